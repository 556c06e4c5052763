//! The `InformerController`: fans informer events out to watchers and reconcilers, in order per
//! object, concurrently across objects, with retries.
//!
//! # Guarantees
//!
//! - **Registration order.** For each event, the kind's watchers run in registration order, then
//!   its reconcilers in registration order, one after the other. A failing (or panicking, or timed
//!   out) handler does not stop the ones after it; each handler has its own retry slot per object,
//!   keyed by (kind, handler, namespace, name).
//! - **Per-object ordering.** The events of one object are handled in the order the informer
//!   produced them and never concurrently with each other, and that includes retries and requeues:
//!   each object has one lane, and one worker at a time works on a lane.
//! - **No head-of-line blocking.** Objects do not share queues: a slow or failing object only holds
//!   its own lane and one worker. Up to `max_concurrent_workers` (default 10) objects of a kind are
//!   handled at once, by as many long-lived worker tasks; a free worker takes the lane that has
//!   waited longest for one (a lane with more work goes to the back of the line after each item).
//! - **Panics are contained.** A panic in a handler is caught (`catch_unwind` on the handler's
//!   future), becomes that call's [`HandlerError::Panicked`] with the panic message, and is
//!   retried by policy.
//! - **Event timeout.** With [`ControllerConfig::event_timeout`], a handler call running longer is
//!   cancelled (its future dropped) and counts as [`HandlerError::TimedOut`].
//! - **Retries** follow a [`RetryPolicy`]: for reconcilers by default 5, 10, 20, 40, 80, 160 s,
//!   then every 5 minutes until the call succeeds ([`RetryPolicy::default`], never giving up: a
//!   reconciler keeps one pending request per object, refreshed to the newest object, so nothing
//!   queues behind it); for watchers by default 5, 10, 20, 40, 80, 160 s, then give up
//!   ([`RetryPolicy::go_sdk`]: a watcher's retries run in event order, and one that never ended
//!   would hold back the object's later retries for good). Giving up is logged with kind,
//!   namespace, name, handler and the last error, and counted. A retry re-runs
//!   the handler with the object of the failed event, not a fresh read (a reconciler's kept
//!   request excepted, see below). Each object waiting for a retry has one entry in its kind's
//!   timer queue, so due retries of different objects run in parallel, and a dropped retry leaves
//!   no timer behind.
//! - **Failures are visible.** A handler call that fails while the handler was not already
//!   failing for that object records a Warning Event `HandlerFailed` on the object, and giving up
//!   (the policy's last attempt, a terminal error, or the per-object bound below) one
//!   `HandlerGaveUp`: not one per retry (kinds registered through a
//!   [`KindHandle`](crate::KindHandle), whose client publishes them; see [`failures`]). The
//!   gauges `controller_objects_failing{kind}` (objects waiting for a retry after an error) and
//!   `controller_oldest_retry_age_seconds{kind}` (how long the longest-failing of them has been
//!   failing) show what is failing now (see [`metrics`](crate::metrics)).
//! - **Dequeue.** When a new event reaches a handler that has retries or a requeue pending for the
//!   same object, the [`RetryDequeuePolicy`] decides for each whether it is dropped (default: the
//!   opinionated rule; with no policy every new event drops it). A kept retry still runs at its
//!   time, after the new event, and is never overwritten by the retry of the newer event when that
//!   one fails too. For watchers (edge-triggered) both retries wait and run in event order: a
//!   handler's newer retry waits for its older one. For reconcilers (level-triggered) one pending
//!   request runs: a newer event refreshes the kept request to the newest object, and a newer
//!   failure or requeue merges into it (actions merge as waiting requests do, see below; the
//!   earlier due time stays). A handler keeps at most 16 retries per object; one more is dropped,
//!   logged as an error and counted as given up.
//! - **Requeue.** [`ReconcileResult::requeue_after`](crate::ReconcileResult) runs the same request
//!   again after the delay. A [`ReconcileError`](crate::ReconcileError) with a requeue: the requeue
//!   decides the timing; the error is still logged and counted. The state returned by the latest
//!   attempt is the one the next attempt gets.
//! - **Graceful stop.** When the stop token passed to [`InformerController::run`] is cancelled, the
//!   controller stops reading informers and starting queued work, cancels the handlers'
//!   [`DynContext`](crate::DynContext), and waits for in-flight work to finish, up to
//!   [`ControllerConfig::shutdown_grace`] (default 30 s); then it drops what still runs (a handler
//!   that blocks its thread without awaiting cannot be dropped, and delays the stop), logs how
//!   many calls it dropped as an error and counts them in
//!   [`InformerController::abandoned_calls`]. In-flight
//!   work is whole events: an event whose dispatch began before the stop still goes through its
//!   remaining handlers (the stop is checked once per event, not before every call: asking the
//!   token takes a lock), and no later event or retry starts. Queued events and pending retries
//!   are dropped (the next start lists every object again).
//! - **Dynamic registration.** Informers, watchers and reconcilers can be added before or while the
//!   controller runs. A handler added later sees the events dispatched after it was added.
//!
//! # Bursts, merging and backpressure
//!
//! Watchers see every event. Reconcile requests are level-triggered: when an event arrives while
//! an older event of the same object is still waiting (not yet started), the newer event takes over
//! the waiting reconcile request, with the action merged: Created followed by anything but a
//! Delete stays Created, Updated and Resynced merge into Updated (Resynced only if both were),
//! anything followed by a Delete becomes Deleted, and nothing merges across a Delete (what follows
//! a Delete is a new incarnation). The reconciler then runs once, with the newest object. So with
//! reconcilers only, waiting work is bounded by the number of objects (plus one per pending
//! re-creation).
//!
//! An update that is only the echo of the controller's own write (a status written through the
//! SDK, an opinionated finalizer patch, a write a handler noted with
//! [`note_own_write`](crate::DynContext::note_own_write)) starts no reconcile; a request into
//! which such echoes merged is skipped only when every event in it is one. Watchers still see
//! them. See [`own_writes`](crate::own_writes) for the rule, and
//! [`ControllerConfig::reconcile_own_writes`] to reconcile them anyway.
//!
//! Events waiting for watchers are bounded per kind by [`ControllerConfig::max_pending_events`]
//! (default 1000; an event counts from its arrival until its handlers finished). When that many
//! events of a kind wait, the controller stops pulling from the kind's informers until one is
//! handled; the informer in turn stops reading its watch (see [`list_watch`](crate::list_watch)). A
//! watcher slower than the event rate of one object therefore eventually pauses intake for its
//! whole kind; other kinds are not affected. Events of a kind without watchers do not count and
//! never pause intake: they merge, so they are bounded by the number of objects as said above.
//!
//! See [`InformerController`] for a runnable example.

mod call_log;
mod counts;
mod dispatch;
mod durations;
pub mod failures;
pub(crate) mod kind_runtime;
pub(crate) mod lanes;
mod outcome;
mod pending;
pub(crate) mod registry;
mod retry;
mod shared_kinds;
mod subscription;
pub mod term;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::informers::Informers;
use crate::list_watch::Informer;
use crate::metrics::ControllerMetrics;
use crate::reconciler::DynReconciler;
use crate::store::SyncedFlag;
use crate::watcher::DynWatcher;

pub use self::retry::{
    DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP, GO_SDK_LAST_ATTEMPT, RetryDequeuePolicy, RetryPolicy,
};
pub use self::term::{SharedKind, Term};
#[doc(no_inline)]
pub use crate::handler::HandlerError;

use self::kind_runtime::{KindRuntime, Running};

/// Settings of an [`InformerController`]; `ControllerConfig::default()` gives the contract's
/// defaults.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    max_concurrent_workers: usize,
    max_pending_events: usize,
    event_timeout: Option<Duration>,
    watcher_retry_policy: RetryPolicy,
    reconciler_retry_policy: RetryPolicy,
    dequeue_policy: Option<RetryDequeuePolicy>,
    shutdown_grace: Duration,
    metrics: Option<ControllerMetrics>,
    name: String,
    informers: Option<Informers>,
    instance: Option<String>,
    reconcile_own_writes: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            max_concurrent_workers: 10,
            max_pending_events: 1000,
            event_timeout: None,
            watcher_retry_policy: RetryPolicy::go_sdk(),
            reconciler_retry_policy: RetryPolicy::default(),
            dequeue_policy: Some(RetryDequeuePolicy::opinionated()),
            shutdown_grace: Duration::from_secs(30),
            metrics: None,
            name: "kubeapp".to_string(),
            informers: None,
            instance: None,
            reconcile_own_writes: false,
        }
    }
}

impl ControllerConfig {
    /// Objects of one kind handled at once (default 10; an informer's option overrides it).
    #[must_use]
    pub fn max_concurrent_workers(mut self, workers: usize) -> Self {
        self.max_concurrent_workers = workers.max(1);
        self
    }

    /// Events of one kind waiting for watchers (or being handled) before intake pauses (default
    /// 1000). Events of a kind without watchers merge instead and do not count.
    #[must_use]
    pub fn max_pending_events(mut self, events: usize) -> Self {
        self.max_pending_events = events.max(1);
        self
    }

    /// Cancels a handler call running longer than `timeout` and counts it as an error.
    #[must_use]
    pub fn event_timeout(mut self, timeout: Duration) -> Self {
        self.event_timeout = Some(timeout);
        self
    }

    /// When failed calls of every handler, watchers and reconcilers alike, run again (see
    /// [`watcher_retry_policy`](Self::watcher_retry_policy) and
    /// [`reconciler_retry_policy`](Self::reconciler_retry_policy) for their defaults). With
    /// [`RetryPolicy::go_sdk`] every handler gives up as the Go SDK's do.
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.watcher_retry_policy = policy.clone();
        self.reconciler_retry_policy = policy;
        self
    }

    /// When failed watcher calls run again; default [`RetryPolicy::go_sdk`] (5 s doubling,
    /// giving up after the retry at 160 s). A watcher's retries of one object run in event
    /// order, so a policy that never gives up lets a call that always fails hold back the
    /// object's later retries for good.
    #[must_use]
    pub fn watcher_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.watcher_retry_policy = policy;
        self
    }

    /// When failed reconciler calls run again; default [`RetryPolicy::default`] (5 s doubling up
    /// to 5 minutes, never giving up).
    #[must_use]
    pub fn reconciler_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.reconciler_retry_policy = policy;
        self
    }

    /// The retry policy of `handler`'s kind of handler.
    pub(crate) fn retry_policy_of(&self, handler: lanes::HandlerId) -> &RetryPolicy {
        match handler {
            lanes::HandlerId::Watcher(_) => &self.watcher_retry_policy,
            lanes::HandlerId::Reconciler(_) => &self.reconciler_retry_policy,
        }
    }

    /// Whether a new event drops a pending retry; `None` means every new event does.
    #[must_use]
    pub fn dequeue_policy(mut self, policy: Option<RetryDequeuePolicy>) -> Self {
        self.dequeue_policy = policy;
        self
    }

    /// How long a stop waits for in-flight handler calls (default 30 s).
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Where to count; without it the controller counts into collectors registered nowhere.
    #[must_use]
    pub fn metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The controller's name (default `kubeapp`): the field manager of
    /// [`Context::apply`](crate::Context::apply) and the reporter of its Events.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The registry of shared informers kinds are registered from (default: one of the
    /// controller's own). A `kubeapp_runner::Runner` passes the process's, so that two apps
    /// watching the same kind share one watch.
    #[must_use]
    pub fn informers(mut self, informers: Informers) -> Self {
        self.informers = Some(informers);
        self
    }

    /// The controller's name (see [`name`](Self::name)).
    pub fn controller_name(&self) -> &str {
        &self.name
    }

    /// This replica's name (e.g. the pod name): the `reportingInstance` of the Events handlers
    /// record through [`Context::recorder`](crate::Context::recorder). None by default.
    #[must_use]
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// See [`instance`](Self::instance).
    pub(crate) fn instance_name(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// Opt-in: reconcile the watch events of this controller's own writes too (default false:
    /// the event of a status write or finalizer patch the controller made itself starts no
    /// reconcile; see [`own_writes`](crate::own_writes)). Watchers get every event either way.
    #[must_use]
    pub fn reconcile_own_writes(mut self, reconcile: bool) -> Self {
        self.reconcile_own_writes = reconcile;
        self
    }

    /// Whether the events of own writes are reconciled (see
    /// [`reconcile_own_writes`](Self::reconcile_own_writes)).
    pub(crate) fn reconciles_own_writes(&self) -> bool {
        self.reconcile_own_writes
    }
}

/// Why an [`InformerController`] could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// `run` was called while the controller runs or after it stopped.
    #[error("the controller already ran; make a new one")]
    AlreadyRan,
    /// Running in terms (leader election, sharding) needs every kind on shared informers
    /// (`kind`, `KindHandle`, a simple App's kinds): kinds added with `add_informer` cannot be
    /// listed again for a new term.
    #[error(
        "running in terms (leader election, sharding) needs every kind registered through \
         InformerController::kind (shared informers); kinds added with the erased add_informer \
         cannot be listed again for a new term: {0}"
    )]
    NotRestartable(String),
}

enum RunState {
    Idle { informers: Vec<(String, Informer)> },
    Running(Arc<Running>),
    Stopped,
}

struct Shared {
    config: Arc<ControllerConfig>,
    metrics: ControllerMetrics,
    informers: Informers,
    kinds: RwLock<HashMap<String, Arc<KindRuntime>>>,
    synced: Mutex<Vec<(String, SyncedFlag)>>,
    state: Mutex<RunState>,
    /// Handler calls dropped by hard stops, over every run (see `abandoned_calls`).
    abandoned_calls: AtomicU64,
}

/// Owns informers, watchers and reconcilers keyed by kind; see the [module docs](self).
///
/// Cheap to clone; clones share everything, so handlers can be added from another task while
/// [`run`](Self::run) is awaited.
///
/// # Example
///
/// A controller fed by a synthetic event stream (an [`Informer::from_stream`]); with a real
/// cluster, use [`Informer::new`] instead.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::object::share;
/// use kube::core::GroupVersionKind;
/// use kubeapp_operator::erased::DynReconcilerFn;
/// use kubeapp_operator::erased::DynWatcherFns;
/// use kubeapp_operator::{
///     ControllerConfig, Informer, InformerController, InformerEvent, ReconcileResult,
/// };
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let controller = InformerController::new(ControllerConfig::default());
/// let (events, stream) = futures::channel::mpsc::unbounded();
/// controller.erased().add_informer("configmaps", Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream));
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let log = seen.clone();
/// controller.erased().add_watcher(
///     "configmaps",
///     DynWatcherFns::<ConfigMap>::new().on_add(move |cm, _ctx| {
///         let log = log.clone();
///         async move {
///             log.lock().unwrap().push(format!("add {}", cm.metadata.name.as_deref().unwrap_or("")));
///             Ok(())
///         }
///     }),
/// );
/// let (done_tx, done) = tokio::sync::oneshot::channel();
/// let done_tx = Mutex::new(Some(done_tx));
/// controller.erased().add_reconciler(
///     "configmaps",
///     DynReconcilerFn::<ConfigMap, _>::new(move |request, _ctx| {
///         if let Some(tx) = done_tx.lock().unwrap().take() {
///             let _ = tx.send(request.action);
///         }
///         async { Ok(ReconcileResult::done()) }
///     }),
/// );
///
/// let stop = CancellationToken::new();
/// let running = tokio::spawn({
///     let (controller, stop) = (controller.clone(), stop.clone());
///     async move { controller.run(stop).await }
/// });
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// events.unbounded_send(InformerEvent::Add(share(cm))).unwrap();
///
/// let action = done.await.unwrap();
/// assert_eq!(action, kubeapp_operator::ReconcileAction::Created);
/// assert_eq!(*seen.lock().unwrap(), ["add settings"]);
/// stop.cancel();
/// running.await.unwrap().unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct InformerController {
    shared: Arc<Shared>,
}

impl InformerController {
    /// A controller with `config`; add informers and handlers, then [`run`](Self::run) it.
    pub fn new(config: ControllerConfig) -> Self {
        let metrics = config.metrics.clone().unwrap_or_else(default_metrics);
        let informers = match &config.informers {
            Some(informers) => {
                informers.adopt_metrics(&metrics);
                informers.clone()
            }
            None => Informers::with_metrics(metrics.clone()),
        };
        Self {
            shared: Arc::new(Shared {
                config: Arc::new(config),
                metrics,
                informers,
                kinds: RwLock::default(),
                synced: Mutex::default(),
                state: Mutex::new(RunState::Idle {
                    informers: Vec::new(),
                }),
                abandoned_calls: AtomicU64::new(0),
            }),
        }
    }

    /// The registry kinds are registered from.
    pub fn informers(&self) -> &Informers {
        &self.shared.informers
    }

    pub(crate) fn config(&self) -> &ControllerConfig {
        &self.shared.config
    }

    fn named_kind(&self, kind: &str) -> Arc<KindRuntime> {
        if let Some(runtime) = self
            .shared
            .kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(kind)
        {
            return Arc::clone(runtime);
        }
        let mut kinds = self
            .shared
            .kinds
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let runtime = kinds.entry(kind.to_string()).or_insert_with(|| {
            let metrics = self.shared.metrics.for_kind(kind);
            Arc::new(KindRuntime::new(
                kind,
                Arc::clone(&self.shared.config),
                metrics,
            ))
        });
        Arc::clone(runtime)
    }

    /// Adds an informer for `kind` (see
    /// [`ErasedHandlers::add_informer`](crate::erased::ErasedHandlers::add_informer)).
    pub(crate) fn register_informer(&self, kind: &str, informer: Informer) {
        let runtime = self.named_kind(kind);
        let _ = runtime.info.set(informer.gvk().clone());
        runtime.init_workers(informer.max_concurrent_workers());
        let flag = informer.synced();
        if flag.is_synced() {
            runtime.metrics.informer_synced.set(1);
        }
        self.shared
            .synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((kind.to_string(), flag));
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            RunState::Idle { informers } => informers.push((kind.to_string(), informer)),
            RunState::Running(run) => spawn_informer(runtime, informer, run),
            RunState::Stopped => {
                tracing::warn!(kind, "informer added after the controller stopped; ignored");
            }
        }
    }

    /// Adds a watcher for `kind`; watchers run in the order they were added, before reconcilers.
    pub(crate) fn register_watcher(&self, kind: &str, watcher: impl DynWatcher) {
        self.named_kind(kind).add_watcher(Arc::new(watcher));
    }

    /// Adds a reconciler for `kind`; reconcilers run in the order they were added, after watchers.
    pub(crate) fn register_reconciler(&self, kind: &str, reconciler: impl DynReconciler) {
        self.named_kind(kind).add_reconciler(Arc::new(reconciler));
    }

    /// True when every informer added so far has delivered its first complete list.
    pub fn is_synced(&self) -> bool {
        self.synced_flags().iter().all(|(_, flag)| flag.is_synced())
    }

    /// Each informer's kind and synced flag, for readiness checks.
    pub fn synced_flags(&self) -> Vec<(String, SyncedFlag)> {
        self.shared
            .synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many handler calls the controller abandoned so far: calls still running when a stop's
    /// grace period ran out, dropped with their workers (each also logged as an error when it
    /// happens), over every run, including the terms of a leader-elected or sharded run (a term
    /// that ends on a lost Lease has no grace at all). An app reports them so the process can exit with a status that says work was
    /// left undone (see the Runner's exit status).
    pub fn abandoned_calls(&self) -> u64 {
        self.shared.abandoned_calls.load(Ordering::Relaxed)
    }

    /// Runs informers and handlers until `stop` is cancelled, then stops gracefully (see the
    /// [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`ControllerError::AlreadyRan`] when the controller runs or ran already: a controller runs
    /// once.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), ControllerError> {
        self.run_gated(stop, Term::default(), false).await
    }
}

impl fmt::Debug for InformerController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<String> = self
            .shared
            .kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        f.debug_struct("InformerController")
            .field("kinds", &kinds)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// Collectors registered nowhere, for a controller configured without metrics.
#[allow(clippy::expect_used)] // Fixed, valid metric names: construction cannot fail.
fn default_metrics() -> ControllerMetrics {
    ControllerMetrics::unregistered(None).expect("valid metric names")
}

/// Pulls events from `informer` into `runtime`'s lanes until the controller stops.
fn spawn_informer(runtime: Arc<KindRuntime>, informer: Informer, run: &Arc<Running>) {
    let events = informer.into_events(runtime.metrics.clone());
    run.tracker.spawn(runtime.intake(events, Arc::clone(run)));
}
