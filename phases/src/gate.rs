//! Gates: a person's say on a phase machine, through the annotation [`GATE_ANNOTATION`] on the
//! object (`kubectl annotate canary/web phases.kubeapp.dev/gate=promote`, or `kubeapp promote
//! canary/web`), read by the scheduler on each reconcile and applied once: the scheduler writes
//! the effect to the status, then removes the annotation (a JSON patch that first tests the
//! value, so a newer gate written meanwhile is kept for the next reconcile).
//!
//! | gate | effect |
//! |---|---|
//! | `pause` | the object stops where it is (no worker, no measurement): `Paused=True`, reason `Gate` |
//! | `resume` | `Paused=False`, reason `Resumed`; an inconclusive analysis measures again |
//! | `promote` | in a phase with an analysis: ends it as `Promoted` and takes its success transition |
//! | `abort` | in a phase with an analysis: ends it as `Aborted` and takes its failure transition; elsewhere, moves to the machine's [`abort_to`](crate::PhaseMachine::abort_to) phase |
//!
//! A gate that does not apply (promote without an analysis, any gate in a final phase) or an
//! unknown value is removed too, with a Warning Event `GateIgnored` saying why.

use std::fmt;
use std::str::FromStr;

/// The annotation a gate is written in.
pub const GATE_ANNOTATION: &str = "phases.kubeapp.dev/gate";

/// The condition saying whether the object is paused (by a gate or an inconclusive analysis).
pub const PAUSED: &str = "Paused";

/// `Paused`'s reason when the `pause` gate paused it.
pub const REASON_GATE: &str = "Gate";
/// `Paused`'s reason when an analysis was inconclusive.
pub const REASON_INCONCLUSIVE: &str = "Inconclusive";
/// `Paused=False`'s reason after `resume` (or a promote or abort that ended a pause).
pub const REASON_RESUMED: &str = "Resumed";

/// One gate; see the [module docs](self).
///
/// ```
/// use kubeapp_phases::{GATE_ANNOTATION, Gate};
///
/// // What `kubectl annotate canary/web phases.kubeapp.dev/gate=promote` sets:
/// assert_eq!(GATE_ANNOTATION, "phases.kubeapp.dev/gate");
/// assert_eq!("promote".parse::<Gate>(), Ok(Gate::Promote));
/// assert!("ship-it".parse::<Gate>().is_err());
/// assert_eq!(Gate::Abort.as_str(), "abort");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gate {
    /// Stop where it is.
    Pause,
    /// Go on.
    Resume,
    /// Skip the rest of the analysis: its success transition.
    Promote,
    /// Stop the analysis: its failure transition (or the machine's abort phase).
    Abort,
}

impl Gate {
    /// Every gate.
    pub const ALL: [Gate; 4] = [Gate::Pause, Gate::Resume, Gate::Promote, Gate::Abort];

    /// The annotation's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Promote => "promote",
            Self::Abort => "abort",
        }
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An annotation value that is no gate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{GATE_ANNOTATION}={0:?} is not a gate (one of: pause, resume, promote, abort)")]
pub struct UnknownGate(pub String);

impl FromStr for Gate {
    type Err = UnknownGate;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|gate| gate.as_str() == text.trim())
            .ok_or_else(|| UnknownGate(text.chars().take(64).collect()))
    }
}

/// The JSON patch that removes the annotation if it still says `value`.
pub(crate) fn acknowledgement(value: &str) -> serde_json::Value {
    let path = format!(
        "/metadata/annotations/{}",
        GATE_ANNOTATION.replace('/', "~1")
    );
    serde_json::json!([
        {"op": "test", "path": path, "value": value},
        {"op": "remove", "path": path},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_read_their_annotation_values_and_refuse_others_by_name() {
        for gate in Gate::ALL {
            assert_eq!(gate.as_str().parse::<Gate>(), Ok(gate));
        }
        let unknown = "promot".parse::<Gate>().expect_err("a typo");
        assert_eq!(
            unknown.to_string(),
            "phases.kubeapp.dev/gate=\"promot\" is not a gate (one of: pause, resume, promote, abort)"
        );
        let patch = acknowledgement("promote");
        assert_eq!(
            patch[0]["path"],
            "/metadata/annotations/phases.kubeapp.dev~1gate"
        );
        assert_eq!(patch[0]["op"], "test");
    }
}
