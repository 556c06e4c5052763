//! What an informer hands over: an [`InformerEvent`] per change of an object (written into the
//! cache before anyone else sees it), and the [`SyncedFlag`] that says whether the first complete
//! list arrived. They live with the cache, which applies them, so that the cache and everything
//! above it share them without importing the informer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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
///
/// It also carries the informer's activity (last event, re-lists, failed
/// requests) for the diagnostics endpoint: the flag is the one handle the informer's task, its
/// cache and its stores already share.
#[derive(Clone, Debug)]
pub struct SyncedFlag(Arc<FlagState>);

#[derive(Debug)]
struct FlagState {
    synced: watch::Sender<bool>,
    activity: InformerActivity,
}

impl SyncedFlag {
    pub(crate) fn new(synced: bool) -> Self {
        Self(Arc::new(FlagState {
            synced: watch::Sender::new(synced),
            activity: InformerActivity::default(),
        }))
    }

    /// Marks the first complete list as delivered (the informer's task does).
    pub(crate) fn set(&self) {
        self.0.synced.send_replace(true);
    }

    /// A flag that is synced from the start (tests, ready-made sources).
    #[cfg(test)]
    pub(crate) fn new_synced() -> Self {
        Self::new(true)
    }

    /// True once the first complete list was delivered.
    pub fn is_synced(&self) -> bool {
        *self.0.synced.borrow()
    }

    /// What the informer's task has seen so far.
    pub(crate) fn activity(&self) -> &InformerActivity {
        &self.0.activity
    }

    /// Resolves once the first complete list was delivered.
    pub async fn wait(&self) {
        let mut rx = self.0.synced.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|synced| *synced).await;
    }
}

/// Counts of what an informer's task has seen, read by the diagnostics endpoint; relaxed
/// atomics (a report, never a synchronisation).
#[derive(Debug, Default)]
pub(crate) struct InformerActivity {
    /// When the last watch event or list item arrived, as nanoseconds after [`epoch`] plus one
    /// (0: never).
    last_event: AtomicU64,
    relists: AtomicU64,
    watch_errors: AtomicU64,
}

/// The process's reference instant for [`InformerActivity::last_event`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl InformerActivity {
    /// Events arrived until now (the shared informer's task records it when its stream runs
    /// dry, so the age read later is that of the last event, give or take one batch).
    pub(crate) fn event(&self) {
        let since = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.last_event.store(since + 1, Ordering::Relaxed);
    }

    /// The informer lists again after its first sync.
    pub(crate) fn relist(&self) {
        self.relists.fetch_add(1, Ordering::Relaxed);
    }

    /// A list or watch request failed.
    pub(crate) fn watch_error(&self) {
        self.watch_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// How long ago the last event arrived; `None` before the first.
    pub(crate) fn last_event_age(&self) -> Option<Duration> {
        match self.last_event.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                epoch()
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(at - 1)),
            ),
        }
    }

    /// Re-lists after the first sync.
    pub(crate) fn relists(&self) -> u64 {
        self.relists.load(Ordering::Relaxed)
    }

    /// Failed list and watch requests.
    pub(crate) fn watch_errors(&self) -> u64 {
        self.watch_errors.load(Ordering::Relaxed)
    }
}
