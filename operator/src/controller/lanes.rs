//! Per-object lanes: the queue, the retries and the one task that works on each object.
//!
//! Every object with pending work has a [`Lane`]: its queued events, its pending retries (at most
//! one per handler) and an `active` flag. A lane is worked on by at most one task at a time, which
//! takes one item (the oldest queued event, else a due retry), dispatches it, and repeats until the
//! lane is empty; then the lane is removed (or kept, idle, while retries wait). Different lanes run
//! concurrently, each item under one of the kind's worker permits. Retry timers wake their lane
//! when due, so retries of different objects run in parallel.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ControllerConfig;
use crate::handler::HandlerError;
use crate::informer::{InformerEvent, KindInfo};
use crate::metrics::KindMetrics;
use crate::object::{KubeObject, ObjectKey, SharedObject};
use crate::reconciler::{ReconcileAction, ReconcileRequest, Reconciler};
use crate::watcher::Watcher;

/// What a running controller shares with its tasks.
pub(crate) struct Running {
    /// Cancelled when the controller begins to stop: no new events, handler contexts cancelled.
    pub stop: CancellationToken,
    /// Cancelled when the grace period ran out: in-flight handler futures are dropped.
    pub hard_stop: CancellationToken,
    /// Lane and informer tasks, awaited on stop.
    pub tracker: TaskTracker,
}

/// Which handler of a kind: watchers and reconcilers by registration index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum HandlerId {
    Watcher(usize),
    Reconciler(usize),
}

impl std::fmt::Display for HandlerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Watcher(i) => write!(f, "watcher[{i}]"),
            Self::Reconciler(i) => write!(f, "reconciler[{i}]"),
        }
    }
}

/// The handlers of a kind; replaced as a whole when one is added.
#[derive(Default)]
pub(crate) struct Handlers {
    pub watchers: Vec<Arc<dyn Watcher>>,
    pub reconcilers: Vec<Arc<dyn Reconciler>>,
}

/// An event waiting in a lane.
pub(super) struct Queued {
    pub(super) event: InformerEvent,
    /// False when no watcher was registered as it arrived.
    pub(super) for_watchers: bool,
    /// The reconcile request this event carries, `None` once a newer event took it over.
    pub(super) reconcile: Option<(ReconcileAction, SharedObject)>,
    /// Held until the event is handled: bounds the events queued per kind.
    _backlog: OwnedSemaphorePermit,
}

/// What a retry re-runs.
#[derive(Clone)]
pub(super) enum RetryWork {
    Watch(InformerEvent),
    Reconcile(ReconcileRequest),
}

impl RetryWork {
    pub(super) fn action(&self) -> ReconcileAction {
        match self {
            Self::Watch(event) => event.action(),
            Self::Reconcile(request) => request.action,
        }
    }

    pub(super) fn object(&self) -> &SharedObject {
        match self {
            Self::Watch(event) => event.object(),
            Self::Reconcile(request) => &request.object,
        }
    }
}

/// A pending retry (after an error) or requeue (after `requeue_after`) of one handler.
pub(super) struct RetryEntry {
    pub(super) due: Instant,
    /// The attempt number the retry runs as (0 for a requeue after a success).
    pub(super) attempt: u32,
    pub(super) work: RetryWork,
    /// The error that caused it; `None` for a plain requeue.
    pub(super) error: Option<HandlerError>,
}

#[derive(Default)]
pub(super) struct Lane {
    queue: VecDeque<Queued>,
    retries: BTreeMap<HandlerId, RetryEntry>,
    active: bool,
}

impl Lane {
    fn runnable(&self, now: Instant) -> bool {
        !self.queue.is_empty() || self.retries.values().any(|entry| entry.due <= now)
    }
}

pub(super) enum Work {
    Event(Queued),
    Retry(HandlerId, RetryEntry),
}

/// How a handler call ended, after its retry (if any) was scheduled.
pub(super) enum CallEnd {
    Done,
    Requeued,
    Retrying,
    GaveUp,
}

/// Everything the controller keeps for one kind.
pub(crate) struct KindRuntime {
    pub name: Arc<str>,
    pub info: OnceLock<KindInfo>,
    handlers: RwLock<Arc<Handlers>>,
    lanes: Mutex<HashMap<ObjectKey, Lane>>,
    workers: OnceLock<Arc<Semaphore>>,
    backlog: Arc<Semaphore>,
    pub metrics: KindMetrics,
    pub(super) config: Arc<ControllerConfig>,
}

impl KindRuntime {
    pub(crate) fn new(name: &str, config: Arc<ControllerConfig>, metrics: KindMetrics) -> Self {
        Self {
            name: Arc::from(name),
            info: OnceLock::new(),
            handlers: RwLock::default(),
            lanes: Mutex::default(),
            workers: OnceLock::new(),
            backlog: Arc::new(Semaphore::new(config.max_pending_events.max(1))),
            metrics,
            config,
        }
    }

    /// Sets the worker limit of this kind; the first caller decides.
    pub(crate) fn init_workers(&self, workers: Option<usize>) {
        let workers = workers.unwrap_or(self.config.max_concurrent_workers).max(1);
        let _ = self.workers.set(Arc::new(Semaphore::new(workers)));
    }

    fn workers(&self) -> Arc<Semaphore> {
        self.workers
            .get_or_init(|| Arc::new(Semaphore::new(self.config.max_concurrent_workers.max(1))))
            .clone()
    }

    pub(crate) fn handlers(&self) -> Arc<Handlers> {
        self.handlers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn add_watcher(&self, watcher: Arc<dyn Watcher>) {
        let mut slot = self
            .handlers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = Handlers {
            watchers: slot.watchers.clone(),
            reconcilers: slot.reconcilers.clone(),
        };
        next.watchers.push(watcher);
        *slot = Arc::new(next);
    }

    pub(crate) fn add_reconciler(&self, reconciler: Arc<dyn Reconciler>) {
        let mut slot = self
            .handlers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = Handlers {
            watchers: slot.watchers.clone(),
            reconcilers: slot.reconcilers.clone(),
        };
        next.reconcilers.push(reconciler);
        *slot = Arc::new(next);
    }

    fn lanes(&self) -> MutexGuard<'_, HashMap<ObjectKey, Lane>> {
        // A panic never happens while the lock is held (user code runs outside it), but if one
        // did, the map is still consistent item by item.
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `event` in its object's lane, waiting while the kind's backlog is full. Returns
    /// false when the controller stopped meanwhile.
    pub(crate) async fn enqueue(
        self: &Arc<Self>,
        event: InformerEvent,
        run: &Arc<Running>,
    ) -> bool {
        let backlog = tokio::select! {
            biased;
            () = run.stop.cancelled() => return false,
            permit = self.backlog.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return false,
            },
        };
        let action = event.action();
        self.metrics.action(action).events_total.inc();
        let for_watchers = !self.handlers().watchers.is_empty();
        let object = event.object().clone();
        let key = ObjectKey::of(object.as_ref());
        let mut lanes = self.lanes();
        let lane = lanes.entry(key.clone()).or_default();
        let mut reconcile = (action, object);
        // Level-triggered merge: the newest event takes over the reconcile request of the last
        // waiting event of the same object, unless a Delete separates them.
        if let Some(position) = lane.queue.iter().rposition(|q| q.reconcile.is_some()) {
            let waiting = &mut lane.queue[position];
            if let Some((waiting_action, _)) = &waiting.reconcile
                && let Some(merged) = waiting_action.merged_with(action)
            {
                waiting.reconcile = None;
                reconcile.0 = merged;
                if !waiting.for_watchers {
                    lane.queue.remove(position);
                    self.metrics.queue_depth.dec();
                }
            }
        }
        lane.queue.push_back(Queued {
            event,
            for_watchers,
            reconcile: Some(reconcile),
            _backlog: backlog,
        });
        self.metrics.queue_depth.inc();
        if !lane.active {
            lane.active = true;
            self.spawn_lane(key, run);
        }
        true
    }

    fn spawn_lane(self: &Arc<Self>, key: ObjectKey, run: &Arc<Running>) {
        let this = Arc::clone(self);
        let run_for_task = Arc::clone(run);
        run.tracker
            .spawn(async move { this.drive_lane(key, run_for_task).await });
    }

    /// Works on one lane until it is empty or the controller stops.
    async fn drive_lane(self: Arc<Self>, key: ObjectKey, run: Arc<Running>) {
        let workers = self.workers();
        loop {
            let permit = tokio::select! {
                biased;
                () = run.stop.cancelled() => None,
                permit = workers.clone().acquire_owned() => permit.ok(),
            };
            let Some(permit) = permit else {
                self.park(&key);
                return;
            };
            let Some(work) = self.next_work(&key) else {
                return;
            };
            match work {
                Work::Event(queued) => self.dispatch_event(&key, queued, &run).await,
                Work::Retry(handler, entry) => self.run_retry(&key, handler, entry, &run).await,
            }
            drop(permit);
            if run.stop.is_cancelled() {
                self.park(&key);
                return;
            }
        }
    }

    /// Marks the lane idle without taking more work (the controller is stopping).
    fn park(&self, key: &ObjectKey) {
        if let Some(lane) = self.lanes().get_mut(key) {
            lane.active = false;
        }
    }

    /// The next item of the lane: the oldest queued event, else a due retry. When there is none,
    /// the lane goes idle (and away, if no retry waits).
    fn next_work(&self, key: &ObjectKey) -> Option<Work> {
        let mut lanes = self.lanes();
        let lane = lanes.get_mut(key)?;
        if let Some(queued) = lane.queue.pop_front() {
            self.metrics.queue_depth.dec();
            return Some(Work::Event(queued));
        }
        let now = Instant::now();
        let due = lane
            .retries
            .iter()
            .find(|(_, entry)| entry.due <= now)
            .map(|(handler, _)| *handler);
        if let Some(handler) = due
            && let Some(entry) = lane.retries.remove(&handler)
        {
            self.metrics.retries_pending.dec();
            return Some(Work::Retry(handler, entry));
        }
        lane.active = false;
        if lane.retries.is_empty() {
            lanes.remove(key);
        }
        None
    }

    /// Called by a retry timer: starts the lane's task if it is idle and has due work.
    fn wake(self: &Arc<Self>, key: &ObjectKey, run: &Arc<Running>) {
        if run.stop.is_cancelled() {
            return;
        }
        let mut lanes = self.lanes();
        if let Some(lane) = lanes.get_mut(key)
            && !lane.active
            && lane.runnable(Instant::now())
        {
            lane.active = true;
            self.spawn_lane(key.clone(), run);
        }
    }

    pub(super) fn schedule(
        self: &Arc<Self>,
        key: &ObjectKey,
        handler: HandlerId,
        entry: RetryEntry,
        run: &Arc<Running>,
    ) {
        let due = entry.due;
        {
            let mut lanes = self.lanes();
            let lane = lanes.entry(key.clone()).or_default();
            if lane.retries.insert(handler, entry).is_none() {
                self.metrics.retries_pending.inc();
            }
        }
        let this = Arc::clone(self);
        let run = Arc::clone(run);
        let key = key.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep_until(due) => this.wake(&key, &run),
                () = run.stop.cancelled() => {}
            }
        });
    }

    /// Applies the dequeue policy to `handler`'s pending retry before a new event reaches it.
    pub(super) fn dequeue_check(
        &self,
        key: &ObjectKey,
        handler: HandlerId,
        new_action: ReconcileAction,
        new_object: &dyn KubeObject,
    ) {
        // Taken out so that the user's policy runs outside the lock; nothing else touches this
        // handler's retry meanwhile, because only this lane's task does.
        let Some(entry) = self
            .lanes()
            .get_mut(key)
            .and_then(|lane| lane.retries.remove(&handler))
        else {
            return;
        };
        let drop_it = match &self.config.dequeue_policy {
            None => true,
            Some(policy) => policy.should_dequeue(
                new_action,
                new_object,
                entry.work.action(),
                entry.work.object().as_ref(),
                entry.error.as_ref(),
            ),
        };
        if drop_it {
            self.metrics.retries_pending.dec();
            tracing::debug!(kind = %self.name, object = %key, %handler, "newer event drops the pending retry");
        } else if let Some(lane) = self.lanes().get_mut(key) {
            lane.retries.insert(handler, entry);
        }
    }
}
