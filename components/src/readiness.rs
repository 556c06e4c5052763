//! Whether a deployed object is ready: the built-in rules per kind, read from the object as the
//! apiserver returned it (never an older copy).
//!
//! | kind | ready when | failed when |
//! |---|---|---|
//! | `apps/v1` Deployment | `status.observedGeneration` >= `metadata.generation`, `Available=True`, and `Progressing=True` with reason `NewReplicaSetAvailable` | `Progressing=False` (e.g. `ProgressDeadlineExceeded`) |
//! | `apps/v1` StatefulSet | observed generation current, `readyReplicas == replicas`, `updateRevision == currentRevision` | - |
//! | `apps/v1` DaemonSet | observed generation current, `numberReady == desiredNumberScheduled`, `updatedNumberScheduled == desiredNumberScheduled` | - |
//! | `batch/v1` Job | `Complete=True` | `Failed=True` |
//! | `v1` Pod | `Ready=True` | phase `Failed` |
//! | `v1` PersistentVolumeClaim | phase `Bound` | phase `Lost` |
//! | anything with a `Ready` condition | `Ready=True` | - |
//! | anything else | present | - |
//!
//! `replicas` defaults to 1 when the spec leaves it out, as Kubernetes does. A component may
//! replace these rules with its own check.

use serde::Serialize;
use serde_json::Value;

/// The outcome of a readiness check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Ready.
    Ready,
    /// Not ready yet; the reason says what is missing (for the status and logs).
    NotReady(String),
    /// Will not become ready without a change (a failed Job, a Deployment past its deadline).
    Failed(String),
}

impl Readiness {
    /// Whether it is [`Readiness::Ready`].
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Ready)
    }

    /// The built-in readiness of a typed object (a `Deployment` read from a cache, a `Job`...):
    /// [`readiness`] of its JSON, so a phase worker or a hook needs no conversion of its own. An
    /// object that cannot be serialized is [`NotReady`](Self::NotReady) with the serializer's
    /// message (it cannot be judged, and may serialize once it changes).
    pub fn of<T: Serialize>(object: &T) -> Self {
        serde_json::to_value(object).map_or_else(
            |error| Self::NotReady(format!("cannot read the object: {error}")),
            |value| readiness(&value),
        )
    }
}

/// The built-in readiness of `object` (a Kubernetes object as JSON); see the [module
/// docs](self).
pub fn readiness(object: &Value) -> Readiness {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("apps/v1", "Deployment") => deployment(object),
        ("apps/v1", "StatefulSet") => stateful_set(object),
        ("apps/v1", "DaemonSet") => daemon_set(object),
        ("batch/v1", "Job") => job(object),
        ("v1", "Pod") => pod(object),
        ("v1", "PersistentVolumeClaim") => claim(object),
        _ => match condition(object, "Ready") {
            Some(ready) if ready.status == "True" => Readiness::Ready,
            Some(ready) => Readiness::NotReady(ready.describe("Ready")),
            None => Readiness::Ready,
        },
    }
}

/// One condition's status and reason.
struct Condition<'a> {
    status: &'a str,
    reason: &'a str,
}

impl Condition<'_> {
    fn describe(&self, type_: &str) -> String {
        if self.reason.is_empty() {
            format!("{type_}={}", self.status)
        } else {
            format!("{type_}={} ({})", self.status, self.reason)
        }
    }
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<Condition<'a>> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| Condition {
            status: c["status"].as_str().unwrap_or_default(),
            reason: c["reason"].as_str().unwrap_or_default(),
        })
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// `None` when the controller has seen the newest spec; else why not.
fn generation_pending(object: &Value) -> Option<String> {
    let generation = int(&object["metadata"]["generation"]);
    let observed = int(&object["status"]["observedGeneration"]);
    (observed < generation)
        .then(|| format!("observedGeneration {observed} is behind generation {generation}"))
}

fn replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

fn deployment(object: &Value) -> Readiness {
    if let Some(pending) = generation_pending(object) {
        return Readiness::NotReady(pending);
    }
    let progressing = condition(object, "Progressing");
    if let Some(p) = &progressing
        && p.status == "False"
    {
        return Readiness::Failed(p.describe("Progressing"));
    }
    match (condition(object, "Available"), progressing) {
        (Some(a), Some(p))
            if a.status == "True" && p.status == "True" && p.reason == "NewReplicaSetAvailable" =>
        {
            Readiness::Ready
        }
        (Some(a), _) if a.status != "True" => Readiness::NotReady(a.describe("Available")),
        (None, _) => Readiness::NotReady("no Available condition yet".into()),
        (_, Some(p)) => Readiness::NotReady(p.describe("Progressing")),
        (_, None) => Readiness::NotReady("no Progressing condition yet".into()),
    }
}

fn stateful_set(object: &Value) -> Readiness {
    if let Some(pending) = generation_pending(object) {
        return Readiness::NotReady(pending);
    }
    let status = &object["status"];
    let (ready, wanted) = (int(&status["readyReplicas"]), replicas(object));
    if ready < wanted {
        return Readiness::NotReady(format!("{ready} of {wanted} replicas ready"));
    }
    let (update, current) = (
        status["updateRevision"].as_str().unwrap_or_default(),
        status["currentRevision"].as_str().unwrap_or_default(),
    );
    if update != current {
        return Readiness::NotReady(format!("revision {current} is being updated to {update}"));
    }
    Readiness::Ready
}

fn daemon_set(object: &Value) -> Readiness {
    if let Some(pending) = generation_pending(object) {
        return Readiness::NotReady(pending);
    }
    let status = &object["status"];
    let desired = int(&status["desiredNumberScheduled"]);
    let ready = int(&status["numberReady"]);
    let updated = int(&status["updatedNumberScheduled"]);
    if ready < desired {
        Readiness::NotReady(format!("{ready} of {desired} pods ready"))
    } else if updated < desired {
        Readiness::NotReady(format!("{updated} of {desired} pods updated"))
    } else {
        Readiness::Ready
    }
}

fn job(object: &Value) -> Readiness {
    if let Some(failed) = condition(object, "Failed")
        && failed.status == "True"
    {
        return Readiness::Failed(failed.describe("Failed"));
    }
    match condition(object, "Complete") {
        Some(complete) if complete.status == "True" => Readiness::Ready,
        _ => Readiness::NotReady("not Complete yet".into()),
    }
}

fn pod(object: &Value) -> Readiness {
    if object["status"]["phase"] == "Failed" {
        return Readiness::Failed("phase Failed".into());
    }
    match condition(object, "Ready") {
        Some(ready) if ready.status == "True" => Readiness::Ready,
        Some(ready) => Readiness::NotReady(ready.describe("Ready")),
        None => Readiness::NotReady("no Ready condition yet".into()),
    }
}

fn claim(object: &Value) -> Readiness {
    match object["status"]["phase"].as_str().unwrap_or_default() {
        "Bound" => Readiness::Ready,
        "Lost" => Readiness::Failed("phase Lost".into()),
        "" => Readiness::NotReady("no phase yet".into()),
        phase => Readiness::NotReady(format!("phase {phase}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(
        generation: i64,
        observed: i64,
        available: &str,
        progressing: (&str, &str),
    ) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "generation": generation},
            "status": {
                "observedGeneration": observed,
                "conditions": [
                    {"type": "Available", "status": available, "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": progressing.0, "reason": progressing.1}
                ]
            }
        })
    }

    #[test]
    fn a_deployment_is_ready_only_when_available_progressed_and_current() {
        let ready = deployment(2, 2, "True", ("True", "NewReplicaSetAvailable"));
        assert_eq!(readiness(&ready), Readiness::Ready);
        let old = deployment(3, 2, "True", ("True", "NewReplicaSetAvailable"));
        assert_eq!(
            readiness(&old),
            Readiness::NotReady("observedGeneration 2 is behind generation 3".into())
        );
        let rolling = deployment(2, 2, "True", ("True", "ReplicaSetUpdated"));
        assert_eq!(
            readiness(&rolling),
            Readiness::NotReady("Progressing=True (ReplicaSetUpdated)".into())
        );
        let unavailable = deployment(2, 2, "False", ("True", "NewReplicaSetAvailable"));
        assert_eq!(
            readiness(&unavailable),
            Readiness::NotReady("Available=False (MinimumReplicasAvailable)".into())
        );
        let stuck = deployment(2, 2, "False", ("False", "ProgressDeadlineExceeded"));
        assert_eq!(
            readiness(&stuck),
            Readiness::Failed("Progressing=False (ProgressDeadlineExceeded)".into())
        );
        let fresh =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generation": 1}});
        assert!(!readiness(&fresh).is_ready(), "no status yet");
    }

    #[test]
    fn stateful_sets_and_daemon_sets_count_ready_and_updated_pods() {
        let set = |ready: i64, current: &str| {
            json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"generation": 1}, "spec": {"replicas": 3},
                "status": {"observedGeneration": 1, "readyReplicas": ready,
                           "currentRevision": current, "updateRevision": "r2"}
            })
        };
        assert_eq!(readiness(&set(3, "r2")), Readiness::Ready);
        assert_eq!(
            readiness(&set(2, "r2")),
            Readiness::NotReady("2 of 3 replicas ready".into())
        );
        assert_eq!(
            readiness(&set(3, "r1")),
            Readiness::NotReady("revision r1 is being updated to r2".into())
        );
        let daemons = |ready: i64, updated: i64| {
            json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 4},
                "status": {"observedGeneration": 4, "desiredNumberScheduled": 5,
                           "numberReady": ready, "updatedNumberScheduled": updated}
            })
        };
        assert_eq!(readiness(&daemons(5, 5)), Readiness::Ready);
        assert_eq!(
            readiness(&daemons(4, 5)),
            Readiness::NotReady("4 of 5 pods ready".into())
        );
        assert_eq!(
            readiness(&daemons(5, 3)),
            Readiness::NotReady("3 of 5 pods updated".into())
        );
    }

    #[test]
    fn jobs_pods_and_claims_have_their_own_rules() {
        let job = |type_: &str| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "status": {"conditions": [{"type": type_, "status": "True", "reason": "X"}]}})
        };
        assert_eq!(readiness(&job("Complete")), Readiness::Ready);
        assert_eq!(
            readiness(&job("Failed")),
            Readiness::Failed("Failed=True (X)".into())
        );
        let running = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"active": 1}});
        assert!(!readiness(&running).is_ready());
        let pod = |ready: &str, phase: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}})
        };
        assert_eq!(readiness(&pod("True", "Running")), Readiness::Ready);
        assert_eq!(
            readiness(&pod("False", "Running")),
            Readiness::NotReady("Ready=False".into())
        );
        assert!(matches!(
            readiness(&pod("False", "Failed")),
            Readiness::Failed(_)
        ));
        let claim = |phase: &str| json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": phase}});
        assert_eq!(readiness(&claim("Bound")), Readiness::Ready);
        assert_eq!(
            readiness(&claim("Pending")),
            Readiness::NotReady("phase Pending".into())
        );
        assert!(matches!(readiness(&claim("Lost")), Readiness::Failed(_)));
    }

    #[test]
    fn other_kinds_are_ready_by_their_ready_condition_or_by_being_there() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}});
        assert_eq!(readiness(&config_map), Readiness::Ready);
        let custom = |status: &str| {
            json!({"apiVersion": "db.example.com/v1", "kind": "Database",
                   "status": {"conditions": [{"type": "Ready", "status": status, "reason": "Provisioning"}]}})
        };
        assert_eq!(readiness(&custom("True")), Readiness::Ready);
        assert_eq!(
            readiness(&custom("False")),
            Readiness::NotReady("Ready=False (Provisioning)".into())
        );
    }

    #[test]
    fn of_a_typed_object_applies_the_rule_of_its_kind() {
        use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus};

        let condition = |type_: &str, status: &str, reason: &str| DeploymentCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..DeploymentCondition::default()
        };
        let mut stuck = Deployment::default();
        stuck.metadata.generation = Some(1);
        stuck.status = Some(DeploymentStatus {
            observed_generation: Some(1),
            conditions: Some(vec![
                condition("Available", "False", "MinimumReplicasUnavailable"),
                condition("Progressing", "False", "ProgressDeadlineExceeded"),
            ]),
            ..DeploymentStatus::default()
        });
        // The Deployment rule (not "anything else: present"): the typed object carries its kind.
        assert!(
            matches!(Readiness::of(&stuck), Readiness::Failed(why) if why.contains("ProgressDeadlineExceeded")),
            "{:?}",
            Readiness::of(&stuck)
        );
    }

    #[test]
    fn of_an_object_that_cannot_be_serialized_is_not_ready_with_the_reason() {
        struct Broken;
        impl Serialize for Broken {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no JSON for this"))
            }
        }
        assert_eq!(
            Readiness::of(&Broken),
            Readiness::NotReady("cannot read the object: no JSON for this".into())
        );
    }
}
