//! What every handler call gets and what a failed call becomes.
//!
//! Handlers ([`DynWatcher`](crate::erased::DynWatcher), [`DynReconciler`](crate::erased::DynReconciler)) receive a
//! [`DynContext`] and return their own errors as [`BoxError`], so `?` works on any error type.
//! The controller turns each failed call into a [`HandlerError`]: the handler's error, a caught
//! panic, or a timeout. That is what retry and dequeue policies look at.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio_util::sync::CancellationToken;

use crate::own_writes::{OwnWrites, WrittenPart};

/// Any error a handler returns: the one `BoxError` of kubeapp, defined in the SDK (apps' and
/// webhooks' errors are the same type).
pub use kubeapp_sdk::app::BoxError;

/// Why one handler call failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum HandlerError {
    /// The handler returned an error. Printed with its whole chain (each cause once, see
    /// [`ErrorChain`](kubeapp_sdk::error::ErrorChain)): the handler's error is not a `source()`
    /// of this one (match the variant to reach it), so logs of a failed call show every cause.
    #[error("{}", kubeapp_sdk::error::error_chain(.0.as_ref()))]
    Failed(Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The handler panicked; the panic was caught and carries this message.
    #[error("handler panicked: {0}")]
    Panicked(String),
    /// The handler ran longer than the controller's `event_timeout` and was cancelled.
    #[error("handler timed out after {0:?}")]
    TimedOut(Duration),
    /// The controller stopped and its grace period ran out while the handler was still running.
    /// The `InformerController` itself drops such a call with its worker and reports nothing;
    /// wrappers and custom runners may use this variant.
    #[error("handler cancelled: the controller stopped")]
    Cancelled,
}

impl HandlerError {
    /// Wraps an error a handler returned.
    pub fn failed(error: BoxError) -> Self {
        Self::Failed(Arc::from(error))
    }
}

/// What a handler call knows about its surroundings.
///
/// Cheap to clone (one reference count). [`cancelled`](Self::cancelled) resolves when the
/// controller begins to stop: in-flight handlers are still allowed to finish (within the
/// controller's grace period), and a long-running handler may use the signal to wrap up early.
#[derive(Clone)]
pub struct DynContext {
    shared: Arc<ContextShared>,
    attempt: u32,
}

/// What every call of one controller run shares, so that a clone per call is one reference count
/// (a `CancellationToken` clone takes a lock).
struct ContextShared {
    kind: Arc<str>,
    stop: CancellationToken,
    /// Where the writes of this controller's kind are recorded (none outside a controller).
    own_writes: Option<OwnWrites>,
}

impl DynContext {
    /// A context for calling a handler outside a controller (tests, wrappers): kind `kind`, first
    /// attempt, cancelled when `stop` is.
    pub fn new(kind: &str, stop: CancellationToken) -> Self {
        Self::of_kind(Arc::from(kind), stop, None)
    }

    /// The first-attempt context of a controller's kind, recording own writes in `own_writes`.
    pub(crate) fn of_kind(
        kind: Arc<str>,
        stop: CancellationToken,
        own_writes: Option<OwnWrites>,
    ) -> Self {
        Self {
            shared: Arc::new(ContextShared {
                kind,
                stop,
                own_writes,
            }),
            attempt: 0,
        }
    }

    /// Records that this handler wrote the object the controller handles and that the
    /// apiserver answered with `written` (the returned object's metadata), changing only `part`
    /// of it. The watch event of that write then starts no reconcile (see
    /// [`own_writes`](crate::own_writes)). For writes made with the handler's own client; the
    /// SDK's status writer and the opinionated wrappers record theirs themselves. Does nothing
    /// outside a controller.
    pub fn note_own_write(&self, written: &ObjectMeta, part: WrittenPart) {
        if let Some(own) = &self.shared.own_writes {
            own.record(written, part);
        }
    }

    /// Where this controller's kind records its own writes.
    pub(crate) fn own_writes(&self) -> Option<&OwnWrites> {
        self.shared.own_writes.as_ref()
    }

    /// Whether `other` is this very context: the same controller run and kind (the same shared
    /// part, not merely equal) and the same attempt.
    pub(crate) fn is(&self, other: &DynContext) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared) && self.attempt == other.attempt
    }

    /// The same context for attempt `attempt`.
    pub(crate) fn with_attempt(&self, attempt: u32) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            attempt,
        }
    }

    /// The kind key the handler was registered under.
    pub fn kind(&self) -> &str {
        &self.shared.kind
    }

    /// 0 for the first call of an event, n for its n-th retry or requeue.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// True once the controller has begun to stop.
    pub fn is_cancelled(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// Resolves when the controller begins to stop.
    pub async fn cancelled(&self) {
        self.shared.stop.cancelled().await;
    }

    /// The underlying token, for `select!` and child tokens.
    pub(crate) fn cancellation_token(&self) -> &CancellationToken {
        &self.shared.stop
    }
}

impl fmt::Debug for DynContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynContext")
            .field("kind", &self.kind())
            .field("attempt", &self.attempt)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// The text of a caught panic payload (`panic!` with a literal or a formatted message).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&'static str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-text payload".to_string()
    }
}
