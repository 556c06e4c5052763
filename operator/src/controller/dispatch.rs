//! Dispatch: one event through all handlers of its kind, one retry through its handler, and what
//! each handler call's outcome schedules next.
//!
//! Dispatch works on the held lane only ([`Held`]): the dequeue policy and new retries change the
//! lane's [`Retries`], which the worker took along with the item and hands back when it is done.
//! It never calls back into the kind's lanes or lock.
//!
//! Every handler call runs under [`KindRuntime::guarded`]: its future is polled inside
//! `catch_unwind` (a panic becomes [`HandlerError::Panicked`]) and under the optional event
//! timeout (the future is dropped when it runs out). The controller's hard stop drops the whole
//! worker, and with it the call in flight (see [`kind_runtime`](super::kind_runtime)).
//!
//! Spans are made only when a subscriber records them (see `info_span_if_recorded`); metrics use handles whose
//! labels were resolved once per kind.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tracing::{Instrument, Span};

use tokio_util::sync::CancellationToken;

use super::call_log::CallLog;
use super::counts::WorkerGauges;
use super::durations::{Instant, Timed, WorkerDurations};
use super::failures::{FailedCall, Failure, GaveUp};
use super::kind_runtime::{KindRuntime, Running};
use super::lanes::{HandlerId, LaneKey, Queued};
use super::pending::{Pending, Retries, RetryEntry, RetryWork};
use super::registry::Handlers;
use crate::action::ReconcileAction;
use crate::handler::{DynContext, HandlerError, panic_message};
use crate::object::{ObjectKey, SharedObject};
use crate::reconciler::{DynReconciler, ReconcileRequest, ReconcileState};
use crate::store::InformerEvent;
use crate::watcher::DynWatcher;

/// An info span when a subscriber may record it, else [`Span::none`] without making one. With no
/// subscriber set at all (`has_been_set` is what tracing's own macros check), tracing's `log`
/// fallback would format the fields of every span made and log its drop, and every enter and exit
/// of it on every poll of the instrumented future; with a subscriber, [`wanted`] drops the spans
/// it does not record.
macro_rules! info_span_if_recorded {
    ($($args:tt)*) => {
        if tracing::dispatcher::has_been_set() {
            wanted(tracing::info_span!($($args)*))
        } else {
            Span::none()
        }
    };
}

/// How a handler call ended, after its retry (if any) was scheduled.
pub(super) enum CallEnd {
    Done,
    /// Failed with a terminal error: not retried.
    Terminal,
    Requeued,
    Retrying,
    GaveUp,
    /// Not started: the run stopped acting just before (see [`CallLog::start`]).
    NotStarted,
}

/// What a worker holds while it dispatches one item of a lane: the lane's key and pending
/// retries, which dispatch changes in place (the worker hands them back to the lane afterwards),
/// and the worker's own duration histograms.
pub(super) struct Held<'a> {
    pub(super) key: &'a LaneKey,
    pub(super) retries: &'a mut Retries,
    /// Where the calls' and the event's durations go (see [`durations`](super::durations)).
    pub(super) durations: &'a mut WorkerDurations,
    /// The worker's part of the ongoing events and calls (see [`counts`](super::counts)).
    pub(super) gauges: &'a mut WorkerGauges,
    /// The controller's stop: a call failing while it stops is not retried.
    pub(super) stop: &'a CancellationToken,
    /// The run: no event starts unless it is [acting](Running::acting), and no handler call
    /// unless it [leads](Running::leading).
    pub(super) run: &'a Running,
    /// When the run of failures the call in hand continues began, if it continues one: the
    /// retry being run, or the handler's retries the new event just dropped (see
    /// [`failures`](super::failures)). Set before each handler call.
    pub(super) continues: Option<tokio::time::Instant>,
}

/// Whether a handler call ran for a new event or for one of its retries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Event,
    Retry,
}

impl KindRuntime {
    /// The object's Kind as the contract names it (the registration name, often the plural and
    /// the `kind` label of the metrics, goes in the spans' `informer` field).
    fn span_kind(&self) -> &str {
        self.info
            .get()
            .map(|info| info.kind.as_str())
            .filter(|kind| !kind.is_empty())
            .unwrap_or(&self.name)
    }

    fn event_span(&self, action: ReconcileAction, key: &LaneKey) -> Span {
        let (group, version) = self.info.get().map_or(("", ""), |info| {
            (info.group.as_str(), info.version.as_str())
        });
        let kind = self.span_kind();
        let namespace = key.namespace().unwrap_or("");
        macro_rules! event_span {
            ($name:literal) => {
                info_span_if_recorded!(
                    $name,
                    kind = %kind,
                    informer = %self.name,
                    group = %group,
                    version = %version,
                    namespace = %namespace,
                    name = %key.name(),
                    event_type = action.metric_label(),
                )
            };
        }
        match action {
            ReconcileAction::Created => event_span!("informer-event-add"),
            ReconcileAction::Updated | ReconcileAction::Resynced => {
                event_span!("informer-event-update")
            }
            ReconcileAction::Deleted => event_span!("informer-event-delete"),
        }
    }

    /// Runs one event through the kind's watchers, then its reconcilers.
    pub(super) async fn dispatch_event(
        &self,
        held: &mut Held<'_>,
        queued: Queued,
        ctx: &DynContext,
        handlers: &Handlers,
    ) {
        let action = queued.action;
        let span = self.event_span(action, held.key);
        async {
            held.gauges.event_started(action);
            let started = Instant::now();
            // One clock read per handler: each call's end is the next one's start.
            let mut clock = started;
            // Whether this event's wait (receipt to its first handler call) was observed.
            let mut waited = false;
            let seq = queued.seq;
            if let Some(event) = &queued.event {
                for entry in &handlers.watchers {
                    if !held.run.leading() {
                        break;
                    }
                    let handler = HandlerId::Watcher(entry.id);
                    if seq < entry.since || queued.only.is_some_and(|only| only != handler) {
                        continue;
                    }
                    held.continues = None;
                    if !held.retries.is_empty() {
                        self.dequeue_check(held, handler, action, event.object());
                    }
                    if !waited {
                        held.durations
                            .observe(action, Timed::Wait, queued.received, clock);
                        waited = true;
                    }
                    clock = self
                        .call_watcher(
                            held,
                            Origin::Event,
                            handler,
                            entry.handler.as_ref(),
                            event,
                            ctx,
                            clock,
                        )
                        .await
                        .1;
                }
            }
            if action == ReconcileAction::Deleted
                && let Some(uid) = queued.object().and_then(|o| o.metadata().uid.as_deref())
            {
                self.own_writes.forget(uid);
            }
            let reconcile = queued.reconcile.as_ref().filter(|_| {
                if !queued.echo.possible() {
                    return true;
                }
                // The updates not found to be echoes as they were queued are checked now: the
                // call that made a write has finished (and recorded it) before the lane's next
                // item is taken.
                let unchecked = queued.echo.unchecked();
                let echo = unchecked.is_empty() || self.own_writes.all_echoes(unchecked);
                if echo {
                    let skipped = u64::from(queued.echo.confirmed()) + unchecked.len() as u64;
                    self.metrics.own_write_echoes.inc_by(skipped);
                }
                !echo
            });
            if let Some((reconcile_action, object)) = reconcile {
                for entry in &handlers.reconcilers {
                    if !held.run.leading() {
                        break;
                    }
                    let handler = HandlerId::Reconciler(entry.id);
                    if seq < entry.since || queued.only.is_some_and(|only| only != handler) {
                        continue;
                    }
                    held.continues = None;
                    if !held.retries.is_empty() {
                        self.dequeue_check(held, handler, *reconcile_action, object);
                    }
                    let request = ReconcileRequest {
                        action: *reconcile_action,
                        object: object.clone(),
                        state: ReconcileState::new(),
                        cause: queued.cause.clone(),
                    };
                    if !waited {
                        held.durations
                            .observe(action, Timed::Wait, queued.received, clock);
                        waited = true;
                    }
                    clock = self
                        .call_reconciler(
                            held,
                            Origin::Event,
                            handler,
                            entry.handler.as_ref(),
                            request,
                            object,
                            ctx,
                            clock,
                        )
                        .await
                        .1;
                }
            }
            held.durations.observe(action, Timed::Event, started, clock);
            held.gauges.event_ended(action);
        }
        .instrument(span)
        .await;
    }

    /// Runs one due retry (or requeue) through its handler and counts how it ended.
    pub(super) async fn run_retry(
        &self,
        held: &mut Held<'_>,
        pending: Pending,
        ctx: &DynContext,
        handlers: &Handlers,
    ) {
        if !held.run.acting() {
            // Stopping or no longer leading: the next start (or term) lists everything again.
            return;
        }
        let Pending { handler, entry } = pending;
        let span = info_span_if_recorded!(
            "controller-retry",
            kind = %self.span_kind(),
            informer = %self.name,
            namespace = %held.key.namespace().unwrap_or(""),
            name = %held.key.name(),
            %handler,
            attempt = entry.attempt,
            event_type = entry.work.action().metric_label(),
        );
        let ctx = ctx.with_attempt(entry.attempt);
        held.continues = entry.failing_since;
        let started = Instant::now();
        let end = async {
            match (handler, entry.work) {
                (HandlerId::Watcher(id), RetryWork::Watch(event)) => {
                    let watcher = handlers.watcher(id)?;
                    let call = self.call_watcher(
                        held,
                        Origin::Retry,
                        handler,
                        watcher.handler.as_ref(),
                        &event,
                        &ctx,
                        started,
                    );
                    Some(call.await.0)
                }
                (HandlerId::Reconciler(id), RetryWork::Reconcile(mut request)) => {
                    let reconciler = handlers.reconciler(id)?;
                    self.refresh_object(&mut request);
                    let kept = SharedObject::clone(&request.object);
                    let call = self.call_reconciler(
                        held,
                        Origin::Retry,
                        handler,
                        reconciler.handler.as_ref(),
                        request,
                        &kept,
                        &ctx,
                        started,
                    );
                    Some(call.await.0)
                }
                _ => None,
            }
        }
        .instrument(span)
        .await;
        let counter = match end {
            Some(CallEnd::Done) => &self.metrics.retry_success,
            Some(CallEnd::Requeued) => &self.metrics.retry_requeue,
            Some(CallEnd::Retrying) => &self.metrics.retry_retry,
            Some(CallEnd::GaveUp | CallEnd::Terminal) => &self.metrics.retry_failed,
            // The term ended just before: its retries go with it.
            Some(CallEnd::NotStarted) => return,
            // The handler was removed meanwhile: its retry is dropped.
            None => return,
        };
        counter.inc();
    }

    /// Level-triggered retries: a reconcile retry runs with the newest cached object of the
    /// same incarnation (kinds with a shared cache; a deleted object keeps its last state).
    fn refresh_object(&self, request: &mut ReconcileRequest) {
        let Some(cache) = self.cache.get() else {
            return;
        };
        if request.action == ReconcileAction::Deleted {
            return;
        }
        let key = ObjectKey::of(request.object.as_ref());
        if let Some(newest) = cache.get(&key)
            && newest.metadata().uid == request.object.metadata().uid
        {
            request.object = newest;
        }
    }

    /// Runs one handler future with panic containment and the event timeout.
    async fn guarded<T>(&self, call: impl Future<Output = T>) -> Result<T, HandlerError> {
        let caught = AssertUnwindSafe(call).catch_unwind();
        let outcome = match self.config.event_timeout {
            Some(limit) => tokio::time::timeout(limit, caught)
                .await
                .map_err(|_| HandlerError::TimedOut(limit))?,
            None => caught.await,
        };
        outcome.map_err(|payload| HandlerError::Panicked(panic_message(payload.as_ref())))
    }

    /// Calls a watcher (through `&dyn DynWatcher`: the blanket impl for `Arc<W>` would box a second
    /// future around the handler's own). `started` is when the call began; returns how it ended
    /// and when.
    #[allow(clippy::too_many_arguments)] // One call's context; a struct would only rename them.
    async fn call_watcher(
        &self,
        held: &mut Held<'_>,
        origin: Origin,
        handler: HandlerId,
        watcher: &dyn DynWatcher,
        event: &InformerEvent,
        ctx: &DynContext,
        started: Instant,
    ) -> (CallEnd, Instant) {
        let attempt = ctx.attempt();
        let span = info_span_if_recorded!(
            "controller-event-watch",
            %handler,
            attempt,
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let Some(_logged) = CallLog::start(&self.name, held.key, handler, held.run) else {
            return (CallEnd::NotStarted, started);
        };
        let object = match event {
            InformerEvent::Add(object)
            | InformerEvent::Delete(object)
            | InformerEvent::Resync(object)
            | InformerEvent::Update { new: object, .. } => object,
        };
        self.metrics
            .calls
            .record(&self.name, &handler, event.action(), object, attempt);
        let metrics = self.metrics.action(event.action());
        held.gauges.call_started(event.action());
        let call = async {
            match event {
                InformerEvent::Add(object) => watcher.add(object.clone(), ctx).await,
                InformerEvent::Update { old, new } => {
                    watcher.update(old.clone(), new.clone(), ctx).await
                }
                InformerEvent::Delete(object) => watcher.delete(object.clone(), ctx).await,
                InformerEvent::Resync(object) => {
                    watcher.update(object.clone(), object.clone(), ctx).await
                }
            }
        };
        // Without a span, no `Instrumented` wrapper (its enter and exit on every poll).
        let result = if span.is_none() {
            self.guarded(call).await
        } else {
            self.guarded(call).instrument(span.clone()).await
        }
        .and_then(|r| r.map_err(HandlerError::failed));
        let ended = Instant::now();
        held.durations
            .observe(event.action(), Timed::Watcher, started, ended);
        held.gauges.call_ended(event.action());
        let end = match result {
            Ok(()) => {
                self.metrics.failures.succeeded();
                CallEnd::Done
            }
            Err(error) => {
                metrics.watcher_errors.inc();
                self.metrics.failures.failed(&error);
                mark_error(&span, &error);
                let work = RetryWork::Watch(event.clone());
                self.retry_or_give_up(held, origin, handler, work, attempt, error)
            }
        };
        (end, ended)
    }

    /// Calls a reconciler (through `&dyn DynReconciler`, as for watchers) and schedules what its
    /// result asks for. `started` is when the call began; returns how it ended and when. `kept` is
    /// the request's object as the caller holds it: a retry or requeue takes a copy of it only
    /// when one is scheduled (a reference count per call otherwise).
    #[allow(clippy::too_many_arguments)] // One call's context; a struct would only rename them.
    async fn call_reconciler(
        &self,
        held: &mut Held<'_>,
        origin: Origin,
        handler: HandlerId,
        reconciler: &dyn DynReconciler,
        request: ReconcileRequest,
        kept: &SharedObject,
        ctx: &DynContext,
        started: Instant,
    ) -> (CallEnd, Instant) {
        let attempt = ctx.attempt();
        let span = info_span_if_recorded!(
            "controller-event-reconcile",
            %handler,
            attempt,
            action = %request.action,
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let Some(logged) = CallLog::start(&self.name, held.key, handler, held.run) else {
            return (CallEnd::NotStarted, started);
        };
        self.metrics
            .calls
            .record(&self.name, &handler, request.action, kept, attempt);
        let metrics = self.metrics.action(request.action);
        held.gauges.call_started(request.action);
        // What the next attempt needs if this one fails or requeues. The state is copied only when
        // there is one (an empty map costs a little to copy and to drop).
        let (action, cause) = (request.action, request.cause.clone());
        let kept_state = (!request.state.is_empty()).then(|| request.state.clone());
        let call = reconciler.reconcile(request, ctx);
        let result = if span.is_none() {
            self.guarded(call).await
        } else {
            self.guarded(call).instrument(span.clone()).await
        };
        drop(logged);
        let ended = Instant::now();
        held.durations
            .observe(action, Timed::Reconciler, started, ended);
        held.gauges.call_ended(action);
        let (error, requeue_after, state) = match result {
            Ok(Ok(result)) => {
                self.metrics.failures.succeeded();
                (None, result.requeue_after, result.state)
            }
            Ok(Err(failure)) if failure.terminal => {
                let error = HandlerError::failed(failure.error);
                metrics.reconciler_errors.inc();
                self.metrics.failures.failed(&error);
                self.metrics.terminal_errors.inc();
                mark_error(&span, &error);
                tracing::error!(
                    kind = %self.name, object = %held.key, %handler, %error,
                    "reconcile failed with a terminal error; not retried"
                );
                let call = FailedCall {
                    object: kept,
                    handler,
                    action,
                    attempt,
                    error: &error,
                };
                self.report_failure(&call, Failure::GaveUp(GaveUp::Terminal));
                return (CallEnd::Terminal, ended);
            }
            Ok(Err(failure)) => (
                Some(HandlerError::failed(failure.error)),
                failure.requeue_after,
                failure.state,
            ),
            Err(error) => (Some(error), None, None),
        };
        if error.is_none() && !held.retries.is_empty() {
            // The object no longer fails for this reconciler: its kept request, if any, runs
            // with the newest object anyway.
            held.retries.recovered(handler);
        }
        if error.is_none() && requeue_after.is_none() {
            return (CallEnd::Done, ended);
        }
        // The latest attempt's state is what the next attempt gets.
        let next = ReconcileRequest {
            action,
            object: SharedObject::clone(kept),
            state: state.or(kept_state).unwrap_or_default(),
            cause,
        };
        if let Some(error) = &error {
            metrics.reconciler_errors.inc();
            self.metrics.failures.failed(error);
            mark_error(&span, error);
        }
        let end = match (error, requeue_after) {
            (None, None) => CallEnd::Done,
            (error, Some(delay)) => {
                if let Some(error) = &error {
                    tracing::warn!(
                        kind = %self.name, object = %held.key, %handler, %error, ?delay,
                        "reconcile failed and asked to requeue; requeue decides when it runs again"
                    );
                }
                let (failing_since, first) = match &error {
                    Some(_) => {
                        let (since, first) = self.failure_began(held, handler);
                        (Some(since), first)
                    }
                    None => (None, false),
                };
                let entry = RetryEntry {
                    due: tokio::time::Instant::now() + delay,
                    attempt: if error.is_some() { attempt + 1 } else { 0 },
                    work: RetryWork::Reconcile(next),
                    error,
                    failing_since,
                };
                let reported = first.then(|| entry.error.clone()).flatten();
                if !self.keep_retry(held, origin, handler, entry) {
                    return (CallEnd::GaveUp, ended);
                }
                if let Some(error) = &reported {
                    let call = FailedCall {
                        object: kept,
                        handler,
                        action,
                        attempt,
                        error,
                    };
                    self.report_failure(&call, Failure::Retrying(delay));
                }
                CallEnd::Requeued
            }
            (Some(error), None) => {
                let work = RetryWork::Reconcile(next);
                self.retry_or_give_up(held, origin, handler, work, attempt, error)
            }
        };
        (end, ended)
    }
}

/// `span` when the subscriber records it, else [`Span::none`]: instrumenting a future with
/// `Span::none()` costs nothing per poll.
fn wanted(span: Span) -> Span {
    if span.is_disabled() {
        Span::none()
    } else {
        span
    }
}

fn mark_error(span: &Span, error: &HandlerError) {
    span.record("error", tracing::field::display(error));
    span.record("otel.status_code", "ERROR");
}
