//! [`KindCache`]: one kind's shared informer cache as code outside the crate reads it, without
//! keeping it alive.

use std::fmt;
use std::sync::{Arc, Weak};

use super::cache::SharedCache;
use crate::object::SharedObject;

/// A kind's informer cache, read from outside the crate (`kubeapp-ha`'s gauges and shard
/// counts): its size and its objects. Holds the cache weakly: once the informer is gone it
/// reads as empty. Cheap to clone.
#[derive(Clone)]
pub struct KindCache {
    kind: Arc<str>,
    cache: Weak<SharedCache>,
}

impl KindCache {
    pub(crate) fn new(kind: &str, cache: &Arc<SharedCache>) -> Self {
        Self {
            kind: Arc::from(kind),
            cache: Arc::downgrade(cache),
        }
    }

    /// The kind's name (`ConfigMap`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// How many objects are cached (0 once the informer is gone).
    pub fn len(&self) -> usize {
        self.cache
            .upgrade()
            .map_or(0, |cache| cache.read().objects.len())
    }

    /// Whether no object is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many cached objects `wanted` picks.
    pub fn count(&self, wanted: impl Fn(&SharedObject) -> bool) -> usize {
        self.cache.upgrade().map_or(0, |cache| {
            cache
                .snapshot()
                .iter()
                .filter(|object| wanted(object))
                .count()
        })
    }

    /// Whether `other` reads the same cache.
    pub fn is_same(&self, other: &Self) -> bool {
        Weak::ptr_eq(&self.cache, &other.cache)
    }

    /// Whether the informer (and so the cache) is still there.
    pub fn is_alive(&self) -> bool {
        self.cache.strong_count() > 0
    }
}

impl fmt::Debug for KindCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KindCache")
            .field("kind", &self.kind)
            .field("len", &self.len())
            .finish()
    }
}
