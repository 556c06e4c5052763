//! The typed part of a kind: where it is watched, its handler and its triggers, kept as closures
//! over a [`KindHandle<K>`] until the app registers the kind with its controller.

use std::sync::Arc;

use kube::runtime::watcher;
use kube::{Api, Client};
use kubeapp_operator::apply::KindScope;
use kubeapp_operator::opinionated::FinalizerNameError;
use kubeapp_operator::{
    HandlerHandle, InformerController, InformerOptions, Kind, KindHandle, OpinionatedOptions,
};

/// Attaches the kind's handler to its handle; gets the opinionated options when the kind is
/// opinionated.
pub(crate) type AttachHandler<K> = Box<
    dyn FnOnce(
            &KindHandle<K>,
            Option<OpinionatedOptions>,
        ) -> Result<HandlerHandle, FinalizerNameError>
        + Send
        + Sync,
>;

/// Attaches one trigger (`owns`, `watches`) to the kind's handle; gets the client and the kind's
/// namespace (children are watched where their owner is).
pub(crate) type AttachTrigger<K> =
    Box<dyn FnOnce(&KindHandle<K>, &Client, Option<&str>) -> HandlerHandle + Send + Sync>;

/// Builds the kind's `Api` from the app's client.
pub(crate) type MakeApi<K> = Box<dyn FnOnce(Client) -> Api<K> + Send + Sync>;

/// Registers a kind with a controller: what an erased [`KindSpec`](super::KindSpec) carries.
/// Gets the app's namespace (used when the kind has none of its own).
pub(crate) type Register = Box<
    dyn FnOnce(
            &InformerController,
            &Client,
            Option<OpinionatedOptions>,
            Option<&str>,
        ) -> Result<Vec<HandlerHandle>, FinalizerNameError>
        + Send
        + Sync,
>;

/// Everything typed about one kind.
pub(crate) struct Handlers<K> {
    /// Set by the kind's own `namespace`; else every namespace, or the app's.
    pub(crate) api: Option<MakeApi<K>>,
    pub(crate) namespace: Option<String>,
    pub(crate) config: watcher::Config,
    pub(crate) options: InformerOptions<K>,
    pub(crate) reconciler: Option<AttachHandler<K>>,
    pub(crate) watcher: Option<AttachHandler<K>>,
    pub(crate) triggers: Vec<AttachTrigger<K>>,
}

impl<K: Kind> Handlers<K>
where
    K::Scope: KindScope,
{
    /// Every namespace, default watch settings, no handler.
    pub(crate) fn new() -> Self {
        Self {
            api: None,
            namespace: None,
            config: watcher::Config::default(),
            options: InformerOptions::default(),
            reconciler: None,
            watcher: None,
            triggers: Vec::new(),
        }
    }

    /// The registration of the kind: its informer from the controller's shared registry, its one
    /// handler (the reconciler if both were given: validation refuses that app anyway), then its
    /// triggers.
    pub(crate) fn into_register(self) -> Register {
        Box::new(move |controller, client, opinionated, app_namespace| {
            let (api, namespace) = match (self.api, app_namespace) {
                (Some(make), _) => (make(client.clone()), self.namespace),
                (None, Some(namespace)) => {
                    let api = K::Scope::constrain(Api::all(client.clone()), namespace);
                    let namespace = api.namespace().map(str::to_string);
                    (api, namespace)
                }
                (None, None) => (Api::all(client.clone()), None),
            };
            let handle = controller.kind(api, self.config, self.options);
            let mut registered = Vec::new();
            if let Some(attach) = self.reconciler.or(self.watcher) {
                registered.push(attach(&handle, opinionated)?);
            }
            let namespace = namespace.as_deref();
            registered.extend(
                self.triggers
                    .into_iter()
                    .map(|attach| attach(&handle, client, namespace)),
            );
            Ok(registered)
        })
    }
}

/// `Api<Ch>` in `namespace`, or in every namespace.
pub(crate) fn api_in<Ch>(client: Client, namespace: Option<&str>) -> Api<Ch>
where
    Ch: Kind,
    Ch::Scope: kube::core::NamespaceScope,
{
    let all = Api::all(client);
    match namespace {
        Some(namespace) => all.constrain(namespace),
        None => all,
    }
}

/// The user data handlers get, kept until the handler is attached.
pub(crate) fn with_data<K: Kind, C: Send + Sync + 'static>(
    handle: &KindHandle<K>,
    data: &Arc<C>,
) -> KindHandle<K, C> {
    handle.with_context(Arc::clone(data))
}
