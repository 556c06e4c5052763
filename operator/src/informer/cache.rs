//! The informer's cache and how raw watch traffic becomes Add, Update and Delete.
//!
//! An object that does not decode is cached as an [`Undecodable`] that carries the incarnation's
//! last decodable state (taken from the cache entry it replaces), and the first decodable state of
//! an object that never decoded before is an Add, not an Update: the rules of a typed handler's
//! [`view`](crate::view) of the object, applied here once for every handler, the re-list diff
//! included (it goes through the same upsert).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::object::{ObjectKey, SharedObject, Undecodable, as_undecodable, share};
use crate::sharding::assignment::{SlotSet, slot_of_uid};
use crate::store::cache::SharedCache;

use super::InformerEvent;

/// Watch traffic after decoding. A typed informer delivers an object that does not deserialize
/// as an [`Undecodable`](crate::object::Undecodable), so `object` is always set by the informer;
/// `None` (an object known only by its key) keeps the previous cached state and still counts as
/// listed.
#[derive(Debug)]
pub(crate) enum Observed {
    /// A (re-)list begins; `within`: the shard slots the apiserver filters it to (`None`: every
    /// object).
    ListStart { within: Option<SlotSet> },
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

/// A list in progress.
struct Listing {
    seen: HashSet<ObjectKey>,
    /// The shard slots the list is filtered to (`None`: every object).
    within: Option<SlotSet>,
}

/// Where the last known states live.
pub(crate) enum Objects {
    /// The informer's own map.
    Own(HashMap<ObjectKey, SharedObject>),
    /// The cache of a shared informer ([`SharedCache`]): read here, written when each event is
    /// published, so an operator keeps one copy of every object, not two. Every event this
    /// cache produces is published before the informer reads its next observation (the
    /// informer's stream yields its queued events first, and the shared informer publishes each
    /// before it polls again), so reads here see every event produced so far.
    Shared(Arc<SharedCache>),
}

impl Default for Objects {
    fn default() -> Self {
        Self::Own(HashMap::new())
    }
}

impl Objects {
    /// Records `new` (own map only) and returns the previous state of `key`.
    fn upsert(&mut self, key: ObjectKey, new: SharedObject) -> Option<SharedObject> {
        match self {
            Self::Own(objects) => objects.insert(key, new),
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

    /// Removes `key` without an event: an object outside the shard range being listed, which
    /// is forgotten, never reported deleted. A shared cache is written here directly (no
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

    /// Every key, sorted.
    fn sorted_keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = match self {
            Self::Own(objects) => objects.keys().cloned().collect(),
            Self::Shared(cache) => cache.read().objects.keys().cloned().collect(),
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
                    seen: HashSet::new(),
                    within,
                });
            }
            Observed::Object {
                key,
                object,
                listed,
            } => {
                if listed && let Some(listing) = &mut self.listing {
                    // Seen even when undecodable: it exists, so it must not be reported deleted.
                    listing.seen.insert(key.clone());
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
                if let Some(Listing { seen, within }) = self.listing.take() {
                    let gone: Vec<ObjectKey> = self
                        .objects
                        .sorted_keys()
                        .into_iter()
                        .filter(|key| !seen.contains(key))
                        .collect();
                    for key in gone {
                        let Some(last) = self.objects.get(&key) else {
                            continue;
                        };
                        // Outside the list's shard range: not deleted, only not ours to cache.
                        if within.is_some_and(|slots| {
                            !slots.contains(slot_of_uid(uid(&last).unwrap_or("")))
                        }) {
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
mod tests {
    use super::*;
    use crate::object::share;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, uid: &str, rv: &str) -> SharedObject {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.uid = Some(uid.into());
        cm.metadata.resource_version = Some(rv.into());
        share(cm)
    }

    fn listed(object: SharedObject) -> Observed {
        Observed::Object {
            key: ObjectKey::of(object.as_ref()),
            object: Some(object),
            listed: true,
        }
    }

    fn describe(events: &[InformerEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| {
                let o = e.object().metadata();
                format!(
                    "{:?} {} {}",
                    e.action(),
                    o.name.as_deref().unwrap_or(""),
                    o.resource_version.as_deref().unwrap_or("")
                )
            })
            .collect()
    }

    #[test]
    fn relist_turns_missing_objects_into_deletes_changed_into_updates_new_into_adds() {
        let mut cache = InformerCache::default();
        let mut out = Vec::new();
        cache.apply(Observed::ListStart { within: None }, &mut out);
        for obj in [cm("a", "1", "10"), cm("b", "2", "11"), cm("c", "3", "12")] {
            cache.apply(listed(obj), &mut out);
        }
        assert!(cache.apply(Observed::ListDone, &mut out), "synced");
        assert_eq!(
            describe(&out),
            ["Created a 10", "Created b 11", "Created c 12"]
        );

        // A disconnect, then a re-list: a unchanged, b changed, c gone, d new, e undecodable.
        out.clear();
        cache.apply(Observed::ListStart { within: None }, &mut out);
        cache.apply(listed(cm("a", "1", "10")), &mut out);
        cache.apply(listed(cm("b", "2", "20")), &mut out);
        cache.apply(listed(cm("d", "4", "21")), &mut out);
        cache.apply(
            Observed::Object {
                key: ObjectKey {
                    namespace: Some("ns".into()),
                    name: "e".into(),
                },
                object: None,
                listed: true,
            },
            &mut out,
        );
        cache.apply(Observed::ListDone, &mut out);
        assert_eq!(
            describe(&out),
            ["Updated b 20", "Created d 21", "Deleted c 12"]
        );
    }

    #[test]
    fn same_name_with_a_new_uid_is_a_delete_then_an_add() {
        let mut cache = InformerCache::default();
        let mut out = Vec::new();
        cache.apply(listed(cm("a", "1", "10")), &mut out);
        cache.apply(listed(cm("a", "2", "30")), &mut out);
        assert_eq!(
            describe(&out),
            ["Created a 10", "Deleted a 10", "Created a 30"]
        );
    }

    #[test]
    fn watch_delete_of_an_undecodable_object_reports_its_last_known_state() {
        let mut cache = InformerCache::default();
        let mut out = Vec::new();
        let a = cm("a", "1", "10");
        let key = ObjectKey::of(a.as_ref());
        cache.apply(listed(a), &mut out);
        cache.apply(Observed::Deleted { key, object: None }, &mut out);
        assert_eq!(describe(&out), ["Created a 10", "Deleted a 10"]);
        out.clear();
        cache.resync(&mut out);
        assert!(out.is_empty(), "gone from the cache");
    }

    /// Applies `observed` to an informer cache over a shared cache, publishing what it
    /// produces to the shared cache as the shared informer does; returns the events.
    fn observe_shared(
        informer: &mut InformerCache,
        shared: &SharedCache,
        observed: Observed,
    ) -> Vec<InformerEvent> {
        let mut out = Vec::new();
        informer.apply(observed, &mut out);
        for event in &out {
            shared.apply(event);
        }
        out
    }

    #[test]
    fn over_a_shared_cache_relists_and_uid_changes_give_the_same_events_as_its_own_map() {
        let shared = Arc::new(SharedCache::new(crate::informer::SyncedFlag::new(false)));
        let mut cache = InformerCache::shared(Arc::clone(&shared));
        let mut events = Vec::new();
        events.extend(observe_shared(
            &mut cache,
            &shared,
            Observed::ListStart { within: None },
        ));
        for obj in [cm("a", "1", "10"), cm("b", "2", "11"), cm("c", "3", "12")] {
            events.extend(observe_shared(&mut cache, &shared, listed(obj)));
        }
        events.extend(observe_shared(&mut cache, &shared, Observed::ListDone));
        assert_eq!(
            describe(&events),
            ["Created a 10", "Created b 11", "Created c 12"]
        );
        assert_eq!(
            shared.read().objects.len(),
            3,
            "one copy, in the shared cache"
        );

        let mut events = Vec::new();
        events.extend(observe_shared(
            &mut cache,
            &shared,
            Observed::ListStart { within: None },
        ));
        events.extend(observe_shared(
            &mut cache,
            &shared,
            listed(cm("a", "1", "10")),
        ));
        events.extend(observe_shared(
            &mut cache,
            &shared,
            listed(cm("b", "2", "20")),
        ));
        events.extend(observe_shared(
            &mut cache,
            &shared,
            listed(cm("d", "4", "21")),
        ));
        events.extend(observe_shared(&mut cache, &shared, Observed::ListDone));
        assert_eq!(
            describe(&events),
            ["Updated b 20", "Created d 21", "Deleted c 12"]
        );

        // Same name, new uid: a delete of the old object, then an add.
        let events = observe_shared(&mut cache, &shared, listed(cm("a", "9", "30")));
        assert_eq!(describe(&events), ["Deleted a 10", "Created a 30"]);
        let keys: Vec<String> = shared
            .snapshot()
            .iter()
            .map(|o| o.metadata().resource_version.clone().unwrap_or_default())
            .collect();
        assert_eq!(keys, ["30", "20", "21"], "a (new), b, d");
    }

    /// Lists a, b, c (uids a-uid, b-uid, c-uid), then re-lists filtered to the slots of a-uid and c-uid
    /// (and d-uid) seeing a and a new d: b left the range (forgotten), c was deleted (inside the range).
    fn relist_after_a_range_change(
        mut apply: impl FnMut(Observed) -> Vec<InformerEvent>,
    ) -> Vec<InformerEvent> {
        let mut within = SlotSet::EMPTY;
        within.insert(slot_of_uid("a-uid"));
        within.insert(slot_of_uid("c-uid"));
        within.insert(slot_of_uid("d-uid"));
        assert!(!within.contains(slot_of_uid("b-uid")), "pick other uids");
        apply(Observed::ListStart { within: None });
        for obj in [
            cm("a", "a-uid", "10"),
            cm("b", "b-uid", "11"),
            cm("c", "c-uid", "12"),
        ] {
            apply(listed(obj));
        }
        apply(Observed::ListDone);
        let mut events = apply(Observed::ListStart {
            within: Some(within),
        });
        events.extend(apply(listed(cm("a", "a-uid", "10"))));
        events.extend(apply(listed(cm("d", "d-uid", "13"))));
        events.extend(apply(Observed::ListDone));
        events
    }

    #[test]
    fn a_relist_within_shard_slots_forgets_objects_outside_them_and_deletes_those_inside() {
        let mut cache = InformerCache::default();
        let events = relist_after_a_range_change(|observed| {
            let mut out = Vec::new();
            cache.apply(observed, &mut out);
            out
        });
        assert_eq!(describe(&events), ["Created d 13", "Deleted c 12"]);
        let mut out = Vec::new();
        cache.resync(&mut out);
        assert_eq!(
            describe(&out),
            ["Resynced a 10", "Resynced d 13"],
            "b forgotten"
        );

        let shared = Arc::new(SharedCache::new(crate::informer::SyncedFlag::new(false)));
        let mut cache = InformerCache::shared(Arc::clone(&shared));
        let events =
            relist_after_a_range_change(|observed| observe_shared(&mut cache, &shared, observed));
        assert_eq!(describe(&events), ["Created d 13", "Deleted c 12"]);
        let names: Vec<String> = shared
            .snapshot()
            .iter()
            .map(|o| o.metadata().name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a", "d"], "b forgotten from the shared cache too");
    }
}
