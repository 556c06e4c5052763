//! The informer's cache and how raw watch traffic becomes Add, Update and Delete.
//!
//! An object that does not decode is cached as an [`Undecodable`] that carries the incarnation's
//! last decodable state (taken from the cache entry it replaces), and the first decodable state of
//! an object that never decoded before is an Add, not an Update: the rules of a typed handler's
//! [`view`](crate::view) of the object, applied here once for every handler, the re-list diff
//! included (it goes through the same upsert).

use std::sync::Arc;

use crate::list_scope::ListRange;
use crate::object::{ObjectKey, SharedObject, Undecodable, as_undecodable, share};
use crate::store::cache::SharedCache;
use crate::store::object_map::{KeyRef, ObjectMap};

use super::InformerEvent;

/// Watch traffic after decoding. A typed informer delivers an object that does not deserialize
/// as an [`Undecodable`](crate::object::Undecodable), so `object` is always set by the informer;
/// `None` (an object known only by its key) keeps the previous cached state and still counts as
/// listed.
pub(crate) enum Observed {
    /// A (re-)list begins; `within`: the objects it covers, as its [`ListScope`](crate::list_scope::ListScope)
    /// says (`None`: every object).
    ListStart { within: Option<ListRange> },
    /// An object from a list page or a watch event.
    Object {
        key: ObjectKey,
        object: Option<SharedObject>,
        listed: bool,
    },
    /// A watch Delete.
    Deleted {
        key: ObjectKey,
        object: Option<SharedObject>,
    },
    /// The (re-)list is complete.
    ListDone,
}

/// The last known state of every object, plus the keys seen during a list in progress.
#[derive(Default)]
pub(crate) struct InformerCache {
    objects: Objects,
    listing: Option<Listing>,
}

/// Keys (foldhash; a [`KeyRef`] finds its owned key without a copy).
type KeySet = hashbrown::HashSet<ObjectKey, foldhash::fast::RandomState>;

/// A list in progress.
struct Listing {
    /// The keys the list delivered so far; `None` when the list started on an empty cache (the
    /// first list: nothing cached can be missing from it, so no key is copied per object).
    seen: Option<KeySet>,
    /// The objects the list covers (`None`: every object).
    within: Option<ListRange>,
}

/// Where the last known states live.
pub(crate) enum Objects {
    /// The informer's own map.
    Own(ObjectMap),
    /// The cache of a shared informer ([`SharedCache`]): read here, written when each event is
    /// published, so an operator keeps one copy of every object, not two. Every event this
    /// cache produces is published before the informer reads its next observation (the
    /// informer's stream yields its queued events first, and the shared informer publishes each
    /// before it polls again), so reads here see every event produced so far.
    Shared(Arc<SharedCache>),
}

impl Default for Objects {
    fn default() -> Self {
        Self::Own(ObjectMap::default())
    }
}

impl Objects {
    /// Records `new` (own map only) and returns the previous state of `key`.
    fn upsert(&mut self, key: ObjectKey, new: SharedObject) -> Option<SharedObject> {
        match self {
            Self::Own(objects) => objects.insert(new),
            Self::Shared(cache) => cache.get(&key),
        }
    }

    /// Forgets `key` (own map only) and returns its last state.
    fn remove(&mut self, key: &ObjectKey) -> Option<SharedObject> {
        match self {
            Self::Own(objects) => objects.remove(key),
            Self::Shared(cache) => cache.get(key),
        }
    }

    /// Removes `key` without an event: an object outside the range being listed (e.g. another
    /// replica's shard), which is forgotten, never reported deleted. A shared cache is written here directly (no
    /// subscriber hears of it); the object is outside the replica's share, so no active slot,
    /// and no delivery from the cache, involves it.
    fn forget(&mut self, key: &ObjectKey) {
        match self {
            Self::Own(objects) => {
                objects.remove(key);
            }
            Self::Shared(cache) => {
                if let Some(last) = cache.get(key) {
                    cache.apply(&InformerEvent::Delete(last));
                }
            }
        }
    }

    /// Whether nothing is cached.
    fn is_empty(&self) -> bool {
        match self {
            Self::Own(objects) => objects.len() == 0,
            Self::Shared(cache) => cache.read().objects.len() == 0,
        }
    }

    /// The keys not in `seen`, sorted (copied only for those).
    fn sorted_keys_absent_from(&self, seen: &KeySet) -> Vec<ObjectKey> {
        let absent = |objects: &ObjectMap| -> Vec<ObjectKey> {
            objects
                .keys()
                .filter(|key| !seen.contains(key))
                .map(KeyRef::to_owned)
                .collect()
        };
        let mut keys = match self {
            Self::Own(objects) => absent(objects),
            Self::Shared(cache) => absent(&cache.read().objects),
        };
        keys.sort();
        keys
    }

    /// Every key, sorted.
    fn sorted_keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = match self {
            Self::Own(objects) => objects.keys().map(KeyRef::to_owned).collect(),
            Self::Shared(cache) => cache.read().objects.keys().map(KeyRef::to_owned).collect(),
        };
        keys.sort();
        keys
    }

    fn get(&self, key: &ObjectKey) -> Option<SharedObject> {
        match self {
            Self::Own(objects) => objects.get(key).cloned(),
            Self::Shared(cache) => cache.get(key),
        }
    }
}

fn resource_version(object: &SharedObject) -> Option<&str> {
    object.metadata().resource_version.as_deref()
}

fn uid(object: &SharedObject) -> Option<&str> {
    object.metadata().uid.as_deref()
}

/// An undecodable state without a decodable one before it (in this informer).
fn never_decoded(object: &SharedObject) -> bool {
    as_undecodable(object).is_some_and(|undecodable| undecodable.last_decodable().is_none())
}

/// `new`, when it is an undecodable state of the same incarnation as `previous`, carrying the
/// last decodable state: `previous` itself when it decoded, else the one `previous` carries.
fn carry_last_decodable(new: SharedObject, previous: Option<&SharedObject>) -> SharedObject {
    let Some(undecodable) = as_undecodable(&new) else {
        return new;
    };
    let Some(previous) = previous.filter(|previous| uid(previous) == uid(&new)) else {
        return new;
    };
    if undecodable.last_decodable().is_some() {
        return new;
    }
    let last = match as_undecodable(previous) {
        Some(before) => before.last_decodable().cloned(),
        None => Some(SharedObject::clone(previous)),
    };
    match last {
        Some(last) => share::<Undecodable>(undecodable.with_last_decodable(last)),
        None => new,
    }
}

impl InformerCache {
    /// Applies one observation and appends the events it implies to `out`. Returns true when a
    /// list completed (the informer is synced from then on).
    pub(crate) fn apply(&mut self, observed: Observed, out: &mut Vec<InformerEvent>) -> bool {
        match observed {
            Observed::ListStart { within } => {
                self.listing = Some(Listing {
                    seen: (!self.objects.is_empty()).then(KeySet::default),
                    within,
                });
            }
            Observed::Object {
                key,
                object,
                listed,
            } => {
                if listed
                    && let Some(Listing {
                        seen: Some(seen), ..
                    }) = &mut self.listing
                {
                    // Seen even when undecodable: it exists, so it must not be reported deleted.
                    seen.insert(key.clone());
                }
                if let Some(new) = object {
                    self.upsert(key, new, out);
                }
            }
            Observed::Deleted { key, object } => {
                let last = self.objects.remove(&key);
                let gone = match object {
                    Some(object) => Some(carry_last_decodable(object, last.as_ref())),
                    None => last,
                };
                if let Some(gone) = gone {
                    out.push(InformerEvent::Delete(gone));
                }
            }
            Observed::ListDone => {
                if let Some(Listing {
                    seen: Some(seen),
                    within,
                }) = self.listing.take()
                {
                    let gone = self.objects.sorted_keys_absent_from(&seen);
                    for key in gone {
                        let Some(last) = self.objects.get(&key) else {
                            continue;
                        };
                        // Outside the list's range: not deleted, only not ours to cache.
                        if within.as_ref().is_some_and(|covers| !covers(&last)) {
                            self.objects.forget(&key);
                        } else if let Some(last) = self.objects.remove(&key) {
                            out.push(InformerEvent::Delete(last));
                        }
                    }
                }
                return true;
            }
        }
        false
    }

    /// An informer cache over a shared informer's cache (see [`Objects::Shared`]).
    pub(crate) fn shared(cache: Arc<SharedCache>) -> Self {
        Self {
            objects: Objects::Shared(cache),
            listing: None,
        }
    }

    fn upsert(&mut self, key: ObjectKey, new: SharedObject, out: &mut Vec<InformerEvent>) {
        // Only an undecodable state needs the previous one first (rare: one lookup more).
        let new = if as_undecodable(&new).is_some() {
            carry_last_decodable(new, self.objects.get(&key).as_ref())
        } else {
            new
        };
        match self.objects.upsert(key, new.clone()) {
            None => out.push(InformerEvent::Add(new)),
            // Deleted and created again under the same name while we were not watching.
            Some(old) if uid(&old) != uid(&new) => {
                out.push(InformerEvent::Delete(old));
                out.push(InformerEvent::Add(new));
            }
            // The first decodable state of an object that had none: it appears to typed handlers.
            Some(old) if never_decoded(&old) && as_undecodable(&new).is_none() => {
                out.push(InformerEvent::Add(new));
            }
            Some(old) if resource_version(&old) != resource_version(&new) => {
                out.push(InformerEvent::Update { old, new });
            }
            // Unchanged (a re-list or a resumed watch repeating what we have).
            Some(_) => {}
        }
    }

    /// Whether a (re-)list is in progress.
    pub(crate) fn is_listing(&self) -> bool {
        self.listing.is_some()
    }

    /// Every cached object's key and `resourceVersion` as a number (for the drift check).
    pub(crate) fn versions(&self) -> Vec<(ObjectKey, Option<u64>)> {
        let version = |object: &SharedObject| {
            (
                KeyRef::of(object.as_ref()).to_owned(),
                super::drift::cached_version(object),
            )
        };
        match &self.objects {
            Objects::Own(objects) => objects.values().map(version).collect(),
            Objects::Shared(cache) => cache.read().objects.values().map(version).collect(),
        }
    }

    /// The cached `resourceVersion` of `key` as a number; `None` when not cached.
    pub(crate) fn version_of(&self, key: &ObjectKey) -> Option<u64> {
        self.objects
            .get(key)
            .and_then(|object| super::drift::cached_version(&object))
    }

    /// Every cached object as a Resync event.
    pub(crate) fn resync(&self, out: &mut Vec<InformerEvent>) {
        out.extend(
            self.objects
                .sorted_keys()
                .iter()
                .filter_map(|key| self.objects.get(key))
                .map(InformerEvent::Resync),
        );
    }
}

#[cfg(test)]
mod tests;
