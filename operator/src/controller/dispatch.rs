//! Dispatch: one event through all handlers of its kind, one retry through its handler, and what
//! each handler call's outcome schedules next.
//!
//! Every handler call runs under [`KindRuntime::guarded`]: its future is polled inside
//! `catch_unwind` (a panic becomes [`HandlerError::Panicked`]), under the optional event timeout
//! (the future is dropped when it runs out), and against the controller's hard stop.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::lanes::{CallEnd, HandlerId, KindRuntime, Queued, RetryEntry, RetryWork, Running};
use crate::handler::{HandlerContext, HandlerError, panic_message};
use crate::informer::InformerEvent;
use crate::object::ObjectKey;
use crate::reconciler::{ReconcileRequest, ReconcileState, Reconciler};
use crate::watcher::Watcher;

impl KindRuntime {
    fn event_span(&self, event: &InformerEvent, key: &ObjectKey) -> Span {
        let info = self.info.get().cloned().unwrap_or_default();
        let namespace = key.namespace.as_deref().unwrap_or("");
        // The object's Kind (as the contract names it); the registration name (often the plural,
        // and the `kind` label of the metrics) goes in `informer`.
        let kind = if info.kind.is_empty() {
            &self.name
        } else {
            info.kind.as_str()
        };
        macro_rules! event_span {
            ($name:literal) => {
                tracing::info_span!(
                    $name,
                    kind = %kind,
                    informer = %self.name,
                    group = %info.group,
                    version = %info.version,
                    namespace = %namespace,
                    name = %key.name,
                    event_type = event.action().metric_label(),
                )
            };
        }
        match event {
            InformerEvent::Add(_) => event_span!("informer-event-add"),
            InformerEvent::Update { .. } | InformerEvent::Resync(_) => {
                event_span!("informer-event-update")
            }
            InformerEvent::Delete(_) => event_span!("informer-event-delete"),
        }
    }

    pub(super) async fn dispatch_event(
        self: &Arc<Self>,
        key: &ObjectKey,
        queued: Queued,
        run: &Arc<Running>,
    ) {
        let span = self.event_span(&queued.event, key);
        let action = queued.event.action();
        let metrics = self.metrics.action(action).clone();
        async {
            metrics.ongoing_events.inc();
            let started = Instant::now();
            let handlers = self.handlers();
            if queued.for_watchers {
                for (index, watcher) in handlers.watchers.iter().enumerate() {
                    let handler = HandlerId::Watcher(index);
                    self.dequeue_check(key, handler, action, queued.event.object().as_ref());
                    self.call_watcher(key, handler, watcher, &queued.event, 0, run)
                        .await;
                }
            }
            if let Some((reconcile_action, object)) = &queued.reconcile {
                for (index, reconciler) in handlers.reconcilers.iter().enumerate() {
                    let handler = HandlerId::Reconciler(index);
                    self.dequeue_check(key, handler, *reconcile_action, object.as_ref());
                    let request = ReconcileRequest {
                        action: *reconcile_action,
                        object: object.clone(),
                        state: ReconcileState::new(),
                    };
                    self.call_reconciler(key, handler, reconciler, request, 0, run)
                        .await;
                }
            }
            metrics
                .event_duration
                .observe(started.elapsed().as_secs_f64());
            metrics.ongoing_events.dec();
        }
        .instrument(span)
        .await;
    }

    pub(super) async fn run_retry(
        self: &Arc<Self>,
        key: &ObjectKey,
        handler: HandlerId,
        entry: RetryEntry,
        run: &Arc<Running>,
    ) {
        let kind = self
            .info
            .get()
            .map(|info| info.kind.as_str())
            .filter(|kind| !kind.is_empty())
            .unwrap_or(&self.name);
        let span = tracing::info_span!(
            "controller-retry",
            kind = %kind,
            informer = %self.name,
            namespace = %key.namespace.as_deref().unwrap_or(""),
            name = %key.name,
            %handler,
            attempt = entry.attempt,
            event_type = entry.work.action().metric_label(),
        );
        let handlers = self.handlers();
        let end = async {
            match (handler, entry.work) {
                (HandlerId::Watcher(index), RetryWork::Watch(event)) => {
                    let watcher = handlers.watchers.get(index)?;
                    Some(
                        self.call_watcher(key, handler, watcher, &event, entry.attempt, run)
                            .await,
                    )
                }
                (HandlerId::Reconciler(index), RetryWork::Reconcile(request)) => {
                    let reconciler = handlers.reconcilers.get(index)?;
                    Some(
                        self.call_reconciler(key, handler, reconciler, request, entry.attempt, run)
                            .await,
                    )
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
            Some(CallEnd::GaveUp) => &self.metrics.retry_failed,
            // Handlers are never removed, so a retry always finds its handler.
            None => return,
        };
        counter.inc();
    }

    fn context(&self, attempt: u32, run: &Running) -> HandlerContext {
        HandlerContext {
            kind: Arc::clone(&self.name),
            attempt,
            stop: run.stop.clone(),
        }
    }

    /// Runs one handler future with panic containment, the event timeout and the hard stop.
    async fn guarded<T>(
        &self,
        call: impl Future<Output = T>,
        run: &Running,
    ) -> Result<T, HandlerError> {
        let caught = AssertUnwindSafe(call).catch_unwind();
        let timed = async {
            let outcome = match self.config.event_timeout {
                Some(limit) => tokio::time::timeout(limit, caught)
                    .await
                    .map_err(|_| HandlerError::TimedOut(limit))?,
                None => caught.await,
            };
            outcome.map_err(|payload| HandlerError::Panicked(panic_message(payload.as_ref())))
        };
        tokio::select! {
            result = timed => result,
            () = run.hard_stop.cancelled() => Err(HandlerError::Cancelled),
        }
    }

    async fn call_watcher(
        self: &Arc<Self>,
        key: &ObjectKey,
        handler: HandlerId,
        watcher: &Arc<dyn Watcher>,
        event: &InformerEvent,
        attempt: u32,
        run: &Arc<Running>,
    ) -> CallEnd {
        let span = tracing::info_span!(
            "controller-event-watch",
            %handler,
            attempt,
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let metrics = self.metrics.action(event.action());
        let ctx = self.context(attempt, run);
        metrics.ongoing_processes.inc();
        let started = Instant::now();
        let call = async {
            match event {
                InformerEvent::Add(object) => watcher.add(&ctx, object.clone()).await,
                InformerEvent::Update { old, new } => {
                    watcher.update(&ctx, old.clone(), new.clone()).await
                }
                InformerEvent::Delete(object) => watcher.delete(&ctx, object.clone()).await,
                InformerEvent::Resync(object) => {
                    watcher.update(&ctx, object.clone(), object.clone()).await
                }
            }
        };
        let result = self
            .guarded(call, run)
            .instrument(span.clone())
            .await
            .and_then(|r| r.map_err(HandlerError::failed));
        metrics
            .watcher_duration
            .observe(started.elapsed().as_secs_f64());
        metrics.ongoing_processes.dec();
        match result {
            Ok(()) => CallEnd::Done,
            Err(error) => {
                metrics.watcher_errors.inc();
                mark_error(&span, &error);
                let work = RetryWork::Watch(event.clone());
                self.retry_or_give_up(key, handler, work, attempt, error, run)
            }
        }
    }

    async fn call_reconciler(
        self: &Arc<Self>,
        key: &ObjectKey,
        handler: HandlerId,
        reconciler: &Arc<dyn Reconciler>,
        request: ReconcileRequest,
        attempt: u32,
        run: &Arc<Running>,
    ) -> CallEnd {
        let span = tracing::info_span!(
            "controller-event-reconcile",
            %handler,
            attempt,
            action = %request.action,
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let metrics = self.metrics.action(request.action);
        let ctx = self.context(attempt, run);
        metrics.ongoing_processes.inc();
        let started = Instant::now();
        let result = self
            .guarded(reconciler.reconcile(&ctx, request.clone()), run)
            .instrument(span.clone())
            .await;
        metrics
            .reconciler_duration
            .observe(started.elapsed().as_secs_f64());
        metrics.ongoing_processes.dec();
        let (error, requeue_after, state) = match result {
            Ok(Ok(result)) => (None, result.requeue_after, result.state),
            Ok(Err(failure)) => (
                Some(HandlerError::failed(failure.error)),
                failure.requeue_after,
                failure.state,
            ),
            Err(error) => (Some(error), None, None),
        };
        // The latest attempt's state is what the next attempt gets.
        let next = ReconcileRequest {
            state: state.unwrap_or(request.state),
            ..request
        };
        if let Some(error) = &error {
            metrics.reconciler_errors.inc();
            mark_error(&span, error);
        }
        match (error, requeue_after) {
            (None, None) => CallEnd::Done,
            (error, Some(delay)) => {
                if let Some(error) = &error {
                    tracing::warn!(
                        kind = %self.name, object = %key, %handler, %error, ?delay,
                        "reconcile failed and asked to requeue; requeue decides when it runs again"
                    );
                }
                let attempt = if error.is_some() { attempt + 1 } else { 0 };
                let entry = RetryEntry {
                    due: Instant::now() + delay,
                    attempt,
                    work: RetryWork::Reconcile(next),
                    error,
                };
                self.schedule(key, handler, entry, run);
                CallEnd::Requeued
            }
            (Some(error), None) => self.retry_or_give_up(
                key,
                handler,
                RetryWork::Reconcile(next),
                attempt,
                error,
                run,
            ),
        }
    }

    fn retry_or_give_up(
        self: &Arc<Self>,
        key: &ObjectKey,
        handler: HandlerId,
        work: RetryWork,
        attempt: u32,
        error: HandlerError,
        run: &Arc<Running>,
    ) -> CallEnd {
        let namespace = key.namespace.as_deref().unwrap_or("");
        if run.stop.is_cancelled() {
            // Stopping: pending retries are dropped anyway, and the next start lists again.
            tracing::info!(
                kind = %self.name, namespace, name = %key.name, %handler, %error,
                "handler failed while the controller stops; not retried"
            );
            return CallEnd::GaveUp;
        }
        match self.config.retry_policy.delay(&error, attempt) {
            Some(delay) => {
                tracing::warn!(
                    kind = %self.name, namespace, name = %key.name, %handler, attempt, %error, ?delay,
                    "handler failed; will retry"
                );
                let entry = RetryEntry {
                    due: Instant::now() + delay,
                    attempt: attempt + 1,
                    work,
                    error: Some(error),
                };
                self.schedule(key, handler, entry, run);
                CallEnd::Retrying
            }
            None => {
                tracing::error!(
                    kind = %self.name, namespace, name = %key.name, %handler, attempt, %error,
                    "handler failed; giving up after the retry policy's last attempt"
                );
                self.metrics.retries_given_up.inc();
                CallEnd::GaveUp
            }
        }
    }
}

fn mark_error(span: &Span, error: &HandlerError) {
    span.record("error", tracing::field::display(error));
    span.record("otel.status_code", "ERROR");
}
