//! What a wrapper remembers about each object incarnation (UID) while the process runs.
//!
//! The finalizers on the object say what survived a restart; this in-memory record covers what
//! happens between two events of one process: an add that succeeded but whose finalizer swap has
//! not landed yet, and a delete that was handled at `deletionTimestamp` (so a retry with an old
//! copy, or the watch's final Delete event, does not call the handler again). An entry lives until
//! the watch reports the object gone, so the map holds at most one entry per live object.
//!
//! The watcher also keeps, for a short while, the object its `add` was given: from the moment the
//! add succeeds until an event shows either that nothing changed (the finalizer swap landed on the
//! version the add saw) or that the spec changed meanwhile, which is then delivered as
//! `update(object the add saw, newest)`. Without it, a spec change made while `add` ran would be
//! folded into the add that had read the older object. Afterwards the entry is a small marker
//! again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::object::{KubeObject, ObjectKey, SharedObject};

/// How far one incarnation got.
#[derive(Clone, Debug)]
pub(crate) enum Progress {
    /// The reconciler added its finalizer, and `Created` has not succeeded yet (it runs, or
    /// failed and waits for its retry): a request for the incarnation still goes downstream as
    /// `Created`, though the object carries our finalizer.
    Creating,
    /// `add` (or, after a restart, `sync`) succeeded; for the reconciler, `Created` (or
    /// `Resynced` at start-up) was delivered.
    Added {
        /// The object the watcher's `add` was given, while no event has yet shown whether the
        /// spec changed after the add read it (see the [module docs](self)); `None` otherwise.
        saw: Option<SharedObject>,
    },
    /// `delete` succeeded (the reconciler delivered `Deleted`).
    DeleteHandled,
}

impl Progress {
    /// `add` succeeded and nothing is left to compare against.
    pub(crate) const ADDED: Self = Self::Added { saw: None };

    /// Whether `delete` was handled for this incarnation.
    pub(crate) fn delete_handled(&self) -> bool {
        matches!(self, Self::DeleteHandled)
    }
}

/// The identity of one incarnation: its UID, or its namespace/name for objects without one
/// (synthetic objects in tests; the apiserver always sets a UID).
pub(crate) fn incarnation(object: &dyn KubeObject) -> String {
    match &object.metadata().uid {
        Some(uid) => uid.clone(),
        None => format!("name:{}", ObjectKey::of(object)),
    }
}

#[derive(Debug, Default)]
pub(crate) struct ProgressMap(Mutex<HashMap<String, Progress>>);

impl ProgressMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Progress>> {
        // Only plain inserts and removals happen under the lock: a poisoned map is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, id: &str) -> Option<Progress> {
        self.lock().get(id).cloned()
    }

    /// Whether `delete` was handled for the incarnation `id`.
    pub(crate) fn delete_handled(&self, id: &str) -> bool {
        self.lock().get(id).is_some_and(Progress::delete_handled)
    }

    /// The object the add of `id` saw, while it still has to be compared with newer events.
    pub(crate) fn add_saw(&self, id: &str) -> Option<SharedObject> {
        match self.lock().get(id) {
            Some(Progress::Added { saw }) => saw.clone(),
            _ => None,
        }
    }

    /// Records `progress`; `DeleteHandled` is never downgraded to `Added` (nor `Creating`).
    pub(crate) fn set(&self, id: &str, progress: Progress) {
        let mut map = self.lock();
        match map.get_mut(id) {
            Some(Progress::DeleteHandled) => {}
            Some(entry) => *entry = progress,
            None => {
                map.insert(id.to_string(), progress);
            }
        }
    }

    /// Forgets the incarnation (it is gone) and says how far it got.
    pub(crate) fn remove(&self, id: &str) -> Option<Progress> {
        self.lock().remove(id)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handled_delete_is_never_downgraded_and_removal_reports_it() {
        let map = ProgressMap::default();
        map.set("u", Progress::ADDED);
        map.set("u", Progress::DeleteHandled);
        map.set("u", Progress::ADDED);
        assert!(map.delete_handled("u"));
        assert!(map.remove("u").is_some_and(|p| p.delete_handled()));
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn creating_is_not_a_handled_delete_and_never_replaces_one() {
        let map = ProgressMap::default();
        map.set("u", Progress::Creating);
        assert!(matches!(map.get("u"), Some(Progress::Creating)));
        assert!(!map.delete_handled("u"));
        map.set("u", Progress::DeleteHandled);
        map.set("u", Progress::Creating);
        assert!(map.delete_handled("u"));
    }

    #[test]
    fn what_the_add_saw_is_kept_until_replaced_by_the_plain_marker() {
        let map = ProgressMap::default();
        let saw: SharedObject =
            crate::object::share(k8s_openapi::api::core::v1::ConfigMap::default());
        map.set("u", Progress::Added { saw: Some(saw) });
        assert!(map.add_saw("u").is_some());
        map.set("u", Progress::ADDED);
        assert!(map.add_saw("u").is_none());
        assert!(!map.delete_handled("u"));
    }
}
