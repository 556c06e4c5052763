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
            Self::Owned { child } => write!(f, "owned {} changed", Named(child)),
            Self::Mapped { source } => write!(f, "watched {} changed", Named(source)),
            Self::Requested => f.write_str("requested"),
        }
    }
}

/// An object as people name it: `ConfigMap shop/settings` (`Kind name` when cluster-scoped).
/// kube's own `ObjectRef` display is `Kind.version.group/name.namespace`, which for the core
/// group reads `ConfigMap.v1./settings.shop`.
struct Named<'a>(&'a ObjectRef<DynamicObject>);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let object = self.0;
        match &object.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", object.dyntype.kind, object.name),
            None => write!(f, "{} {}", object.dyntype.kind, object.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{ApiResource, DynamicObject};
    use kube::runtime::reflector::ObjectRef;

    use super::TriggerCause;

    #[test]
    fn a_trigger_cause_names_the_object_as_people_do() {
        let config_maps = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let child = ObjectRef::<DynamicObject>::new_with("a", config_maps).within("shop");
        let cause = TriggerCause::Owned {
            child: Box::new(child),
        };
        assert_eq!(cause.to_string(), "owned ConfigMap shop/a changed");
        let nodes = ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&());
        let cause = TriggerCause::Mapped {
            source: Box::new(ObjectRef::<DynamicObject>::new_with("n1", nodes)),
        };
        assert_eq!(cause.to_string(), "watched Node n1 changed");
    }
}
