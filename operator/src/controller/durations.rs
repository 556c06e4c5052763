//! A worker's own copies of the kind's duration histograms (event, watcher call, reconciler
//! call, per action), folded into the shared ones now and then instead of on every call.
//!
//! Why: a shared prometheus `Histogram::observe` is four atomic read-modify-writes (one a
//! compare-and-swap loop for the sum), and dispatch makes one per handler call plus one per
//! event: six per event with 3 watchers and 2 reconcilers, the largest single cost of a no-op
//! dispatch in a profile. A [`LocalHistogram`] (prometheus' own unsynchronised buffer) counts in
//! plain memory; [`flush`](LocalHistogram::flush) adds what it counted to the shared histogram.
//!
//! When the shared histograms see a worker's observations: when the worker parks (nothing to
//! do), on the first call that ends [`FLUSH_EVERY`] or more after the last fold, and when the
//! worker ends (dropping a `LocalHistogram` flushes it). So a scrape lags a busy worker by at
//! most [`FLUSH_EVERY`] plus one call, and an idle one not at all.
//!
//! The clock: [`Instant`] is quanta's, not `std`'s. Dispatch reads the clock once per handler
//! call and once per event (each call's end is the next one's start), and on this project's VMs
//! `std::time::Instant::now` (the vDSO's `clock_gettime`) took 23 ns against quanta's 8.7 ns
//! (its TSC read, scaled): with 3 watchers and 2 reconcilers the clock was the largest single
//! item of a no-op dispatch profile (8 %). quanta reads the time-stamp counter only where the
//! CPU says it is invariant, calibrated once per process against the OS's monotonic clock (about
//! 0.6 ms here, bounded at 200 ms, paid when the first worker starts), and the OS clock
//! elsewhere. These instants only time calls for the histograms; timers and deadlines stay on
//! tokio's clock.

use std::time::Duration;

/// The clock the durations are read from (see the [module docs](self)).
pub(super) use quanta::Instant;

use prometheus::local::LocalHistogram;

use crate::action::ReconcileAction;
use crate::metrics::KindMetrics;

/// How long a busy worker keeps observations to itself at most (plus the call that ends past it).
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The duration histograms of one action.
struct ActionDurations {
    event: LocalHistogram,
    watcher: LocalHistogram,
    reconciler: LocalHistogram,
    wait: LocalHistogram,
}

/// Which duration a call or event adds to.
#[derive(Clone, Copy)]
pub(super) enum Timed {
    /// One event through all handlers.
    Event,
    /// One watcher call.
    Watcher,
    /// One reconciler call.
    Reconciler,
    /// An event's wait, from its receipt to its first handler call's start.
    Wait,
}

/// One worker's duration histograms, by action (see the [module docs](self)).
pub(super) struct WorkerDurations {
    actions: [ActionDurations; 4],
    /// When the observations were last folded into the shared histograms, plus [`FLUSH_EVERY`].
    next_flush: Instant,
    /// Whether anything was observed since the last fold.
    dirty: bool,
}

impl WorkerDurations {
    /// Empty buffers for the histograms of `metrics`.
    pub(super) fn new(metrics: &KindMetrics) -> Self {
        let of = |action| {
            let shared = metrics.action(action);
            ActionDurations {
                event: shared.event_duration.local(),
                watcher: shared.watcher_duration.local(),
                reconciler: shared.reconciler_duration.local(),
                wait: shared.event_wait.local(),
            }
        };
        Self {
            actions: [
                of(ReconcileAction::Created),
                of(ReconcileAction::Updated),
                of(ReconcileAction::Deleted),
                of(ReconcileAction::Resynced),
            ],
            next_flush: Instant::now() + FLUSH_EVERY,
            dirty: false,
        }
    }

    /// Records that `what` of `action` took from `started` to `ended`, and folds everything into
    /// the shared histograms when the last fold is [`FLUSH_EVERY`] ago.
    pub(super) fn observe(
        &mut self,
        action: ReconcileAction,
        what: Timed,
        started: Instant,
        ended: Instant,
    ) {
        let index = match action {
            ReconcileAction::Created => 0,
            ReconcileAction::Updated => 1,
            ReconcileAction::Deleted => 2,
            ReconcileAction::Resynced => 3,
        };
        let durations = &self.actions[index];
        let histogram = match what {
            Timed::Event => &durations.event,
            Timed::Watcher => &durations.watcher,
            Timed::Reconciler => &durations.reconciler,
            Timed::Wait => &durations.wait,
        };
        // Saturating: a worker that moved between cores may read a counter a few cycles behind
        // the one it read before (quanta's `-` saturates too, but says it may panic one day).
        histogram.observe(ended.saturating_duration_since(started).as_secs_f64());
        self.dirty = true;
        if ended >= self.next_flush {
            self.flush_at(ended);
        }
    }

    /// Folds everything observed into the shared histograms (a worker about to park).
    pub(super) fn flush(&mut self) {
        if self.dirty {
            self.flush_at(Instant::now());
        }
    }

    fn flush_at(&mut self, now: Instant) {
        for durations in &self.actions {
            durations.event.flush();
            durations.watcher.flush();
            durations.reconciler.flush();
            durations.wait.flush();
        }
        self.dirty = false;
        self.next_flush = now + FLUSH_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ControllerMetrics;

    fn count(metrics: &KindMetrics, action: ReconcileAction) -> u64 {
        metrics.action(action).watcher_duration.get_sample_count()
    }

    #[test]
    fn an_end_read_before_its_start_counts_as_zero_not_a_panic() {
        let metrics = ControllerMetrics::unregistered(None)
            .expect("metrics")
            .for_kind("durations-backwards");
        let mut durations = WorkerDurations::new(&metrics);
        let start = Instant::now() + Duration::from_millis(5);
        // A counter read on another core a little behind: the end comes before the start.
        durations.observe(
            ReconcileAction::Updated,
            Timed::Watcher,
            start,
            start - Duration::from_millis(1),
        );
        durations.flush();
        let shared = &metrics.action(ReconcileAction::Updated).watcher_duration;
        assert_eq!(shared.get_sample_count(), 1, "the call is counted");
        assert_eq!(shared.get_sample_sum(), 0.0, "as taking no time");
    }

    #[test]
    fn observations_reach_the_shared_histogram_on_flush_when_due_and_when_dropped() {
        let metrics = ControllerMetrics::unregistered(None)
            .expect("metrics")
            .for_kind("durations");
        // Read before the buffers are made: their first fold is due 100 ms after that, so a
        // call ending 1 ms after `start` is never due, however long this thread is held up.
        let start = Instant::now();
        let mut durations = WorkerDurations::new(&metrics);
        durations.observe(
            ReconcileAction::Updated,
            Timed::Watcher,
            start,
            start + Duration::from_millis(1),
        );
        assert_eq!(count(&metrics, ReconcileAction::Updated), 0, "kept locally");
        durations.flush();
        assert_eq!(
            count(&metrics, ReconcileAction::Updated),
            1,
            "folded on flush"
        );

        // A call ending past the deadline folds everything at once.
        durations.observe(ReconcileAction::Created, Timed::Watcher, start, start);
        assert_eq!(count(&metrics, ReconcileAction::Created), 0);
        let late = durations.next_flush + Duration::from_millis(1);
        durations.observe(ReconcileAction::Created, Timed::Watcher, start, late);
        assert_eq!(
            count(&metrics, ReconcileAction::Created),
            2,
            "folded when due"
        );
        let shared = metrics.action(ReconcileAction::Created);
        assert_eq!(
            shared.event_duration.get_sample_count(),
            0,
            "only what was timed"
        );

        durations.observe(ReconcileAction::Deleted, Timed::Reconciler, start, start);
        drop(durations);
        let deleted = metrics.action(ReconcileAction::Deleted);
        assert_eq!(
            deleted.reconciler_duration.get_sample_count(),
            1,
            "folded on drop"
        );
    }
}
