//! The objects of a kind that are failing now, as two gauges computed at scrape:
//! `controller_objects_failing{kind}` and `controller_oldest_retry_age_seconds{kind}`.
//!
//! An object is failing while it waits for a retry after an error: some handler's latest call
//! for it failed and the policy retries it (a reconciler's success, a retry that succeeds, a
//! newer event that drops the retry and succeeds, giving up, or the object's deletion ends
//! it). Each kind's controller keeps a [`FailingObjects`]: when each failing object began failing
//! (the first failure of its run of failures, not the latest retry), changed only when an object
//! starts or stops failing, never per event. A scrape counts them and reports the age of the
//! oldest, so a reconciler stuck on a dependency shows as an age that keeps growing, where its
//! retry schedule alone (every 5 minutes, never giving up) would look like calm.
//!
//! Several controllers may count one kind label into one registry (two apps of a Runner): a
//! scrape adds their counts and takes the oldest age.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntGaugeVec, Opts};
use tokio::time::Instant;

use crate::kind_trackers::{KindTrackers, earliest};
use crate::metric_registration::MetricsError;

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only map and vector edits happen under these locks: a poisoned one is still whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One kind's failing objects, by when each began failing (a multiset of instants).
#[derive(Debug, Default)]
pub(crate) struct FailingObjects {
    since: Mutex<BTreeMap<Instant, u32>>,
}

impl FailingObjects {
    /// An object's failing state changed from `before` to `after` (each `None` when it was or
    /// is not failing, else since when it fails).
    pub(crate) fn changed(&self, before: Option<Instant>, after: Option<Instant>) {
        if before == after {
            return;
        }
        let mut since = locked(&self.since);
        if let Some(before) = before
            && let Some(count) = since.get_mut(&before)
        {
            *count -= 1;
            if *count == 0 {
                since.remove(&before);
            }
        }
        if let Some(after) = after {
            *since.entry(after).or_default() += 1;
        }
    }

    /// No object fails any more (the controller stopped and dropped its retries).
    pub(crate) fn clear(&self) {
        locked(&self.since).clear();
    }

    /// How many objects are failing, and since when the longest-failing one is.
    pub(crate) fn snapshot(&self) -> (u64, Option<Instant>) {
        let since = locked(&self.since);
        let count = since.values().map(|&count| u64::from(count)).sum();
        (count, since.keys().next().copied())
    }
}

/// The two gauges over every kind's [`FailingObjects`]; register it as a [`Collector`].
/// Clones share everything.
#[derive(Clone, Debug)]
pub(crate) struct FailingFamily {
    count: IntGaugeVec,
    age: GaugeVec,
    /// Each kind label's trackers (one per controller of that label).
    kinds: KindTrackers<FailingObjects>,
    /// Serialises scrapes: each resets and refills the two vectors.
    scrape: Arc<Mutex<()>>,
}

/// The name of the count gauge (without the prefix).
pub(crate) const OBJECTS_FAILING: &str = "controller_objects_failing";
/// The name of the age gauge (without the prefix).
pub(crate) const OLDEST_RETRY_AGE: &str = "controller_oldest_retry_age_seconds";

impl FailingFamily {
    /// The gauges under the prefix `namespace`.
    pub(crate) fn new(namespace: &str) -> Result<Self, MetricsError> {
        let count = IntGaugeVec::new(
            Opts::new(
                OBJECTS_FAILING,
                "Objects waiting for a retry after a failed handler call.",
            )
            .namespace(namespace),
            &["kind"],
        )
        .map_err(|source| MetricsError {
            name: OBJECTS_FAILING.to_string(),
            source,
        })?;
        let age = GaugeVec::new(
            Opts::new(
                OLDEST_RETRY_AGE,
                "How long the longest-failing object waiting for a retry has been failing (0 when none).",
            )
            .namespace(namespace),
            &["kind"],
        )
        .map_err(|source| MetricsError {
            name: OLDEST_RETRY_AGE.to_string(),
            source,
        })?;
        Ok(Self {
            count,
            age,
            kinds: KindTrackers::default(),
            scrape: Arc::default(),
        })
    }

    /// A new tracker for one controller's kind `kind`, counted under that label while it lives.
    pub(crate) fn track(&self, kind: &str) -> Arc<FailingObjects> {
        self.kinds.track(kind)
    }

    /// Every kind label's count and oldest instant, the trackers of one label combined.
    pub(crate) fn by_kind(&self) -> BTreeMap<String, (u64, Option<Instant>)> {
        self.kinds.fold(
            |entry: &mut (u64, Option<Instant>), tracker: &FailingObjects| {
                let (count, oldest) = tracker.snapshot();
                entry.0 += count;
                entry.1 = earliest(entry.1, oldest);
            },
        )
    }
}

impl Collector for FailingFamily {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.count.desc();
        descs.extend(self.age.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _scrape = locked(&self.scrape);
        self.count.reset();
        self.age.reset();
        let now = Instant::now();
        for (kind, (count, oldest)) in self.by_kind() {
            self.count
                .with_label_values(&[&kind])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
            let age = oldest.map_or(0.0, |oldest| now.duration_since(oldest).as_secs_f64());
            self.age.with_label_values(&[&kind]).set(age);
        }
        let mut families = self.count.collect();
        families.extend(self.age.collect());
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_scrape_counts_failing_objects_per_kind_and_ages_the_oldest() {
        let family = FailingFamily::new("t").expect("family");
        let a = family.track("widgets");
        let b = family.track("widgets"); // a second controller of the same label
        let other = family.track("gadgets");
        let start = Instant::now();
        a.changed(None, Some(start));
        tokio::time::advance(Duration::from_secs(30)).await;
        b.changed(None, Some(Instant::now()));
        b.changed(None, Some(Instant::now()));
        tokio::time::advance(Duration::from_secs(30)).await;
        let families = family.collect();
        let value = |name: &str, kind: &str| {
            let family = families.iter().find(|f| f.name() == name).expect("family");
            let metric = family
                .get_metric()
                .iter()
                .find(|m| m.get_label()[0].value() == kind)
                .expect("series");
            metric.get_gauge().get_value()
        };
        assert_eq!(value("t_controller_objects_failing", "widgets"), 3.0);
        assert_eq!(
            value("t_controller_oldest_retry_age_seconds", "widgets"),
            60.0
        );
        assert_eq!(value("t_controller_objects_failing", "gadgets"), 0.0);
        assert_eq!(
            value("t_controller_oldest_retry_age_seconds", "gadgets"),
            0.0
        );
        // The oldest stops failing: the age is the next oldest's.
        a.changed(Some(start), None);
        assert_eq!(
            family.by_kind()["widgets"],
            (2, Some(start + Duration::from_secs(30)))
        );
        b.clear();
        drop(other);
        let by_kind = family.by_kind();
        assert_eq!(by_kind["widgets"], (0, None));
        assert!(
            !by_kind.contains_key("gadgets"),
            "a dropped tracker is not counted"
        );
    }
}
