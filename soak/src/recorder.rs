//! What the handlers saw, per object incarnation (UID).
//!
//! The soak operator's handlers ([`crate::operator`]) call the [`Recorder`]; the [`crate::checker`] compares its
//! [`Sighting`]s with what the apiserver holds and what the workload did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The handler call that carried an object to the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// The watcher's `add`.
    Add,
    /// The watcher's `update` (the new object).
    Update,
    /// The watcher's `sync`.
    Sync,
    /// The watcher's `delete`.
    Delete,
    /// The reconciler with `Created`.
    Created,
    /// The reconciler with `Updated`.
    Updated,
    /// The reconciler with `Resynced`.
    Resynced,
    /// The reconciler with `Deleted`.
    Deleted,
}

impl Call {
    /// True for the calls that end an incarnation (`delete`, `Deleted`).
    pub fn is_delete(self) -> bool {
        matches!(self, Self::Delete | Self::Deleted)
    }
}

/// What the handlers saw of one object incarnation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sighting {
    /// The object's name.
    pub name: String,
    /// The highest `spec.revision` a spec-carrying call (add, update, sync, Created, Updated,
    /// Resynced) saw; `None` when none did.
    pub newest_revision: Option<u32>,
    /// How many times `delete` / `Deleted` was called.
    pub deletes: u32,
}

/// Collects [`Sighting`]s; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    inner: Arc<Mutex<RecorderState>>,
}

#[derive(Debug, Default)]
struct RecorderState {
    by_uid: HashMap<String, Sighting>,
    calls: HashMap<Call, u64>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a successful handler call about the incarnation `uid` named `name` whose spec had
    /// `revision`.
    pub fn record(&self, call: Call, uid: &str, name: &str, revision: u32) {
        let mut state = self.lock();
        *state.calls.entry(call).or_default() += 1;
        let sighting = state
            .by_uid
            .entry(uid.to_string())
            .or_insert_with(|| Sighting {
                name: name.to_string(),
                ..Sighting::default()
            });
        if call.is_delete() {
            sighting.deletes += 1;
        } else {
            sighting.newest_revision = Some(
                sighting
                    .newest_revision
                    .map_or(revision, |seen| seen.max(revision)),
            );
        }
    }

    /// What was seen of `uid`, if anything.
    pub fn sighting(&self, uid: &str) -> Option<Sighting> {
        self.lock().by_uid.get(uid).cloned()
    }

    /// A copy of every sighting, by UID.
    pub fn sightings(&self) -> HashMap<String, Sighting> {
        self.lock().by_uid.clone()
    }

    /// How many calls of each kind were recorded, in [`Call`] order.
    pub fn call_counts(&self) -> Vec<(Call, u64)> {
        let mut counts: Vec<_> = self.lock().calls.iter().map(|(c, n)| (*c, *n)).collect();
        counts.sort();
        counts
    }

    fn lock(&self) -> MutexGuard<'_, RecorderState> {
        // A handler that panicked while holding the lock left consistent counters behind.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_highest_revision_and_counts_deletes_per_uid() {
        let recorder = Recorder::new();
        recorder.record(Call::Add, "u1", "a", 0);
        recorder.record(Call::Update, "u1", "a", 2);
        recorder.record(Call::Sync, "u1", "a", 1);
        recorder.record(Call::Delete, "u1", "a", 2);
        recorder.record(Call::Deleted, "u2", "b", 5);
        let a = recorder.sighting("u1").expect("seen");
        assert_eq!(a.newest_revision, Some(2));
        assert_eq!(a.deletes, 1);
        let b = recorder.sighting("u2").expect("seen");
        assert_eq!(b.newest_revision, None);
        assert_eq!(b.deletes, 1);
        assert_eq!(recorder.call_counts()[0], (Call::Add, 1));
    }
}
