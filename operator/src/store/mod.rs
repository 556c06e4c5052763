//! [`Store<K>`]: the readable cache of a shared informer, with indexes and read-after-write waits.
//!
//! Every kind registered through [`InformerController::kind`](crate::InformerController::kind)
//! (or [`Informers::store`](crate::Informers::store)) is cached once per process, and a store is a
//! typed view of that cache: reads take a read lock and return `Arc<K>` (no copy of the object).
//! The informer writes an object into the cache before its event reaches any handler, so a
//! handler reading the store sees at least the state of the event it handles.
//!
//! Indexes: every store indexes objects by the UIDs of their owners ([`Store::by_owner`]); more
//! come from [`InformerOptions::index_label`](crate::InformerOptions::index_label) and
//! [`InformerOptions::index`](crate::InformerOptions::index).
//!
//! Objects that did not decode into `K` (see [`object`](crate::object)) are cached, so that their
//! deletion is still seen, but a typed store never returns them, nor the last decodable state
//! they carry for the handlers (see [`view`](crate::view)): a store answers with what the
//! apiserver holds now, and an undecodable object has no typed form.
//!
//! # Read after write
//!
//! [`Store::wait_for_version`] waits until the cache has seen an object with a `resourceVersion`
//! at least the given one: pass what a create, apply or status write returned, and the store shows
//! that write (if the object matches the informer's selectors) when it returns. kube-apiserver's
//! resource versions are etcd revisions, increasing across a resource; Kubernetes calls them
//! opaque, so a version that is not a number is an error, never a wrong answer.

pub(crate) mod cache;
mod digest;
mod event;
mod kind_cache;
pub(crate) mod object_map;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;

use crate::object::{KubeObject, SharedObject, downcast_shared};

use self::cache::OWNER_INDEX;
pub(crate) use self::cache::{IndexFn, SharedCache, VersionWaitEnd, label_index, label_indexer};
pub(crate) use self::digest::cache_digest;
pub use self::event::{InformerEvent, SyncedFlag};
pub use self::kind_cache::KindCache;

/// Why a [`Store`] read could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store has no index of this name (declare it in the kind's `InformerOptions`).
    #[error(
        "the store has no index {index:?}; declare it with InformerOptions::index or index_label"
    )]
    NotIndexed {
        /// The index asked for.
        index: String,
    },
    /// The resource version is not a number, so it cannot be ordered.
    #[error("resource version {rv:?} is not a number; only numeric (etcd) versions can be awaited")]
    OpaqueVersion {
        /// The version given.
        rv: String,
    },
    /// The cache did not reach the version in time.
    #[error("the cache did not reach resource version {rv} within {waited:?}")]
    Timeout {
        /// The version waited for.
        rv: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The informer behind the store stopped (nothing else used it).
    #[error("the informer behind this store stopped")]
    Stopped,
}

/// A read-only, typed view of one shared informer's cache; see the [module docs](self).
///
/// Cheap to clone. A store keeps its informer running: the watch stops when no store, handler or
/// kind handle uses it any more.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::{Api, runtime::watcher};
/// use kubeapp_operator::{InformerOptions, Informers};
///
/// let informers = Informers::new();
/// let config_maps = informers.store(
///     Api::<ConfigMap>::namespaced(client, "default"),
///     watcher::Config::default(),
///     InformerOptions::default().index_label("app"),
/// );
/// config_maps.wait_until_synced().await;
/// for cm in config_maps.by_label("app", "web")? {
///     println!("{:?}", cm.metadata.name);
/// }
/// # Ok(()) }
/// ```
pub struct Store<K> {
    cache: Arc<SharedCache>,
    /// Keeps the informer running while the store exists.
    _user: Option<Arc<dyn Send + Sync>>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            cache: Arc::clone(&self.cache),
            _user: self._user.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("kind", &std::any::type_name::<K>())
            .field("objects", &self.cache.read().objects.len())
            .field("synced", &self.cache.synced.is_synced())
            .finish()
    }
}

impl<K: KubeObject> Store<K> {
    pub(crate) fn new(cache: Arc<SharedCache>, user: Option<Arc<dyn Send + Sync>>) -> Self {
        Self {
            cache,
            _user: user,
            kind: PhantomData,
        }
    }

    fn typed(objects: impl IntoIterator<Item = SharedObject>) -> Vec<Arc<K>> {
        objects
            .into_iter()
            .filter_map(|object| downcast_shared::<K>(&object))
            .collect()
    }

    /// The cached object `key` refers to.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>>
    where
        K: kube::Resource,
    {
        self.get_named(key.namespace.as_deref(), &key.name)
    }

    /// The cached object `name` in `namespace` (`None` for cluster-scoped kinds).
    pub fn get_named(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let object = self
            .cache
            .read()
            .objects
            .get(object_map::KeyRef::new(namespace, name))
            .cloned();
        object.as_ref().and_then(downcast_shared::<K>)
    }

    /// Every cached object (a snapshot of `Arc`s, in no particular order).
    pub fn state(&self) -> Vec<Arc<K>> {
        Self::typed(self.cache.read().objects.values().cloned())
    }

    /// The cached objects in `namespace`, or all of them with `None`.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<K>> {
        let state = self.cache.read();
        Self::typed(
            state
                .objects
                .values()
                .filter(|object| {
                    namespace.is_none() || object.metadata().namespace.as_deref() == namespace
                })
                .cloned(),
        )
    }

    /// How many objects are cached (undecodable ones included).
    pub fn len(&self) -> usize {
        self.cache.read().objects.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached objects with an owner reference to the UID `owner_uid`.
    pub fn by_owner(&self, owner_uid: &str) -> Vec<Arc<K>> {
        Self::typed(
            self.cache
                .read()
                .indexed(OWNER_INDEX, owner_uid)
                .unwrap_or_default(),
        )
    }

    /// The cached objects whose label `key` is `value`; needs
    /// [`InformerOptions::index_label`](crate::InformerOptions::index_label)`(key)`.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotIndexed`] when the label is not indexed.
    pub fn by_label(&self, key: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        self.by_index(&label_index(key), value)
    }

    /// The cached objects indexed under `value` by the index `index` (see
    /// [`InformerOptions::index`](crate::InformerOptions::index)).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotIndexed`] when there is no such index.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        let state = self.cache.read();
        match state.indexed(index, value) {
            Some(objects) => Ok(Self::typed(objects)),
            None => Err(StoreError::NotIndexed {
                index: index.to_string(),
            }),
        }
    }

    /// True once the informer delivered its first complete list.
    pub fn is_synced(&self) -> bool {
        self.cache.synced.is_synced()
    }

    /// Resolves once the informer delivered its first complete list.
    pub async fn wait_until_synced(&self) {
        self.cache.synced.wait().await;
    }

    /// Waits until the cache has seen a `resourceVersion` of at least `rv`; see the
    /// [module docs](self#read-after-write).
    ///
    /// # Errors
    ///
    /// [`StoreError::OpaqueVersion`] for a version that is not a number, [`StoreError::Timeout`]
    /// when `timeout` runs out first, [`StoreError::Stopped`] when the informer stopped.
    pub async fn wait_for_version(&self, rv: &str, timeout: Duration) -> Result<(), StoreError> {
        let wanted: u64 = rv
            .parse()
            .map_err(|_| StoreError::OpaqueVersion { rv: rv.to_string() })?;
        match self.cache.wait_for_version(wanted, timeout).await {
            Ok(()) => Ok(()),
            Err(VersionWaitEnd::Stopped) => Err(StoreError::Stopped),
            Err(VersionWaitEnd::Timeout) => Err(StoreError::Timeout {
                rv: rv.to_string(),
                waited: timeout,
            }),
        }
    }

    /// A custom index function, applied to the typed object (undecodable objects are not
    /// indexed).
    pub(crate) fn index_fn(f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) -> IndexFn {
        Arc::new(
            move |object: &dyn KubeObject| match object.as_any().downcast_ref::<K>() {
                Some(typed) => f(typed),
                None => Vec::new(),
            },
        )
    }
}

#[cfg(test)]
mod tests;
