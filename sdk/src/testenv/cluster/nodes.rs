//! The fake nodes: created by testenv with capacity and allocatable (kwok manages only nodes that
//! exist), made Ready by kwok's stages.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use super::components::KWOK_NODE_ANNOTATION;
use super::{ClusterOptions, NODE_NOT_READY_LABEL};
use crate::testenv::{TestEnv, TestEnvError};

/// Creates the fake nodes (an existing one is left as it is).
pub(crate) async fn create_nodes(
    client: &kube::Client,
    options: &ClusterOptions,
) -> Result<(), TestEnvError> {
    let api = Api::<Node>::all(client.clone());
    for (index, name) in options.node_names().into_iter().enumerate() {
        let node = node_object(&name, index, options)?;
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => {
                return Err(TestEnvError::Kube {
                    action: format!("creating fake node {name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

fn node_object(name: &str, index: usize, options: &ClusterOptions) -> Result<Node, TestEnvError> {
    let (annotation, value) = KWOK_NODE_ANNOTATION;
    let resources = serde_json::json!({
        "cpu": options.node_cpu,
        "memory": options.node_memory,
        "pods": options.node_pods.to_string(),
    });
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": { annotation: value, "node.alpha.kubernetes.io/ttl": "0" },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": { "podCIDR": format!("10.244.{index}.0/24") },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{ "type": "InternalIP", "address": format!("10.96.{}.{}", index / 250, index % 250 + 1) }],
        },
    });
    serde_json::from_value(value).map_err(|e| TestEnvError::InvalidYaml {
        what: format!("fake node {name}"),
        message: e.to_string(),
    })
}

/// `Ok` when every node in `names` reports `Ready=True`; otherwise which one does not.
pub(crate) async fn nodes_ready(client: &kube::Client, names: &[String]) -> Result<(), String> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing nodes: {e}"))?;
    for name in names {
        let node = nodes
            .items
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
            .ok_or_else(|| format!("node {name} does not exist"))?;
        if !is_ready(node) {
            return Err(format!("node {name} is not Ready yet"));
        }
    }
    Ok(())
}

/// Whether a node's `Ready` condition is `True`.
pub(crate) fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl TestEnv {
    /// The fake nodes' names (empty unless the environment runs in
    /// [cluster mode](super::super::TestEnvBuilder::cluster)).
    pub fn node_names(&self) -> Vec<String> {
        self.cluster
            .as_ref()
            .map(|c| c.options.node_names())
            .unwrap_or_default()
    }

    /// Marks a node unschedulable (`cordoned`, as `kubectl cordon` does) or schedulable again.
    /// Pods already on it stay; new ones wait `Pending` (`Unschedulable`) while no node takes
    /// them: the way to hold a rollout back for as long as a test needs, whatever the timing.
    pub async fn cordon_node(&self, node: &str, cordoned: bool) -> Result<(), TestEnvError> {
        let patch = serde_json::json!({ "spec": { "unschedulable": cordoned } });
        Api::<Node>::all(self.client())
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|source| TestEnvError::Kube {
                action: format!("cordoning node {node} ({cordoned})"),
                source,
            })
    }

    /// Makes a fake node report `Ready=False` (`ready == false`) or `Ready=True` again, through
    /// the label [`NODE_NOT_READY_LABEL`], and waits until its status says so. What follows is
    /// the real controllers' doing: the node lifecycle controller taints a NotReady node, and
    /// pods are evicted once their tolerations run out (300 s by default).
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), TestEnvError> {
        let api = Api::<Node>::all(self.client());
        let label = if ready {
            serde_json::Value::Null
        } else {
            serde_json::Value::String("true".into())
        };
        let patch =
            serde_json::json!({ "metadata": { "labels": { NODE_NOT_READY_LABEL: label } } });
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| TestEnvError::Kube {
                action: format!("labelling node {node}"),
                source,
            })?;
        let what = format!("until node {node} reports Ready={ready}");
        let condition = move |n: Option<&Node>| n.is_some_and(|n| is_ready(n) == ready);
        tokio::time::timeout(
            crate::testenv::cluster::NODE_TIMEOUT,
            kube::runtime::wait::await_condition(api, node, condition),
        )
        .await
        .map_err(|_| TestEnvError::Timeout {
            what: what.clone(),
            waited: crate::testenv::cluster::NODE_TIMEOUT,
        })?
        .map_err(|e| TestEnvError::Watch {
            what,
            message: e.to_string(),
        })
        .map(drop)
    }
}
