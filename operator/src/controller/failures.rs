//! Making failing handlers visible: a Warning Event on the object when a handler starts failing
//! for it and when a retry policy gives up, and the gauges of failing objects per kind.
//!
//! # Events
//!
//! | reason | when | note |
//! |---|---|---|
//! | [`HANDLER_FAILED`] (`HandlerFailed`) | a handler call fails and is retried, and that handler was not already failing for the object (its first failure, or the first after a success) | the handler, the action, the error, when it is retried |
//! | [`HANDLER_GAVE_UP`] (`HandlerGaveUp`) | a failed call is not retried: the retry policy's last attempt failed, a reconciler returned a terminal error, or the handler already keeps its most retries for the object | the handler, the action, the attempt, the error, why |
//!
//! Not one per retry: a reconciler that fails every 5 minutes for a day records one
//! `HandlerFailed`, and the age gauge below grows instead. The Event's `action` is `Reconcile` or
//! `Watch`; repeats of the same reason and action about one object within a few minutes become
//! one Event with a growing count (the recorder's series, see [`events`](crate::events)).
//!
//! Events are published in the background, one at a time, through the client the kind was
//! registered with ([`InformerController::kind`](crate::InformerController::kind) and the other
//! [`KindHandle`](crate::KindHandle) registrations), as the controller's
//! [name](super::ControllerConfig::name) and [instance](super::ControllerConfig::instance); a
//! failing dispatch never waits for one. At most [`MAX_QUEUED_EVENTS`] wait; beyond that (a whole
//! kind failing at once while the apiserver is slow) further ones are dropped with a log line,
//! the metrics and the logs still saying what fails. Kinds added with
//! [`add_informer`](crate::erased::ErasedHandlers::add_informer) have no client of the controller's:
//! they get the metrics and logs only.
//!
//! # Metrics
//!
//! An object is *failing* while it waits for a retry after an error: from a handler call's
//! failure until a call of that handler succeeds for it (for a reconciler, a newer event's
//! successful call counts too, as its kept request then runs with the newest object), the retry
//! is dropped (a newer event under the dequeue policy, the object's deletion), or the policy
//! gives up. `controller_objects_failing{kind}` counts those objects, and
//! `controller_oldest_retry_age_seconds{kind}` says how long the longest-failing of them has
//! been failing, counted from the first failure of its run of failures (a retry that fails
//! again keeps the age).

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::dispatch::Held;
use super::kind_runtime::KindRuntime;
use super::lanes::HandlerId;
use crate::action::ReconcileAction;
use crate::events::EventRecorder;
use crate::handler::HandlerError;
use crate::object::SharedObject;

/// The reason of the Warning Event recorded when a handler starts failing for an object.
pub const HANDLER_FAILED: &str = "HandlerFailed";

/// The reason of the Warning Event recorded when a failed handler call is not retried.
pub const HANDLER_GAVE_UP: &str = "HandlerGaveUp";

/// Failure Events of one kind waiting to be published; more are dropped (logged).
pub const MAX_QUEUED_EVENTS: usize = 1024;

/// Why a failed call is not retried.
#[derive(Clone, Copy, Debug)]
pub(super) enum GaveUp {
    /// The retry policy's last attempt failed.
    LastAttempt,
    /// A reconciler returned a terminal error.
    Terminal,
    /// The handler already keeps its most retries for the object.
    TooManyRetries,
}

impl GaveUp {
    fn why(self) -> &'static str {
        match self {
            Self::LastAttempt => "the retry policy's last attempt",
            Self::Terminal => "a terminal error",
            Self::TooManyRetries => "the handler already keeps its most retries for this object",
        }
    }
}

/// What happened to a failed call, for its Event.
#[derive(Clone, Copy, Debug)]
pub(super) enum Failure {
    /// Retried after `delay`.
    Retrying(Duration),
    /// Not retried.
    GaveUp(GaveUp),
}

/// A failed call, as its Event tells it.
pub(super) struct FailedCall<'a> {
    pub(super) object: &'a SharedObject,
    pub(super) handler: HandlerId,
    pub(super) action: ReconcileAction,
    pub(super) attempt: u32,
    pub(super) error: &'a HandlerError,
}

/// One Event to publish.
struct Report {
    reference: ObjectReference,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Publishes a kind's failure Events in the background, in order, at most
/// [`MAX_QUEUED_EVENTS`] waiting.
pub(crate) struct FailureEvents {
    recorder: EventRecorder,
    /// Made, with the task that drains it, by the first Event.
    queue: OnceLock<mpsc::Sender<Report>>,
}

impl FailureEvents {
    pub(crate) fn new(recorder: EventRecorder) -> Self {
        Self {
            recorder,
            queue: OnceLock::new(),
        }
    }

    fn send(&self, report: Report) {
        let queue = self.queue.get_or_init(|| {
            let (tx, mut rx) = mpsc::channel::<Report>(MAX_QUEUED_EVENTS);
            let recorder = self.recorder.clone();
            // Ends when the kind's runtime (the sender) is dropped.
            tokio::spawn(async move {
                while let Some(report) = rx.recv().await {
                    let published = recorder
                        .publish_about(
                            &report.reference,
                            EventType::Warning,
                            report.reason,
                            report.action,
                            report.note,
                        )
                        .await;
                    if let Err(error) = published {
                        tracing::warn!(%error, "recording a handler failure Event failed");
                    }
                }
            });
            tx
        });
        if let Err(error) = queue.try_send(report) {
            tracing::warn!(
                %error,
                limit = MAX_QUEUED_EVENTS,
                "too many handler failure Events wait to be published; this one is dropped"
            );
        }
    }
}

impl KindRuntime {
    /// When the failure of `handler`'s call in hand began, and whether it starts a new run of
    /// failures: it continues the run of the retry it ran, of a retry the new event dropped, or
    /// of a retry of the handler still pending; otherwise it begins now.
    pub(super) fn failure_began(&self, held: &Held<'_>, handler: HandlerId) -> (Instant, bool) {
        match held
            .continues
            .or_else(|| held.retries.failing_since_of(handler))
        {
            Some(since) => (since, false),
            None => (Instant::now(), true),
        }
    }

    /// Records the Warning Event of `call` (see the [module docs](self)); nothing for a kind
    /// without a recorder or without its API identity.
    pub(super) fn report_failure(&self, call: &FailedCall<'_>, failure: Failure) {
        let Some(events) = self.failure_events.get() else {
            return;
        };
        let Some(reference) = self.reference_to(call.object) else {
            tracing::debug!(kind = %self.name, "no API identity for a failure Event");
            return;
        };
        let handler = call.handler;
        let (action, error, attempt) = (call.action, call.error, call.attempt);
        let (reason, note) = match failure {
            Failure::Retrying(delay) => (
                HANDLER_FAILED,
                format!(
                    "{handler} failed on {action} (attempt {attempt}): {error}; retrying in {delay:?}"
                ),
            ),
            Failure::GaveUp(gave_up) => (
                HANDLER_GAVE_UP,
                format!(
                    "{handler} gave up on {action} after attempt {attempt} ({}): {error}; \
                     the object is handled again at its next change or resync",
                    gave_up.why()
                ),
            ),
        };
        let action = match handler {
            HandlerId::Watcher(_) => "Watch",
            HandlerId::Reconciler(_) => "Reconcile",
        };
        events.send(Report {
            reference,
            reason,
            action,
            note,
        });
    }

    /// The Event reference to `object`: its kind's API identity and its own metadata.
    fn reference_to(&self, object: &SharedObject) -> Option<ObjectReference> {
        let info = self.info.get().filter(|info| !info.kind.is_empty())?;
        let api_version = if info.group.is_empty() {
            info.version.clone()
        } else {
            format!("{}/{}", info.group, info.version)
        };
        let meta = object.metadata();
        Some(ObjectReference {
            api_version: Some(api_version),
            kind: Some(info.kind.clone()),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            field_path: None,
        })
    }
}
