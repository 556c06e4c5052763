//! The custom object's status after a run: `Ready` and `Updating` conditions with reasons, a
//! summary of the components, and `observedGeneration`, written through the status subresource
//! only when one of them changed (condition times aside), by server-side apply under the
//! reconcile's field manager, so conditions and fields other writers own are kept.
//!
//! The custom kind's status is [`ComponentsStatus`] (`#[kube(status = "ComponentsStatus")]`),
//! or a struct of the operator's own that declares the same fields (with `conditions` as a list
//! map keyed by `type`: `#[schemars(schema_with = "kubeapp_operator::apply::conditions::schema")]`)
//! next to others:
//!
//! ```text
//! pub struct WebAppStatus {
//!     #[schemars(schema_with = "kubeapp_operator::apply::conditions::schema")]
//!     pub conditions: Vec<Condition>,
//!     pub components: Option<ComponentsSummary>,
//!     pub observed_generation: Option<i64>,
//! }
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kubeapp_operator::apply::conditions::{self, NewCondition};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::report::{ComponentObject, Outcome, RunReport, Verified};

/// The condition a graph sets while components are being brought up to date.
pub(crate) const UPDATING: &str = "Updating";

/// `Ready=False`'s reason when a component failed (and the reason of the Warning Event about
/// it); `kubeapp trace` reports such an object as failed.
pub const COMPONENT_FAILED: &str = "ComponentFailed";

/// What the components write.
//
// (Not a doc comment, which would go into the CRD's description:) a custom kind's whole status
// when the components write all of it, `#[kube(status = "ComponentsStatus")]`; a kind whose
// status holds more declares these three fields in its own struct (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentsStatus {
    /// `Ready` and `Updating`, with other writers' conditions kept.
    #[serde(default)]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
    /// How far the components got, and what they made.
    pub components: Option<ComponentsSummary>,
    /// The generation the status describes.
    pub observed_generation: Option<i64>,
}

/// How far the components got, for `status.components`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentsSummary {
    /// Components in the graph that are enabled.
    pub total: u32,
    /// Enabled components applied in the last reconcile.
    pub deployed: u32,
    /// Enabled components found ready in the last reconcile.
    pub verified: u32,
    /// Components that failed, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Components waiting (for a prerequisite or for readiness), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// Every object the components applied and that was not pruned since: the
    /// [inventory](crate::inventory) pruning works from, kept in the cluster so that it
    /// survives a restart of the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ComponentObject>,
}

impl ComponentsSummary {
    /// The summary of `report`.
    pub fn of(report: &RunReport) -> Self {
        let mut summary = Self::default();
        for (name, (deployed, verified)) in report
            .names
            .iter()
            .zip(report.deployed.iter().zip(&report.verified))
        {
            if matches!(deployed, Outcome::Disabled) {
                continue;
            }
            summary.total += 1;
            if matches!(deployed, Outcome::Deployed(_)) {
                summary.deployed += 1;
            }
            match (deployed, verified) {
                (_, Verified::Ready) => summary.verified += 1,
                (Outcome::Failed(_), _) | (_, Verified::Failed(_)) => {
                    summary.failed.push(name.clone());
                }
                _ => summary.waiting.push(name.clone()),
            }
        }
        summary
    }
}

/// The waiting components, each verified-not-ready one with its object's own reason, e.g.
/// `deployment (Deployment/shop: Available=False (MinimumReplicasUnavailable)), service`.
fn waiting_with_reasons(report: &RunReport, waiting: &[String]) -> String {
    waiting
        .iter()
        .map(|name| {
            let why = report
                .names
                .iter()
                .position(|n| n == name)
                .and_then(|i| report.verified.get(i));
            match why {
                Some(Verified::NotReady(why)) => format!("{name} ({why})"),
                _ => name.clone(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `status` body to apply after `report` for an object at `generation` whose current
/// status is `current` (JSON, `Null` when none), recording `objects` as the inventory, or
/// `None` when nothing would change.
pub(crate) fn status_update(
    report: &RunReport,
    generation: Option<i64>,
    current: &Value,
    objects: &[ComponentObject],
) -> Option<Value> {
    let mut summary = ComponentsSummary::of(report);
    summary.objects = objects.to_vec();
    let mut conditions: Vec<Condition> =
        serde_json::from_value(current["conditions"].clone()).unwrap_or_default();
    let ready = if report.all_ready() {
        conditions::ready(
            true,
            "ComponentsReady",
            "every component is deployed and ready",
        )
    } else if summary.failed.is_empty() {
        conditions::ready(
            false,
            "ComponentsNotReady",
            format!(
                "waiting for: {}",
                waiting_with_reasons(report, &summary.waiting)
            ),
        )
    } else {
        conditions::ready(
            false,
            COMPONENT_FAILED,
            format!("failed: {}", summary.failed.join(", ")),
        )
    };
    let updating = NewCondition::new(
        UPDATING,
        !report.all_ready(),
        if report.all_ready() {
            "UpToDate"
        } else {
            "InProgress"
        },
        format!("{} of {} components ready", summary.verified, summary.total),
    );
    let mut changed = conditions::set(&mut conditions, ready, generation);
    changed |= conditions::set(&mut conditions, updating, generation);
    let summary_value = serde_json::to_value(&summary).unwrap_or(Value::Null);
    changed |= current["components"] != summary_value;
    changed |= current["observedGeneration"].as_i64() != generation;
    if !changed {
        return None;
    }
    // Only the two conditions this graph owns: server-side apply keeps everyone else's.
    let owned: Vec<&Condition> = conditions
        .iter()
        .filter(|c| c.type_ == conditions::READY || c.type_ == UPDATING)
        .collect();
    Some(json!({
        "conditions": owned,
        "components": summary_value,
        "observedGeneration": generation,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(deployed: Vec<Outcome>, verified: Vec<Verified>) -> RunReport {
        RunReport {
            names: (0..deployed.len()).map(|i| format!("c{i}")).collect(),
            objects: deployed.iter().map(|_| Vec::new()).collect(),
            deployed,
            verified,
        }
    }

    #[test]
    fn the_summary_counts_enabled_components_and_names_failed_and_waiting_ones() {
        let r = report(
            vec![
                Outcome::Deployed(vec![]),
                Outcome::Deployed(vec![]),
                Outcome::Failed("x".into()),
                Outcome::Disabled,
                Outcome::Waiting("y".into()),
            ],
            vec![
                Verified::Ready,
                Verified::NotReady("z".into()),
                Verified::Skipped,
                Verified::Skipped,
                Verified::Skipped,
            ],
        );
        assert_eq!(
            ComponentsSummary::of(&r),
            ComponentsSummary {
                total: 4,
                deployed: 2,
                verified: 1,
                failed: vec!["c2".into()],
                waiting: vec!["c1".into(), "c4".into()],
                objects: vec![],
            }
        );
    }

    #[test]
    fn status_is_rewritten_only_when_it_changes() {
        let ready = report(vec![Outcome::Deployed(vec![])], vec![Verified::Ready]);
        let first = status_update(&ready, Some(3), &Value::Null, &[]).expect("a first status");
        assert_eq!(first["observedGeneration"], 3);
        assert_eq!(first["components"]["verified"], 1);
        let types: Vec<&str> = first["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(types, ["Ready", "Updating"]);
        assert_eq!(first["conditions"][0]["status"], "True");
        assert!(
            status_update(&ready, Some(3), &first, &[]).is_none(),
            "the same outcome writes nothing"
        );
        assert!(
            status_update(&ready, Some(4), &first, &[]).is_some(),
            "a new generation is written"
        );
        let waiting = report(
            vec![Outcome::Deployed(vec![])],
            vec![Verified::NotReady("no".into())],
        );
        let record = [ComponentObject {
            component: "c0".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespace: None,
            name: "settings".into(),
        }];
        let recorded = status_update(&ready, Some(3), &first, &record).expect("a new record");
        assert_eq!(recorded["components"]["objects"][0]["name"], "settings");
        assert!(status_update(&ready, Some(3), &recorded, &record).is_none());
        let next = status_update(&waiting, Some(3), &first, &[]).expect("not ready any more");
        assert_eq!(next["conditions"][0]["status"], "False");
        assert_eq!(next["conditions"][0]["reason"], "ComponentsNotReady");
        assert_eq!(
            next["conditions"][0]["message"], "waiting for: c0 (no)",
            "a component verified not ready is named with its object's reason"
        );
    }

    #[test]
    fn the_ready_made_status_reads_what_a_run_writes_with_conditions_as_a_map_by_type() {
        let ready = report(vec![Outcome::Deployed(vec![])], vec![Verified::Ready]);
        let written = status_update(&ready, Some(3), &json!({}), &[]).expect("a first status");
        let status: ComponentsStatus =
            serde_json::from_value(written.clone()).expect("the status type reads it");
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.components.as_ref().map(|c| c.verified), Some(1));
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [conditions::READY, UPDATING]);
        assert_eq!(serde_json::to_value(&status).expect("serializes"), written);
        let schema = serde_json::to_value(schemars::schema_for!(ComponentsStatus)).expect("schema");
        let conditions = &schema["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map", "{schema}");
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        assert!(
            schema["properties"]["observedGeneration"].is_object(),
            "{schema}"
        );
    }
}
