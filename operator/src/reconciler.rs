//! Reconcilers: level-triggered handlers that get the newest object and a state map.
//!
//! A [`DynReconciler`] receives a [`ReconcileRequest`]: what happened ([`ReconcileAction`]), the
//! object, and a [`ReconcileState`] carried across retries and requeues of the same request. It
//! answers with a [`ReconcileResult`] (optionally `requeue_after` and a new state) or a
//! [`ReconcileError`], which may carry a requeue and a state of its own: when both a requeue and an
//! error are given, the requeue decides the timing and the error is still logged and counted.
//!
//! Because a reconciler only needs the newest object, requests of one object still waiting in the
//! controller's queue may merge into the newest one (see [`controller`](crate::controller)).
//!
//! Typed reconcilers implement [`Reconciler<K, C>`](crate::Reconciler) and are attached through a
//! [`KindHandle`](crate::KindHandle); on the erased layer, a closure over one concrete type is a
//! [`DynReconcilerFn`]. Neither passes an [`Undecodable`](crate::object::Undecodable)
//! object to the user: a request for one runs with the object's last decodable state (same
//! action), and one for an object that never decoded is done without calling the user. Together
//! with the informer's rules, a typed reconciler gets `Deleted(last decodable)` for an object
//! deleted while undecodable, `Created` for the first decodable state of an object that never
//! decoded, and `Updated` for one that decodes again (see [`view`](crate::view)).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::action::{ReconcileAction, TriggerCause};
use crate::handler::{BoxError, DynContext};
use crate::object::KubeObject;

/// State a reconciler carries from one attempt of a request to the next: one value of the
/// reconciler's own type, kept serialized (so requests of any kind share one queue).
///
/// A reconciler stores it with [`ReconcileResult::with_state`] or [`ReconcileError::with_state`]
/// and reads it back, typed, from the next attempt's request:
///
/// ```
/// use kubeapp_operator::ReconcileState;
///
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Progress { step: u32 }
///
/// let state = ReconcileState::of(&Progress { step: 2 }).expect("serializes");
/// assert_eq!(state.get::<Progress>().expect("decodes"), Some(Progress { step: 2 }));
/// assert_eq!(ReconcileState::new().get::<Progress>().expect("nothing to decode"), None);
/// ```
///
/// kubeapp's own wrappers (the [opinionated reconciler](crate::OpinionatedReconciler)) keep their
/// notes in the same state, apart from the reconciler's value and out of its reach.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReconcileState {
    /// The reconciler's value, serialized.
    value: Option<serde_json::Value>,
    /// Notes of kubeapp's wrappers, by the wrapper's key.
    notes: BTreeMap<&'static str, String>,
}

impl ReconcileState {
    /// No state: what the first attempt of a request gets.
    pub fn new() -> Self {
        Self::default()
    }

    /// A state holding `value`.
    ///
    /// # Errors
    ///
    /// When `value` does not serialize to JSON (a map with non-string keys, say).
    pub fn of<S: Serialize>(value: &S) -> Result<Self, serde_json::Error> {
        Ok(Self {
            value: Some(serde_json::to_value(value)?),
            notes: BTreeMap::new(),
        })
    }

    /// The reconciler's value as an `S`, or `None` when no attempt stored one.
    ///
    /// # Errors
    ///
    /// When the stored value is not an `S` (another type was stored).
    pub fn get<S: DeserializeOwned>(&self) -> Result<Option<S>, serde_json::Error> {
        self.value
            .as_ref()
            .map(|value| S::deserialize(value))
            .transpose()
    }

    /// True when it holds neither a value nor a wrapper's note.
    pub fn is_empty(&self) -> bool {
        self.value.is_none() && self.notes.is_empty()
    }

    /// The note of the wrapper keyed `key`.
    pub(crate) fn note(&self, key: &'static str) -> Option<&str> {
        self.notes.get(key).map(String::as_str)
    }

    /// Sets (or with `None` removes) the note of the wrapper keyed `key`.
    pub(crate) fn set_note(&mut self, key: &'static str, note: Option<&str>) {
        match note {
            Some(note) => {
                self.notes.insert(key, note.to_string());
            }
            None => {
                self.notes.remove(key);
            }
        }
    }
}

/// One call of a reconciler: `ReconcileRequest<Widget>` for a typed [`Reconciler`](crate::Reconciler), plain
/// `ReconcileRequest` (the object type-erased) for a [`DynReconciler`].
pub struct ReconcileRequest<K: ?Sized = dyn KubeObject> {
    /// What happened.
    pub action: ReconcileAction,
    /// The newest object the controller has for this request.
    pub object: Arc<K>,
    /// The state returned by the latest attempt of this request (empty on the first).
    pub state: ReconcileState,
    /// Why a triggered request runs (`owns`, `watches`, a [`Trigger`](crate::Trigger)); `None`
    /// for informer events. A triggered request's action is `Resynced` unless it merged into a
    /// waiting event's request (see [`trigger`](crate::trigger)).
    pub cause: Option<TriggerCause>,
}

impl ReconcileRequest {
    /// This erased request as one for `K`: `Ok(None)` when the object has no decodable state to
    /// hand a typed handler (see [`view`](crate::view)), which then skips the call. The one place
    /// both typed paths (the controller's wrapper of a [`Reconciler`] and [`DynReconcilerFn`])
    /// turn a request typed.
    ///
    /// # Errors
    ///
    /// When the object is not a `K`.
    pub(crate) fn into_typed<K: KubeObject>(
        self,
    ) -> Result<Option<ReconcileRequest<K>>, ReconcileError> {
        let Some(object) = crate::view::view_owned::<K>(self.object)? else {
            return Ok(None);
        };
        Ok(Some(ReconcileRequest {
            action: self.action,
            object,
            state: self.state,
            cause: self.cause,
        }))
    }
}

impl<K: ?Sized> Clone for ReconcileRequest<K> {
    fn clone(&self) -> Self {
        Self {
            action: self.action,
            object: Arc::clone(&self.object),
            state: self.state.clone(),
            cause: self.cause.clone(),
        }
    }
}

impl<K: ?Sized + fmt::Debug> fmt::Debug for ReconcileRequest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconcileRequest")
            .field("action", &self.action)
            .field("object", &self.object)
            .field("state", &self.state)
            .field("cause", &self.cause)
            .finish()
    }
}

/// A successful reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReconcileResult {
    /// Run the same request again after this delay.
    pub requeue_after: Option<Duration>,
    /// Replaces the request's state for the next attempt (kept as is when `None`).
    pub state: Option<ReconcileState>,
}

impl ReconcileResult {
    /// Done; nothing to requeue.
    pub fn done() -> Self {
        Self::default()
    }

    /// Run the request again after `delay`.
    pub fn requeue_after(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
            state: None,
        }
    }

    /// Sets the state carried into the next attempt.
    #[must_use]
    pub fn with_state(mut self, state: ReconcileState) -> Self {
        self.state = Some(state);
        self
    }
}

/// A failed reconcile: the error, and optionally a requeue delay and a state.
///
/// Any error converts into it, so `?` works in a reconciler. It deliberately does not implement
/// `std::error::Error` itself (that would make the blanket conversion overlap).
pub struct ReconcileError {
    /// What went wrong.
    pub error: BoxError,
    /// When set, the request runs again after this delay instead of after the retry policy's.
    pub requeue_after: Option<Duration>,
    /// Replaces the request's state for the next attempt (kept as is when `None`).
    pub state: Option<ReconcileState>,
    /// A terminal error is logged and counted, never retried, and does not requeue.
    pub terminal: bool,
}

impl ReconcileError {
    /// An error retried by the controller's retry policy.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            requeue_after: None,
            state: None,
            terminal: false,
        }
    }

    /// An error that retrying cannot fix (an invalid spec, say): logged and counted
    /// (`reconciler_terminal_errors_total`), never retried, no requeue even when one is set
    /// (controller-runtime's `TerminalError`). The next event of the object reconciles it again.
    pub fn terminal(error: impl Into<BoxError>) -> Self {
        Self {
            terminal: true,
            ..Self::new(error)
        }
    }

    /// Retry after `delay` instead of after the retry policy's delay; the error is still logged
    /// and counted.
    #[must_use]
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// Sets the state carried into the next attempt.
    #[must_use]
    pub fn with_state(mut self, state: ReconcileState) -> Self {
        self.state = Some(state);
        self
    }
}

impl<E: Into<BoxError>> From<E> for ReconcileError {
    fn from(error: E) -> Self {
        Self::new(error)
    }
}

impl fmt::Debug for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconcileError")
            .field("error", &self.error)
            .field("requeue_after", &self.requeue_after)
            .field("state", &self.state)
            .field("terminal", &self.terminal)
            .finish()
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

/// A level-triggered handler for one kind, on the erased layer (see [`erased`](crate::erased)): it
/// gets the newest object of a request, requests waiting for one object merge, and a
/// [`ReconcileError`] may carry a requeue and a state of its own.
#[async_trait]
pub trait DynReconciler: Send + Sync + 'static {
    /// Brings the world in line with `request.object`.
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        ctx: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError>;
}

#[async_trait]
impl<R: DynReconciler + ?Sized> DynReconciler for Arc<R> {
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        ctx: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError> {
        (**self).reconcile(request, ctx).await
    }
}

#[async_trait]
impl<R: DynReconciler + ?Sized> DynReconciler for Box<R> {
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        ctx: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError> {
        (**self).reconcile(request, ctx).await
    }
}

/// A reconciler made of one closure over [`ReconcileRequest<K>`]: the erased layer's
/// counterpart of [`DynWatcherFns`](crate::erased::DynWatcherFns), for controllers fed by
/// [`add_informer`](crate::erased::ErasedHandlers::add_informer) (`K = DynamicObject` for untyped
/// kinds). Typed reconcilers are written against [`Reconciler<K, C>`](crate::Reconciler) and
/// attached through a [`KindHandle`](crate::KindHandle).
///
/// ```
/// use std::time::Duration;
/// use kubeapp_operator::ReconcileResult;
/// use kubeapp_operator::erased::DynReconcilerFn;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let reconciler = DynReconcilerFn::<ConfigMap, _>::new(|request, _ctx| async move {
///     tracing::info!(action = %request.action, name = ?request.object.metadata.name, "reconcile");
///     Ok(ReconcileResult::requeue_after(Duration::from_secs(60)))
/// });
/// # let _ = reconciler;
/// ```
pub struct DynReconcilerFn<K, F> {
    f: F,
    _kind: PhantomData<fn() -> K>,
}

impl<K, F, Fut> DynReconcilerFn<K, F>
where
    K: KubeObject,
    F: Fn(ReconcileRequest<K>, DynContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send + 'static,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _kind: PhantomData,
        }
    }
}

#[async_trait]
impl<K, F, Fut> DynReconciler for DynReconcilerFn<K, F>
where
    K: KubeObject,
    F: Fn(ReconcileRequest<K>, DynContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send + 'static,
{
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        ctx: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError> {
        // The last decodable state of an undecodable object; none: skipped (see `view`).
        let Some(typed) = request.into_typed::<K>()? else {
            return Ok(ReconcileResult::done());
        };
        (self.f)(typed, ctx.clone()).await
    }
}

#[cfg(test)]
mod tests {
    use super::ReconcileAction::{Created, Deleted, Resynced, Updated};
    use super::*;

    #[test]
    fn waiting_requests_merge_into_the_newest_but_never_across_a_delete() {
        assert_eq!(Created.merged_with(Updated), Some(Created));
        assert_eq!(Created.merged_with(Resynced), Some(Created));
        assert_eq!(Updated.merged_with(Resynced), Some(Updated));
        assert_eq!(Resynced.merged_with(Updated), Some(Updated));
        assert_eq!(Resynced.merged_with(Resynced), Some(Resynced));
        assert_eq!(Updated.merged_with(Deleted), Some(Deleted));
        assert_eq!(Created.merged_with(Deleted), Some(Deleted));
        assert_eq!(Deleted.merged_with(Created), None);
        assert_eq!(Deleted.merged_with(Deleted), None);
    }

    #[test]
    fn any_error_converts_with_question_mark() {
        fn fails() -> Result<ReconcileResult, ReconcileError> {
            let n: i32 = "x".parse()?;
            Ok(ReconcileResult::requeue_after(Duration::from_secs(
                n.unsigned_abs().into(),
            )))
        }
        let err = fails().expect_err("not a number");
        assert!(err.requeue_after.is_none());
        assert!(err.to_string().contains("invalid digit"), "{err}");
    }
}
