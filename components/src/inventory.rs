//! What a graph made, recorded in the cluster, and what to prune from it.
//!
//! Every object a component applies is recorded as a [`ComponentObject`] (component, apiVersion,
//! kind, plural, namespace, name) in the custom object's status (`status.components.objects`,
//! written with the rest of the [status](crate::status)). The record lives in the cluster, so
//! pruning also works after the operator restarts, and it names only objects this graph applied:
//! objects the operator never made are never touched.
//!
//! After a run, `PrunePlan::after` compares the previous record with what the run applied:
//!
//! - a component that **deployed** keeps exactly the objects it applied now; what it applied last
//!   time and not now (a removed optional object) is pruned;
//! - a **disabled** component keeps nothing (its rendered objects were deleted by the run; any
//!   other object it applied before is pruned);
//! - a component that is **no longer in the graph** keeps nothing (pruned);
//! - a component that **failed, waited or was halted** keeps its previous record untouched: what
//!   it would render is unknown, so nothing of it is pruned;
//! - an object whose delete failed stays recorded, to be pruned by the next reconcile.

use std::collections::BTreeSet;

use crate::report::{ComponentObject, Outcome, RunReport};

/// What to delete after a run and what stays recorded; see the [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrunePlan {
    /// Objects recorded before and not applied now, to delete.
    pub prune: Vec<ComponentObject>,
    /// The record after the run, if every prune succeeds (sorted).
    pub keep: Vec<ComponentObject>,
}

impl PrunePlan {
    /// The plan after `report`, given the `previous` record.
    pub(crate) fn after(previous: &[ComponentObject], report: &RunReport) -> Self {
        let mut keep: BTreeSet<ComponentObject> = BTreeSet::new();
        for (index, name) in report.names.iter().enumerate() {
            match &report.deployed[index] {
                Outcome::Deployed(_) => {
                    keep.extend(report.objects[index].iter().cloned());
                }
                Outcome::Disabled => {}
                Outcome::Waiting(_) | Outcome::Failed(_) | Outcome::Halted { .. } => {
                    keep.extend(previous.iter().filter(|o| &o.component == name).cloned());
                }
            }
        }
        let kept: BTreeSet<_> = keep.iter().map(ComponentObject::identity).collect();
        let mut prune: Vec<ComponentObject> = previous
            .iter()
            .filter(|o| !kept.contains(&o.identity()))
            .cloned()
            .collect();
        prune.sort();
        prune.dedup_by(|a, b| a.identity() == b.identity());
        Self {
            prune,
            keep: keep.into_iter().collect(),
        }
    }

    /// The record after the prunes in `failed` did not succeed: they stay, to be tried again.
    pub(crate) fn record(&self, failed: &[ComponentObject]) -> Vec<ComponentObject> {
        let mut record: BTreeSet<ComponentObject> = self.keep.iter().cloned().collect();
        record.extend(failed.iter().cloned());
        record.into_iter().collect()
    }
}

/// `a` and `b` merged (each object once), sorted.
pub(crate) fn union(a: &[ComponentObject], b: &[ComponentObject]) -> Vec<ComponentObject> {
    let mut all: BTreeSet<ComponentObject> = a.iter().cloned().collect();
    all.extend(b.iter().cloned());
    all.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verified;

    fn object(component: &str, kind: &str, name: &str) -> ComponentObject {
        ComponentObject {
            component: component.into(),
            api_version: if kind == "Deployment" {
                "apps/v1"
            } else {
                "v1"
            }
            .into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespace: Some("shop".into()),
            name: name.into(),
        }
    }

    fn report(rows: Vec<(&str, Outcome, Vec<ComponentObject>)>) -> RunReport {
        RunReport {
            names: rows.iter().map(|(n, _, _)| n.to_string()).collect(),
            verified: rows.iter().map(|_| Verified::Skipped).collect(),
            deployed: rows.iter().map(|(_, o, _)| o.clone()).collect(),
            objects: rows.into_iter().map(|(_, _, objects)| objects).collect(),
        }
    }

    #[test]
    fn a_removed_object_of_a_deployed_component_is_pruned_and_the_rest_is_kept() {
        let previous = vec![
            object("web", "Deployment", "shop"),
            object("web", "PodDisruptionBudget", "shop"),
        ];
        let now = report(vec![(
            "web",
            Outcome::Deployed(vec![]),
            vec![object("web", "Deployment", "shop")],
        )]);
        let plan = PrunePlan::after(&previous, &now);
        assert_eq!(
            plan.prune,
            vec![object("web", "PodDisruptionBudget", "shop")]
        );
        assert_eq!(plan.keep, vec![object("web", "Deployment", "shop")]);
    }

    #[test]
    fn disabled_and_removed_components_keep_nothing_failed_ones_keep_their_record() {
        let previous = vec![
            object("service", "Service", "shop"),
            object("gone", "ConfigMap", "old"),
            object("db", "Secret", "db"),
            object("cache", "ConfigMap", "cache"),
        ];
        let now = report(vec![
            ("service", Outcome::Disabled, vec![]),
            ("db", Outcome::Failed("boom".into()), vec![]),
            ("cache", Outcome::Halted { by: "db".into() }, vec![]),
        ]);
        let plan = PrunePlan::after(&previous, &now);
        assert_eq!(
            plan.prune,
            vec![
                object("gone", "ConfigMap", "old"),
                object("service", "Service", "shop")
            ]
        );
        assert_eq!(
            plan.keep,
            vec![
                object("cache", "ConfigMap", "cache"),
                object("db", "Secret", "db")
            ]
        );
    }

    #[test]
    fn an_object_moved_to_another_component_is_not_pruned_and_a_failed_prune_stays_recorded() {
        let previous = vec![object("old", "ConfigMap", "settings")];
        let now = report(vec![(
            "new",
            Outcome::Deployed(vec![]),
            vec![object("new", "ConfigMap", "settings")],
        )]);
        let plan = PrunePlan::after(&previous, &now);
        assert!(plan.prune.is_empty(), "the same object, still applied");
        let previous = vec![object("web", "Service", "shop")];
        let now = report(vec![("web", Outcome::Deployed(vec![]), vec![])]);
        let plan = PrunePlan::after(&previous, &now);
        assert_eq!(plan.prune, previous);
        assert_eq!(plan.record(&plan.prune), previous, "kept until deleted");
        assert!(plan.record(&[]).is_empty());
    }

    #[test]
    fn a_record_turns_back_into_a_deletable_object() {
        let record = ComponentObject {
            component: "web".into(),
            api_version: "policy/v1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let rendered = record.to_rendered();
        assert_eq!(rendered.resource.group, "policy");
        assert_eq!(rendered.resource.plural, "poddisruptionbudgets");
        assert_eq!(rendered.object["metadata"]["namespace"], "shop");
        let back = ComponentObject::of("web", &rendered, &rendered.object).expect("named");
        assert_eq!(back, record);
    }
}
