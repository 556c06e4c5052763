//! Everything the controller keeps for one kind: its handlers, its lanes, the intake that queues
//! informer events, and the worker tasks that dispatch them.
//!
//! Workers are long-lived tasks, started on demand up to the kind's `max_concurrent_workers`
//! (when work becomes ready and no worker is idle) and kept until the controller stops. A worker
//! takes one item of one ready lane, dispatches it, hands the lane back, and repeats; with nothing
//! ready it parks until an event or a due retry makes a lane ready. A lane that becomes ready is
//! handed to one parked worker explicitly (that worker stops counting as idle at once), so a burst
//! after a quiet period starts as many workers as it has objects, up to the limit. So the number
//! of objects being handled at once never exceeds the number of workers, a slow object holds only
//! its own worker, and the steady state spawns no task and takes no semaphore per event.
//!
//! Retries and requeues wait in one timer queue per kind, fired by one task per kind (started with
//! the first worker); see [`lanes`](super::lanes).
//!
//! The intake pulls events from the kind's informers and stops pulling while
//! `max_pending_events` events for watchers wait or run (the backlog); a handled event frees its
//! place. Events with reconcile work only do not count: they merge while they wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::task::Poll;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ControllerConfig;
use super::counts::{LaneCounts, WorkerGauges};
use super::dispatch::Held;
use super::durations::WorkerDurations;
use super::failures::FailureEvents;
use super::lanes::{HandlerId, Lanes, PushExtra, Taken, Work};
use super::pending::Retries;
use super::registry::{Handlers, Registration};
use crate::action::TriggerCause;
use crate::gate::{CallGate, EventFilter};
use crate::handler::DynContext;
use crate::informers::Fanout;
use crate::metrics::KindMetrics;
use crate::object::SharedObject;
use crate::own_writes::OwnWrites;
use crate::store::InformerEvent;
use crate::store::SharedCache;
use kube::core::GroupVersionKind;

mod intake;

pub(crate) use intake::Enqueue;

/// What a running controller shares with its tasks.
pub(crate) struct Running {
    /// Cancelled when the controller begins to stop: no new events, handler contexts cancelled.
    pub stop: CancellationToken,
    /// Cancelled when the grace period ran out: workers drop their in-flight handler futures.
    pub hard_stop: CancellationToken,
    /// Worker and informer tasks, awaited on stop.
    pub tracker: TaskTracker,
    /// The runtime the controller runs on (subscriptions made from outside it spawn there).
    pub runtime: tokio::runtime::Handle,
    /// In a term (e.g. leader-elected): asked before every handler call (see
    /// [`gate`](crate::gate)).
    pub gate: Option<Arc<dyn CallGate>>,
    /// In a term (e.g. sharded): the events it handles; others are dropped before they reach
    /// the lanes (see [`gate`](crate::gate)).
    pub filter: Option<Arc<dyn EventFilter>>,
    /// Set by the run's own task as it sees `stop` cancelled (see [`stop_seen`](Self::stop_seen)).
    pub stop_seen: AtomicBool,
    /// Workers the hard stop dropped in the middle of an item (each with a handler call under
    /// way): the calls this run abandoned.
    pub abandoned: AtomicU64,
}

impl Running {
    /// Whether the run has seen its stop: one load, where `stop.is_cancelled()` takes the token's
    /// lock (two locked instructions; asked for every event it was 5 % of a no-op dispatch). It
    /// turns true a moment after the stop, when the run's task wakes, so it is only asked where
    /// acting in that moment is harmless: queuing an event (no worker dispatches once the
    /// stop is cancelled, [`acting`](Self::acting) asks the token itself, and the run detaches its
    /// kinds from their informers as it sees the stop).
    pub(crate) fn stop_seen(&self) -> bool {
        self.stop_seen.load(Ordering::Acquire)
    }

    /// Whether this run handles `object` at all: always, unless the term's [`EventFilter`]
    /// (e.g. a shard's active slots) does not admit it.
    pub(crate) fn admits(&self, object: &SharedObject) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|filter| filter.admits(object))
    }

    /// Whether a new event or retry may start: not stopping, and leading if elected.
    pub(crate) fn acting(&self) -> bool {
        !self.stop.is_cancelled() && self.leading()
    }

    /// Whether the next handler call of the event in hand may start: the term's [`CallGate`]
    /// allows it (leading, if elected). A
    /// stop is checked once per event (asking the stop token takes a lock, and an event has a
    /// call per handler): an event under way when the stop comes finishes its handlers within
    /// the grace period, as a call under way does; the hard stop drops it.
    pub(crate) fn leading(&self) -> bool {
        self.gate.as_ref().is_none_or(|gate| gate.may_call())
    }
}

/// The lanes and the bookkeeping of the workers and intakes, under one lock.
pub(super) struct State {
    pub(super) lanes: Lanes,
    /// The events counted and the queue depth, written under this lock.
    pub(super) counts: LaneCounts,
    /// Worker tasks started.
    workers: usize,
    /// Workers parked waiting for work (registered on `work_ready`), not yet handed any.
    idle: usize,
    /// An intake waits for room in the backlog.
    intake_waiting: bool,
    /// The kind's shared informer has delivered its cache to the lanes on this run: a handler
    /// added from now on gets the cache replayed for itself (see `registry`).
    pub(super) live: bool,
    /// Handlers added while the cache was still being delivered: replayed when it is.
    pub(super) awaiting_replay: Vec<HandlerId>,
}

/// A lane a worker has finished with, handed back with its next take.
struct Finished {
    slot: usize,
    /// Whether its item counted in the backlog of events for watchers.
    counted: bool,
    retries: Retries,
}

/// A worker's copy of the kind's handlers, refreshed when one was added.
#[derive(Default)]
struct HandlersCache {
    version: Option<u64>,
    handlers: Arc<Handlers>,
}

impl HandlersCache {
    fn current(&mut self, kind: &KindRuntime) -> &Handlers {
        // The version is read before the handlers: a handler added in between bumps it again,
        // and the next event reads them anew.
        let version = kind.handlers_version.load(Ordering::Acquire);
        if self.version != Some(version) {
            self.handlers = kind.handlers();
            self.version = Some(version);
        }
        &self.handlers
    }
}

/// Everything the controller keeps for one kind.
pub(crate) struct KindRuntime {
    pub name: Arc<str>,
    pub info: OnceLock<GroupVersionKind>,
    pub(super) handlers: RwLock<Arc<Handlers>>,
    /// Bumped when a handler is added, so that workers re-read `handlers` only then.
    pub(super) handlers_version: AtomicU64,
    /// Whether any watcher is registered (what the intake needs to know per event).
    pub(super) has_watchers: AtomicBool,
    state: Mutex<State>,
    worker_limit: OnceLock<usize>,
    /// Wakes a parked worker: one `notify_one` per lane handed off to an idle worker.
    work_ready: Notify,
    /// Wakes intakes waiting for room in the backlog.
    room: Notify,
    pub metrics: KindMetrics,
    pub(super) config: Arc<ControllerConfig>,
    /// The shared cache of the kind's informer, when it has one (kinds registered through a
    /// `KindHandle`): reconcile retries and triggers read the newest object from it, and a
    /// handler added at run time gets it replayed.
    pub(crate) cache: OnceLock<Arc<SharedCache>>,
    /// The controller's run, while it runs (triggers and replays need it to start workers).
    running: Mutex<Option<Arc<Running>>>,
    /// The first-attempt handler context of the run it was made for, shared by all the run's
    /// workers: one context per run, so a typed handler can keep the [`Context`](crate::Context)
    /// it built for it and lend it to every call (see `kind::traits::Erased`).
    run_context: Mutex<Option<(Weak<Running>, DynContext)>>,
    /// Numbers of the next watcher and reconciler.
    pub(super) next_ids: Mutex<(usize, usize)>,
    /// The shared informer feeding this kind, for kinds registered through a `KindHandle`.
    pub(crate) fanout: OnceLock<Arc<Fanout>>,
    /// What handles registered, by token (see `HandlerHandle`).
    pub(crate) registrations: Mutex<HashMap<u64, Registration>>,
    pub(super) next_token: AtomicU64,
    /// The writes this controller made to objects of the kind, whose watch events reconcile
    /// nothing (see [`own_writes`](crate::own_writes)).
    pub(crate) own_writes: OwnWrites,
    /// Where the Warning Events of failing handlers go: set for kinds registered with a client
    /// (see [`failures`](super::failures)).
    pub(crate) failure_events: OnceLock<FailureEvents>,
}

impl KindRuntime {
    pub(crate) fn new(name: &str, config: Arc<ControllerConfig>, metrics: KindMetrics) -> Self {
        Self {
            name: Arc::from(name),
            info: OnceLock::new(),
            handlers: RwLock::default(),
            handlers_version: AtomicU64::new(0),
            has_watchers: AtomicBool::new(false),
            state: Mutex::new(State {
                lanes: Lanes::tracking_echoes(!config.reconciles_own_writes())
                    .reporting_waits(Arc::clone(&metrics.queue_wait)),
                counts: LaneCounts::new(&metrics),
                workers: 0,
                idle: 0,
                intake_waiting: false,
                live: false,
                awaiting_replay: Vec::new(),
            }),
            worker_limit: OnceLock::new(),
            work_ready: Notify::new(),
            room: Notify::new(),
            metrics,
            config,
            cache: OnceLock::new(),
            running: Mutex::new(None),
            run_context: Mutex::new(None),
            next_ids: Mutex::new((0, 0)),
            fanout: OnceLock::new(),
            registrations: Mutex::default(),
            next_token: AtomicU64::new(0),
            own_writes: OwnWrites::default(),
            failure_events: OnceLock::new(),
        }
    }

    /// The controller's run, while it runs.
    pub(crate) fn current_run(&self) -> Option<Arc<Running>> {
        self.running()
    }

    /// Records the controller's run (`None` when it stopped).
    pub(crate) fn set_running(&self, run: Option<Arc<Running>>) {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = run;
    }

    pub(super) fn running(&self) -> Option<Arc<Running>> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sets the worker limit of this kind; the first caller decides.
    pub(crate) fn init_workers(&self, workers: Option<usize>) {
        let workers = workers.unwrap_or(self.config.max_concurrent_workers).max(1);
        let _ = self.worker_limit.set(workers);
    }

    fn worker_limit(&self) -> usize {
        *self
            .worker_limit
            .get_or_init(|| self.config.max_concurrent_workers.max(1))
    }

    /// Whether any watcher is registered: then the kind's intake waits when its backlog of
    /// events for watchers is full.
    pub(crate) fn has_watchers(&self) -> bool {
        self.has_watchers.load(Ordering::Acquire)
    }

    pub(crate) fn handlers(&self) -> Arc<Handlers> {
        self.handlers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Queues a triggered reconcile of `object` (see [`trigger`](crate::trigger)); dropped when
    /// the controller is not running.
    /// Queues a triggered reconcile of `object`. `creation`: the related object whose Add
    /// triggered it, when that Add may be the echo of a creation by this kind's own handler
    /// whose record was not there yet (checked again at dispatch; see `own_writes`).
    pub(crate) fn push_triggered(
        self: &Arc<Self>,
        object: SharedObject,
        cause: TriggerCause,
        creation: Option<SharedObject>,
    ) {
        let Some(run) = self.running() else {
            return;
        };
        if run.stop_seen() || !run.admits(&object) {
            return;
        }
        let mut state = self.state();
        let extra = PushExtra {
            cause: Some(cause),
            creation,
            ..PushExtra::default()
        };
        self.metrics.triggered.inc();
        let pushed = state
            .lanes
            .push_with(InformerEvent::Resync(object), false, extra);
        state.counts.pushed(pushed.merged_away > 0);
        if pushed.became_ready {
            self.work_became_ready(&mut state, &run);
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // A panic never happens while the lock is held (user code runs outside it), but if one
        // did, the lanes are still consistent item by item.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A lane became ready: hand it to a parked worker, or start one while below the limit. The
    /// hand-off takes the worker out of the idle count at once, so the next lane that becomes
    /// ready before it runs starts (or wakes) another worker instead of waiting for this one.
    pub(super) fn work_became_ready(self: &Arc<Self>, state: &mut State, run: &Arc<Running>) {
        if state.idle > 0 {
            state.idle -= 1;
            // Every idle worker registered its wait under this lock before counting itself idle,
            // so this wakes one of them (it never stores a permit for later).
            self.work_ready.notify_one();
        } else if state.workers < self.worker_limit() {
            if state.workers == 0 {
                // The first worker comes with the kind's retry timer task.
                self.spawn_timers(run);
            }
            state.workers += 1;
            self.spawn_worker(run);
        }
    }

    fn spawn_worker(self: &Arc<Self>, run: &Arc<Running>) {
        // Whether the worker is in the middle of an item: written by the worker only.
        let busy = Arc::new(AtomicBool::new(false));
        let worker = Arc::clone(self).work(Arc::clone(run), Arc::clone(&busy));
        let hard_stop = run.hard_stop.clone();
        let counted = Arc::clone(run);
        run.tracker.spawn(async move {
            // The worker first: the hard-stop future is polled only when the worker waits.
            tokio::select! {
                biased;
                () = worker => {}
                () = hard_stop.cancelled() => {
                    if busy.load(Ordering::Relaxed) {
                        counted.abandoned.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }

    /// Starts the task that fires the kind's retry timers: one task per kind, however many
    /// retries and requeues wait.
    fn spawn_timers(self: &Arc<Self>, run: &Arc<Running>) {
        let this = Arc::clone(self);
        let tracker = run.tracker.clone();
        let run = Arc::clone(run);
        tracker.spawn(async move {
            let fire = std::future::poll_fn(|cx| {
                let mut state = this.state();
                let Poll::Ready(ready) = state.lanes.poll_timers(cx) else {
                    return Poll::<()>::Pending;
                };
                for _ in 0..ready {
                    this.work_became_ready(&mut state, &run);
                }
                // Yield after each batch; the next poll picks up what is due meanwhile.
                cx.waker().wake_by_ref();
                Poll::Pending
            });
            tokio::select! {
                () = fire => {}
                () = run.stop.cancelled() => {}
            }
        });
    }

    /// The first-attempt handler context of `run`: made by the run's first worker, cloned by
    /// the others.
    fn dyn_context(&self, run: &Arc<Running>) -> DynContext {
        let mut slot = self
            .run_context
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A `Weak` keeps its allocation, so an equal pointer is this run, never a later one at
        // the same address.
        if let Some((made_for, ctx)) = &*slot
            && std::ptr::eq(made_for.as_ptr(), Arc::as_ptr(run))
        {
            return ctx.clone();
        }
        let ctx = DynContext::of_kind(
            Arc::clone(&self.name),
            run.stop.clone(),
            Some(self.own_writes.clone()),
        );
        *slot = Some((Arc::downgrade(run), ctx.clone()));
        ctx
    }

    /// One worker: takes ready work until the controller stops. A lane it finished is handed back
    /// under the same hold of the lock that takes its next work (one lock round trip per item,
    /// not two).
    async fn work(self: Arc<Self>, run: Arc<Running>, busy: Arc<AtomicBool>) {
        let ctx = self.dyn_context(&run);
        let mut handlers = HandlersCache::default();
        let mut durations = WorkerDurations::new(&self.metrics);
        let mut gauges = WorkerGauges::new(&self.metrics);
        let mut finished: Option<Finished> = None;
        loop {
            // Asked before anything is taken, as every item starts: a stopping (or no longer
            // leading) worker takes nothing more, but still hands back what it finished.
            let acting = run.acting();
            let parked = self.work_ready.notified();
            tokio::pin!(parked);
            let taken = {
                let mut state = self.state();
                if let Some(done) = finished.take() {
                    self.hand_back(&mut state, done);
                }
                if !acting {
                    return;
                }
                let taken = state.lanes.take();
                if let Some(Taken {
                    work: Work::Event(_),
                    ..
                }) = &taken
                {
                    state.counts.taken();
                }
                if taken.is_none() {
                    // Registered as a waiter before counting as idle, both under the lock where
                    // lanes are handed off.
                    parked.as_mut().enable();
                    state.idle += 1;
                }
                taken
            };
            let Some(Taken {
                slot,
                key,
                work,
                mut retries,
            }) = taken
            else {
                // A parked worker keeps no durations to itself.
                durations.flush();
                tokio::select! {
                    () = parked => {}
                    () = run.stop.cancelled() => return,
                }
                continue;
            };
            // Whether the object is failing, and since when, as the kind's gauges know it (the
            // retry to run counts until it ran).
            let mut failing_before = retries.failing_since();
            if let Work::Retry(pending) = &work
                && let Some(since) = pending.entry.failing_since
            {
                failing_before = Some(failing_before.map_or(since, |other| other.min(since)));
            }
            busy.store(true, Ordering::Relaxed);
            let mut held = Held {
                key: &key,
                retries: &mut retries,
                durations: &mut durations,
                gauges: &mut gauges,
                stop: &run.stop,
                run: &run,
                continues: None,
            };
            let counted = match work {
                Work::Event(queued) => {
                    let counted = queued.for_watchers();
                    let handlers = handlers.current(&self);
                    self.dispatch_event(&mut held, queued, &ctx, handlers).await;
                    counted
                }
                Work::Retry(pending) => {
                    self.metrics.retries_pending.dec();
                    let handlers = handlers.current(&self);
                    self.run_retry(&mut held, pending, &ctx, handlers).await;
                    false
                }
            };
            self.metrics
                .failing
                .changed(failing_before, retries.failing_since());
            busy.store(false, Ordering::Relaxed);
            finished = Some(Finished {
                slot,
                counted,
                retries,
            });
            // Handlers that never wait would otherwise keep this thread to themselves. The lane
            // is handed back first when the budget is spent (the yield may last), else with the
            // next take.
            if !tokio::task::coop::has_budget_remaining()
                && let Some(done) = finished.take()
            {
                self.hand_back(&mut self.state(), done);
            }
            tokio::task::consume_budget().await;
        }
    }

    /// Hands a finished lane back (its pending retries with it), making room for the intake.
    fn hand_back(&self, state: &mut State, done: Finished) {
        state.lanes.finish(done.slot, done.counted, done.retries);
        if done.counted && state.intake_waiting {
            state.intake_waiting = false;
            self.room.notify_waiters();
        }
    }

    /// Drops queued events and pending retries once the controller stopped.
    pub(crate) fn clear(&self) {
        let mut state = self.state();
        state.lanes.clear();
        self.metrics.failing.clear();
        state.counts.cleared();
        state.workers = 0;
        state.idle = 0;
        state.intake_waiting = false;
        state.live = false;
        state.awaiting_replay.clear();
    }
}
