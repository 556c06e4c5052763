//! What `kubeapp trace` reports about one object ([`Trace`], the `-o json` form) and the verdict
//! it exits with, decided from the object and the operator's Events alone (no cluster access
//! here, so every rule is unit-tested).

use k8s_openapi::jiff::Timestamp;
use kubeapp::components::status::COMPONENT_FAILED;
use kubeapp::phases::status::PHASE_FAILED;
use kubeapp::sdk::diagnostics::{AppDiagnostics, InformerDiagnostics, KindDiagnostics};
use serde::Serialize;
use serde_json::Value;

/// The `Ready=False` reasons that mean the object failed (it will not become ready without a
/// change), against those that mean it is on its way.
pub const FAILED_REASONS: [&str; 2] = [COMPONENT_FAILED, PHASE_FAILED];

/// Where the object stands, as the exit code says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Ready for its current generation: exit 0.
    Ready,
    /// On its way, or not looked at yet: exit 3.
    NotReady,
    /// Failed, or the operator gave up on it: exit 4.
    Failed,
}

impl Verdict {
    /// The exit code (see the command's docs).
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Ready => 0,
            Self::NotReady => 3,
            Self::Failed => 4,
        }
    }

    /// Whether waiting longer could change it.
    pub fn is_settled(self) -> bool {
        self != Self::NotReady
    }
}

/// One object's trace.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    /// The object.
    pub object: ObjectView,
    /// Where it stands.
    pub verdict: Verdict,
    /// Why, in one line.
    pub why: String,
    /// Its conditions as stored.
    pub conditions: Vec<ConditionView>,
    /// The last write to its status: when, and by which field manager.
    pub last_status_write: Option<WriteView>,
    /// A phase machine's object: the phase, its history, the current analysis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<PhasesView>,
    /// A components object: each component and the objects it applied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentView>,
    /// The handlers' failures (`HandlerFailed`, `HandlerGaveUp` Events), newest first.
    pub failures: Vec<EventView>,
    /// The newest Events about the object, newest first.
    pub events: Vec<EventView>,
    /// Who acts on it.
    pub owner: OwnerView,
    /// What the operator process reports on `/debug/kubeapp` (with `--diagnostics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorView>,
    /// What could not be read (Events, Leases, an applied object), and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// What the operator process reports about the object's kind (`--diagnostics`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorView {
    /// Where it was read.
    pub url: String,
    /// The informer caching the object.
    pub informer: Option<InformerDiagnostics>,
    /// The kind's queue and failures.
    pub kind: Option<KindDiagnostics>,
    /// Each app's leader and shard state.
    pub apps: Vec<AppDiagnostics>,
}

/// The object itself.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectView {
    /// `group/version`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its uid.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// Its finalizers, when it is being deleted.
    pub deleting: Option<Vec<String>>,
}

/// A condition.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// Its type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// The generation it was set for.
    pub observed_generation: Option<i64>,
    /// When its status last changed.
    pub last_transition_time: Option<Timestamp>,
}

/// A write to the status subresource, from `metadata.managedFields`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteView {
    /// When.
    pub time: Timestamp,
    /// The field manager.
    pub manager: String,
}

/// A phase machine's object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhasesView {
    /// `status.phase`.
    pub phase: String,
    /// Its transitions (the `PhaseChanged` Events still kept), oldest first.
    pub history: Vec<TransitionView>,
    /// `status.analysis`, as stored.
    pub analysis: Option<Value>,
    /// The objects its phases applied (`status.outputs`, machines that prune), with readiness.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<ChildView>,
}

/// A phase change.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransitionView {
    /// When (the Event's time).
    pub time: Option<Timestamp>,
    /// `from -> to`, as the Event says.
    pub change: String,
}

/// One component.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentView {
    /// Its name.
    pub name: String,
    /// `ready`, `waiting` or `failed`, from `status.components`.
    pub state: &'static str,
    /// The objects it applied, as read now.
    pub children: Vec<ChildView>,
}

/// An object the operator applied, read now.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    /// Its kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// `Ready`, `NotReady`, `Failed` (the built-in readiness rules of the components crate),
    /// `Missing`, or `Unreadable`.
    pub readiness: &'static str,
    /// Why it is not ready.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// An Event.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// When it last happened.
    pub time: Option<Timestamp>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its reason.
    pub reason: String,
    /// Its action.
    pub action: String,
    /// Its note.
    pub note: String,
    /// How many times it happened.
    pub count: i32,
    /// The reporting controller and instance (`controller/instance`).
    pub reporter: String,
}

/// Who acts on the object.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerView {
    /// The reporter of the newest Event about it from a controller (`controller/instance`).
    pub last_reported_by: Option<String>,
    /// Its slot and owner in every kubeapp shard ring found.
    pub shards: Vec<ShardView>,
    /// The holder of every kubeapp leader-election Lease found.
    pub leaders: Vec<LeaderView>,
}

/// The object's place in one shard ring.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardView {
    /// The ring (its Leases' `sharding.kubeapp.dev/ring` label).
    pub ring: String,
    /// The Leases' namespace.
    pub namespace: String,
    /// The object's slot (of 256).
    pub slot: usize,
    /// The live member whose share holds the slot.
    pub owner: Option<String>,
    /// The live members (Leases renewed within their duration, by this machine's clock).
    pub members: Vec<String>,
}

/// One leader-election Lease.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderView {
    /// `namespace/name`.
    pub lease: String,
    /// Its holder, when its claim is current.
    pub holder: Option<String>,
}

/// The verdict on `object` (as JSON) given the handlers' failure Events about it (newest
/// first, reasons `HandlerFailed` and `HandlerGaveUp`) and the last write to its status:
///
/// 1. being deleted: not ready;
/// 2. the operator gave up on it (a `HandlerGaveUp` Event newer than the last status write):
///    failed;
/// 3. a `Ready` condition: `True` for the current generation is ready (for an older one, not
///    ready); `False` with a reason of [`FAILED_REASONS`] is failed; otherwise not ready;
/// 4. no `Ready` condition: ready when `status.observedGeneration` is the current generation,
///    else not ready.
///
/// A `HandlerFailed` Event (a retry pending) does not decide: the operator records no success,
/// so a retry that succeeded without changing the status would leave the object "failing" for
/// as long as the Event is kept.
pub fn verdict(
    object: &Value,
    failures: &[EventView],
    last_write: Option<&WriteView>,
) -> (Verdict, String) {
    let metadata = &object["metadata"];
    if !metadata["deletionTimestamp"].is_null() {
        return (
            Verdict::NotReady,
            format!(
                "being deleted (finalizers: {})",
                metadata["finalizers"]
                    .as_array()
                    .map(|f| f
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", "))
                    .unwrap_or_default()
            ),
        );
    }
    let gave_up = failures.iter().find(|e| {
        e.reason == kubeapp::operator::controller::failures::HANDLER_GAVE_UP
            && match (e.time, last_write) {
                (Some(time), Some(write)) => time > write.time,
                (_, None) => true,
                (None, Some(_)) => false,
            }
    });
    if let Some(event) = gave_up {
        return (
            Verdict::Failed,
            format!(
                "the operator gave up on it after its last status write: {}",
                event.note
            ),
        );
    }
    let generation = metadata["generation"].as_i64();
    let status = &object["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let observed = ready
        .and_then(|c| c["observedGeneration"].as_i64())
        .or_else(|| status["observedGeneration"].as_i64());
    let stale = |observed: Option<i64>| {
        format!(
            "its status is for generation {}, the object is at {}",
            observed.map_or_else(|| "none".to_string(), |g| g.to_string()),
            generation.map_or_else(|| "none".to_string(), |g| g.to_string())
        )
    };
    let current = generation.is_none() || observed >= generation;
    match ready {
        Some(ready) => {
            let reason = ready["reason"].as_str().unwrap_or("");
            let message = ready["message"].as_str().unwrap_or("");
            let said = if message.is_empty() {
                format!(
                    "Ready={} ({reason})",
                    ready["status"].as_str().unwrap_or("")
                )
            } else {
                format!(
                    "Ready={} ({reason}): {message}",
                    ready["status"].as_str().unwrap_or("")
                )
            };
            match ready["status"].as_str() {
                Some("True") if current => (Verdict::Ready, said),
                Some("True") => (Verdict::NotReady, stale(observed)),
                Some("False") if FAILED_REASONS.contains(&reason) => (Verdict::Failed, said),
                _ => (Verdict::NotReady, said),
            }
        }
        None if status.is_null() => (Verdict::NotReady, "no status written yet".to_string()),
        None if status["observedGeneration"].is_null() => (
            Verdict::NotReady,
            "its status has neither a Ready condition nor an observedGeneration".to_string(),
        ),
        None if current => (
            Verdict::Ready,
            format!(
                "no Ready condition; the status is for the current generation ({})",
                observed.unwrap_or_default()
            ),
        ),
        None => (Verdict::NotReady, stale(observed)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(status: Value) -> Value {
        json!({"metadata": {"name": "a", "generation": 2}, "status": status})
    }

    fn ready(status: &str, reason: &str, generation: i64) -> Value {
        json!({"conditions": [{"type": "Ready", "status": status, "reason": reason,
                               "message": "m", "observedGeneration": generation}]})
    }

    fn event(reason: &str, seconds: i64) -> EventView {
        EventView {
            time: Some(Timestamp::from_second(seconds).expect("time")),
            type_: "Warning".into(),
            reason: reason.into(),
            action: "Reconcile".into(),
            note: "boom".into(),
            count: 1,
            reporter: "c/i".into(),
        }
    }

    fn write(seconds: i64) -> WriteView {
        WriteView {
            time: Timestamp::from_second(seconds).expect("time"),
            manager: "op".into(),
        }
    }

    #[test]
    fn ready_for_the_current_generation_is_ready_and_for_an_older_one_is_not() {
        let (v, why) = verdict(&object(ready("True", "Done", 2)), &[], None);
        assert_eq!(v, Verdict::Ready, "{why}");
        let (v, why) = verdict(&object(ready("True", "Done", 1)), &[], None);
        assert_eq!(v, Verdict::NotReady);
        assert!(why.contains("generation 1, the object is at 2"), "{why}");
    }

    #[test]
    fn a_failure_reason_is_failed_and_any_other_not_ready_reason_is_not_ready() {
        for reason in FAILED_REASONS {
            let (v, _) = verdict(&object(ready("False", reason, 2)), &[], None);
            assert_eq!(v, Verdict::Failed, "{reason}");
        }
        let (v, why) = verdict(&object(ready("False", "ComponentsNotReady", 2)), &[], None);
        assert_eq!(v, Verdict::NotReady);
        assert_eq!(why, "Ready=False (ComponentsNotReady): m");
    }

    #[test]
    fn giving_up_after_the_last_status_write_is_failed_and_before_it_is_not() {
        let status = ready("True", "Done", 2);
        let gave_up = [event("HandlerGaveUp", 200)];
        let (now, why) = verdict(&object(status.clone()), &gave_up, Some(&write(100)));
        assert_eq!(now, Verdict::Failed);
        assert!(why.contains("gave up") && why.contains("boom"), "{why}");
        let (later, _) = verdict(&object(status.clone()), &gave_up, Some(&write(300)));
        assert_eq!(later, Verdict::Ready, "a status written since then");
        let retrying = [event("HandlerFailed", 200)];
        let (retry, _) = verdict(&object(status), &retrying, Some(&write(100)));
        assert_eq!(retry, Verdict::Ready, "a pending retry does not decide");
    }

    #[test]
    fn without_a_ready_condition_the_observed_generation_decides() {
        let (v, _) = verdict(&object(json!({"observedGeneration": 2})), &[], None);
        assert_eq!(v, Verdict::Ready);
        let (v, _) = verdict(&object(json!({"observedGeneration": 1})), &[], None);
        assert_eq!(v, Verdict::NotReady);
        let (v, why) = verdict(&object(Value::Null), &[], None);
        assert_eq!(
            (v, why.as_str()),
            (Verdict::NotReady, "no status written yet")
        );
        let (v, _) = verdict(&object(json!({"phase": "x"})), &[], None);
        assert_eq!(v, Verdict::NotReady);
    }

    #[test]
    fn an_object_being_deleted_is_not_ready_and_names_its_finalizers() {
        let mut deleting = object(ready("True", "Done", 2));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        deleting["metadata"]["finalizers"] = json!(["a.example/cleanup"]);
        let (v, why) = verdict(&deleting, &[], None);
        assert_eq!(v, Verdict::NotReady);
        assert!(why.contains("a.example/cleanup"), "{why}");
    }

    #[test]
    fn exit_codes_are_0_ready_3_not_ready_4_failed() {
        assert_eq!(
            [Verdict::Ready, Verdict::NotReady, Verdict::Failed].map(Verdict::exit_code),
            [0, 3, 4]
        );
    }
}
