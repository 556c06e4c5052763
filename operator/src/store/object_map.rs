//! The objects of a cache by namespace and name, keyed by the objects themselves.
//!
//! A map from an owned [`ObjectKey`] to each object would hold a second copy of every object's
//! name and namespace: two `String`s and their allocations, about 110 bytes per object, a tenth
//! of a small object's whole cost in the cache. This table hashes and compares the name and
//! namespace in each object's own metadata instead, so nothing is copied; a lookup borrows its
//! key ([`KeyRef`]) from an `ObjectKey` or from another state of the object. An object's name
//! and namespace never change (the apiserver keys objects by them), so neither does its hash.
//!
//! foldhash (randomly seeded per process): the cache is written once per event, and SipHash over
//! two strings was a measurable part of it.

use std::hash::BuildHasher;

use crate::object::{KubeObject, ObjectKey, SharedObject};

/// A namespace and name borrowed from an object's metadata or an [`ObjectKey`].
/// Ordered as `ObjectKey` is (namespace, then name).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct KeyRef<'a> {
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> KeyRef<'a> {
    /// The key of object `name` in `namespace`.
    pub(crate) fn new(namespace: Option<&'a str>, name: &'a str) -> Self {
        Self { namespace, name }
    }

    /// The key of `object` (an object without a name, never sent by the apiserver, has `""`).
    pub(crate) fn of(object: &'a dyn KubeObject) -> Self {
        let meta = object.metadata();
        Self {
            namespace: meta.namespace.as_deref(),
            name: meta.name.as_deref().unwrap_or_default(),
        }
    }

    /// An owned copy.
    pub(crate) fn to_owned(self) -> ObjectKey {
        ObjectKey {
            namespace: self.namespace.map(str::to_string),
            name: self.name.to_string(),
        }
    }
}

impl<'a> From<&'a ObjectKey> for KeyRef<'a> {
    fn from(key: &'a ObjectKey) -> Self {
        Self {
            namespace: key.namespace.as_deref(),
            name: &key.name,
        }
    }
}

/// A `KeyRef` hashes exactly as the owned key does (`Option<&str>` and `&str` hash as
/// `Option<String>` and `String`, fields in the same order), so it finds the same entry.
impl hashbrown::Equivalent<ObjectKey> for KeyRef<'_> {
    fn equivalent(&self, key: &ObjectKey) -> bool {
        *self == KeyRef::from(key)
    }
}

/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct ObjectMap {
    table: hashbrown::HashTable<SharedObject>,
    hasher: foldhash::fast::RandomState,
}

impl ObjectMap {
    fn hash(&self, key: KeyRef<'_>) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The object under `key`.
    pub(crate) fn get<'k>(&self, key: impl Into<KeyRef<'k>>) -> Option<&SharedObject> {
        let key = key.into();
        self.table
            .find(self.hash(key), |object| KeyRef::of(object.as_ref()) == key)
    }

    /// Caches `object` under its own key; returns the state it replaces.
    pub(crate) fn insert(&mut self, object: SharedObject) -> Option<SharedObject> {
        let key = KeyRef::of(object.as_ref());
        let hash = self.hash(key);
        let hasher = &self.hasher;
        match self.table.entry(
            hash,
            |cached| KeyRef::of(cached.as_ref()) == key,
            |cached| hasher.hash_one(KeyRef::of(cached.as_ref())),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut slot) => {
                Some(std::mem::replace(slot.get_mut(), object))
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(object);
                None
            }
        }
    }

    /// Removes the object under `key`; returns it.
    pub(crate) fn remove<'k>(&mut self, key: impl Into<KeyRef<'k>>) -> Option<SharedObject> {
        let key = key.into();
        let hash = self.hash(key);
        self.table
            .find_entry(hash, |object| KeyRef::of(object.as_ref()) == key)
            .ok()
            .map(|slot| slot.remove().0)
    }

    /// How many objects are cached.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Every object, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &SharedObject> {
        self.table.iter()
    }

    /// Every object's key, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = KeyRef<'_>> {
        self.table.iter().map(|object| KeyRef::of(object.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::object::share;

    fn config_map(namespace: Option<&str>, name: &str, version: &str) -> SharedObject {
        share(ConfigMap {
            metadata: ObjectMeta {
                namespace: namespace.map(str::to_string),
                name: Some(name.to_string()),
                resource_version: Some(version.to_string()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    fn key(namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    fn version(object: Option<&SharedObject>) -> Option<&str> {
        object.and_then(|object| object.metadata().resource_version.as_deref())
    }

    #[test]
    fn objects_are_found_replaced_and_removed_by_their_own_name_and_namespace() {
        let mut map = ObjectMap::default();
        assert!(map.insert(config_map(Some("a"), "x", "1")).is_none());
        assert!(map.insert(config_map(Some("b"), "x", "2")).is_none());
        assert!(map.insert(config_map(None, "x", "3")).is_none());
        for n in 0..1_000 {
            map.insert(config_map(Some("many"), &format!("cm-{n}"), "4"));
        }
        assert_eq!(map.len(), 1_003);
        assert_eq!(version(map.get(&key(Some("a"), "x"))), Some("1"));
        assert_eq!(version(map.get(&key(Some("b"), "x"))), Some("2"));
        assert_eq!(version(map.get(&key(None, "x"))), Some("3"));
        assert!(map.get(&key(Some("c"), "x")).is_none());

        let replaced = map.insert(config_map(Some("a"), "x", "5"));
        assert_eq!(version(replaced.as_ref()), Some("1"));
        assert_eq!(version(map.get(&key(Some("a"), "x"))), Some("5"));
        assert_eq!(map.len(), 1_003);

        let removed = map.remove(&key(Some("b"), "x"));
        assert_eq!(version(removed.as_ref()), Some("2"));
        assert!(map.remove(&key(Some("b"), "x")).is_none());
        assert_eq!(map.len(), 1_002);
        for n in 0..1_000 {
            assert!(map.get(&key(Some("many"), &format!("cm-{n}"))).is_some());
        }
        let mut keys: Vec<ObjectKey> = map.keys().map(KeyRef::to_owned).collect();
        keys.sort();
        assert_eq!(keys.first(), Some(&key(None, "x")));
        assert_eq!(map.values().count(), 1_002);
    }

    #[test]
    fn a_borrowed_key_finds_its_owned_copy_in_a_hashed_set() {
        let mut set: hashbrown::HashSet<ObjectKey, foldhash::fast::RandomState> =
            hashbrown::HashSet::default();
        set.insert(key(Some("ns"), "a"));
        set.insert(key(None, "a"));
        let object = config_map(Some("ns"), "a", "1");
        assert!(set.contains(&KeyRef::of(object.as_ref())));
        assert!(set.contains(&KeyRef::new(None, "a")));
        assert!(!set.contains(&KeyRef::new(Some("other"), "a")));
    }
}
