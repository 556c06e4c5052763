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

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use kube::Client;
use kube::api::{ApiResource, DynamicObject};
use kube::core::admission::AdmissionRequest;
use kubeapp_operator::informer::InformerOptions;
use kubeapp_operator::{
    DynReconciler, DynWatcher, HandlerContext, Informer, ReconcileError, ReconcileResult,
    ReconcilerFn, TypedReconcileRequest, TypedReconciler, TypedWatcher, WatcherFns,
    typed_reconciler, typed_watcher,
};
use kubeapp_sdk::admission::{
    Mutator, TypedAdmissionRequest, Validator, mutator_fn, typed_request, validator_fn,
};
use kubeapp_sdk::app::AdmissionError;
use kubeapp_sdk::conversion::Converter;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a Rust type needs to be a kind of a simple App: a `kube::Resource` with a static type
/// (a derived custom resource or a k8s-openapi type) that (de)serializes.
pub trait AppKind:
    kube::Resource<DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> AppKind for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A validator of admission requests of one kind, with the typing done.
#[async_trait]
pub(crate) trait AdmissionValidator: Send + Sync {
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError>;
}

/// A mutator of admission requests of one kind, with the typing done.
#[async_trait]
pub(crate) trait AdmissionMutator: Send + Sync {
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError>;
}

/// Adapts a typed sdk handler (`Validator<K>` or `Mutator<K>`) to the untyped request.
struct Typed<K, H> {
    handler: H,
    kind: PhantomData<fn(K)>,
}

impl<K, H> Typed<K, H> {
    fn new(handler: H) -> Self {
        Self {
            handler,
            kind: PhantomData,
        }
    }
}

#[async_trait]
impl<K: AppKind, V: Validator<K>> AdmissionValidator for Typed<K, V> {
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        let typed = typed_request::<K>(request)?;
        self.handler.validate(&typed).await
    }
}

#[async_trait]
impl<K: AppKind, M: Mutator<K>> AdmissionMutator for Typed<K, M> {
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        let typed = typed_request::<K>(request)?;
        let mutated = self.handler.mutate(&typed).await?;
        let value = serde_json::to_value(&mutated)
            .map_err(|e| AdmissionError::Internal(format!("encoding the mutated object: {e}")))?;
        serde_json::from_value(value)
            .map_err(|e| AdmissionError::Internal(format!("encoding the mutated object: {e}")))
    }
}

/// Everything the app needs of one kind, its Rust type erased.
pub(crate) struct KindSpec {
    pub(crate) resource: ApiResource,
    pub(crate) managed: bool,
    pub(crate) new_informer: fn(Client, InformerOptions) -> Informer,
    pub(crate) options: InformerOptions,
    pub(crate) opinionated: bool,
    pub(crate) finalizer: Option<String>,
    pub(crate) reconciler: Option<Arc<dyn DynReconciler>>,
    pub(crate) watcher: Option<Arc<dyn DynWatcher>>,
    pub(crate) validator: Option<Arc<dyn AdmissionValidator>>,
    pub(crate) mutator: Option<Arc<dyn AdmissionMutator>>,
    pub(crate) converter: Option<Arc<dyn Converter>>,
}

impl KindSpec {
    fn new<K: AppKind>(managed: bool) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            managed,
            new_informer: Informer::new::<K>,
            options: InformerOptions::default(),
            opinionated: managed,
            finalizer: None,
            reconciler: None,
            watcher: None,
            validator: None,
            mutator: None,
            converter: None,
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
            .field("reconciler", &self.reconciler.is_some())
            .field("watcher", &self.watcher.is_some())
            .field("validator", &self.validator.is_some())
            .field("mutator", &self.mutator.is_some())
            .field("converter", &self.converter.is_some())
            .finish_non_exhaustive()
    }
}

/// Handler and informer settings shared by both builders.
macro_rules! handler_methods {
    () => {
        /// Reconciles objects with a [`TypedReconciler`] (replaces an earlier reconciler).
        #[must_use]
        pub fn reconciler(mut self, reconciler: impl TypedReconciler<K>) -> Self {
            self.spec.reconciler = Some(Arc::new(typed_reconciler(reconciler)));
            self
        }

        /// Reconciles objects with a closure `|ctx, request| async { .. }` (see
        /// [`ReconcilerFn`]).
        #[must_use]
        pub fn reconcile_fn<F, Fut>(mut self, f: F) -> Self
        where
            F: Fn(HandlerContext, TypedReconcileRequest<K>) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<ReconcileResult, ReconcileError>> + Send + 'static,
        {
            self.spec.reconciler = Some(Arc::new(ReconcilerFn::<K, F>::new(f)));
            self
        }

        /// Watches objects with a [`TypedWatcher`] (replaces an earlier watcher).
        #[must_use]
        pub fn watcher(mut self, watcher: impl TypedWatcher<K>) -> Self {
            self.spec.watcher = Some(Arc::new(typed_watcher(watcher)));
            self
        }

        /// Watches objects with closures: `WatcherFns::<K>::new().on_add(..).on_delete(..)`.
        #[must_use]
        pub fn watcher_fns(mut self, watcher: WatcherFns<K>) -> Self {
            self.spec.watcher = Some(Arc::new(watcher));
            self
        }

        /// Informer options: namespace, label and field selectors, resync interval, workers.
        #[must_use]
        pub fn options(mut self, options: InformerOptions) -> Self {
            self.spec.options = options;
            self
        }

        /// The finalizer of the opinionated wrapper, instead of
        /// `{group}/{app}-{plural}-{version}`. Must be a qualified name `prefix/name`.
        #[must_use]
        pub fn finalizer(mut self, name: impl Into<String>) -> Self {
            self.spec.finalizer = Some(name.into());
            self
        }
    };
}

/// A kind the app owns; see the [module docs](self).
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::ReconcileResult;
/// use kubeapp_simple::ManagedKind;
///
/// let kind = ManagedKind::<ConfigMap>::new()
///     .reconcile_fn(|_ctx, request| async move {
///         tracing::info!(action = %request.action, "reconciling");
///         Ok(ReconcileResult::done())
///     })
///     .plain();
/// # let _ = kind;
/// ```
pub struct ManagedKind<K> {
    spec: KindSpec,
    kind: PhantomData<fn() -> K>,
}

impl<K: AppKind> ManagedKind<K> {
    /// A managed kind without handlers, opinionated, watching all namespaces.
    pub fn new() -> Self {
        Self {
            spec: KindSpec::new::<K>(true),
            kind: PhantomData,
        }
    }

    handler_methods!();

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

    pub(crate) fn into_spec(self) -> KindSpec {
        self.spec
    }
}

impl<K: AppKind> Default for ManagedKind<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for ManagedKind<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManagedKind").field(&self.spec).finish()
    }
}

/// A kind the app watches but does not own; see the [module docs](self).
pub struct UnmanagedKind<K> {
    spec: KindSpec,
    kind: PhantomData<fn() -> K>,
}

impl<K: AppKind> UnmanagedKind<K> {
    /// An unmanaged kind without handlers, plain, watching all namespaces.
    pub fn new() -> Self {
        Self {
            spec: KindSpec::new::<K>(false),
            kind: PhantomData,
        }
    }

    handler_methods!();

    /// Wraps the handler in the opinionated wrapper (finalizers on the watched objects).
    #[must_use]
    pub fn opinionated(mut self) -> Self {
        self.spec.opinionated = true;
        self
    }

    pub(crate) fn into_spec(self) -> KindSpec {
        self.spec
    }
}

impl<K: AppKind> Default for UnmanagedKind<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for UnmanagedKind<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnmanagedKind").field(&self.spec).finish()
    }
}
