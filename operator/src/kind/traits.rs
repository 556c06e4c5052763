//! The typed handler traits: [`Watcher<K, C>`], [`Reconciler<K, C>`] and [`ApplyCleanup<K, C>`],
//! with native async methods (no box per call in the trait), and their closure forms.
//!
//! A [`KindHandle<K>`](crate::KindHandle) attaches them; inside, each handler is erased once
//! (behind [`DynWatcher`] / [`DynReconciler`], one boxed future per call) and gets the `Arc<K>`
//! the informer decoded, never a copy. An object state that did not decode into `K` never reaches
//! a typed handler: the handlers see each object as the sequence of its decodable states (see
//! [`view`](crate::view)).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use crate::action::ReconcileAction;
use crate::context::{Context, ContextShared, HandlerEnv};
use crate::handler::{BoxError, DynContext};
use crate::object::{KubeObject, SharedObject};
use crate::reconciler::{DynReconciler, ReconcileError, ReconcileRequest, ReconcileResult};
use crate::view::{ViewChange, view_change_owned, view_owned};
use crate::watcher::DynWatcher;

/// An edge-triggered handler of objects of kind `K`: every event, in order per object (see
/// [`controller`](crate::controller)). `C` is the user data of the [`Context`].
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::{BoxError, Context, KindHandle, Watcher};
///
/// /// Logs every change of a ConfigMap.
/// struct Audit;
///
/// impl Watcher<ConfigMap> for Audit {
///     async fn add(&self, cm: Arc<ConfigMap>, _: &Context) -> Result<(), BoxError> {
///         tracing::info!(name = ?cm.metadata.name, "added");
///         Ok(())
///     }
///     async fn update(&self, _old: Arc<ConfigMap>, new: Arc<ConfigMap>, _: &Context) -> Result<(), BoxError> {
///         tracing::info!(name = ?new.metadata.name, "updated");
///         Ok(())
///     }
///     async fn delete(&self, cm: Arc<ConfigMap>, _: &Context) -> Result<(), BoxError> {
///         tracing::info!(name = ?cm.metadata.name, "deleted");
///         Ok(())
///     }
/// }
///
/// fn attach(config_maps: &KindHandle<ConfigMap>) {
///     config_maps.watch(Audit);
/// }
/// ```
pub trait Watcher<K, C = ()>: Send + Sync + 'static {
    /// An object appeared (initial list, creation, re-list after a disconnect, or the cache
    /// replayed to a watcher added at run time).
    fn add(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// An object changed; `old` is the last state the informer saw (a periodic resync passes the
    /// same object twice).
    fn update(
        &self,
        old: Arc<K>,
        new: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// An object is gone; this is its last known state.
    fn delete(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// The object may have changed while nobody watched (the opinionated wrapper calls it); the
    /// default does nothing.
    fn sync(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        let _ = (object, ctx);
        async { Ok(()) }
    }
}

/// A level-triggered handler of objects of kind `K`: the newest object, requests merged while they
/// wait, retries with the newest cached object. `C` is the user data of the [`Context`].
///
/// ```no_run
/// use std::time::Duration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::{
///     Context, KindHandle, OpinionatedOptions, ReconcileAction, ReconcileError, ReconcileRequest,
///     ReconcileResult, Reconciler,
/// };
///
/// /// Counts the keys of each ConfigMap again every minute.
/// struct CountKeys;
///
/// impl Reconciler<ConfigMap> for CountKeys {
///     async fn reconcile(
///         &self,
///         request: ReconcileRequest<ConfigMap>,
///         _ctx: &Context,
///     ) -> Result<ReconcileResult, ReconcileError> {
///         if request.action == ReconcileAction::Deleted {
///             return Ok(ReconcileResult::done());
///         }
///         let keys = request.object.data.as_ref().map_or(0, |d| d.len());
///         tracing::info!(keys, "counted");
///         Ok(ReconcileResult::requeue_after(Duration::from_secs(60)))
///     }
/// }
///
/// fn attach(config_maps: &KindHandle<ConfigMap>) -> Result<(), Box<dyn std::error::Error>> {
///     // With a finalizer, so a delete while the operator is down still arrives as `Deleted`.
///     config_maps.reconcile_opinionated(CountKeys, OpinionatedOptions::default())?;
///     Ok(())
/// }
/// ```
pub trait Reconciler<K, C = ()>: Send + Sync + 'static {
    /// Brings the world in line with `request.object`.
    fn reconcile(
        &self,
        request: ReconcileRequest<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<ReconcileResult, ReconcileError>> + Send;
}

/// kube-rs's reconciler shape: `apply` for every live state, `cleanup` before deletion.
/// Attached with [`KindHandle::apply_cleanup`](crate::KindHandle::apply_cleanup), inside an
/// [`OpinionatedReconciler`](crate::OpinionatedReconciler), so `cleanup` runs before the object
/// disappears (its finalizer, added before the first `apply`, holds the deletion), also when the
/// deletion happened while the operator was down or while the first `apply` ran.
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::{
///     ApplyCleanup, Context, KindHandle, OpinionatedOptions, ReconcileError, ReconcileResult,
/// };
///
/// /// Registers each ConfigMap somewhere outside the cluster, and unregisters it before it goes.
/// struct Registry;
///
/// impl ApplyCleanup<ConfigMap> for Registry {
///     async fn apply(&self, cm: Arc<ConfigMap>, _: &Context) -> Result<ReconcileResult, ReconcileError> {
///         tracing::info!(name = ?cm.metadata.name, "registered");
///         Ok(ReconcileResult::done())
///     }
///     async fn cleanup(&self, cm: Arc<ConfigMap>, _: &Context) -> Result<ReconcileResult, ReconcileError> {
///         tracing::info!(name = ?cm.metadata.name, "unregistered");
///         Ok(ReconcileResult::done())
///     }
/// }
///
/// fn attach(config_maps: &KindHandle<ConfigMap>) -> Result<(), Box<dyn std::error::Error>> {
///     config_maps.apply_cleanup(Registry, OpinionatedOptions::default().finalizer("example.com/registry"))?;
///     Ok(())
/// }
/// ```
pub trait ApplyCleanup<K, C = ()>: Send + Sync + 'static {
    /// The object exists (created, changed, resynced or triggered).
    fn apply(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<ReconcileResult, ReconcileError>> + Send;
    /// The object is being deleted; its finalizer is removed when this succeeds.
    fn cleanup(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<ReconcileResult, ReconcileError>> + Send;
}

/// A [`Reconciler`] from a closure `Fn(ReconcileRequest<K>, Context<C>) -> impl Future`.
pub fn reconciler_fn<F>(f: F) -> ReconcileFn<F> {
    ReconcileFn(f)
}

/// A [`Reconciler`] made by [`reconciler_fn`].
pub struct ReconcileFn<F>(F);

impl<K, C, F, Fut> Reconciler<K, C> for ReconcileFn<F>
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
    F: Fn(ReconcileRequest<K>, Context<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send,
{
    fn reconcile(
        &self,
        request: ReconcileRequest<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<ReconcileResult, ReconcileError>> + Send {
        (self.0)(request, ctx.clone())
    }
}

/// An [`ApplyCleanup`] from two closures `Fn(Arc<K>, Context<C>) -> impl Future`.
pub fn apply_cleanup<A, D>(apply: A, cleanup: D) -> ApplyCleanupFns<A, D> {
    ApplyCleanupFns { apply, cleanup }
}

/// An [`ApplyCleanup`] made by [`apply_cleanup`].
pub struct ApplyCleanupFns<A, D> {
    apply: A,
    cleanup: D,
}

impl<K, C, A, AFut, D, DFut> ApplyCleanup<K, C> for ApplyCleanupFns<A, D>
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: Fn(Arc<K>, Context<C>) -> AFut + Send + Sync + 'static,
    AFut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send,
    D: Fn(Arc<K>, Context<C>) -> DFut + Send + Sync + 'static,
    DFut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send,
{
    fn apply(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<ReconcileResult, ReconcileError>> + Send {
        (self.apply)(object, ctx.clone())
    }

    fn cleanup(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<ReconcileResult, ReconcileError>> + Send {
        (self.cleanup)(object, ctx.clone())
    }
}

/// An [`ApplyCleanup`] as a [`Reconciler`]: `Deleted` runs `cleanup`, every other action `apply`.
pub struct ApplyCleanupReconciler<T>(pub T);

impl<K, C, T> Reconciler<K, C> for ApplyCleanupReconciler<T>
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
    T: ApplyCleanup<K, C>,
{
    async fn reconcile(
        &self,
        request: ReconcileRequest<K>,
        ctx: &Context<C>,
    ) -> Result<ReconcileResult, ReconcileError> {
        match request.action {
            ReconcileAction::Deleted => self.0.cleanup(request.object, ctx).await,
            _ => self.0.apply(request.object, ctx).await,
        }
    }
}

/// A typed handler erased for the controller: the one box per call.
pub(crate) struct Erased<K, C, H> {
    inner: H,
    shared: Arc<ContextShared<C>>,
    /// The [`Context`] of the first controller run's first-attempt calls, lent to each of them.
    /// A context per call would cost two reference counts up and two down per handler call (the
    /// typed API before `Context` lent the controller's `&DynContext`); the controller
    /// makes one first-attempt `DynContext` per run and kind, so one context serves every
    /// call of the run. Retries, and runs after the first (a restart under leader election),
    /// get a context made for the call.
    first_attempts: OnceLock<Context<C>>,
    kind: PhantomData<fn() -> K>,
}

impl<K, C, H> Erased<K, C, H> {
    pub(crate) fn new(inner: H, data: Arc<C>, env: Arc<HandlerEnv>) -> Self {
        Self {
            inner,
            shared: ContextShared::new(data, env),
            first_attempts: OnceLock::new(),
            kind: PhantomData,
        }
    }

    /// The kept context when it is `call`'s, else `None` (then [`context`](Self::context)
    /// makes one).
    fn kept_context(&self, call: &DynContext) -> Option<&Context<C>> {
        let kept = if call.attempt() == 0 {
            self.first_attempts
                .get_or_init(|| Context::of_call(&self.shared, call))
        } else {
            self.first_attempts.get()?
        };
        kept.dyn_context().is(call).then_some(kept)
    }

    fn context(&self, call: &DynContext) -> Context<C> {
        Context::of_call(&self.shared, call)
    }
}

/// `$erased`'s context for `$call` as `&Context<C>`: the kept one, or one made for the call and
/// held in `$made` (a binding of the caller's, so it lives across the handler's await).
macro_rules! context_for {
    ($erased:expr, $call:expr, $made:ident) => {
        match $erased.kept_context($call) {
            Some(kept) => kept,
            None => {
                $made = $erased.context($call);
                &$made
            }
        }
    };
}

#[async_trait]
impl<K, C, W> DynWatcher for Erased<K, C, W>
where
    K: KubeObject,
    C: Send + Sync + 'static,
    W: Watcher<K, C>,
{
    async fn add(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        let made;
        match view_owned::<K>(object)? {
            Some(object) => self.inner.add(object, context_for!(self, ctx, made)).await,
            None => Ok(()),
        }
    }

    async fn update(
        &self,
        old: SharedObject,
        new: SharedObject,
        ctx: &DynContext,
    ) -> Result<(), BoxError> {
        let made;
        match view_change_owned::<K>(old, new)? {
            ViewChange::Update(old, new) => {
                let context = context_for!(self, ctx, made);
                self.inner.update(old, new, context).await
            }
            ViewChange::Add(new) => self.inner.add(new, context_for!(self, ctx, made)).await,
            ViewChange::Unchanged => Ok(()),
        }
    }

    async fn delete(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        let made;
        match view_owned::<K>(object)? {
            Some(object) => {
                self.inner
                    .delete(object, context_for!(self, ctx, made))
                    .await
            }
            None => Ok(()),
        }
    }

    async fn sync(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        let made;
        match view_owned::<K>(object)? {
            Some(object) => self.inner.sync(object, context_for!(self, ctx, made)).await,
            None => Ok(()),
        }
    }
}

/// A typed reconciler erased for the controller.
pub(crate) struct ErasedReconciler<K, C, R>(pub(crate) Erased<K, C, R>);

#[async_trait]
impl<K, C, R> DynReconciler for ErasedReconciler<K, C, R>
where
    K: KubeObject,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        ctx: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError> {
        let Some(typed) = request.into_typed::<K>()? else {
            return Ok(ReconcileResult::done());
        };
        let erased = &self.0;
        let made;
        let context = context_for!(erased, ctx, made);
        erased.inner.reconcile(typed, context).await
    }
}
