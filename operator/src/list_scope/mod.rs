//! What a shared informer lists and watches in: its [`ListScope`].
//!
//! By default an informer lists and watches every object its `watcher::Config` selects
//! ([`PlainWatch`]: kube-runtime's watcher with the informer's backoff, see `backoff.rs`). A
//! crate above the core can narrow that at run time without the informer knowing how: the
//! `kubeapp-ha` crate's shard scope restarts the list with a server-side shard selector when its
//! replica's share changes. A scope decides two things:
//!
//! - how the raw list+watch of a kind starts ([`ListScope::watch`]): it may drop its current
//!   list or watch and start again (a new list begins with `Event::Init`), and
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

use crate::object::SharedObject;

/// The raw traffic of a list+watch, as kube-runtime's watcher yields it.
pub type RawWatch = BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>;

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
    /// The raw list+watch of `api` (the kind `resource`) with `config`. Called once per
    /// informer, when its task starts; the stream never ends on its own. It may restart its list
    /// at any time; each list begins with `Event::Init`, when [`list_range`](Self::list_range)
    /// is asked.
    fn watch(
        self: Arc<Self>,
        api: Api<DynamicObject>,
        resource: &ApiResource,
        config: watcher::Config,
    ) -> RawWatch;

    /// Which objects the list starting now covers; `None` (the default): every object, so a
    /// cached object absent from the list was deleted.
    fn list_range(&self) -> Option<ListRange> {
        None
    }
}

/// The default [`ListScope`]: every object `config` selects, through kube-runtime's watcher and
/// a backoff that starts over only once data arrives (see `backoff.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainWatch;

impl PlainWatch {
    /// The plain list+watch of `api` with `config` (for scopes that restart it with other
    /// request parameters).
    pub fn start(api: Api<DynamicObject>, config: watcher::Config) -> RawWatch {
        backoff::backoff_until_data(watcher::watcher(api, config).boxed())
    }
}

impl ListScope for PlainWatch {
    fn watch(
        self: Arc<Self>,
        api: Api<DynamicObject>,
        _resource: &ApiResource,
        config: watcher::Config,
    ) -> RawWatch {
        Self::start(api, config)
    }
}
