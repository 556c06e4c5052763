//! Ordered teardown: the objects of a graph are deleted in reverse dependency order, wave by
//! wave, and a wave must be gone before the next one starts.
//!
//! Used when the custom object goes (its cleanup) and when a disabled branch is pruned. A wave
//! is one level of the graph (see [`graph`](crate::graph)), walked from the last level to the
//! first, so a workload goes before the Secret it mounts and the ServiceAccount it runs as.
//! Objects recorded for a component the graph no longer has depend on nothing the graph knows
//! of and form the first wave.
//!
//! A wave is deleted, then each of its objects is read again: one still there (held by a
//! finalizer, or a foreground deletion waiting for its own children) stops the teardown, and the
//! waves after it are left alone until the next reconcile. The reconciler reports what it waits
//! for (the object and its finalizers) in the custom object's status and in an Event, and asks to
//! run again; a wave that is gone lets the next one start.
//!
//! Deletion propagates in the foreground for the kinds whose objects have children of their own
//! (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob): such an object is gone only
//! once its ReplicaSets and Pods are, which a cluster's garbage collector does. testenv's plain
//! mode runs no garbage collector, so there such an object stays (with the `foregroundDeletion`
//! finalizer) and the teardown waits; use the cluster mode (`TestEnv::cluster()`) for tests that
//! delete workloads.

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kubeapp_operator::Context;
use kubeapp_operator::apply::conditions;
use serde_json::{Value, json};

use crate::component::Rendered;
use crate::graph::ComponentGraph;
use crate::report::ComponentObject;
use crate::run::Cluster;

/// An object a teardown waits for: still there after its wave was deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remaining {
    /// The component that rendered it.
    pub component: String,
    /// `Kind/name`.
    pub object: String,
    /// Its finalizers (`foregroundDeletion` while the garbage collector deletes its children).
    pub finalizers: Vec<String>,
}

impl Remaining {
    /// Whether something other than the garbage collector holds it: a finalizer other than
    /// `foregroundDeletion` and `orphan`.
    pub(crate) fn held_by_finalizer(&self) -> bool {
        self.finalizers
            .iter()
            .any(|f| f != "foregroundDeletion" && f != "orphan")
    }
}

impl fmt::Display for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {}", self.object, self.component)?;
        if !self.finalizers.is_empty() {
            write!(f, " (finalizers: {})", self.finalizers.join(", "))?;
        }
        Ok(())
    }
}

/// What a teardown did.
#[derive(Debug, Default)]
pub(crate) struct Teardown {
    /// Objects deleted and confirmed gone (or never there).
    pub(crate) gone: Vec<(String, Rendered)>,
    /// The objects of the first wave that is not gone yet; the teardown stopped there.
    pub(crate) waiting: Vec<Remaining>,
    /// Deletes or reads that failed, each naming the object.
    pub(crate) failed: Vec<String>,
    /// Objects of later waves, not touched.
    pub(crate) untouched: Vec<(String, Rendered)>,
}

impl Teardown {
    /// Every object is gone.
    pub(crate) fn finished(&self) -> bool {
        self.waiting.is_empty() && self.failed.is_empty() && self.untouched.is_empty()
    }
}

/// The objects of `targets` (component name, object) in waves: objects of components the graph
/// does not have first, then the graph's levels from the last to the first. Duplicates (by
/// identity) are dropped.
pub(crate) fn waves<K, C>(
    graph: &ComponentGraph<K, C>,
    targets: Vec<(String, Rendered)>,
) -> Vec<Vec<(String, Rendered)>> {
    let levels = graph.levels();
    let level_of = |component: &str| {
        levels.iter().position(|level| {
            level
                .iter()
                .any(|&index| graph.nodes()[index].name == component)
        })
    };
    // Wave 0: unknown components; wave 1 + i: level (levels.len() - 1 - i).
    let mut waves: Vec<Vec<(String, Rendered)>> = vec![Vec::new(); levels.len() + 1];
    let mut seen = HashSet::new();
    for (component, object) in targets {
        if !seen.insert(object.describe()) {
            continue;
        }
        let wave = match level_of(&component) {
            Some(level) => levels.len() - level,
            None => 0,
        };
        waves[wave].push((component, object));
    }
    waves.retain(|wave| !wave.is_empty());
    waves
}

/// Deletes `waves` in order through `cluster`, stopping after the first wave that is not gone;
/// see the [module docs](self).
pub(crate) async fn tear_down<Cl: Cluster>(
    cluster: &Cl,
    waves: Vec<Vec<(String, Rendered)>>,
) -> Teardown {
    let mut teardown = Teardown::default();
    let mut waves = waves.into_iter();
    for wave in waves.by_ref() {
        let mut failed = false;
        for (component, object) in &wave {
            if let Err(why) = cluster.delete(component, object).await {
                teardown
                    .failed
                    .push(format!("deleting {}: {why}", object.describe()));
                failed = true;
            }
        }
        for (component, object) in wave {
            match cluster.remaining(&component, &object).await {
                Ok(None) => teardown.gone.push((component, object)),
                Ok(Some(finalizers)) => teardown.waiting.push(Remaining {
                    object: object.describe(),
                    component,
                    finalizers,
                }),
                Err(why) => {
                    teardown
                        .failed
                        .push(format!("reading {}: {why}", object.describe()));
                    failed = true;
                }
            }
        }
        if failed || !teardown.waiting.is_empty() {
            break;
        }
    }
    teardown.untouched = waves.flatten().collect();
    teardown
}

/// Reports what a teardown waits for on the custom object: `Ready=False` with reason
/// `TearingDown` in its status (only when the message changed) and an Event, a Warning
/// `TeardownStuck` when a finalizer other than the garbage collector's holds an object, else a
/// Normal `TeardownWaiting`. Neither failing stops the teardown (logged).
pub(crate) async fn report_waiting<K, C>(
    waiting: &[Remaining],
    object: &K,
    json: &Value,
    ctx: &Context<C>,
) where
    K: Resource<DynamicType = ()>,
{
    let list: Vec<String> = waiting.iter().map(ToString::to_string).collect();
    let message = format!("deleting the components, waiting for: {}", list.join("; "));
    let current = &json["status"];
    let mut conditions: Vec<Condition> =
        serde_json::from_value(current["conditions"].clone()).unwrap_or_default();
    let ready = conditions::ready(false, "TearingDown", message.clone());
    if conditions::set(&mut conditions, ready, object.meta().generation) {
        let status = json!({ "conditions": conditions });
        if let Err(error) = ctx.applier().apply_status_fields(object, status).await {
            tracing::debug!(%error, "the teardown's status was not written (the object may be gone)");
        }
    }
    let stuck = waiting.iter().any(Remaining::held_by_finalizer);
    let reason = if stuck {
        "TeardownStuck"
    } else {
        "TeardownWaiting"
    };
    if let Err(error) = ctx
        .recorder()
        .publish_action(object, stuck, reason, "Delete", message)
        .await
    {
        tracing::warn!(%error, "the Event about a waiting teardown was not written");
    }
}

/// `objects` recorded in an inventory, as teardown targets.
pub(crate) fn targets_of(objects: &[ComponentObject]) -> Vec<(String, Rendered)> {
    objects
        .iter()
        .map(|o| (o.component.clone(), o.to_rendered()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::{Value, json};

    use super::*;

    fn rendered(kind: &str, name: &str) -> Rendered {
        Rendered::value(json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}))
    }

    fn graph() -> ComponentGraph<ConfigMap> {
        ComponentGraph::<ConfigMap>::builder()
            .render("account", |_| Ok(Vec::new()))
            .render("secret", |_| Ok(Vec::new()))
            .render("workload", |_| Ok(Vec::new()))
            .depends_on("account")
            .depends_on("secret")
            .render("service", |_| Ok(Vec::new()))
            .depends_on("workload")
            .build()
            .expect("a valid graph")
    }

    #[test]
    fn waves_go_from_the_last_level_to_the_first_with_unknown_components_first() {
        let targets = vec![
            ("account".to_string(), rendered("ServiceAccount", "a")),
            ("secret".to_string(), rendered("Secret", "s")),
            ("workload".to_string(), rendered("Deployment", "w")),
            ("service".to_string(), rendered("Service", "svc")),
            ("gone-from-graph".to_string(), rendered("ConfigMap", "old")),
            ("secret".to_string(), rendered("Secret", "s")),
        ];
        let waves: Vec<Vec<String>> = waves(&graph(), targets)
            .iter()
            .map(|wave| wave.iter().map(|(c, _)| c.clone()).collect())
            .collect();
        assert_eq!(
            waves,
            [
                vec!["gone-from-graph"],
                vec!["service"],
                vec!["workload"],
                vec!["account", "secret"],
            ]
        );
    }

    /// Deletes immediately, except for the names in `held` (present with a finalizer).
    struct Recording {
        deleted: Mutex<Vec<String>>,
        held: Vec<&'static str>,
    }

    impl Cluster for Recording {
        async fn apply(&self, _: &str, object: &Rendered) -> Result<Value, String> {
            Ok(object.object.clone())
        }
        async fn delete(&self, _: &str, object: &Rendered) -> Result<(), String> {
            self.deleted
                .lock()
                .unwrap()
                .push(object.object["metadata"]["name"].as_str().unwrap().into());
            Ok(())
        }
        async fn remaining(
            &self,
            _: &str,
            object: &Rendered,
        ) -> Result<Option<Vec<String>>, String> {
            let name = object.object["metadata"]["name"].as_str().unwrap();
            Ok(self
                .held
                .contains(&name)
                .then(|| vec!["example.com/hold".to_string()]))
        }
    }

    #[tokio::test]
    async fn a_wave_still_there_stops_the_teardown_before_the_next_wave() {
        let targets = vec![
            ("account".to_string(), rendered("ServiceAccount", "a")),
            ("secret".to_string(), rendered("Secret", "s")),
            ("workload".to_string(), rendered("Deployment", "w")),
            ("service".to_string(), rendered("Service", "svc")),
        ];
        let cluster = Recording {
            deleted: Mutex::default(),
            held: vec!["w"],
        };
        let teardown = tear_down(&cluster, waves(&graph(), targets.clone())).await;
        assert_eq!(*cluster.deleted.lock().unwrap(), ["svc", "w"]);
        assert_eq!(
            teardown.waiting,
            [Remaining {
                component: "workload".into(),
                object: "Deployment/w".into(),
                finalizers: vec!["example.com/hold".into()],
            }]
        );
        assert!(teardown.waiting[0].held_by_finalizer());
        assert_eq!(teardown.untouched.len(), 2, "account and secret wait");
        assert!(!teardown.finished());

        let cluster = Recording {
            deleted: Mutex::default(),
            held: vec![],
        };
        let teardown = tear_down(&cluster, waves(&graph(), targets)).await;
        assert_eq!(*cluster.deleted.lock().unwrap(), ["svc", "w", "a", "s"]);
        assert!(teardown.finished());
        assert_eq!(teardown.gone.len(), 4);
    }
}
