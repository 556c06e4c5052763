//! The status a phase machine writes: `phase`, `observedGeneration`, `details`, `outputs` (when
//! pruning), `analysis` (the run of a phase's analysis, when one has an analysis), the `Ready`
//! condition (see [`ready`]), the `Paused` condition (once a gate or an inconclusive analysis
//! paused the object) and, when the stored phase is not one of the kind's, a `PhaseKnown=False`
//! condition. Written by server-side apply
//! of the status subresource, only when a field changed; every field written once is written
//! again with each apply (server-side apply removes the fields a manager leaves out).
//!
//! The custom kind's status is [`PhaseStatus`] (`#[kube(status = "PhaseStatus")]`), or a struct
//! of the operator's own that declares the fields it uses next to others:
//!
//! ```text
//! pub struct CanaryStatus {
//!     pub phase: Option<String>,
//!     pub observed_generation: Option<i64>,
//!     #[serde(default, skip_serializing_if = "Option::is_none")] // optional despite schema_with
//!     #[schemars(schema_with = "kubeapp_phases::status::details_schema")]
//!     pub details: Option<serde_json::Value>,
//!     #[serde(default)]
//!     #[schemars(schema_with = "kubeapp_operator::apply::conditions::schema")]
//!     pub conditions: Vec<Condition>,
//! }
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::api::DynamicObject;
use kubeapp_components::ComponentObject;
use kubeapp_operator::apply::conditions::{self, NewCondition};
use kubeapp_operator::{Context, ReconcileError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::analysis::AnalysisStatus;
use crate::gate::PAUSED;
use crate::phase::Phase;

/// The condition reporting whether `status.phase` names a phase of the kind.
pub const PHASE_KNOWN: &str = "PhaseKnown";

/// `Ready=True`'s reason: the object rests in a final phase that is not a failure.
pub const PHASE_COMPLETED: &str = "PhaseCompleted";
/// `Ready=False`'s reason when the object rests in a final phase that is a failure
/// ([`Phase::is_failure`]).
pub const PHASE_FAILED: &str = "PhaseFailed";
/// `Ready=False`'s reason while the object is paused in a phase that is not final.
pub const PHASE_PAUSED: &str = "PhasePaused";
/// `Ready=False`'s reason while the object is in a phase that is not final.
pub const PHASE_IN_PROGRESS: &str = "PhaseInProgress";

/// Whether the machine writes the `Ready` condition for an object that reads as `json` (its
/// typed form): when its status has a `conditions` field, or it has no status yet. A kind whose
/// status type has no `conditions` would lose the condition on every read (the apiserver drops
/// fields its schema lacks) and so be written again at every reconcile.
pub(crate) fn holds_conditions(json: &Value) -> bool {
    let status = &json["status"];
    status.is_null() || status.get("conditions").is_some()
}

/// The `Ready` condition of an object in `phase` (paused or not), written with every status
/// write so that tools which know nothing of the kind's phases (`kubeapp trace`, kstatus
/// readers such as Flux or Argo CD's health checks) can tell done, failed and in progress
/// apart: `True` ([`PHASE_COMPLETED`]) in a final phase, `False` with [`PHASE_FAILED`] in a
/// final phase that is a failure, [`PHASE_PAUSED`] while paused, [`PHASE_IN_PROGRESS`]
/// otherwise; the message names the phase.
pub fn ready<P: Phase>(phase: P, paused: bool) -> NewCondition {
    let name = phase.name();
    match (phase.is_final(), phase.is_failure(), paused) {
        (true, false, _) => conditions::ready(true, PHASE_COMPLETED, format!("phase {name}")),
        (true, true, _) => conditions::ready(false, PHASE_FAILED, format!("phase {name} (failed)")),
        (false, _, true) => {
            conditions::ready(false, PHASE_PAUSED, format!("paused in phase {name}"))
        }
        (false, _, false) => conditions::ready(false, PHASE_IN_PROGRESS, format!("phase {name}")),
    }
}

/// What the phase machine writes.
//
// (Not a doc comment, which would go into the CRD's description:) a custom kind's whole status
// when the machine writes all of it, `#[kube(status = "PhaseStatus")]`; `outputs` is written only
// by a machine with `prune_outputs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhaseStatus {
    /// The current phase.
    pub phase: Option<String>,
    /// The generation the phase was worked for.
    pub observed_generation: Option<i64>,
    /// What the last worker reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "details_schema")]
    pub details: Option<Value>,
    /// `PhaseKnown` when the stored phase is not one of the kind's; `Paused` once paused.
    #[serde(default)]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
    /// The objects the phases applied, for pruning (machines with `prune_outputs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<ComponentObject>,
    /// The last run of a phase's analysis: counts, the newest measurements, the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisStatus>,
}

/// The schema of `status.details`: any JSON object, kept as written.
pub fn details_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// What a reconcile writes besides the phase, details and outputs (`None`: keep what is there).
#[derive(Debug, Default)]
pub(crate) struct Extra<'a> {
    /// The analysis run.
    pub(crate) analysis: Option<&'a AnalysisStatus>,
    /// The `Paused` condition.
    pub(crate) paused: Option<NewCondition>,
    /// The `Ready` condition ([`ready`]).
    pub(crate) ready: Option<NewCondition>,
}

/// What to write after a worker ran, given the `current` status: `None` when nothing changes.
#[cfg(test)]
pub(crate) fn after_work(
    current: &Value,
    phase: &str,
    generation: Option<i64>,
    details: Option<&Value>,
    outputs: Option<&[ComponentObject]>,
) -> Option<Value> {
    write(
        current,
        phase,
        generation,
        details,
        outputs,
        Extra::default(),
    )
}

/// [`after_work`] with the analysis run and the `Paused` condition.
pub(crate) fn write(
    current: &Value,
    phase: &str,
    generation: Option<i64>,
    details: Option<&Value>,
    outputs: Option<&[ComponentObject]>,
    extra: Extra<'_>,
) -> Option<Value> {
    let mut changed = current["phase"].as_str() != Some(phase);
    changed |= current["observedGeneration"].as_i64() != generation;
    let mut body = json!({"phase": phase, "observedGeneration": generation});
    match details {
        Some(details) => {
            changed |= &current["details"] != details;
            body["details"] = details.clone();
        }
        // Server-side apply removes the fields we applied before and leave out now: keeping the
        // details means applying them again.
        None if !current["details"].is_null() => body["details"] = current["details"].clone(),
        None => {}
    }
    if let Some(outputs) = outputs {
        let outputs = serde_json::to_value(outputs).unwrap_or(Value::Null);
        let before = if current["outputs"].is_null() {
            json!([])
        } else {
            current["outputs"].clone()
        };
        changed |= before != outputs;
        body["outputs"] = outputs;
    } else if !current["outputs"].is_null() {
        body["outputs"] = current["outputs"].clone();
    }
    match extra.analysis {
        Some(analysis) => {
            let analysis = serde_json::to_value(analysis).unwrap_or(Value::Null);
            changed |= current["analysis"] != analysis;
            body["analysis"] = analysis;
        }
        None if !current["analysis"].is_null() => body["analysis"] = current["analysis"].clone(),
        None => {}
    }
    let mut conditions: Vec<Condition> =
        serde_json::from_value(current["conditions"].clone()).unwrap_or_default();
    if conditions::find(&conditions, PHASE_KNOWN).is_some() {
        let known = NewCondition::new(PHASE_KNOWN, true, "Known", format!("phase {phase}"));
        changed |= conditions::set(&mut conditions, known, generation);
    }
    if let Some(paused) = extra.paused {
        changed |= conditions::set(&mut conditions, paused, generation);
    }
    if let Some(ready) = extra.ready {
        changed |= conditions::set(&mut conditions, ready, generation);
    }
    if conditions
        .iter()
        .any(|c| OWN_CONDITIONS.contains(&c.type_.as_str()))
    {
        body["conditions"] = own_conditions(&conditions);
    }
    changed.then_some(body)
}

/// What to write when `status.phase` is `unknown`: `PhaseKnown=False` naming the phases.
pub(crate) fn unknown_phase(
    current: &Value,
    unknown: &str,
    known: &[&str],
    generation: Option<i64>,
) -> Option<Value> {
    let mut conditions: Vec<Condition> =
        serde_json::from_value(current["conditions"].clone()).unwrap_or_default();
    let condition = NewCondition::new(
        PHASE_KNOWN,
        false,
        "UnknownPhase",
        format!(
            "status.phase {unknown:?} is not a phase of this kind (one of: {})",
            known.join(", ")
        ),
    );
    conditions::set(&mut conditions, condition, generation)
        .then(|| json!({"conditions": own_conditions(&conditions)}))
}

/// The condition types the machine writes (others' conditions are left to their managers).
const OWN_CONDITIONS: [&str; 3] = [PHASE_KNOWN, PAUSED, conditions::READY];

fn own_conditions(conditions: &[Condition]) -> Value {
    let ours: Vec<&Condition> = conditions
        .iter()
        .filter(|c| OWN_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    serde_json::to_value(ours).unwrap_or(Value::Null)
}

/// Applies `status` to `object`'s status subresource; returns the object as stored.
pub(crate) async fn apply<K, C>(
    object: &K,
    status: Value,
    ctx: &Context<C>,
) -> Result<DynamicObject, ReconcileError>
where
    K: Resource<DynamicType = ()>,
{
    ctx.applier()
        .apply_status_fields(object, status)
        .await
        .map_err(ReconcileError::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_written_only_when_phase_generation_details_or_outputs_change() {
        let first = after_work(&Value::Null, "Waiting", Some(1), None, None).expect("new");
        assert_eq!(first, json!({"phase": "Waiting", "observedGeneration": 1}));
        assert!(after_work(&first, "Waiting", Some(1), None, None).is_none());
        assert!(after_work(&first, "Waiting", Some(2), None, None).is_some());
        assert!(after_work(&first, "Evaluating", Some(1), None, None).is_some());
        let details = json!({"successRate": 0.99});
        let with = after_work(&first, "Waiting", Some(1), Some(&details), None).expect("details");
        assert!(after_work(&with, "Waiting", Some(1), Some(&details), None).is_none());
        let moved = after_work(&with, "Evaluating", Some(1), None, None).expect("moved");
        assert_eq!(
            moved["details"], details,
            "no new details keeps the old ones"
        );
        assert!(
            after_work(&first, "Waiting", Some(1), None, Some(&[])).is_none(),
            "no outputs recorded is the same as an empty record"
        );
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    enum Rollout {
        Running,
        Done,
        RolledBack,
    }

    impl Phase for Rollout {
        const ALL: &'static [Self] = &[Self::Running, Self::Done, Self::RolledBack];
        const INITIAL: Self = Self::Running;
        fn name(&self) -> &'static str {
            match self {
                Self::Running => "Running",
                Self::Done => "Done",
                Self::RolledBack => "RolledBack",
            }
        }
        fn is_final(&self) -> bool {
            *self != Self::Running
        }
        fn is_failure(&self) -> bool {
            *self == Self::RolledBack
        }
    }

    #[test]
    fn ready_is_true_only_in_a_final_phase_that_is_not_a_failure() {
        let said = |phase, paused| {
            let c = ready(phase, paused);
            (c.status.as_str(), c.reason)
        };
        assert_eq!(said(Rollout::Done, false), ("True", PHASE_COMPLETED.into()));
        assert_eq!(
            said(Rollout::RolledBack, false),
            ("False", PHASE_FAILED.into())
        );
        assert_eq!(
            said(Rollout::Running, false),
            ("False", PHASE_IN_PROGRESS.into())
        );
        assert_eq!(said(Rollout::Running, true), ("False", PHASE_PAUSED.into()));
        assert!(holds_conditions(&json!({"metadata": {}})), "no status yet");
        assert!(holds_conditions(&json!({"status": {"conditions": []}})));
        assert!(
            !holds_conditions(&json!({"status": {"phase": "Running"}})),
            "a status type without conditions"
        );
        let first = write(
            &Value::Null,
            "Running",
            Some(1),
            None,
            None,
            Extra {
                ready: Some(ready(Rollout::Running, false)),
                ..Extra::default()
            },
        )
        .expect("a first status");
        assert_eq!(first["conditions"][0]["type"], "Ready");
        let done = write(
            &first,
            "Done",
            Some(1),
            None,
            None,
            Extra {
                ready: Some(ready(Rollout::Done, false)),
                ..Extra::default()
            },
        )
        .expect("moved");
        assert_eq!(done["conditions"][0]["status"], "True");
        let unknown = unknown_phase(&done, "Dancing", &["Running"], Some(1)).expect("set");
        let kept: Vec<&str> = unknown["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(
            kept,
            ["Ready", "PhaseKnown"],
            "an apply that leaves Ready out would remove it"
        );
    }

    #[test]
    fn an_unknown_phase_is_reported_once_and_cleared_when_known_again() {
        let report = unknown_phase(&Value::Null, "Dancing", &["A", "B"], Some(1)).expect("set");
        let message = report["conditions"][0]["message"]
            .as_str()
            .expect("message");
        assert!(
            message.contains("\"Dancing\"") && message.contains("A, B"),
            "{message}"
        );
        assert_eq!(report["conditions"][0]["status"], "False");
        assert!(unknown_phase(&report, "Dancing", &["A", "B"], Some(1)).is_none());
        let mut current = report.clone();
        current["phase"] = "A".into();
        current["observedGeneration"] = 1.into();
        let cleared = after_work(&current, "A", Some(1), None, None).expect("cleared");
        assert_eq!(cleared["conditions"][0]["status"], "True");
    }

    #[test]
    fn the_ready_made_status_reads_what_the_machine_writes() {
        let output = ComponentObject {
            component: "Waiting".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let details = json!({"successRate": 0.99});
        let written = after_work(
            &Value::Null,
            "Waiting",
            Some(2),
            Some(&details),
            Some(std::slice::from_ref(&output)),
        )
        .expect("a first status");
        let mut status: PhaseStatus =
            serde_json::from_value(written.clone()).expect("the status type reads it");
        assert_eq!(status.phase.as_deref(), Some("Waiting"));
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.details, Some(details));
        assert_eq!(status.outputs, [output]);
        let mut again = serde_json::to_value(&status).expect("serializes");
        assert_eq!(
            again["conditions"],
            json!([]),
            "no condition is an empty list"
        );
        again
            .as_object_mut()
            .expect("an object")
            .remove("conditions");
        assert_eq!(again, written);
        let unknown = unknown_phase(&written, "Dancing", &["Waiting"], Some(2)).expect("set");
        status.conditions = serde_json::from_value(unknown["conditions"].clone()).expect("read");
        assert_eq!(status.conditions[0].type_, PHASE_KNOWN);
        let schema = serde_json::to_value(schemars::schema_for!(PhaseStatus)).expect("schema");
        let properties = &schema["properties"];
        assert_eq!(
            properties["conditions"]["x-kubernetes-list-type"], "map",
            "{schema}"
        );
        assert_eq!(
            properties["details"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(properties["outputs"].is_object(), "{schema}");
    }
}
