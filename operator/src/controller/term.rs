//! Terms: runs of one controller that come and go, for whoever decides when it may act (the
//! `kubeapp-ha` crate: one term per period of leadership, or per acknowledged shard membership).
//!
//! The controller knows nothing of Leases. A term is [`run_term`](InformerController::run_term)
//! with a [`Term`]: a [`CallGate`] asked before every handler call, an [`EventFilter`] asked for
//! every event, and a grace-period rule read when the term stops (no grace after a lost Lease:
//! the objects may be another replica's by now). Between terms the shared informers keep
//! listing and watching (a warm standby); only the controller's subscriptions come and go, and
//! a new term's subscription delivers every cached object as an Add (the ones its filter
//! admits). During a term, [`deliver_cached`](InformerController::deliver_cached) hands the
//! term's kinds the cached objects that just became theirs (a shard's newly active slots), and
//! [`shared_kinds`](InformerController::shared_kinds) gives each kind's cache and
//! [`ListScope`], for gauges and for narrowing what the informers
//! cache.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::kind_runtime::Running;
use super::subscription::kind_subscriber;
use super::{ControllerError, InformerController, RunState, shared_kinds, spawn_informer};
use crate::gate::{CallGate, EventFilter};
use crate::list_scope::ListScope;
use crate::object::SharedObject;
use crate::store::KindCache;

/// How long a stopping term waits for its in-flight handler calls: asked when it stops, with
/// the configured [`shutdown_grace`](super::ControllerConfig::shutdown_grace).
type GraceRule = Arc<dyn Fn(Duration) -> Duration + Send + Sync>;

/// What one term of a controller is gated on, and how it stops; see the [module docs](self).
/// `Term::default()` gates nothing and stops with the configured grace period.
#[derive(Clone, Default)]
pub struct Term {
    gate: Option<Arc<dyn CallGate>>,
    filter: Option<Arc<dyn EventFilter>>,
    grace: Option<GraceRule>,
}

impl Term {
    /// A term that gates nothing (see the setters).
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks `gate` before every handler call of the term.
    #[must_use]
    pub fn call_gate(mut self, gate: Arc<dyn CallGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Hands the term only the events `filter` admits.
    #[must_use]
    pub fn event_filter(mut self, filter: Arc<dyn EventFilter>) -> Self {
        self.filter = Some(filter);
        self
    }

    /// The grace period of the term's stop, asked when it stops with the configured one
    /// ([`ControllerConfig::shutdown_grace`](super::ControllerConfig::shutdown_grace)); without
    /// a rule, the configured one.
    #[must_use]
    pub fn grace(mut self, rule: impl Fn(Duration) -> Duration + Send + Sync + 'static) -> Self {
        self.grace = Some(Arc::new(rule));
        self
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("call_gate", &self.gate.is_some())
            .field("event_filter", &self.filter.is_some())
            .field("grace", &self.grace.is_some())
            .finish()
    }
}

/// One kind of a controller fed by a shared informer: its cache and what the informer lists in.
#[derive(Clone)]
pub struct SharedKind {
    /// The kind's informer cache.
    pub cache: KindCache,
    /// What the informer lists and watches in (`None` for a ready-made stream, which cannot be
    /// listed again).
    pub scope: Option<Arc<dyn ListScope>>,
}

impl fmt::Debug for SharedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKind")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl InformerController {
    /// Checks that the controller can run in terms: idle, and every kind on a shared informer
    /// (kinds added with `add_informer` cannot be listed again for a new term).
    ///
    /// # Errors
    ///
    /// [`ControllerError::NotRestartable`] naming the kinds added with `add_informer`;
    /// [`ControllerError::AlreadyRan`] when the controller runs or ran.
    pub fn check_restartable(&self) -> Result<(), ControllerError> {
        let state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*state {
            RunState::Idle { informers } if !informers.is_empty() => {
                let kinds: Vec<&str> = informers.iter().map(|(k, _)| k.as_str()).collect();
                Err(ControllerError::NotRestartable(kinds.join(", ")))
            }
            RunState::Idle { .. } => Ok(()),
            _ => Err(ControllerError::AlreadyRan),
        }
    }

    /// Runs one term until `stop`, gated as `term` says, and leaves the controller ready to
    /// run again (its queued events and pending retries dropped: the next term subscribes anew
    /// and gets every cached object as an Add). Stops as [`run`](Self::run) does, with the
    /// term's grace rule. Check [`check_restartable`](Self::check_restartable) first.
    ///
    /// # Errors
    ///
    /// [`ControllerError::AlreadyRan`] when the controller runs (or ran with `run`).
    pub async fn run_term(
        &self,
        stop: CancellationToken,
        term: Term,
    ) -> Result<(), ControllerError> {
        self.run_gated(stop, term, true).await
    }

    /// Delivers to every kind of the running term, as Adds, the cached objects `wanted` picks
    /// (e.g. a shard's newly active slots). Each kind's delivery holds its informer's delivery
    /// lock: events before it are in the cache, events after it follow in order. Nothing
    /// happens for kinds without a shared informer or when no term runs.
    pub async fn deliver_cached(&self, wanted: &(dyn Fn(&SharedObject) -> bool + Sync)) {
        for runtime in self.runtimes() {
            let (Some(fanout), Some(run)) = (runtime.fanout.get(), runtime.current_run()) else {
                continue;
            };
            let subscriber = kind_subscriber(&runtime, &run);
            fanout.deliver_cached(&subscriber, wanted).await;
        }
    }

    /// The controller's kinds fed by shared informers: each one's cache and list scope.
    pub fn shared_kinds(&self) -> Vec<SharedKind> {
        self.runtimes()
            .iter()
            .filter_map(|runtime| runtime.fanout.get())
            .map(|fanout| SharedKind {
                cache: KindCache::new(&fanout.resource.kind, &fanout.cache),
                scope: fanout.scope.clone(),
            })
            .collect()
    }

    /// One run until `stop`, gated and stopped as `term` says; when `restartable`, a
    /// controller that may run again afterwards.
    pub(super) async fn run_gated(
        &self,
        stop: CancellationToken,
        term: Term,
        restartable: bool,
    ) -> Result<(), ControllerError> {
        let run = Arc::new(Running {
            stop: stop.clone(),
            hard_stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            runtime: tokio::runtime::Handle::current(),
            gate: term.gate,
            filter: term.filter,
            stop_seen: AtomicBool::new(false),
            abandoned: AtomicU64::new(0),
        });
        let informers = {
            let mut state = self
                .shared
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, RunState::Running(Arc::clone(&run))) {
                RunState::Idle { informers } => informers,
                previous => {
                    *state = previous;
                    return Err(ControllerError::AlreadyRan);
                }
            }
        };
        for (kind, informer) in informers {
            spawn_informer(self.named_kind(&kind), informer, &run);
        }
        for runtime in self.runtimes() {
            shared_kinds::start(&runtime, &run);
        }
        stop.cancelled().await;
        run.stop_seen.store(true, Ordering::Release);
        for runtime in self.runtimes() {
            shared_kinds::stop(&runtime, &run);
        }

        tracing::info!("controller stopping; waiting for in-flight handlers");
        run.tracker.close();
        let configured = self.shared.config.shutdown_grace;
        let grace = term.grace.map_or(configured, |grace| grace(configured));
        if tokio::time::timeout(grace, run.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?grace,
                "handlers still running after the grace period; cancelling them"
            );
            run.hard_stop.cancel();
            run.tracker.wait().await;
            let abandoned = run.abandoned.load(Ordering::Relaxed);
            if abandoned > 0 {
                self.shared
                    .abandoned_calls
                    .fetch_add(abandoned, Ordering::Relaxed);
                tracing::error!(
                    abandoned,
                    ?grace,
                    "handler calls abandoned: still running when the grace period ran out"
                );
            }
        }
        for kind in self.runtimes() {
            kind.clear();
        }
        *self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = if restartable {
            RunState::Idle {
                informers: Vec::new(),
            }
        } else {
            RunState::Stopped
        };
        tracing::info!("controller stopped");
        Ok(())
    }
}
