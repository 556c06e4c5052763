//! [`KindHandle<K, C>`]: a kind registered with an [`InformerController`], typed by its object,
//! and everything attached to it: watchers, reconcilers, the store, related-object triggers.
//!
//! The type is the key: a watcher of `Secret` on a `ConfigMap` handle, or a `Store<Secret>` from
//! it, does not compile, and there is no handler without a registered kind to attach it to.
//! Untyped kinds are `KindHandle<DynamicObject>` (from
//! [`InformerController::dynamic_kind`]), with the same methods.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::{Api, runtime::watcher};
//! use kubeapp_operator::{
//!     CancellationToken, ControllerConfig, InformerController, InformerOptions, ReconcileResult,
//! };
//!
//! let controller = InformerController::new(ControllerConfig::default());
//! let config_maps = controller.kind(
//!     Api::<ConfigMap>::namespaced(client, "default"),
//!     watcher::Config::default().labels("app=web"),
//!     InformerOptions::default(),
//! );
//! let store = config_maps.store();
//! let _reconciler = config_maps.reconcile_fn(move |request, _ctx| {
//!     let store = store.clone();
//!     async move {
//!         println!("{:?} {:?}, {} cached", request.action, request.object.metadata.name, store.len());
//!         Ok(ReconcileResult::done())
//!     }
//! });
//! controller.run(CancellationToken::new()).await?;
//! # Ok(()) }
//! ```

mod closures;
#[cfg(test)]
#[path = "tests/terms.rs"]
mod term_tests;
#[cfg(test)]
mod tests;
mod traits;
#[cfg(test)]
#[path = "tests/undecodable.rs"]
mod undecodable_tests;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::apply::Applier;
use crate::context::HandlerEnv;
use crate::controller::InformerController;
use crate::controller::failures::FailureEvents;
use crate::controller::kind_runtime::KindRuntime;
use crate::controller::lanes::HandlerId;
use crate::controller::registry::Registration;
use crate::events::{EventRecorder, Reporter};
use crate::informers::{InformerOptions, SharedInformer, Subscriber};
use crate::object::{Kind, KubeObject, ObjectKey};
use crate::opinionated::{
    FinalizerNameError, OpinionatedOptions, OpinionatedReconciler, OpinionatedWatcher,
};
use crate::projection::{Projected, Projection};
use crate::store::Store;
use crate::trigger::{CauseKind, MapFn, Trigger, TriggerSink, controller_owner_keys};

pub use self::closures::WatcherFns;
pub use self::traits::{
    ApplyCleanup, ApplyCleanupFns, ApplyCleanupReconciler, ReconcileFn, Reconciler, Watcher,
    apply_cleanup, reconciler_fn,
};
pub(crate) use self::traits::{Erased, ErasedReconciler};

/// A kind registered with one controller; see the [module docs](self). Cheap to clone. `C` is the
/// user data handlers attached through it get in their [`Context`](crate::Context).
///
/// The handle keeps the kind's informer running; so does every handler, trigger and store
/// attached through it, until removed (or, for a store, dropped).
pub struct KindHandle<K, C = ()> {
    runtime: Arc<KindRuntime>,
    informer: Arc<SharedInformer>,
    controller: InformerController,
    env: Arc<HandlerEnv>,
    data: Arc<C>,
    kind: PhantomData<fn() -> K>,
}

impl<K, C> Clone for KindHandle<K, C> {
    fn clone(&self) -> Self {
        Self {
            runtime: Arc::clone(&self.runtime),
            informer: Arc::clone(&self.informer),
            controller: self.controller.clone(),
            env: Arc::clone(&self.env),
            data: Arc::clone(&self.data),
            kind: PhantomData,
        }
    }
}

impl<K, C> fmt::Debug for KindHandle<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KindHandle")
            .field("kind", &self.runtime.name)
            .field("type", &std::any::type_name::<K>())
            .finish()
    }
}

/// A registered handler or trigger. [`remove`](Self::remove) detaches it; dropping the handle
/// does not (the handler stays for the controller's life), so it is not `#[must_use]`: attach
/// and forget is the common case. When nothing uses an informer any more (no handler, trigger,
/// store or kind handle), its watch stops.
pub struct HandlerHandle {
    runtime: Arc<KindRuntime>,
    token: u64,
}

impl HandlerHandle {
    /// Detaches the handler or trigger: no new calls start (one in flight finishes), its pending
    /// retries are dropped, and the informers it kept open may stop.
    pub fn remove(self) {
        self.runtime.unregister(self.token);
    }
}

impl fmt::Debug for HandlerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerHandle")
            .field("kind", &self.runtime.name)
            .field("token", &self.token)
            .finish()
    }
}

/// A trigger's handle ([`KindHandle::owns`], [`KindHandle::watches`]): the related kind's cache,
/// typed, and what detaches the trigger. Dropping it keeps the trigger (as dropping a
/// [`HandlerHandle`] keeps the handler).
///
/// Keep [`store`](Self::store) (a clone) in the handler's context data to read children from the
/// cache with no run-time lookup: the store exists because the trigger does.
pub struct TriggerHandle<O: Kind> {
    handle: HandlerHandle,
    store: Store<O>,
}

impl<O: Kind> TriggerHandle<O> {
    /// The cache of the related `O` objects the trigger watches (clones share it).
    pub fn store(&self) -> &Store<O> {
        &self.store
    }

    /// Detaches the trigger (see [`HandlerHandle::remove`]).
    pub fn remove(self) {
        self.handle.remove();
    }
}

impl<O: Kind> From<TriggerHandle<O>> for HandlerHandle {
    fn from(trigger: TriggerHandle<O>) -> Self {
        trigger.handle
    }
}

impl<O: Kind> fmt::Debug for TriggerHandle<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TriggerHandle")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl InformerController {
    /// Registers the typed kind `K`: one shared informer for (`api`'s namespace, `config`,
    /// `options`) from the controller's [`Informers`](crate::Informers). Calling it again with
    /// the same key returns a handle to the same kind. While the controller runs, the kind
    /// starts at once (its handlers first get every cached object as an Add).
    pub fn kind<K: Kind>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        options: InformerOptions<K>,
    ) -> KindHandle<K> {
        let client = api.clone().into_client();
        let informer = self.informers().typed(api, config, options);
        self.handle_for(informer, client)
    }

    /// Registers the projection `P` of its kind (see [`projection`](crate::projection)): one
    /// shared informer per kind and projection, caching only the projected fields; handlers get
    /// `Arc<Projected<P>>`. Everything else is as for [`kind`](Self::kind).
    pub fn projection<P: Projection>(
        &self,
        api: Api<P::Of>,
        config: watcher::Config,
        options: InformerOptions<Projected<P>>,
    ) -> KindHandle<Projected<P>> {
        let client = api.clone().into_client();
        let informer = self.informers().projected(api, config, options);
        self.handle_for(informer, client)
    }

    /// Registers an untyped kind; handlers get `Arc<DynamicObject>`.
    pub fn dynamic_kind(
        &self,
        api: Api<DynamicObject>,
        resource: ApiResource,
        config: watcher::Config,
        options: InformerOptions<DynamicObject>,
    ) -> KindHandle<DynamicObject> {
        let client = api.clone().into_client();
        let informer = self.informers().dynamic(api, resource, config, options);
        self.handle_for(informer, client)
    }

    /// Registers the typed kind `K` fed by a ready-made [`Informer`](crate::Informer) (e.g.
    /// [`Informer::from_stream`](crate::Informer::from_stream) over synthetic events in tests and
    /// benchmarks, or [`Informer::from_watch_stream`](crate::Informer::from_watch_stream)): the
    /// same handle, cache and dispatch as [`kind`](Self::kind), never shared with another
    /// registration. The stream is read only once the controller runs (a stream cannot be listed
    /// again, so nothing may reach a cache before the kind is listening). `client` is what
    /// handlers' [`Context`](crate::Context) writes with. Objects of another type than `K` in
    /// the stream reach no typed handler.
    pub fn kind_from_stream<K: Kind>(
        &self,
        informer: crate::Informer,
        client: kube::Client,
    ) -> KindHandle<K> {
        let resource = ApiResource::erase::<K>(&());
        let informer = self.informers().over_stream::<K>(informer, resource);
        self.handle_for(informer, client)
    }

    fn handle_for<K>(&self, informer: Arc<SharedInformer>, client: kube::Client) -> KindHandle<K> {
        let runtime = self.shared_kind(&informer.fanout);
        let manager = self.config().controller_name().to_string();
        let recorder = EventRecorder::new(
            client.clone(),
            Reporter {
                controller: manager.clone(),
                instance: self.config().instance_name().map(str::to_string),
            },
        );
        // The kind's first registration's client publishes its handlers' failure Events.
        let _ = runtime
            .failure_events
            .set(FailureEvents::new(recorder.clone()));
        let env = Arc::new(HandlerEnv {
            applier: Applier::new(client.clone(), manager.clone())
                .recording_into(runtime.own_writes.clone()),
            recorder,
            client,
            related: Default::default(),
        });
        KindHandle {
            runtime,
            informer,
            controller: self.clone(),
            env,
            data: Arc::new(()),
            kind: PhantomData,
        }
    }
}

// Everything but `watches` works for a projection too (`K = Projected<P>`, not a `Resource`).
impl<K, C> KindHandle<K, C>
where
    K: KubeObject + Clone,
    C: Send + Sync + 'static,
{
    /// The same kind, with `data` as the user data of handlers attached through the returned
    /// handle (handlers attached before keep theirs).
    pub fn with_context<D: Send + Sync + 'static>(&self, data: Arc<D>) -> KindHandle<K, D> {
        KindHandle {
            runtime: Arc::clone(&self.runtime),
            informer: Arc::clone(&self.informer),
            controller: self.controller.clone(),
            env: Arc::clone(&self.env),
            data,
            kind: PhantomData,
        }
    }

    /// The kind's group, version, kind and plural.
    pub fn resource(&self) -> &ApiResource {
        &self.informer.fanout.resource
    }

    /// The kind's cache, readable from anywhere (see [`Store`]).
    pub fn store(&self) -> Store<K> {
        let user: Arc<dyn Send + Sync> = self.informer.clone();
        Store::new(Arc::clone(&self.informer.fanout.cache), Some(user))
    }

    /// A handle to reconcile one object, or all, on demand.
    pub fn trigger(&self) -> Trigger<K> {
        Trigger {
            owner: Arc::clone(&self.runtime),
            cache: Arc::clone(&self.informer.fanout.cache),
            kind: PhantomData,
        }
    }

    fn keep_alive(&self) -> Vec<Arc<dyn Send + Sync>> {
        vec![self.informer.clone() as Arc<dyn Send + Sync>]
    }

    fn handle(&self, registration: Registration) -> HandlerHandle {
        HandlerHandle {
            token: self.runtime.register(registration),
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// Registers an erased handler; its registration keeps the kind's informer open.
    fn attach(&self, handler: HandlerId) -> HandlerHandle {
        self.handle(Registration {
            handler: Some(handler),
            trigger: None,
            _keep_alive: self.keep_alive(),
        })
    }

    /// `watcher` erased once, with this handle's context.
    fn erase_watcher<W: Watcher<K, C>>(&self, watcher: W) -> Erased<K, C, W> {
        Erased::new(watcher, Arc::clone(&self.data), Arc::clone(&self.env))
    }

    /// `reconciler` erased once, with this handle's context.
    fn erase_reconciler<R: Reconciler<K, C>>(&self, reconciler: R) -> ErasedReconciler<K, C, R> {
        ErasedReconciler(Erased::new(
            reconciler,
            Arc::clone(&self.data),
            Arc::clone(&self.env),
        ))
    }

    /// Adds a watcher. Watchers run in registration order, then reconcilers (see
    /// [`controller`](crate::controller)). Added while the controller runs, it first gets every
    /// cached object as an `add`.
    pub fn watch(&self, watcher: impl Watcher<K, C>) -> HandlerHandle {
        let id = self
            .runtime
            .add_watcher(Arc::new(self.erase_watcher(watcher)));
        self.attach(id)
    }

    /// Adds a reconciler (same rules; cached objects arrive as `Created`).
    pub fn reconcile(&self, reconciler: impl Reconciler<K, C>) -> HandlerHandle {
        let id = self
            .runtime
            .add_reconciler(Arc::new(self.erase_reconciler(reconciler)));
        self.attach(id)
    }

    /// Adds a reconciler written as a closure `Fn(ReconcileRequest<K>, Context<C>) -> impl
    /// Future` (its argument types are inferred from the handle).
    pub fn reconcile_fn<F, Fut>(&self, f: F) -> HandlerHandle
    where
        F: Fn(crate::ReconcileRequest<K>, crate::Context<C>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<crate::ReconcileResult, crate::ReconcileError>>
            + Send,
    {
        self.reconcile(reconciler_fn(f))
    }

    /// Adds `watcher` inside an [`OpinionatedWatcher`]: a finalizer on every object, so deletes
    /// while the operator is down still reach `delete`, and changes meanwhile reach `sync`.
    ///
    /// # Errors
    ///
    /// When the finalizer names of `options` are invalid.
    pub fn watch_opinionated(
        &self,
        watcher: impl Watcher<K, C>,
        options: OpinionatedOptions,
    ) -> Result<HandlerHandle, FinalizerNameError> {
        let wrapped = OpinionatedWatcher::new(
            self.env.client.clone(),
            self.resource().clone(),
            self.erase_watcher(watcher),
            options,
        )?;
        Ok(self.attach(self.runtime.add_watcher(Arc::new(wrapped))))
    }

    /// Adds `reconciler` inside an [`OpinionatedReconciler`] (one finalizer per object, so a
    /// delete while the operator is down still reaches it as `Deleted`).
    ///
    /// # Errors
    ///
    /// When the finalizer name of `options` is invalid.
    pub fn reconcile_opinionated(
        &self,
        reconciler: impl Reconciler<K, C>,
        options: OpinionatedOptions,
    ) -> Result<HandlerHandle, FinalizerNameError> {
        let wrapped = OpinionatedReconciler::new(
            self.env.client.clone(),
            self.resource().clone(),
            self.erase_reconciler(reconciler),
            options,
        )?;
        Ok(self.attach(self.runtime.add_reconciler(Arc::new(wrapped))))
    }

    /// Adds a reconciler written as a closure `Fn(ReconcileRequest<K>, Context<C>) -> impl Future`
    /// inside an [`OpinionatedReconciler`], as [`reconcile_opinionated`](Self::reconcile_opinionated)
    /// does. The closure's argument types come from the handle, so it needs no annotations
    /// (`reconcile_opinionated(reconciler_fn(|request, ctx| ..))` cannot infer them: E0282).
    ///
    /// ```no_run
    /// # fn demo(config_maps: kubeapp_operator::KindHandle<k8s_openapi::api::core::v1::ConfigMap>)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use kubeapp_operator::{OpinionatedOptions, ReconcileAction, ReconcileResult};
    ///
    /// let _reconciler = config_maps.reconcile_opinionated_fn(
    ///     |request, ctx| async move {
    ///         if request.action != ReconcileAction::Deleted {
    ///             let name = request.object.metadata.name.clone().unwrap_or_default();
    ///             tracing::info!(%name, attempt = ctx.attempt(), "reconciled");
    ///         }
    ///         Ok(ReconcileResult::done())
    ///     },
    ///     OpinionatedOptions::default(),
    /// )?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When the finalizer name of `options` is invalid.
    pub fn reconcile_opinionated_fn<F, Fut>(
        &self,
        f: F,
        options: OpinionatedOptions,
    ) -> Result<HandlerHandle, FinalizerNameError>
    where
        F: Fn(crate::ReconcileRequest<K>, crate::Context<C>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<crate::ReconcileResult, crate::ReconcileError>>
            + Send,
    {
        self.reconcile_opinionated(reconciler_fn(f), options)
    }

    /// An empty [`WatcherFns`] for this kind and context: closures set on it get their argument
    /// types from the handle, so they need no annotations (`WatcherFns::new()` alone leaves `K`
    /// to be inferred after the closures are checked: E0282 as soon as one reads the object).
    /// Attach it with [`watch`](Self::watch) or [`watch_opinionated`](Self::watch_opinionated).
    ///
    /// ```no_run
    /// # fn demo(config_maps: kubeapp_operator::KindHandle<k8s_openapi::api::core::v1::ConfigMap>)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use kubeapp_operator::OpinionatedOptions;
    ///
    /// let watcher = config_maps
    ///     .watcher_fns()
    ///     .on_add(|cm, _ctx| async move {
    ///         tracing::info!(name = ?cm.metadata.name, "added");
    ///         Ok(())
    ///     })
    ///     .on_delete(|cm, ctx| async move {
    ///         tracing::info!(name = ?cm.metadata.name, attempt = ctx.attempt(), "deleted");
    ///         Ok(())
    ///     });
    /// let _watcher = config_maps.watch_opinionated(watcher, OpinionatedOptions::default())?;
    /// # Ok(()) }
    /// ```
    pub fn watcher_fns(&self) -> WatcherFns<K, C> {
        WatcherFns::new()
    }

    /// Adds a kube-rs-style reconciler: `apply` for every live state, `cleanup` before the
    /// object is deleted, guaranteed by the opinionated finalizer (see [`ApplyCleanup`]).
    ///
    /// # Errors
    ///
    /// When the finalizer name of `options` is invalid.
    pub fn apply_cleanup(
        &self,
        handler: impl ApplyCleanup<K, C>,
        options: OpinionatedOptions,
    ) -> Result<HandlerHandle, FinalizerNameError> {
        self.reconcile_opinionated(ApplyCleanupReconciler(handler), options)
    }

    /// Reconciles the owner when a child of kind `Ch` with a controller owner reference to a
    /// `K` changes or is deleted (see [`trigger`](crate::trigger)). `config` may carry a label
    /// selector so only the operator's children are cached.
    pub fn owns<Ch: Kind>(&self, api: Api<Ch>, config: watcher::Config) -> TriggerHandle<Ch> {
        let informer = self
            .controller
            .informers()
            .typed(api, config, InformerOptions::default());
        self.env.related.add::<Ch>(&informer);
        let resource = self.resource();
        let map = controller_owner_keys(resource.group.clone(), resource.kind.clone());
        let store = Store::new(
            Arc::clone(&informer.fanout.cache),
            Some(Arc::clone(&informer) as Arc<dyn Send + Sync>),
        );
        TriggerHandle {
            handle: self.trigger_on(informer, map, CauseKind::Owned),
            store,
        }
    }

    fn trigger_on(
        &self,
        related: Arc<SharedInformer>,
        map: MapFn,
        cause: CauseKind,
    ) -> HandlerHandle {
        let sink = Arc::new(TriggerSink {
            owner: Arc::clone(&self.runtime),
            owner_cache: Arc::clone(&self.informer.fanout.cache),
            map,
            cause,
            related: related.fanout.resource.clone(),
        });
        let subscriber = Subscriber::new(sink);
        let fanout = Arc::clone(&related.fanout);
        let mut keep_alive = self.keep_alive();
        keep_alive.push(related);
        let handle = self.handle(Registration {
            handler: None,
            trigger: Some((Arc::clone(&fanout), subscriber.clone())),
            _keep_alive: keep_alive,
        });
        self.controller
            .subscribe_if_running(&self.runtime, fanout, subscriber);
        handle
    }
}

// `watches` maps to `ObjectRef<K>`, which needs `K: Resource`: full kinds only.
impl<K, C> KindHandle<K, C>
where
    K: KubeObject + Resource + Clone + DeserializeOwned,
    C: Send + Sync + 'static,
{
    /// Reconciles what `mapper` returns whenever an `O` changes or is deleted.
    pub fn watches<O: Kind>(
        &self,
        api: Api<O>,
        config: watcher::Config,
        mapper: impl Fn(&O) -> Vec<ObjectRef<K>> + Send + Sync + 'static,
    ) -> TriggerHandle<O> {
        let informer = self
            .controller
            .informers()
            .typed(api, config, InformerOptions::default());
        self.env.related.add::<O>(&informer);
        let map: MapFn =
            Box::new(
                move |object: &dyn KubeObject| match object.as_any().downcast_ref::<O>() {
                    Some(typed) => mapper(typed)
                        .into_iter()
                        .map(|target| ObjectKey {
                            namespace: target.namespace,
                            name: target.name,
                        })
                        .collect(),
                    None => Vec::new(),
                },
            );
        let store = Store::new(
            Arc::clone(&informer.fanout.cache),
            Some(Arc::clone(&informer) as Arc<dyn Send + Sync>),
        );
        TriggerHandle {
            handle: self.trigger_on(informer, map, CauseKind::Mapped),
            store,
        }
    }
}
