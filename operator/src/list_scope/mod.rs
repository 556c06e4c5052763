//! What a shared informer lists and watches in: its [`ListScope`].
//!
//! By default an informer lists and watches every object its `watcher::Config` selects
//! ([`PlainWatch`]: kube-runtime's watcher with the informer's backoff, see `backoff.rs`). A
//! crate above the core can narrow that at run time without the informer knowing how: the
//! `kubeapp-ha` crate's shard scope restarts the list with a server-side shard selector when its
//! replica's share changes. A scope decides two things:
//!
//! - how the raw list+watch of a kind starts ([`ListScope::watch`]): it may drop its current
//!   list or watch and start again (a new list begins with `Event::Init`), always through the
//!   informer's [`Lister`], which reads each object into the informer's type, and
//! - which objects a list covers ([`ListScope::list_range`], asked as each list starts): at the
//!   list's end, a cached object absent from the list is reported deleted when it is in the
//!   range, and forgotten without an event when it is not (it only left what this informer is
//!   asked to cache).
//!
//! The [`Informers`](crate::Informers) registry asks its [`ListScopes`] for the scope of each
//! shared informer it makes (by default every one is a [`PlainWatch`]); the controller hands
//! the scopes of its kinds to whoever runs it in terms
//! ([`InformerController::shared_kinds`](crate::InformerController::shared_kinds)), which
//! downcasts them to its own type.

mod backoff;

use std::any::Any;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;

use crate::object::{ObjectKey, SharedObject};

/// The raw traffic of a list+watch, as kube-runtime's watcher yields it, each object as the
/// informer's [`Lister`] read it.
pub type RawWatch = BoxStream<'static, Result<watcher::Event<ListedObject>, watcher::Error>>;

/// One object of a list or watch as a [`Lister`] hands it to the informer.
///
/// Either already read into the informer's type straight from the response's bytes (with
/// `managedFields` and the transform already applied), or a `DynamicObject` the informer still
/// converts: an untyped kind, a synthetic stream ([`From<DynamicObject>`]), or an informer with
/// a transform of the raw object.
#[derive(Clone, Debug)]
pub struct ListedObject(pub(crate) Listed);

/// What a [`ListedObject`] holds.
#[derive(Clone, Debug)]
pub(crate) enum Listed {
    /// Still to be converted by the informer (boxed: the other variant is two words).
    Dynamic(Box<DynamicObject>),
    /// Read into the informer's type (or an `Undecodable`), ready to cache.
    Read {
        key: ObjectKey,
        object: SharedObject,
    },
}

impl From<DynamicObject> for ListedObject {
    fn from(object: DynamicObject) -> Self {
        Self(Listed::Dynamic(Box::new(object)))
    }
}

/// Starts the list+watch of one informer's kind: kube-runtime's watcher over an `Api` a
/// [`ListScope`] chooses (its client, namespace and request layers), reading each object as the
/// informer caches it, behind a backoff that starts over only once data arrives (see
/// `backoff.rs`). The informer makes it; a scope only calls [`watch`](Self::watch).
#[derive(Clone)]
pub struct Lister(Arc<dyn Fn(Api<DynamicObject>, watcher::Config) -> RawWatch + Send + Sync>);

impl Lister {
    /// A lister from the function that starts the unbacked-off list+watch.
    pub(crate) fn new(
        start: impl Fn(Api<DynamicObject>, watcher::Config) -> RawWatch + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(start))
    }

    /// The lister that hands every object over as a `DynamicObject`.
    pub(crate) fn dynamic() -> Self {
        Self::new(|api, config| {
            watcher::watcher(api, config)
                .map(|item| item.map(|event| map_event(event, ListedObject::from)))
                .boxed()
        })
    }

    /// The list+watch of `api` (its client, namespace and URL; the kind is the informer's)
    /// with `config`, behind the informer's backoff.
    pub fn watch(&self, api: Api<DynamicObject>, config: watcher::Config) -> RawWatch {
        backoff::backoff_until_data((self.0)(api, config))
    }
}

impl std::fmt::Debug for Lister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lister").finish_non_exhaustive()
    }
}

/// `event` with each object turned by `f`.
pub(crate) fn map_event<A, B>(event: watcher::Event<A>, f: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(f(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
        watcher::Event::Apply(object) => watcher::Event::Apply(f(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(f(object)),
    }
}

/// Which objects one list covers (see [`ListScope::list_range`]): asked at the list's end for
/// each cached object the list did not contain.
pub type ListRange = Arc<dyn Fn(&SharedObject) -> bool + Send + Sync>;

/// Makes the [`ListScope`] of each shared informer of an [`Informers`](crate::Informers)
/// registry, given the informer's resource ([`Informers::list_in`](crate::Informers::list_in)).
pub type ListScopes = Arc<dyn Fn(&ApiResource) -> Arc<dyn ListScope> + Send + Sync>;

/// What one shared informer lists and watches in; see the [module docs](self).
///
/// `Any` so that the crate that made a scope can find it again among a controller's kinds
/// (`Arc::downcast` after upcasting to `Arc<dyn Any + Send + Sync>`).
pub trait ListScope: Any + Send + Sync {
    /// The raw list+watch of `api` (the kind `resource`) with `config`, each one started with
    /// `lister`. Called once per informer, when its task starts; the stream never ends on its
    /// own. It may restart its list at any time; each list begins with `Event::Init`, when
    /// [`list_range`](Self::list_range) is asked.
    fn watch(
        self: Arc<Self>,
        api: Api<DynamicObject>,
        resource: &ApiResource,
        config: watcher::Config,
        lister: Lister,
    ) -> RawWatch;

    /// Which objects the list starting now covers; `None` (the default): every object, so a
    /// cached object absent from the list was deleted.
    fn list_range(&self) -> Option<ListRange> {
        None
    }
}

/// The default [`ListScope`]: every object `config` selects, through the informer's
/// [`Lister`] (kube-runtime's watcher and a backoff that starts over only once data arrives).
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainWatch;

impl ListScope for PlainWatch {
    fn watch(
        self: Arc<Self>,
        api: Api<DynamicObject>,
        _resource: &ApiResource,
        config: watcher::Config,
        lister: Lister,
    ) -> RawWatch {
        lister.watch(api, config)
    }
}
