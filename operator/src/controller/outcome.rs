//! What a handler call's failure or requeue leaves in the held lane: the next retry (or giving
//! up, with its Warning Event), and the dequeue decision a new event makes about a handler's pending retries. These only
//! change the [`Retries`](super::pending::Retries) the worker took along with the item; nothing here touches the kind's
//! lanes or lock.

use super::dispatch::{CallEnd, Held, Origin};
use super::failures::{FailedCall, Failure, GaveUp};
use super::kind_runtime::KindRuntime;
use super::lanes::HandlerId;
use super::pending::{Added, MAX_RETRIES_PER_HANDLER, RetryEntry, RetryWork};
use crate::action::ReconcileAction;
use crate::handler::HandlerError;
use crate::object::SharedObject;

impl KindRuntime {
    /// Asks the handler's retry policy about a failed call: stores its next attempt in the held
    /// lane, or gives up (logged, counted, and a Warning Event). A call failing while the
    /// controller stops is not retried. The first failure of a run of failures records a Warning
    /// Event too (see [`failures`](super::failures)).
    pub(super) fn retry_or_give_up(
        &self,
        held: &mut Held<'_>,
        origin: Origin,
        handler: HandlerId,
        work: RetryWork,
        attempt: u32,
        error: HandlerError,
    ) -> CallEnd {
        let namespace = held.key.namespace().unwrap_or("");
        let name = held.key.name();
        if held.stop.is_cancelled() {
            // Stopping: pending retries are dropped anyway, and the next start lists again.
            tracing::info!(
                kind = %self.name, namespace, name, %handler, %error,
                "handler failed while the controller stops; not retried"
            );
            return CallEnd::GaveUp;
        }
        let object = SharedObject::clone(work.object());
        let action = work.action();
        match self.config.retry_policy_of(handler).delay(&error, attempt) {
            Some(delay) => {
                tracing::warn!(
                    kind = %self.name, namespace, name, %handler, attempt, %error, ?delay,
                    "handler failed; will retry"
                );
                let (since, first) = self.failure_began(held, handler);
                let reported = first.then(|| error.clone());
                let entry = RetryEntry {
                    due: tokio::time::Instant::now() + delay,
                    attempt: attempt + 1,
                    work,
                    error: Some(error),
                    failing_since: Some(since),
                };
                if !self.keep_retry(held, origin, handler, entry) {
                    return CallEnd::GaveUp;
                }
                if let Some(error) = &reported {
                    let call = FailedCall {
                        object: &object,
                        handler,
                        action,
                        attempt,
                        error,
                    };
                    self.report_failure(&call, Failure::Retrying(delay));
                }
                CallEnd::Retrying
            }
            None => {
                tracing::error!(
                    kind = %self.name, namespace, name, %handler, attempt, %error,
                    "handler failed; giving up after the retry policy's last attempt"
                );
                self.metrics.retries_given_up.inc();
                let call = FailedCall {
                    object: &object,
                    handler,
                    action,
                    attempt,
                    error: &error,
                };
                self.report_failure(&call, Failure::GaveUp(GaveUp::LastAttempt));
                CallEnd::GaveUp
            }
        }
    }

    /// Stores the retry (or requeue) `entry` of a call in the held lane; returns false when the
    /// handler's bound of retries for this object was reached and it was dropped (logged, counted
    /// as given up, and a Warning Event when it followed an error).
    pub(super) fn keep_retry(
        &self,
        held: &mut Held<'_>,
        origin: Origin,
        handler: HandlerId,
        entry: RetryEntry,
    ) -> bool {
        if origin == Origin::Retry {
            held.retries.add_again(handler, entry);
            self.metrics.retries_pending.inc();
            return true;
        }
        // What the Event of a dropped retry needs (a failure only; the entry goes into the lane).
        let failed = entry.error.as_ref().map(|error| {
            (
                error.clone(),
                SharedObject::clone(entry.work.object()),
                entry.work.action(),
                entry.attempt.saturating_sub(1),
            )
        });
        match held.retries.add_new(handler, entry) {
            Added::Stored => self.metrics.retries_pending.inc(),
            Added::Merged => {}
            Added::Full => {
                tracing::error!(
                    kind = %self.name, object = %held.key, %handler,
                    limit = MAX_RETRIES_PER_HANDLER,
                    "handler already keeps the most retries allowed for this object; this event's retry is dropped"
                );
                self.metrics.retries_given_up.inc();
                if let Some((error, object, action, attempt)) = &failed {
                    let call = FailedCall {
                        object,
                        handler,
                        action: *action,
                        attempt: *attempt,
                        error,
                    };
                    self.report_failure(&call, Failure::GaveUp(GaveUp::TooManyRetries));
                }
                return false;
            }
        }
        true
    }

    /// Applies the dequeue policy to `handler`'s pending retries before a new event reaches it;
    /// a kept reconcile request is refreshed to the new event's object (level-triggered).
    pub(super) fn dequeue_check(
        &self,
        held: &mut Held<'_>,
        handler: HandlerId,
        new_action: ReconcileAction,
        new_object: &SharedObject,
    ) {
        // The retries travel with the held lane: the user's policy runs without any lock.
        let (dropped, failing_since) =
            held.retries
                .dequeue(handler, |entry| match &self.config.dequeue_policy {
                    None => true,
                    Some(policy) => policy.should_dequeue(
                        new_action,
                        new_object.as_ref(),
                        entry.work.action(),
                        entry.work.object().as_ref(),
                        entry.error.as_ref(),
                    ),
                });
        for _ in 0..dropped {
            self.metrics.retries_pending.dec();
        }
        // A failure of the call that follows continues the dropped retries' run of failures.
        held.continues = failing_since;
        if dropped > 0 {
            tracing::debug!(kind = %self.name, object = %held.key, %handler, dropped, "newer event drops pending retries");
        }
        if matches!(handler, HandlerId::Reconciler(_)) {
            held.retries
                .refresh_reconcile(handler, new_action, new_object);
        }
    }
}
