//! How long work has waited for a worker, per kind: the age of the oldest lane in each kind's
//! ready queue, for the Runner's `/debug/kubeapp` (`oldestQueuedAgeSeconds`) and the gauge
//! `informer_queue_oldest_age_seconds{kind}` (computed at scrape).
//!
//! A kind's lanes stamp a lane when it joins the ready queue (idle to ready, or handed back with
//! more work, or a retry fell due) and publish the stamp of the queue's head, the oldest, after
//! each change: one clock read per lane made ready, not per event, and one atomic store. Events
//! coalesced into a lane a worker holds are not in the ready queue; they wait for that call only.
//!
//! Why a published stamp and not a lock on the lanes: the report is read from another thread at
//! any time, and the lanes' lock is the dispatch path's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};
use tokio::time::Instant;

use crate::kind_trackers::{KindTrackers, earliest};
use crate::metric_registration::MetricsError;

/// The gauge's name (without the prefix).
pub(crate) const QUEUE_OLDEST_AGE: &str = "informer_queue_oldest_age_seconds";

/// The instant the stamps count from (the first [`QueueWaits::track`] in the process).
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Since when the oldest ready lane of one kind's lanes has waited (one per [`Lanes`]; only
/// they write it).
///
/// [`Lanes`]: crate::controller
#[derive(Debug, Default)]
pub(crate) struct WaitingSince {
    /// Nanoseconds from [`base`] plus one; 0 while nothing waits.
    nanos: AtomicU64,
}

impl WaitingSince {
    /// Publishes the oldest waiting lane's stamp (`None`: the ready queue is empty).
    pub(crate) fn set(&self, since: Option<Instant>) {
        let nanos = since.map_or(0, |since| {
            let elapsed = since.saturating_duration_since(base()).as_nanos();
            u64::try_from(elapsed).unwrap_or(u64::MAX - 1) + 1
        });
        self.nanos.store(nanos, Ordering::Release);
    }

    /// The published stamp.
    pub(crate) fn get(&self) -> Option<Instant> {
        match self.nanos.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(base() + std::time::Duration::from_nanos(nanos - 1)),
        }
    }
}

/// Every kind's [`WaitingSince`], for the report and the gauge (part of the controller
/// metrics; register it as a [`Collector`]). Clones share everything.
#[derive(Clone, Debug)]
pub(crate) struct QueueWaits {
    kinds: KindTrackers<WaitingSince>,
    age: GaugeVec,
    /// Serialises scrapes: each resets and refills the gauge.
    scrape: Arc<Mutex<()>>,
}

impl QueueWaits {
    /// The gauge under the prefix `namespace`.
    pub(crate) fn new(namespace: &str) -> Result<Self, MetricsError> {
        let age = GaugeVec::new(
            Opts::new(
                QUEUE_OLDEST_AGE,
                "How long the oldest object ready for a handler call has waited for a worker (0 when none).",
            )
            .namespace(namespace),
            &["kind"],
        )
        .map_err(|source| MetricsError {
            name: QUEUE_OLDEST_AGE.to_string(),
            source,
        })?;
        Ok(Self {
            kinds: KindTrackers::default(),
            age,
            scrape: Arc::default(),
        })
    }

    /// A stamp for one kind's lanes, labelled `kind`; dropped with them.
    pub(crate) fn track(&self, kind: &str) -> Arc<WaitingSince> {
        // Fixed before any lane exists, so every stamp is at or after it.
        base();
        self.kinds.track(kind)
    }

    /// The oldest stamp of each kind label (the lanes of one label combined); `None` where
    /// nothing waits.
    pub(crate) fn by_kind(&self) -> BTreeMap<String, Option<Instant>> {
        self.kinds
            .fold(|entry: &mut Option<Instant>, waiting: &WaitingSince| {
                *entry = earliest(*entry, waiting.get());
            })
    }
}

impl Collector for QueueWaits {
    fn desc(&self) -> Vec<&Desc> {
        self.age.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _scrape = self.scrape.lock().unwrap_or_else(PoisonError::into_inner);
        self.age.reset();
        let now = Instant::now();
        for (kind, since) in self.by_kind() {
            let age = since.map_or(0.0, |since| {
                now.saturating_duration_since(since).as_secs_f64()
            });
            self.age.with_label_values(&[&kind]).set(age);
        }
        self.age.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stamp_reads_back_and_the_oldest_of_a_kind_wins() {
        let waits = QueueWaits::new("t").expect("gauge");
        let (a, b) = (waits.track("greetings"), waits.track("greetings"));
        let other = waits.track("shops");
        assert_eq!(waits.by_kind().get("greetings"), Some(&None));
        let early = Instant::now();
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        let late = Instant::now();
        b.set(Some(late));
        a.set(Some(early));
        assert_eq!(a.get(), Some(early));
        let by_kind = waits.by_kind();
        assert_eq!(by_kind.get("greetings"), Some(&Some(early)));
        assert_eq!(by_kind.get("shops"), Some(&None));
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        let families = waits.collect();
        let age = |kind: &str| {
            families[0]
                .get_metric()
                .iter()
                .find(|m| m.get_label()[0].value() == kind)
                .map(|m| m.get_gauge().get_value())
        };
        assert_eq!(families[0].name(), "t_informer_queue_oldest_age_seconds");
        assert_eq!((age("greetings"), age("shops")), (Some(5.0), Some(0.0)));
        a.set(None);
        assert_eq!(waits.by_kind().get("greetings"), Some(&Some(late)));
        drop((a, b, other));
        assert!(waits.by_kind().is_empty(), "dropped lanes leave the report");
    }
}
