//! [`Context<C>`]: what one typed handler call gets: the user's shared data, the client, the
//! apply and status helpers under the controller's field manager, an Event recorder, and the
//! call's cancellation and attempt number.
//!
//! The data is given once, where handlers are attached ([`KindHandle::with_context`](
//! crate::KindHandle::with_context)), instead of being captured by every closure, and read with
//! [`Context::data`] (`ctx.data().greeting_suffix`). The context does not deref to it: a field
//! of the user's `C` named like a method of the context (`client`, `status`) would be shadowed.

use std::fmt;
use std::sync::Arc;

use kube::Resource;

use crate::apply::{Applier, Apply, StatusWriter};
use crate::events::EventRecorder;
use crate::handler::DynContext;
use crate::object::Kind;
use crate::own_writes::WrittenPart;
use crate::related::RelatedCaches;
use crate::store::Store;

/// What every call of one kind's handlers shares besides the user data.
pub(crate) struct HandlerEnv {
    pub(crate) client: kube::Client,
    pub(crate) applier: Applier,
    pub(crate) recorder: EventRecorder,
    /// The caches of the kinds attached with `owns` and `watches`.
    pub(crate) related: RelatedCaches,
}

impl HandlerEnv {
    /// An environment outside any controller: applies and Events under `field_manager`, no
    /// related caches.
    pub(crate) fn detached(client: kube::Client, field_manager: &str) -> Self {
        Self {
            applier: Applier::new(client.clone(), field_manager),
            recorder: EventRecorder::new(
                client.clone(),
                crate::events::Reporter {
                    controller: field_manager.to_string(),
                    instance: None,
                },
            ),
            client,
            related: RelatedCaches::default(),
        }
    }
}

/// What every call of the handlers attached with one user data shares: the data and the
/// environment, behind one reference count (a context is made for every handler call).
pub(crate) struct ContextShared<C> {
    data: Arc<C>,
    env: Arc<HandlerEnv>,
}

impl<C> ContextShared<C> {
    pub(crate) fn new(data: Arc<C>, env: Arc<HandlerEnv>) -> Arc<Self> {
        Arc::new(Self { data, env })
    }
}

/// What a typed handler call gets; see the [module docs](self). Cheap to clone (two reference
/// counts).
///
/// In a handler: the user data (`C`), the client, server-side applies and status writes that
/// the controller recognises as its own, Events, the retry attempt, cancellation.
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::{Context, ReconcileError, ReconcileResult};
///
/// struct Settings {
///     greeting: String,
/// }
///
/// async fn apply(cm: Arc<ConfigMap>, ctx: Context<Settings>) -> Result<ReconcileResult, ReconcileError> {
///     if ctx.is_cancelled() {
///         return Ok(ReconcileResult::done());
///     }
///     let mut copy = ConfigMap {
///         metadata: kube::api::ObjectMeta {
///             name: Some(format!("{}-copy", cm.metadata.name.as_deref().unwrap_or_default())),
///             namespace: cm.metadata.namespace.clone(),
///             ..Default::default()
///         },
///         data: cm.data.clone(),
///         ..Default::default()
///     };
///     copy.data.get_or_insert_with(Default::default)
///         .insert("greeting".into(), ctx.data().greeting.clone());
///     // Server-side applied with a controller owner reference: an edit of the copy
///     // reconciles `cm` again (with `owns`), a change this apply made does not.
///     ctx.apply(copy).owned_by(cm.as_ref())?.await?;
///     ctx.recorder()
///         .normal(cm.as_ref(), "Copied", format!("attempt {}", ctx.attempt()))
///         .await?;
///     Ok(ReconcileResult::done())
/// }
/// ```
///
/// Outside a controller (a test, a tool), [`Context::detached`] makes one:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use kubeapp_operator::{CancellationToken, Context, handler::DynContext};
///
/// // No request is sent until a handler uses the client.
/// let config = kube::Config::new("http://127.0.0.1:9".parse()?);
/// let client = kube::Client::try_from(config)?;
/// let ctx = Context::detached(Arc::new(42), client, "my-operator", DynContext::new("Widget", CancellationToken::new()));
/// assert_eq!(**ctx.data(), 42);
/// assert_eq!(ctx.attempt(), 0);
/// assert!(!ctx.is_cancelled());
/// # Ok(())
/// # }
/// ```
pub struct Context<C = ()> {
    shared: Arc<ContextShared<C>>,
    call: DynContext,
}

impl<C> Clone for Context<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            call: self.call.clone(),
        }
    }
}

impl<C> Context<C> {
    /// The context of one call of a handler attached with `shared`.
    pub(crate) fn of_call(shared: &Arc<ContextShared<C>>, call: &DynContext) -> Self {
        Self {
            shared: Arc::clone(shared),
            call: call.clone(),
        }
    }

    /// A context outside any controller, for calling handlers from tests and tools: `data`,
    /// `client`, applies and Events under `field_manager`, the call `call`. It reads no related
    /// caches ([`cached`](Self::cached) and [`related_store`](Self::related_store) find nothing).
    pub fn detached(
        data: Arc<C>,
        client: kube::Client,
        field_manager: &str,
        call: DynContext,
    ) -> Self {
        Self {
            shared: ContextShared::new(data, Arc::new(HandlerEnv::detached(client, field_manager))),
            call,
        }
    }

    /// The informer cache of the `T` objects this kind's handlers relate to (attached with
    /// `owns` or `watches`), while that trigger runs: read children from the cache instead of
    /// the apiserver.
    pub fn related_store<T: Kind>(&self) -> Option<Store<T>> {
        self.shared.env.related.store::<T>()
    }

    /// The cached copy (as JSON) of the object of `resource` named `name`, from the cache of a
    /// kind attached with `owns` or `watches`; `None` when that kind has no such cache or the
    /// object is not in it. For code working on untyped objects (a component graph); typed
    /// handlers use [`related_store`](Self::related_store).
    pub fn cached(
        &self,
        resource: &kube::api::ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<serde_json::Value> {
        self.shared.env.related.get(resource, namespace, name)
    }

    /// The user data given to [`KindHandle::with_context`](crate::KindHandle::with_context).
    pub fn data(&self) -> &Arc<C> {
        &self.shared.data
    }

    /// The client of the kind's `Api`.
    pub fn client(&self) -> &kube::Client {
        &self.shared.env.client
    }

    /// True once the controller began to stop (in-flight calls may still finish).
    pub fn is_cancelled(&self) -> bool {
        self.call.is_cancelled()
    }

    /// Resolves when the controller begins to stop.
    pub async fn cancelled(&self) {
        self.call.cancelled().await;
    }

    /// 0 for the first call of an event, n for its n-th retry or requeue.
    pub fn attempt(&self) -> u32 {
        self.call.attempt()
    }

    /// Records Kubernetes Events about objects, reporting as the controller.
    pub fn recorder(&self) -> &EventRecorder {
        &self.shared.env.recorder
    }

    /// The apply helpers under the controller's field manager.
    pub fn applier(&self) -> &Applier {
        &self.shared.env.applier
    }

    /// Server-side apply of `object` under the controller's field manager:
    /// `ctx.apply(config_map).owned_by(widget.as_ref())?.await?` (see [`apply`](crate::apply)).
    pub fn apply<O: Resource<DynamicType = ()>>(&self, object: O) -> Apply<O> {
        self.shared.env.applier.apply(object)
    }

    /// Writes `object`'s status through the status subresource, only when it changed (see
    /// [`StatusWriter`]).
    pub fn status<K: Resource<DynamicType = ()> + Clone>(&self, object: &K) -> StatusWriter<K> {
        self.shared.env.applier.status(object)
    }

    /// Records that this handler wrote its object with its own client and got `written` back,
    /// changing only `part` (e.g. a status merge patch): the watch event of that write starts no
    /// reconcile (see [`own_writes`](crate::own_writes)). [`status`](Self::status) records its
    /// writes itself.
    pub fn note_own_write<K: Resource>(&self, written: &K, part: WrittenPart) {
        self.call.note_own_write(written.meta(), part);
    }

    /// The untyped call context (kind name, cancellation token), for code written against the
    /// type-erased handler traits.
    pub(crate) fn dyn_context(&self) -> &DynContext {
        &self.call
    }
}

impl<C> fmt::Debug for Context<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("data", &std::any::type_name::<C>())
            .field("call", &self.call)
            .finish()
    }
}
