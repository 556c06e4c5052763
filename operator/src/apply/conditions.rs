//! Standard status conditions, on k8s-openapi's `Condition` (`metav1.Condition`).
//!
//! A status keeps its conditions in a `Vec<Condition>`; [`set`] adds or replaces the condition
//! of a `type`, keeping its `lastTransitionTime` while its status stays the same, and [`ready`]
//! builds the conventional `Ready` condition. Declare the field with [`schema`] so the CRD marks
//! the list a map keyed by `type`: then server-side applies by different field managers (this
//! controller's [`StatusWriter`](super::StatusWriter) and anyone else's) each own their own
//! conditions, and one manager's apply leaves the others' conditions in place.
//!
//! ```
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
//! use kubeapp_operator::apply::conditions;
//!
//! let mut list: Vec<Condition> = Vec::new();
//! assert!(conditions::set(&mut list, conditions::ready(true, "Applied", "all children applied"), Some(3)));
//! // The same condition again: nothing changes, the transition time is kept.
//! assert!(!conditions::set(&mut list, conditions::ready(true, "Applied", "all children applied"), Some(3)));
//! assert!(conditions::is_true(&list, conditions::READY));
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The conventional condition type saying the object is fully reconciled.
pub const READY: &str = "Ready";

/// A condition's status: Kubernetes spells it `"True"`, `"False"` or `"Unknown"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

impl ConditionStatus {
    /// The string Kubernetes stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(status: bool) -> Self {
        if status { Self::True } else { Self::False }
    }
}

/// A condition to set: what [`set`] turns into a `Condition` (it adds the transition time and
/// the observed generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCondition {
    /// The condition type, e.g. `Ready` (CamelCase); one condition per type.
    pub type_: String,
    /// Its status.
    pub status: ConditionStatus,
    /// Why, in one CamelCase word (Kubernetes requires a non-empty reason).
    pub reason: String,
    /// A human readable explanation (may be empty).
    pub message: String,
}

impl NewCondition {
    /// A condition of `type_`.
    pub fn new(
        type_: impl Into<String>,
        status: impl Into<ConditionStatus>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The `Ready` condition: `True` when `status`, `False` otherwise.
pub fn ready(status: bool, reason: &str, message: impl Into<String>) -> NewCondition {
    NewCondition::new(READY, status, reason, message)
}

/// Sets `condition` in `conditions`, replacing the condition of the same type; returns whether
/// anything changed.
///
/// `lastTransitionTime` is now when the condition is new or its status changed, and is kept
/// otherwise (a new reason or message is not a transition). `observedGeneration` is set to
/// `observed_generation` (pass the object's `metadata.generation`).
pub fn set(
    conditions: &mut Vec<Condition>,
    condition: NewCondition,
    observed_generation: Option<i64>,
) -> bool {
    let status = condition.status.as_str();
    let existing = conditions.iter_mut().find(|c| c.type_ == condition.type_);
    let last_transition_time = match &existing {
        Some(current) if current.status == status => current.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    let new = Condition {
        last_transition_time,
        message: condition.message,
        observed_generation,
        reason: condition.reason,
        status: status.to_string(),
        type_: condition.type_,
    };
    match existing {
        Some(current) if *current == new => false,
        Some(current) => {
            *current = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// The condition of `type_`, if set.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is set and `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True.as_str())
}

/// Removes the condition of `type_`; returns whether one was there.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The schema of a `Vec<Condition>` field, for
/// `#[schemars(schema_with = "kubeapp_operator::apply::conditions::schema")]`.
///
/// A list of `metav1.Condition` objects marked `x-kubernetes-list-type: map` with
/// `x-kubernetes-list-map-keys: [type]`, so server-side apply merges conditions by type instead
/// of replacing the whole list: each field manager owns the conditions it applies.
pub fn schema(_generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "Conditions of the object, one per type (metav1.Condition).",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {
                    "type": "string",
                    "maxLength": 316,
                    "description": "The condition type, in CamelCase."
                },
                "status": {
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                    "description": "The condition status."
                },
                "observedGeneration": {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                    "description": "The metadata.generation the condition was set for."
                },
                "lastTransitionTime": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the status last changed."
                },
                "reason": {
                    "type": "string",
                    "maxLength": 1024,
                    "description": "Why, in CamelCase."
                },
                "message": {
                    "type": "string",
                    "maxLength": 32768,
                    "description": "A human readable explanation."
                }
            }
        }
    })
}
