//! Latency percentiles of a set of samples (write to handled, one sample per object write).
//!
//! Percentiles are by nearest rank on the sorted samples: the p-th percentile is the smallest
//! sample such that at least p % of the samples are at most it. So every percentile is a sample
//! that was measured (no interpolation), and `p50 <= p99 <= max` always holds.

use std::time::Duration;

/// p50, p99 and max of a set of latencies, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Percentiles {
    /// How many samples.
    pub count: usize,
    /// The median.
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// The largest sample.
    pub max_ms: f64,
}

impl Percentiles {
    /// The percentiles of `samples`, or `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        Some(Self {
            count: sorted.len(),
            p50_ms: ms(nearest_rank(&sorted, 50)),
            p99_ms: ms(nearest_rank(&sorted, 99)),
            max_ms: ms(sorted[sorted.len() - 1]),
        })
    }
}

/// The `percent`-th percentile of the non-empty, sorted `sorted` by nearest rank:
/// `sorted[ceil(percent / 100 * n) - 1]`.
fn nearest_rank(sorted: &[Duration], percent: usize) -> Duration {
    let rank = (percent * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn nearest_rank_percentiles_are_samples_and_ordered() {
        // 1..=100 ms, shuffled: p50 is the 50th, p99 the 99th.
        let mut samples: Vec<u64> = (1..=100).rev().collect();
        samples.swap(3, 70);
        let p = Percentiles::of(&ms(&samples)).expect("samples");
        assert_eq!(p.count, 100);
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (50.0, 99.0, 100.0));

        // Few samples: p99 is the largest, p50 the lower middle.
        let p = Percentiles::of(&ms(&[30, 10, 20, 40])).expect("samples");
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (20.0, 40.0, 40.0));

        let p = Percentiles::of(&ms(&[7])).expect("one sample");
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (7.0, 7.0, 7.0));
        assert_eq!(Percentiles::of(&[]), None);
    }

    #[test]
    fn one_slow_object_in_a_thousand_moves_max_but_not_p99() {
        let mut samples = vec![5u64; 999];
        samples.push(9000);
        let p = Percentiles::of(&ms(&samples)).expect("samples");
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (5.0, 5.0, 9000.0));
        assert!(p.p50_ms <= p.p99_ms && p.p99_ms <= p.max_ms);
    }
}
