//! The cache behind a shared informer: the newest state of every object, its indexes, and the
//! highest `resourceVersion` seen, written by the informer's task and read by any number of
//! [`Store`](super::Store)s.
//!
//! It is type-erased (objects are [`SharedObject`]s, as the informer delivers them) so that one
//! cache serves typed and dynamic kinds alike; [`Store<K>`](super::Store) gives the typed view.
//! Writes happen before the event reaches any handler, so a handler reading the cache sees at
//! least the state of the event it handles.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use tokio::sync::watch;

use super::object_map::{KeyRef, ObjectMap};
use crate::object::{KubeObject, ObjectKey, SharedObject};
use crate::store::{InformerEvent, SyncedFlag};

/// Computes the values under which an object is indexed.
pub(crate) type IndexFn = Arc<dyn Fn(&dyn KubeObject) -> Vec<String> + Send + Sync>;

/// The built-in index of every object by the UIDs of its owners.
pub(crate) const OWNER_INDEX: &str = "kubeapp.dev/owner-uid";

/// Why [`SharedCache::wait_for_version`] ended without seeing the version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VersionWaitEnd {
    /// The limit ran out first.
    Timeout,
    /// The informer stopped (nothing will raise the version any more).
    Stopped,
}

/// The name of the index of one label's values.
pub(crate) fn label_index(key: &str) -> String {
    format!("kubeapp.dev/label:{key}")
}

/// The objects of one index: value -> keys of the objects indexed under it.
type Index = HashMap<String, BTreeSet<ObjectKey>>;

/// One index's name and how its values are computed.
struct Indexer {
    name: Arc<str>,
    values: IndexFn,
    /// The built-in owner index: an update whose owner references did not change keeps its
    /// values, which is known without computing them.
    by_owners: bool,
}

#[derive(Default)]
pub(crate) struct CacheState {
    pub(crate) objects: ObjectMap,
    indexers: Vec<Indexer>,
    indexes: HashMap<Arc<str>, Index>,
    /// The highest numeric `resourceVersion` of any object seen (written under the write
    /// lock, so no atomic of its own: see `SharedCache::versions` for the ordering).
    highest: u64,
}

impl CacheState {
    /// The objects indexed under `value` in `index`, or `None` without such an index.
    pub(crate) fn indexed(&self, index: &str, value: &str) -> Option<Vec<SharedObject>> {
        let index = self.indexes.get(index)?;
        Some(
            index
                .get(value)
                .into_iter()
                .flatten()
                .filter_map(|key| self.objects.get(key).cloned())
                .collect(),
        )
    }
}

/// See the [module docs](self).
pub(crate) struct SharedCache {
    state: RwLock<CacheState>,
    /// The same for read-after-write waiters, sent only while someone waits (a send takes the
    /// channel's lock; most events have no waiter).
    version: watch::Sender<u64>,
    pub(crate) synced: SyncedFlag,
}

impl SharedCache {
    /// An empty cache with the owner index.
    pub(crate) fn new(synced: SyncedFlag) -> Self {
        let cache = Self {
            state: RwLock::new(CacheState::default()),
            version: watch::Sender::new(0),
            synced,
        };
        cache.add_index(Arc::from(OWNER_INDEX), owner_uids());
        cache
    }

    /// Adds an index (a no-op when one of this name exists), indexing what is cached already.
    /// Two registrations of one informer may ask for different indexes; the cache keeps them all.
    pub(crate) fn add_index(&self, name: Arc<str>, indexer: IndexFn) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.indexes.contains_key(&name) {
            return;
        }
        let mut index = Index::default();
        for object in state.objects.values() {
            for value in indexer(object.as_ref()) {
                let key = KeyRef::of(object.as_ref()).to_owned();
                index.entry(value).or_default().insert(key);
            }
        }
        state.indexes.insert(Arc::clone(&name), index);
        let by_owners = &*name == OWNER_INDEX;
        state.indexers.push(Indexer {
            name,
            values: indexer,
            by_owners,
        });
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, CacheState> {
        // Writers never panic while holding the lock (no user code runs under it).
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one informer event.
    pub(crate) fn apply(&self, event: &InformerEvent) {
        let object = event.object();
        let key = KeyRef::of(object.as_ref());
        let version = numeric_version(object.as_ref());
        let raised = {
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            let previous = match event {
                InformerEvent::Delete(_) => state.objects.remove(key),
                InformerEvent::Resync(_) => None,
                InformerEvent::Add(new) | InformerEvent::Update { new, .. } => {
                    state.objects.insert(Arc::clone(new))
                }
            };
            if !matches!(event, InformerEvent::Resync(_)) {
                let CacheState {
                    indexes, indexers, ..
                } = &mut *state;
                for Indexer {
                    name,
                    values: indexer,
                    by_owners,
                } in indexers.iter()
                {
                    if *by_owners
                        && !matches!(event, InformerEvent::Delete(_))
                        && let Some(previous) = &previous
                        && previous.metadata().owner_references
                            == object.metadata().owner_references
                    {
                        continue;
                    }
                    let before = previous
                        .as_ref()
                        .map(|previous| indexer(previous.as_ref()))
                        .unwrap_or_default();
                    let after = if matches!(event, InformerEvent::Delete(_)) {
                        Vec::new()
                    } else {
                        indexer(object.as_ref())
                    };
                    // Most updates keep their index values (owners, labels): nothing to move,
                    // and no index looked up.
                    if before == after {
                        continue;
                    }
                    let Some(index) = indexes.get_mut(name) else {
                        continue;
                    };
                    let owned = key.to_owned();
                    for value in before {
                        if let Some(keys) = index.get_mut(&value) {
                            keys.remove(&owned);
                            if keys.is_empty() {
                                index.remove(&value);
                            }
                        }
                    }
                    for value in after {
                        index.entry(value).or_default().insert(owned.clone());
                    }
                }
            }
            let raised = version.filter(|version| *version > state.highest);
            if let Some(version) = raised {
                state.highest = version;
            }
            raised
        };
        // A waiter subscribes before it reads `highest` under the lock (see `versions`): either
        // its read comes after this write and sees the version, or its subscription happened
        // before this write took the lock, and is counted here.
        if let Some(version) = raised
            && self.version.receiver_count() > 0
        {
            self.raise_version(version);
        }
    }

    fn raise_version(&self, version: u64) {
        self.version.send_if_modified(|seen| {
            let newer = version > *seen;
            if newer {
                *seen = version;
            }
            newer
        });
    }

    /// Waits, at most `limit`, until the cache has seen a `resourceVersion` of at least
    /// `wanted` (the read-after-write wait of [`Store`](super::Store) and of the opinionated
    /// finalizer patch).
    pub(crate) async fn wait_for_version(
        &self,
        wanted: u64,
        limit: std::time::Duration,
    ) -> Result<(), VersionWaitEnd> {
        let mut versions = self.versions();
        match tokio::time::timeout(limit, versions.wait_for(|seen| *seen >= wanted)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(VersionWaitEnd::Stopped),
            Err(_) => Err(VersionWaitEnd::Timeout),
        }
    }

    /// A receiver of the highest `resourceVersion` seen.
    pub(crate) fn versions(&self) -> watch::Receiver<u64> {
        let receiver = self.version.subscribe();
        let highest = self.read().highest;
        self.raise_version(highest);
        receiver
    }

    /// Every cached object, sorted by key (for replaying the cache as Adds in a stable order).
    pub(crate) fn snapshot(&self) -> Vec<SharedObject> {
        let state = self.read();
        let mut objects: Vec<&SharedObject> = state.objects.values().collect();
        objects.sort_by(|a, b| KeyRef::of(a.as_ref()).cmp(&KeyRef::of(b.as_ref())));
        objects.into_iter().cloned().collect()
    }

    /// The cached object under `key`.
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<SharedObject> {
        self.read().objects.get(key).cloned()
    }
}

/// The `resourceVersion` as a number (etcd's revision, what the apiserver sends), `None` when it
/// is not one. Parsed by hand: `str::parse` was a measurable part of every event's cache write.
fn numeric_version(object: &dyn KubeObject) -> Option<u64> {
    let digits = object.metadata().resource_version.as_deref()?.as_bytes();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &byte| {
        let digit = byte.checked_sub(b'0').filter(|digit| *digit <= 9)?;
        value.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

fn owner_uids() -> IndexFn {
    Arc::new(|object: &dyn KubeObject| {
        object
            .metadata()
            .owner_references
            .iter()
            .flatten()
            .map(|owner| owner.uid.clone())
            .collect()
    })
}

/// An index of one label's value.
pub(crate) fn label_indexer(key: &'static str) -> IndexFn {
    Arc::new(move |object: &dyn KubeObject| {
        object
            .metadata()
            .labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .cloned()
            .into_iter()
            .collect()
    })
}

#[cfg(test)]
mod version_tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::numeric_version;

    fn version(rv: Option<&str>) -> Option<u64> {
        let mut cm = ConfigMap::default();
        cm.metadata.resource_version = rv.map(str::to_string);
        numeric_version(&cm)
    }

    #[test]
    fn resource_versions_parse_as_numbers_only_when_they_are_numbers() {
        assert_eq!(version(Some("0")), Some(0));
        assert_eq!(version(Some("1234567")), Some(1_234_567));
        assert_eq!(version(Some("18446744073709551615")), Some(u64::MAX));
        assert_eq!(version(Some("18446744073709551616")), None, "overflows u64");
        assert_eq!(version(Some("")), None);
        assert_eq!(version(Some("12a")), None);
        assert_eq!(version(Some("-1")), None);
        assert_eq!(version(Some("+1")), None);
        assert_eq!(version(None), None);
    }
}
