//! What an informer hands over: an [`InformerEvent`] per change of an object (written into the
//! cache before anyone else sees it), and the [`SyncedFlag`] that says whether the first complete
//! list arrived. They live with the cache, which applies them, so that the cache and everything
//! above it share them without importing the informer.

use std::sync::Arc;

use tokio::sync::watch;

use crate::action::ReconcileAction;
use crate::object::SharedObject;

/// What an informer reports about one object.
#[derive(Clone, Debug)]
pub enum InformerEvent {
    /// The object appeared.
    Add(SharedObject),
    /// The object changed from `old` to `new`.
    Update {
        /// The last state the informer had.
        old: SharedObject,
        /// The new state.
        new: SharedObject,
    },
    /// The object is gone; this is its last known state.
    Delete(SharedObject),
    /// A periodic resync re-delivers the cached object.
    Resync(SharedObject),
}

impl InformerEvent {
    /// The action handlers and metrics see: Created, Updated, Deleted or Resynced.
    pub fn action(&self) -> ReconcileAction {
        match self {
            Self::Add(_) => ReconcileAction::Created,
            Self::Update { .. } => ReconcileAction::Updated,
            Self::Delete(_) => ReconcileAction::Deleted,
            Self::Resync(_) => ReconcileAction::Resynced,
        }
    }

    /// The newest object of the event.
    pub fn object(&self) -> &SharedObject {
        match self {
            Self::Add(object)
            | Self::Delete(object)
            | Self::Resync(object)
            | Self::Update { new: object, .. } => object,
        }
    }
}

/// Whether an informer has delivered its first complete list. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SyncedFlag(Arc<watch::Sender<bool>>);

impl SyncedFlag {
    pub(crate) fn new(synced: bool) -> Self {
        Self(Arc::new(watch::Sender::new(synced)))
    }

    /// Marks the first complete list as delivered (the informer's task does).
    pub(crate) fn set(&self) {
        self.0.send_replace(true);
    }

    /// A flag that is synced from the start (tests, ready-made sources).
    #[cfg(test)]
    pub(crate) fn new_synced() -> Self {
        Self::new(true)
    }

    /// True once the first complete list was delivered.
    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the first complete list was delivered.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|synced| *synced).await;
    }
}
