//! What a handler is called for and why: the [`ReconcileAction`] of an object (what happened to
//! it, also the action of a watcher event and a metric label) and the [`TriggerCause`] of a
//! reconcile that a related object or a request started.
//!
//! Vocabulary at the bottom of the crate: the informer, the metrics, the controller and the
//! handlers all speak it, so it imports no other module of the crate.

use std::fmt;

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

/// What happened to the object of a [`ReconcileRequest`](crate::ReconcileRequest) (also the action of a watcher event, as
/// retry dequeue policies see it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileAction {
    /// The object appeared.
    Created,
    /// The object changed.
    Updated,
    /// The object is gone.
    Deleted,
    /// A periodic resync re-delivered the object unchanged (or a wrapper asks to re-check it).
    Resynced,
}

impl ReconcileAction {
    /// The metric label of the action: CREATE, UPDATE, DELETE or RESYNC.
    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            Self::Created => "CREATE",
            Self::Updated => "UPDATE",
            Self::Deleted => "DELETE",
            Self::Resynced => "RESYNC",
        }
    }

    /// The action a waiting request with action `self` takes when a newer request of the same
    /// object (action `newer`) merges into it, or `None` when the two must stay apart (a Delete
    /// ends an incarnation: what comes after it is about a new object).
    pub(crate) fn merged_with(self, newer: Self) -> Option<Self> {
        use ReconcileAction::{Created, Deleted, Resynced, Updated};
        match (self, newer) {
            (Deleted, _) => None,
            (_, Deleted) => Some(Deleted),
            (Created, _) => Some(Created),
            (Updated, _) | (Resynced, Updated) => Some(Updated),
            (Resynced, Resynced | Created) => Some(newer),
        }
    }
}

impl fmt::Display for ReconcileAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a triggered reconcile runs (see [`trigger`](crate::trigger)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerCause {
    /// A child owned through `owns` changed or was deleted.
    Owned {
        /// The child (boxed: a reference carries its kind's `ApiResource`).
        child: Box<ObjectRef<DynamicObject>>,
    },
    /// An object watched through `watches` mapped to this one.
    Mapped {
        /// The watched object.
        source: Box<ObjectRef<DynamicObject>>,
    },
    /// [`Trigger::reconcile`](crate::Trigger::reconcile) or
    /// [`Trigger::reconcile_all`](crate::Trigger::reconcile_all).
    Requested,
}

impl fmt::Display for TriggerCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Owned { child } => write!(f, "owned {child} changed"),
            Self::Mapped { source } => write!(f, "watched {source} changed"),
            Self::Requested => f.write_str("requested"),
        }
    }
}
