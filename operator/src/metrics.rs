//! Prometheus metrics of the informers and the `InformerController`.
//!
//! Names follow the Go grafana-app-sdk so its dashboards keep working, each with an optional
//! namespace prefix (`{namespace}_`). Latency histograms use [`LATENCY_BUCKETS`].
//!
//! | name | type | labels |
//! |---|---|---|
//! | `informer_events_total` | counter | `event_type` (CREATE, UPDATE, DELETE, RESYNC), `kind` |
//! | `informer_reconcile_duration_seconds` | histogram, whole event over all handlers | `event_type`, `kind` |
//! | `watcher_process_duration_seconds`, `reconciler_process_duration_seconds` | histogram, one handler call | `event_type`, `kind` |
//! | `informer_event_wait_seconds` | histogram ([`WAIT_BUCKETS`]), from an event's receipt (the informer offering it to the kind) to the start of the first handler call for it; a reconcile request that merged several events counts from the oldest; an event no handler runs for (an own write's echo) is not counted | `event_type`, `kind` |
//! | `watcher_errors_total`, `reconciler_errors_total` | counter | `event_type`, `kind` |
//! | `ongoing_reconcile_events` | gauge, events being dispatched | `event_type`, `kind` |
//! | `ongoing_reconcile_processes` | gauge, handler calls running | `event_type`, `kind` |
//! | `informer_queue_depth` | gauge, events waiting in object lanes | `kind` |
//! | `informer_queue_oldest_age_seconds` | gauge, how long the oldest object ready for a handler call has waited for a worker (0 when none; computed at scrape) | `kind` |
//! | `controller_retries_pending` | gauge, retries and requeues scheduled | `kind` |
//! | `controller_retries_total` | counter, retries and requeues run | `kind`, `result` (success, requeue, retry, failed) |
//! | `controller_retries_given_up_total` | counter | `kind` |
//! | `controller_objects_failing` | gauge, objects waiting for a retry after a failed handler call | `kind` |
//! | `controller_oldest_retry_age_seconds` | gauge, how long the longest-failing of those has been failing (since the first failure of its run of failures; 0 when none) | `kind` |
//! | `informer_synced` | gauge, 1 once the first complete list was delivered | `kind` |
//! | `kubernetes_watch_events_total`, `kubernetes_watch_errors_total` | counter, raw watch traffic | `kind` |
//! | `informer_cache_drift_checks_total`, `informer_cache_drift_total` | counter, checks of the cache against a consistent list of the apiserver, and those that found it drifted (then it re-lists; see [`list_watch`](crate::list_watch#drift-detection)) | `kind` |
//! | `informer_decode_errors_total` | counter, object states that did not deserialize (once per state; see [`list_watch`](crate::list_watch#objects-that-do-not-deserialize)) | `kind` |
//! | `reconciler_terminal_errors_total` | counter, reconciles failed with a terminal error (never retried) | `kind` |
//! | `controller_triggered_reconciles_total` | counter, reconciles queued by `owns`, `watches` or a `Trigger` | `kind` |
//! | `handler_failures_total` | counter, failed handler calls by cause: `forbidden`, `conflict`, `not_found`, `server_error`, `timeout`, `handler_error` (see [`failures`](crate::failures)) | `kind`, `cause` |
//! | `reconciler_own_write_events_skipped_total` | counter, watch events that reconciled nothing as the echo of the controller's own write ([`own_writes`](crate::own_writes)) | `kind` |
//!
//! `result` of a retry: `success` (done), `requeue` (ran and asked to run again later), `retry`
//! (failed, will retry), `failed` (failed and the policy gave up).
//!
//! `controller_objects_failing` and `controller_oldest_retry_age_seconds` are computed at scrape
//! from what each kind's controller keeps about its failing objects (see
//! [`controller`](crate::controller) for what "failing" means); a reconciler that never gives up
//! shows there as an age that keeps growing.
//!
//! `informer_events_total`, `informer_queue_depth`, `ongoing_reconcile_events` and
//! `ongoing_reconcile_processes` change on every event; dispatch writes them through cells that
//! one writer each owns (a kind's lanes, a worker) and a scrape adds up, so a change is a plain
//! load and store rather than an atomic read-modify-write. What a scrape shows is the same.
//!
//! # Registration: one set per registry, no process globals
//!
//! A [`MetricsRegistry`](crate::MetricsRegistry) (a `kubeapp_runner::Runner` owns one) creates
//! these collectors once, with its one prefix, registers them into its Prometheus registry and
//! hands out clones ([`MetricsRegistry::controller`](crate::MetricsRegistry::controller)): the
//! controllers and apps given one handle share the same series, and two handles in one process
//! share nothing. [`ControllerMetrics::unregistered`] makes a private set, exported nowhere (what
//! a controller configured without metrics counts into); its [`collectors`](ControllerMetrics::collectors)
//! can be registered into a registry of the caller's choosing. Registering a set twice into one
//! registry is accepted, never a panic. A registry that already holds a *foreign* collector
//! under one of these names keeps it (prometheus reports both cases alike), so ours is not
//! exported there: use another prefix in that case.

use kubeapp_sdk::diagnostics::KindDiagnostics;
use std::sync::Arc;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

use crate::action::ReconcileAction;
use crate::failing_objects::{FailingFamily, FailingObjects};
use crate::failures::KindFailures;
use crate::handler_calls::HandlerCalls;
use crate::metric_cells::{CellFamily, CellSeries};
pub use crate::metric_registration::{LATENCY_BUCKETS, MetricSet, MetricsError};
use crate::queue_wait::{QueueWaits, WaitingSince};

/// The collectors of the informers and the controller; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    events_total: CellFamily,
    event_duration: HistogramVec,
    watcher_duration: HistogramVec,
    reconciler_duration: HistogramVec,
    event_wait: HistogramVec,
    watcher_errors: IntCounterVec,
    reconciler_errors: IntCounterVec,
    ongoing_events: CellFamily,
    ongoing_processes: CellFamily,
    queue_depth: CellFamily,
    retries_pending: IntGaugeVec,
    retries_total: IntCounterVec,
    retries_given_up: IntCounterVec,
    informer_synced: IntGaugeVec,
    watch_events: IntCounterVec,
    watch_errors: IntCounterVec,
    decode_errors: IntCounterVec,
    drift_checks: IntCounterVec,
    cache_drift: IntCounterVec,
    terminal_errors: IntCounterVec,
    triggered: IntCounterVec,
    own_write_echoes: IntCounterVec,
    failing: FailingFamily,
    handler_failures: IntCounterVec,
    /// How long each kind's oldest ready lane has waited (the report and a gauge).
    queue_waits: QueueWaits,
    /// The most recent handler calls, when the environment asks for them.
    calls: HandlerCalls,
}

const EVENT_LABELS: &[&str] = &["event_type", "kind"];

/// The buckets of `informer_event_wait_seconds`: an idle controller starts a handler tens of
/// microseconds after the event, so they begin far below [`LATENCY_BUCKETS`]' 5 ms.
pub const WAIT_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];
const KIND_LABEL: &[&str] = &["kind"];

impl ControllerMetrics {
    /// Fresh collectors registered nowhere (what a controller without a registry counts into).
    ///
    /// # Errors
    ///
    /// When `namespace` is not a valid metric name prefix.
    pub fn unregistered(namespace: Option<&str>) -> Result<Self, MetricsError> {
        let ns = namespace.unwrap_or("");
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(ns);
        let hist = |name: &str, help: &str| {
            HistogramOpts::new(name, help)
                .namespace(ns)
                .buckets(LATENCY_BUCKETS.to_vec())
        };
        let err = |name: &str| {
            let name = name.to_string();
            move |source| MetricsError { name, source }
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(opts(name, help), labels).map_err(err(name))
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(opts(name, help), labels).map_err(err(name))
        };
        // The series dispatch changes on every event: written through per-writer cells (see
        // `metric_cells`).
        let cell_counter = |name: &str, help: &str, labels: &[&str]| {
            counter(name, help, labels).map(|vec| CellFamily::counter(vec, labels))
        };
        let cell_gauge = |name: &str, help: &str, labels: &[&str]| {
            gauge(name, help, labels).map(|vec| CellFamily::gauge(vec, labels))
        };
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(hist(name, help), EVENT_LABELS).map_err(err(name))
        };
        Ok(Self {
            events_total: cell_counter(
                "informer_events_total",
                "Informer events by type and kind.",
                EVENT_LABELS,
            )?,
            event_duration: histogram(
                "informer_reconcile_duration_seconds",
                "Time to handle one informer event with all handlers of its kind.",
            )?,
            watcher_duration: histogram(
                "watcher_process_duration_seconds",
                "Time of one watcher call.",
            )?,
            reconciler_duration: histogram(
                "reconciler_process_duration_seconds",
                "Time of one reconciler call.",
            )?,
            event_wait: HistogramVec::new(
                HistogramOpts::new(
                    "informer_event_wait_seconds",
                    "Time from an informer event's receipt to the start of the first handler call \
                     for it (a merged reconcile request: from the oldest event it covers).",
                )
                .namespace(ns)
                .buckets(WAIT_BUCKETS.to_vec()),
                EVENT_LABELS,
            )
            .map_err(err("informer_event_wait_seconds"))?,
            watcher_errors: counter(
                "watcher_errors_total",
                "Failed watcher calls.",
                EVENT_LABELS,
            )?,
            reconciler_errors: counter(
                "reconciler_errors_total",
                "Failed reconciler calls (including requeues that carried an error).",
                EVENT_LABELS,
            )?,
            ongoing_events: cell_gauge(
                "ongoing_reconcile_events",
                "Informer events being dispatched.",
                EVENT_LABELS,
            )?,
            ongoing_processes: cell_gauge(
                "ongoing_reconcile_processes",
                "Handler calls running.",
                EVENT_LABELS,
            )?,
            queue_depth: cell_gauge(
                "informer_queue_depth",
                "Events waiting in object lanes.",
                KIND_LABEL,
            )?,
            retries_pending: gauge(
                "controller_retries_pending",
                "Retries and requeues scheduled.",
                KIND_LABEL,
            )?,
            retries_total: counter(
                "controller_retries_total",
                "Retries and requeues run, by result.",
                &["kind", "result"],
            )?,
            retries_given_up: counter(
                "controller_retries_given_up_total",
                "Handler calls given up after the retry policy's last attempt.",
                KIND_LABEL,
            )?,
            informer_synced: gauge(
                "informer_synced",
                "1 once the informer delivered its first complete list.",
                KIND_LABEL,
            )?,
            watch_events: counter(
                "kubernetes_watch_events_total",
                "Raw watch events received.",
                KIND_LABEL,
            )?,
            watch_errors: counter(
                "kubernetes_watch_errors_total",
                "Watch errors (each is followed by a backoff and a reconnect).",
                KIND_LABEL,
            )?,
            decode_errors: counter(
                "informer_decode_errors_total",
                "Object states that did not deserialize into the kind's type (once per state).",
                KIND_LABEL,
            )?,
            drift_checks: counter(
                "informer_cache_drift_checks_total",
                "Checks of the informer's cache against a consistent list of the apiserver.",
                KIND_LABEL,
            )?,
            cache_drift: counter(
                "informer_cache_drift_total",
                "Checks that found the cache drifted from the apiserver (the informer re-listed).",
                KIND_LABEL,
            )?,
            terminal_errors: counter(
                "reconciler_terminal_errors_total",
                "Reconciles that failed with a terminal error (never retried).",
                KIND_LABEL,
            )?,
            triggered: counter(
                "controller_triggered_reconciles_total",
                "Reconciles queued by owns, watches or a Trigger.",
                KIND_LABEL,
            )?,
            own_write_echoes: counter(
                "reconciler_own_write_events_skipped_total",
                "Watch events that started no reconcile because they were the controller's own writes.",
                KIND_LABEL,
            )?,
            failing: FailingFamily::new(ns)?,
            handler_failures: counter(
                "handler_failures_total",
                "Failed handler calls by cause (forbidden, conflict, not_found, server_error, timeout, handler_error).",
                &["kind", "cause"],
            )?,
            queue_waits: QueueWaits::new(ns)?,
            calls: HandlerCalls::from_env(),
        })
    }

    /// The process's most recent handler calls, oldest first, for `/debug/kubeapp` (empty
    /// unless the process asks for them:
    /// [`handler_calls_to_keep`](kubeapp_sdk::diagnostics::handler_calls_to_keep)).
    pub fn handler_calls(&self) -> Vec<kubeapp_sdk::diagnostics::HandlerCall> {
        self.calls.recent()
    }

    /// Every collector, for a registry of the caller's choosing (an app's
    /// `metric_collectors()`); clones share their counts with `self`.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        self.named_collectors()
            .into_iter()
            .map(|(_, collector)| collector)
            .collect()
    }

    fn named_collectors(&self) -> [(&'static str, Box<dyn prometheus::core::Collector>); 25] {
        [
            ("informer_events_total", Box::new(self.events_total.clone())),
            (
                "informer_reconcile_duration_seconds",
                Box::new(self.event_duration.clone()),
            ),
            (
                "watcher_process_duration_seconds",
                Box::new(self.watcher_duration.clone()),
            ),
            (
                "reconciler_process_duration_seconds",
                Box::new(self.reconciler_duration.clone()),
            ),
            (
                "informer_event_wait_seconds",
                Box::new(self.event_wait.clone()),
            ),
            (
                "watcher_errors_total",
                Box::new(self.watcher_errors.clone()),
            ),
            (
                "reconciler_errors_total",
                Box::new(self.reconciler_errors.clone()),
            ),
            (
                "ongoing_reconcile_events",
                Box::new(self.ongoing_events.clone()),
            ),
            (
                "ongoing_reconcile_processes",
                Box::new(self.ongoing_processes.clone()),
            ),
            ("informer_queue_depth", Box::new(self.queue_depth.clone())),
            (
                "controller_retries_pending",
                Box::new(self.retries_pending.clone()),
            ),
            (
                "controller_retries_total",
                Box::new(self.retries_total.clone()),
            ),
            (
                "controller_retries_given_up_total",
                Box::new(self.retries_given_up.clone()),
            ),
            ("informer_synced", Box::new(self.informer_synced.clone())),
            (
                "kubernetes_watch_events_total",
                Box::new(self.watch_events.clone()),
            ),
            (
                "kubernetes_watch_errors_total",
                Box::new(self.watch_errors.clone()),
            ),
            (
                "reconciler_terminal_errors_total",
                Box::new(self.terminal_errors.clone()),
            ),
            (
                "controller_triggered_reconciles_total",
                Box::new(self.triggered.clone()),
            ),
            (
                "informer_decode_errors_total",
                Box::new(self.decode_errors.clone()),
            ),
            (
                "informer_cache_drift_checks_total",
                Box::new(self.drift_checks.clone()),
            ),
            (
                "informer_cache_drift_total",
                Box::new(self.cache_drift.clone()),
            ),
            (
                "reconciler_own_write_events_skipped_total",
                Box::new(self.own_write_echoes.clone()),
            ),
            (
                "controller_objects_failing and controller_oldest_retry_age_seconds",
                Box::new(self.failing.clone()),
            ),
            (
                "handler_failures_total",
                Box::new(self.handler_failures.clone()),
            ),
            (
                "informer_queue_oldest_age_seconds",
                Box::new(self.queue_waits.clone()),
            ),
        ]
    }

    /// What each kind a live controller handles reports for the Runner's `/debug/kubeapp`: its
    /// queue, its retries and its failing objects (the values `/metrics` shows), by kind.
    pub fn kind_diagnostics(&self) -> Vec<KindDiagnostics> {
        let now = tokio::time::Instant::now();
        let waits = self.queue_waits.by_kind();
        self.failing
            .by_kind()
            .into_iter()
            .map(|(kind, (failing, oldest))| {
                let labels = [kind.as_str()];
                let mut entry = KindDiagnostics::default();
                entry.queue_depth = self.queue_depth.series(&labels).get();
                entry.retries_pending = self.retries_pending.with_label_values(&labels).get();
                // Events being dispatched, and handler calls running: a retry's call runs
                // outside any event, so either alone misses work in progress.
                entry.in_flight = [
                    ReconcileAction::Created,
                    ReconcileAction::Updated,
                    ReconcileAction::Deleted,
                    ReconcileAction::Resynced,
                ]
                .iter()
                .map(|action| {
                    let labels = [action.metric_label(), kind.as_str()];
                    self.ongoing_events.series(&labels).get()
                        + self.ongoing_processes.series(&labels).get()
                })
                .sum();
                entry.retries_given_up = self.retries_given_up.with_label_values(&labels).get();
                entry.objects_failing = failing;
                entry.oldest_failure_age_seconds =
                    oldest.map(|since| now.saturating_duration_since(since).as_secs_f64());
                entry.oldest_queued_age_seconds = waits
                    .get(&kind)
                    .copied()
                    .flatten()
                    .map(|since| now.saturating_duration_since(since).as_secs_f64());
                entry.kind = kind;
                entry
            })
            .collect()
    }

    /// Label-resolved handles for one kind, so the hot path does no label lookups.
    pub(crate) fn for_kind(&self, kind: &str) -> KindMetrics {
        let per_action = |action: ReconcileAction| {
            let labels = [action.metric_label(), kind];
            ActionMetrics {
                events_total: self.events_total.series(&labels),
                event_duration: self.event_duration.with_label_values(&labels),
                watcher_duration: self.watcher_duration.with_label_values(&labels),
                reconciler_duration: self.reconciler_duration.with_label_values(&labels),
                event_wait: self.event_wait.with_label_values(&labels),
                watcher_errors: self.watcher_errors.with_label_values(&labels),
                reconciler_errors: self.reconciler_errors.with_label_values(&labels),
                ongoing_events: self.ongoing_events.series(&labels),
                ongoing_processes: self.ongoing_processes.series(&labels),
            }
        };
        let retries = |result: &str| self.retries_total.with_label_values(&[kind, result]);
        KindMetrics {
            actions: Arc::new([
                per_action(ReconcileAction::Created),
                per_action(ReconcileAction::Updated),
                per_action(ReconcileAction::Deleted),
                per_action(ReconcileAction::Resynced),
            ]),
            queue_depth: self.queue_depth.series(&[kind]),
            retries_pending: self.retries_pending.with_label_values(&[kind]),
            retry_success: retries("success"),
            retry_requeue: retries("requeue"),
            retry_retry: retries("retry"),
            retry_failed: retries("failed"),
            retries_given_up: self.retries_given_up.with_label_values(&[kind]),
            informer_synced: self.informer_synced.with_label_values(&[kind]),
            watch_events: self.watch_events.with_label_values(&[kind]),
            watch_errors: self.watch_errors.with_label_values(&[kind]),
            decode_errors: self.decode_errors.with_label_values(&[kind]),
            drift_checks: self.drift_checks.with_label_values(&[kind]),
            cache_drift: self.cache_drift.with_label_values(&[kind]),
            terminal_errors: self.terminal_errors.with_label_values(&[kind]),
            triggered: self.triggered.with_label_values(&[kind]),
            own_write_echoes: self.own_write_echoes.with_label_values(&[kind]),
            failing: self.failing.track(kind),
            queue_wait: self.queue_waits.track(kind),
            failures: KindFailures::new(kind, &self.handler_failures),
            calls: self.calls.clone(),
        }
    }

    /// How many objects of `kind` are failing, and since when the longest-failing one is (what
    /// a scrape reports, before the age is computed).
    #[cfg(test)]
    pub(crate) fn failing(&self, kind: &str) -> (u64, Option<tokio::time::Instant>) {
        self.failing
            .by_kind()
            .get(kind)
            .copied()
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct ActionMetrics {
    pub events_total: CellSeries,
    pub event_duration: Histogram,
    pub watcher_duration: Histogram,
    pub reconciler_duration: Histogram,
    pub event_wait: Histogram,
    pub watcher_errors: IntCounter,
    pub reconciler_errors: IntCounter,
    pub ongoing_events: CellSeries,
    pub ongoing_processes: CellSeries,
}

/// The metrics of one kind with their labels resolved.
#[derive(Clone, Debug)]
pub(crate) struct KindMetrics {
    actions: Arc<[ActionMetrics; 4]>,
    pub queue_depth: CellSeries,
    pub retries_pending: IntGauge,
    pub retry_success: IntCounter,
    pub retry_requeue: IntCounter,
    pub retry_retry: IntCounter,
    pub retry_failed: IntCounter,
    pub retries_given_up: IntCounter,
    pub informer_synced: IntGauge,
    pub watch_events: IntCounter,
    pub watch_errors: IntCounter,
    pub decode_errors: IntCounter,
    pub drift_checks: IntCounter,
    pub cache_drift: IntCounter,
    pub terminal_errors: IntCounter,
    pub triggered: IntCounter,
    pub own_write_echoes: IntCounter,
    /// The kind's failing objects (see [`failing_objects`](crate::failing_objects)); each
    /// `for_kind` call makes a tracker of its own.
    pub failing: Arc<FailingObjects>,
    /// Since when the kind's oldest ready lane waits for a worker (see
    /// [`queue_wait`](crate::queue_wait)); each `for_kind` call makes one of its own.
    pub queue_wait: Arc<WaitingSince>,
    /// Failed handler calls by cause, and the kind's run of forbidden calls.
    pub failures: KindFailures,
    /// The process's recent handler calls (shared by every kind).
    pub calls: HandlerCalls,
}

impl KindMetrics {
    pub(crate) fn action(&self, action: ReconcileAction) -> &ActionMetrics {
        let index = match action {
            ReconcileAction::Created => 0,
            ReconcileAction::Updated => 1,
            ReconcileAction::Deleted => 2,
            ReconcileAction::Resynced => 3,
        };
        &self.actions[index]
    }
}

/// Created by a [`MetricsRegistry`](crate::MetricsRegistry) as its
/// [`controller`](crate::MetricsRegistry::controller) set.
impl MetricSet for ControllerMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        Self::unregistered(prefix)
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        Self::collectors(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Registry;

    #[test]
    fn registering_a_set_twice_is_harmless_and_clones_share_counts() {
        let registry = Registry::new();
        let first = ControllerMetrics::unregistered(Some("twice")).expect("metrics");
        crate::metric_registration::register_all(
            &registry,
            crate::metric_registration::MetricSet::collectors(&first)
                .into_iter()
                .map(|c| ("test", c)),
        )
        .expect("first");
        let second = first.clone();
        crate::metric_registration::register_all(
            &registry,
            crate::metric_registration::MetricSet::collectors(&second)
                .into_iter()
                .map(|c| ("test", c)),
        )
        .expect("second");
        first
            .for_kind("k")
            .action(ReconcileAction::Created)
            .events_total
            .inc();
        second
            .for_kind("k")
            .action(ReconcileAction::Created)
            .events_total
            .inc();
        let families = registry.gather();
        let events = families
            .iter()
            .find(|f| f.name() == "twice_informer_events_total")
            .expect("registered");
        assert_eq!(events.get_metric()[0].get_counter().get_value(), 2.0);
        let histogram = families
            .iter()
            .find(|f| f.name() == "twice_informer_reconcile_duration_seconds")
            .expect("registered");
        assert_eq!(
            histogram.get_metric()[0].get_histogram().get_bucket().len(),
            LATENCY_BUCKETS.len()
        );
    }

    #[test]
    fn a_foreign_metric_under_one_of_the_names_is_kept_without_a_panic() {
        let registry = Registry::new();
        let foreign = IntCounterVec::new(Opts::new("clash_watcher_errors_total", "x"), &["other"])
            .expect("counter");
        registry
            .register(Box::new(foreign.clone()))
            .expect("register");
        crate::MetricsRegistry::with_registry(registry.clone(), Some("clash"))
            .expect("no error, no panic");
        foreign.with_label_values(&["v"]).inc();
        let families = registry.gather();
        let kept = families
            .iter()
            .find(|f| f.name() == "clash_watcher_errors_total")
            .expect("the foreign metric");
        assert_eq!(kept.get_metric()[0].get_label()[0].name(), "other");
    }

    #[test]
    fn an_invalid_namespace_is_an_error() {
        let err = ControllerMetrics::unregistered(Some("not valid!")).expect_err("invalid");
        assert_eq!(err.name, "informer_events_total");
    }
}
