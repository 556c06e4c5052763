//! What a wrapper remembers about each object incarnation (UID) while the process runs.
//!
//! The finalizers on the object say what survived a restart; this in-memory record covers what
//! happens between two events of one process: an add that succeeded but whose finalizer swap has
//! not landed yet, and a delete that was handled at `deletionTimestamp` (so a retry with an old
//! copy, or the watch's final Delete event, does not call the handler again). An entry lives until
//! the watch reports the object gone, so the map holds at most one entry per live object.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::object::{KubeObject, ObjectKey};

/// How far one incarnation got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// `add` (or, after a restart, `sync`) succeeded; for the reconciler, `Created` was
    /// delivered.
    Added,
    /// `delete` succeeded (the reconciler delivered `Deleted`).
    DeleteHandled,
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
        self.lock().get(id).copied()
    }

    /// Records `progress`; `DeleteHandled` is never downgraded to `Added`.
    pub(crate) fn set(&self, id: &str, progress: Progress) {
        let mut map = self.lock();
        let entry = map.entry(id.to_string()).or_insert(progress);
        if *entry != Progress::DeleteHandled {
            *entry = progress;
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
        map.set("u", Progress::Added);
        map.set("u", Progress::DeleteHandled);
        map.set("u", Progress::Added);
        assert_eq!(map.get("u"), Some(Progress::DeleteHandled));
        assert_eq!(map.remove("u"), Some(Progress::DeleteHandled));
        assert_eq!(map.len(), 0);
    }
}
