//! The informer's cache and how raw watch traffic becomes Add, Update and Delete.

use std::collections::{HashMap, HashSet};

use crate::object::{ObjectKey, SharedObject};

use super::InformerEvent;

/// Watch traffic after decoding. A typed informer delivers an object that does not deserialize
/// as an [`Undecodable`](crate::object::Undecodable), so `object` is always set by the informer;
/// `None` (an object known only by its key) keeps the previous cached state and still counts as
/// listed.
#[derive(Debug)]
pub(crate) enum Observed {
    /// A (re-)list begins.
    ListStart,
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
    objects: HashMap<ObjectKey, SharedObject>,
    listing: Option<HashSet<ObjectKey>>,
}

fn resource_version(object: &SharedObject) -> Option<&str> {
    object.metadata().resource_version.as_deref()
}

fn uid(object: &SharedObject) -> Option<&str> {
    object.metadata().uid.as_deref()
}

impl InformerCache {
    /// Applies one observation and appends the events it implies to `out`. Returns true when a
    /// list completed (the informer is synced from then on).
    pub(crate) fn apply(&mut self, observed: Observed, out: &mut Vec<InformerEvent>) -> bool {
        match observed {
            Observed::ListStart => {
                self.listing = Some(HashSet::new());
            }
            Observed::Object {
                key,
                object,
                listed,
            } => {
                if listed && let Some(seen) = &mut self.listing {
                    // Seen even when undecodable: it exists, so it must not be reported deleted.
                    seen.insert(key.clone());
                }
                if let Some(new) = object {
                    self.upsert(key, new, out);
                }
            }
            Observed::Deleted { key, object } => {
                let last = self.objects.remove(&key);
                if let Some(gone) = object.or(last) {
                    out.push(InformerEvent::Delete(gone));
                }
            }
            Observed::ListDone => {
                if let Some(seen) = self.listing.take() {
                    let mut gone: Vec<ObjectKey> = self
                        .objects
                        .keys()
                        .filter(|key| !seen.contains(*key))
                        .cloned()
                        .collect();
                    gone.sort();
                    for key in gone {
                        if let Some(last) = self.objects.remove(&key) {
                            out.push(InformerEvent::Delete(last));
                        }
                    }
                }
                return true;
            }
        }
        false
    }

    fn upsert(&mut self, key: ObjectKey, new: SharedObject, out: &mut Vec<InformerEvent>) {
        match self.objects.insert(key, new.clone()) {
            None => out.push(InformerEvent::Add(new)),
            // Deleted and created again under the same name while we were not watching.
            Some(old) if uid(&old) != uid(&new) => {
                out.push(InformerEvent::Delete(old));
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
        let mut keys: Vec<&ObjectKey> = self.objects.keys().collect();
        keys.sort();
        out.extend(
            keys.into_iter()
                .filter_map(|key| self.objects.get(key))
                .map(|object| InformerEvent::Resync(object.clone())),
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
        cache.apply(Observed::ListStart, &mut out);
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
        cache.apply(Observed::ListStart, &mut out);
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
}
