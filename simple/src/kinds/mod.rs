//! Managed and unmanaged kinds: one informer each, with a reconciler or a watcher.
//!
//! A [`ManagedKind`] is a kind the app owns (it should be in the app's manifest): it may carry a
//! validator, a mutator and a converter besides its handler, and its handler is wrapped in the
//! opinionated wrapper unless [`ManagedKind::plain`] is called. An [`UnmanagedKind`] is a kind the
//! app only watches (a ConfigMap, a Deployment): a handler and informer options, plain unless
//! [`UnmanagedKind::opinionated`] is called.
//!
//! Each kind needs exactly one handler, a reconciler **or** a watcher. The builders accept both
//! (the last call of each wins) so that the app's validation can report every mistake at once;
//! see [`crate::validate`].
//!
//! Both builders are typed by the object: handlers are the operator crate's [`Reconciler<K, C>`],
//! [`ApplyCleanup<K, C>`] and [`Watcher<K, C>`] (or closures), `C` being the user data set with
//! `context` (`()` by default). Related-object triggers (`owns`, `watches`) are declared on the
//! kind. When the app is built, each kind becomes a [`KindHandle`](kubeapp_operator::KindHandle)
//! of the app's controller, so its informer is the shared one of the app's
//! [`Informers`](kubeapp_operator::Informers) (see [`AppConfig::informers`](crate::AppConfig::informers)).

mod admission;
mod handlers;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use kube::api::ApiResource;
use kube::core::NamespaceScope;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kubeapp_operator::apply::KindScope;
use kubeapp_operator::kind::ApplyCleanupReconciler;
use kubeapp_operator::{
    ApplyCleanup, Context, InformerOptions, Kind, ReconcileError, ReconcileRequest,
    ReconcileResult, Reconciler, Watcher, apply_cleanup, reconciler_fn,
};
use kubeapp_sdk::admission::{Mutator, TypedAdmissionRequest, Validator, mutator_fn, validator_fn};
use kubeapp_sdk::app::AdmissionError;
use kubeapp_sdk::conversion::Converter;
use kubeapp_sdk::rbac::RbacBuilder;

use self::admission::Typed;
pub(crate) use self::admission::{AdmissionMutator, AdmissionValidator};
pub(crate) use self::handlers::Register;
use self::handlers::{Handlers, api_in, with_data};

/// Everything the app needs of one kind, its Rust type erased.
pub(crate) struct KindSpec {
    pub(crate) resource: ApiResource,
    pub(crate) managed: bool,
    pub(crate) opinionated: bool,
    pub(crate) finalizer: Option<String>,
    pub(crate) has_reconciler: bool,
    pub(crate) has_watcher: bool,
    /// The handler is an [`ApplyCleanup`], which needs the opinionated finalizer.
    pub(crate) apply_cleanup: bool,
    /// Taken by the app when it registers the kind.
    pub(crate) register: Option<Register>,
    pub(crate) validator: Option<Arc<dyn AdmissionValidator>>,
    pub(crate) mutator: Option<Arc<dyn AdmissionMutator>>,
    pub(crate) converter: Option<Arc<dyn Converter>>,
    /// The RBAC of watching the kind, plain and with finalizers (unmanaged kinds; a managed
    /// kind's comes from the manifest).
    pub(crate) rbac_watch: [RbacFn; 2],
    /// The RBAC of the kinds its triggers watch (`watches`) or own (`owns`).
    pub(crate) rbac_related: Vec<RbacFn>,
}

/// Adds what the operator does with one kind to an [`RbacBuilder`].
pub(crate) type RbacFn = for<'m> fn(RbacBuilder<'m>) -> RbacBuilder<'m>;

fn rbac_watched<'m, K: Kind>(builder: RbacBuilder<'m>) -> RbacBuilder<'m> {
    builder.unmanaged::<K>()
}

fn rbac_watched_opinionated<'m, K: Kind>(builder: RbacBuilder<'m>) -> RbacBuilder<'m> {
    builder.unmanaged_opinionated::<K>()
}

fn rbac_owned<'m, K: Kind>(builder: RbacBuilder<'m>) -> RbacBuilder<'m> {
    builder.owned::<K>()
}

impl KindSpec {
    /// What the operator needs of the cluster for this kind: nothing beyond the manifest for a
    /// managed kind; watching (with finalizers when opinionated) for an unmanaged one; and its
    /// triggers' kinds.
    pub(crate) fn rbac<'m>(&self, mut builder: RbacBuilder<'m>) -> RbacBuilder<'m> {
        if !self.managed {
            builder = self.rbac_watch[usize::from(self.opinionated)](builder);
        }
        for add in &self.rbac_related {
            builder = add(builder);
        }
        builder
    }

    fn new<K: Kind>(managed: bool) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            managed,
            opinionated: managed,
            finalizer: None,
            has_reconciler: false,
            has_watcher: false,
            apply_cleanup: false,
            register: None,
            validator: None,
            mutator: None,
            converter: None,
            rbac_watch: [rbac_watched::<K>, rbac_watched_opinionated::<K>],
            rbac_related: Vec::new(),
        }
    }

    /// `Kind` (core group) or `Kind.group`, for messages.
    pub(crate) fn display_name(&self) -> String {
        if self.resource.group.is_empty() {
            self.resource.kind.clone()
        } else {
            format!("{}.{}", self.resource.kind, self.resource.group)
        }
    }
}

impl fmt::Debug for KindSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KindSpec")
            .field("resource", &self.resource)
            .field("managed", &self.managed)
            .field("opinionated", &self.opinionated)
            .field("finalizer", &self.finalizer)
            .field("reconciler", &self.has_reconciler)
            .field("watcher", &self.has_watcher)
            .field("apply_cleanup", &self.apply_cleanup)
            .field("validator", &self.validator.is_some())
            .field("mutator", &self.mutator.is_some())
            .field("converter", &self.converter.is_some())
            .finish_non_exhaustive()
    }
}

/// Handler, trigger and informer settings shared by both builders.
macro_rules! handler_methods {
    ($builder:ident) => {
        /// The user data of the kind's handlers, in their [`Context`] (`ctx.data()`, or `*ctx`).
        /// Handlers given before this call keep the data they were given with.
        pub fn context<D: Send + Sync + 'static>(self, data: Arc<D>) -> $builder<K, D> {
            $builder {
                spec: self.spec,
                handlers: self.handlers,
                data,
            }
        }

        /// Reconciles objects with a [`Reconciler`] (replaces an earlier reconciler).
        #[must_use]
        pub fn reconciler(mut self, reconciler: impl Reconciler<K, C>) -> Self {
            let data = Arc::clone(&self.data);
            self.spec.has_reconciler = true;
            self.spec.apply_cleanup = false;
            self.handlers.reconciler = Some(Box::new(move |handle, opinionated| {
                let handle = with_data(handle, &data);
                match opinionated {
                    Some(options) => handle.reconcile_opinionated(reconciler, options),
                    None => Ok(handle.reconcile(reconciler)),
                }
            }));
            self
        }

        /// Reconciles objects with a closure `|request, ctx| async { .. }`.
        #[must_use]
        pub fn reconcile_fn<F, Fut>(self, f: F) -> Self
        where
            F: Fn(ReconcileRequest<K>, Context<C>) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send,
        {
            self.reconciler(reconciler_fn(f))
        }

        /// Reconciles objects kube-rs style: `apply` for every live state, `cleanup` before the
        /// object is deleted (replaces an earlier reconciler). The kind must stay opinionated:
        /// its finalizer is what holds the deletion until `cleanup` succeeded.
        #[must_use]
        pub fn apply_cleanup(mut self, handler: impl ApplyCleanup<K, C>) -> Self {
            let data = Arc::clone(&self.data);
            self.spec.has_reconciler = true;
            self.spec.apply_cleanup = true;
            self.handlers.reconciler = Some(Box::new(move |handle, opinionated| {
                let handle = with_data(handle, &data);
                match opinionated {
                    Some(options) => handle.apply_cleanup(handler, options),
                    // Refused by the app's validation before any kind is registered.
                    None => Ok(handle.reconcile(ApplyCleanupReconciler(handler))),
                }
            }));
            self
        }

        /// [`apply_cleanup`](Self::apply_cleanup) with two closures `|object, ctx| async { .. }`.
        #[must_use]
        pub fn apply_cleanup_fn<A, AFut, D, DFut>(self, apply: A, cleanup: D) -> Self
        where
            A: Fn(Arc<K>, Context<C>) -> AFut + Send + Sync + 'static,
            AFut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send,
            D: Fn(Arc<K>, Context<C>) -> DFut + Send + Sync + 'static,
            DFut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send,
        {
            self.apply_cleanup(apply_cleanup(apply, cleanup))
        }

        /// Watches objects with a [`Watcher`], e.g. a
        /// [`WatcherFns`](kubeapp_operator::WatcherFns) (replaces an earlier watcher).
        #[must_use]
        pub fn watcher(mut self, watcher: impl Watcher<K, C>) -> Self {
            let data = Arc::clone(&self.data);
            self.spec.has_watcher = true;
            self.handlers.watcher = Some(Box::new(move |handle, opinionated| {
                let handle = with_data(handle, &data);
                match opinionated {
                    Some(options) => handle.watch_opinionated(watcher, options),
                    None => Ok(handle.watch(watcher)),
                }
            }));
            self
        }

        /// Reconciles the owner when a `Ch` with a controller owner reference to it changes or
        /// is deleted (see [`KindHandle::owns`](kubeapp_operator::KindHandle::owns)). Children
        /// are watched in the kind's namespace; `config` may carry a label selector so only the
        /// operator's children are cached.
        #[must_use]
        pub fn owns<Ch>(mut self, config: watcher::Config) -> Self
        where
            Ch: Kind,
            Ch::Scope: NamespaceScope,
        {
            self.spec.rbac_related.push(rbac_owned::<Ch>);
            self.handlers
                .triggers
                .push(Box::new(move |handle, client, namespace| {
                    handle
                        .owns(api_in::<Ch>(client.clone(), namespace), config)
                        .into()
                }));
            self
        }

        /// Reconciles what `mapper` returns whenever an `O` (in the kind's namespace) changes or
        /// is deleted (see [`KindHandle::watches`](kubeapp_operator::KindHandle::watches)).
        #[must_use]
        pub fn watches<O>(
            mut self,
            config: watcher::Config,
            mapper: impl Fn(&O) -> Vec<ObjectRef<K>> + Send + Sync + 'static,
        ) -> Self
        where
            O: Kind,
            O::Scope: NamespaceScope,
        {
            self.spec.rbac_related.push(rbac_watched::<O>);
            self.handlers
                .triggers
                .push(Box::new(move |handle, client, namespace| {
                    handle
                        .watches(api_in::<O>(client.clone(), namespace), config, mapper)
                        .into()
                }));
            self
        }

        /// Watches only `namespace` (default: the app's namespace, see
        /// [`AppConfig::namespace`](crate::AppConfig::namespace), else all namespaces). Only
        /// namespaced kinds have the method.
        #[must_use]
        pub fn namespace(mut self, namespace: impl Into<String>) -> Self
        where
            K::Scope: NamespaceScope,
        {
            let namespace = namespace.into();
            self.handlers.namespace = Some(namespace.clone());
            self.handlers.api = Some(Box::new(move |client| {
                api_in::<K>(client, Some(namespace.as_str()))
            }));
            self
        }

        /// kube-rs's watch settings: label and field selectors, page size, list strategy.
        #[must_use]
        pub fn watcher_config(mut self, config: watcher::Config) -> Self {
            self.handlers.config = config;
            self
        }

        /// kubeapp's informer settings: resync period, transform, managedFields, indexes,
        /// workers.
        #[must_use]
        pub fn options(mut self, options: InformerOptions<K>) -> Self {
            self.handlers.options = options;
            self
        }

        /// The finalizer of the opinionated wrapper, instead of
        /// `{group}/{app}-{plural}-{version}`. Must be a qualified name `prefix/name`.
        #[must_use]
        pub fn finalizer(mut self, name: impl Into<String>) -> Self {
            self.spec.finalizer = Some(name.into());
            self
        }

        pub(crate) fn into_spec(self) -> KindSpec {
            let mut spec = self.spec;
            spec.register = Some(self.handlers.into_register());
            spec
        }
    };
}

/// A kind the app owns; see the [module docs](self). `C` is the user data of its handlers
/// (see [`context`](Self::context)).
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// use kube::runtime::watcher;
/// use kubeapp_operator::ReconcileResult;
/// use kubeapp_simple::ManagedKind;
///
/// struct Settings { greeting: String }
///
/// let kind = ManagedKind::<ConfigMap>::new()
///     .namespace("shop")
///     .context(Arc::new(Settings { greeting: "hello".into() }))
///     .reconcile_fn(|request, ctx| async move {
///         tracing::info!(action = %request.action, greeting = %ctx.data().greeting, "reconciling");
///         Ok(ReconcileResult::done())
///     })
///     .owns::<Secret>(watcher::Config::default().labels("app.kubernetes.io/managed-by=shop"))
///     .plain();
/// # let _ = kind;
/// ```
pub struct ManagedKind<K, C = ()> {
    spec: KindSpec,
    handlers: Handlers<K>,
    data: Arc<C>,
}

impl<K: Kind> ManagedKind<K>
where
    K::Scope: KindScope,
{
    /// A managed kind without handlers, opinionated, watching all namespaces, its handlers'
    /// user data `()` until [`context`](Self::context).
    pub fn new() -> Self {
        Self {
            spec: KindSpec::new::<K>(true),
            handlers: Handlers::new(),
            data: Arc::new(()),
        }
    }
}

impl<K: Kind, C: Send + Sync + 'static> ManagedKind<K, C>
where
    K::Scope: KindScope,
{
    handler_methods!(ManagedKind);

    /// Opts out of the opinionated wrapper: no finalizers, handlers see raw informer events.
    #[must_use]
    pub fn plain(mut self) -> Self {
        self.spec.opinionated = false;
        self
    }

    /// Validates admission requests with an sdk [`Validator`].
    #[must_use]
    pub fn validator(mut self, validator: impl Validator<K>) -> Self {
        self.spec.validator = Some(Arc::new(Typed::<K, _>::new(validator)));
        self
    }

    /// Validates admission requests with a closure `|request| async { .. }`.
    #[must_use]
    pub fn validate_fn<F, Fut>(self, f: F) -> Self
    where
        F: Fn(TypedAdmissionRequest<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), AdmissionError>> + Send + 'static,
    {
        self.validator(validator_fn(f))
    }

    /// Mutates admission requests with an sdk [`Mutator`].
    #[must_use]
    pub fn mutator(mut self, mutator: impl Mutator<K>) -> Self {
        self.spec.mutator = Some(Arc::new(Typed::<K, _>::new(mutator)));
        self
    }

    /// Mutates admission requests with a closure `|request| async { Ok(changed) }`.
    #[must_use]
    pub fn mutate_fn<F, Fut>(self, f: F) -> Self
    where
        F: Fn(TypedAdmissionRequest<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<K, AdmissionError>> + Send + 'static,
    {
        self.mutator(mutator_fn(f))
    }

    /// Converts objects of this kind between versions (e.g. a
    /// [`VersionConverter`](kubeapp_sdk::conversion::VersionConverter)).
    #[must_use]
    pub fn converter(mut self, converter: impl Converter) -> Self {
        self.spec.converter = Some(Arc::new(converter));
        self
    }
}

impl<K: Kind> Default for ManagedKind<K>
where
    K::Scope: KindScope,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, C> fmt::Debug for ManagedKind<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManagedKind").field(&self.spec).finish()
    }
}

/// A kind the app watches but does not own; see the [module docs](self).
pub struct UnmanagedKind<K, C = ()> {
    spec: KindSpec,
    handlers: Handlers<K>,
    data: Arc<C>,
}

impl<K: Kind> UnmanagedKind<K>
where
    K::Scope: KindScope,
{
    /// An unmanaged kind without handlers, plain, watching all namespaces.
    pub fn new() -> Self {
        Self {
            spec: KindSpec::new::<K>(false),
            handlers: Handlers::new(),
            data: Arc::new(()),
        }
    }
}

impl<K: Kind, C: Send + Sync + 'static> UnmanagedKind<K, C>
where
    K::Scope: KindScope,
{
    handler_methods!(UnmanagedKind);

    /// Wraps the handler in the opinionated wrapper (finalizers on the watched objects).
    #[must_use]
    pub fn opinionated(mut self) -> Self {
        self.spec.opinionated = true;
        self
    }
}

impl<K: Kind> Default for UnmanagedKind<K>
where
    K::Scope: KindScope,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, C> fmt::Debug for UnmanagedKind<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnmanagedKind").field(&self.spec).finish()
    }
}
