//! Per-kind state that each controller's kind owns and a metric set reads at scrape: the set
//! hands a kind a tracker (`track`), keeps only a weak reference, and folds the live trackers of
//! each `kind` label into one value (`fold`). Two controllers of one label count together, and a
//! dropped controller's tracker leaves the report by itself.
//!
//! Used by [`failing_objects`](crate::failing_objects) and [`queue_wait`](crate::queue_wait).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// One kind label and a tracker of it (weak: a dropped controller's tracker is pruned).
type Labelled<T> = (String, Weak<T>);

/// The trackers of every kind label; clones share them.
pub(crate) struct KindTrackers<T> {
    kinds: Arc<Mutex<Vec<Labelled<T>>>>,
}

impl<T> Clone for KindTrackers<T> {
    fn clone(&self) -> Self {
        Self {
            kinds: Arc::clone(&self.kinds),
        }
    }
}

impl<T> Default for KindTrackers<T> {
    fn default() -> Self {
        Self {
            kinds: Arc::default(),
        }
    }
}

impl<T> fmt::Debug for KindTrackers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("KindTrackers")
            .field("trackers", &kinds.len())
            .finish()
    }
}

impl<T: Default> KindTrackers<T> {
    /// A new tracker for one controller's kind, labelled `kind` while it lives (dropped trackers
    /// are pruned here).
    pub(crate) fn track(&self, kind: &str) -> Arc<T> {
        let tracker = Arc::new(T::default());
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.retain(|(_, tracker)| tracker.strong_count() > 0);
        kinds.push((kind.to_string(), Arc::downgrade(&tracker)));
        tracker
    }
}

impl<T> KindTrackers<T> {
    /// One value per kind label with a live tracker: `add` folds each live tracker of the label
    /// into the label's value, which starts at `V::default()`.
    pub(crate) fn fold<V: Default>(&self, mut add: impl FnMut(&mut V, &T)) -> BTreeMap<String, V> {
        let mut by_kind: BTreeMap<String, V> = BTreeMap::new();
        for (kind, tracker) in self
            .kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            if let Some(tracker) = tracker.upgrade() {
                add(by_kind.entry(kind.clone()).or_default(), &tracker);
            }
        }
        by_kind
    }
}

/// The earlier of two optional instants (`None` only when both are).
pub(crate) fn earliest<I: Ord>(a: Option<I>, b: Option<I>) -> Option<I> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
