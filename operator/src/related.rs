//! The informer caches of the kinds a kind's handlers relate to: every kind attached with
//! [`KindHandle::owns`](crate::KindHandle::owns) or [`KindHandle::watches`](crate::KindHandle::watches)
//! is readable from the handlers' [`Context`](crate::Context), typed
//! ([`Context::related_store`](crate::Context::related_store)) or, for code that works on untyped
//! objects (component graphs), as JSON by resource and name
//! ([`Context::cached`](crate::Context::cached)).
//!
//! A cache is readable while its trigger runs: the entry holds the informer weakly, so removing
//! the trigger still stops the informer (and the entry reads as absent from then on).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use kube::api::ApiResource;
use serde_json::Value;

use crate::informers::SharedInformer;
use crate::object::Kind;
use crate::store::Store;

/// Reads one cached object by (namespace, name), as JSON.
type JsonRead = Box<dyn Fn(&SharedInformer, Option<&str>, &str) -> Option<Value> + Send + Sync>;

/// Makes a `Store<K>` over the cache, as `Any`.
type TypedStore = Box<dyn Fn(&SharedInformer) -> Box<dyn Any> + Send + Sync>;

/// One related kind's cache.
struct RelatedCache {
    informer: Weak<SharedInformer>,
    json: JsonRead,
    typed: TypedStore,
}

/// The related caches of one kind's handlers; see the [module docs](self).
#[derive(Default)]
pub(crate) struct RelatedCaches {
    by_type: Mutex<HashMap<TypeId, Arc<RelatedCache>>>,
    by_resource: Mutex<HashMap<(String, String), Arc<RelatedCache>>>,
}

fn store_of<K: Kind>(informer: &SharedInformer) -> Store<K> {
    Store::new(Arc::clone(&informer.fanout.cache), None)
}

impl RelatedCaches {
    /// Makes `informer`'s cache of `K` objects readable.
    pub(crate) fn add<K: Kind>(&self, informer: &Arc<SharedInformer>) {
        let cache = Arc::new(RelatedCache {
            informer: Arc::downgrade(informer),
            json: Box::new(|informer, namespace, name| {
                let object = store_of::<K>(informer).get_named(namespace, name)?;
                serde_json::to_value(object.as_ref()).ok()
            }),
            typed: Box::new(|informer| Box::new(store_of::<K>(informer))),
        });
        let key = (K::api_version(&()).into_owned(), K::kind(&()).into_owned());
        self.by_type
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(TypeId::of::<K>(), Arc::clone(&cache));
        self.by_resource
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, cache);
    }

    /// The store of `K`, while its informer runs.
    pub(crate) fn store<K: Kind>(&self) -> Option<Store<K>> {
        let cache = self
            .by_type
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&TypeId::of::<K>())
            .cloned()?;
        let informer = cache.informer.upgrade()?;
        (cache.typed)(&informer)
            .downcast::<Store<K>>()
            .ok()
            .map(|s| *s)
    }

    /// The cached object of `resource` named `name`, as JSON, while its informer runs.
    pub(crate) fn get(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let key = (resource.api_version.clone(), resource.kind.clone());
        let cache = self
            .by_resource
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned()?;
        let informer = cache.informer.upgrade()?;
        (cache.json)(&informer, namespace, name)
    }
}
