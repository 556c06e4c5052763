//! testenv's cluster mode itself (`docs/cluster-mode.md`), on one shared two-node cluster:
//!
//! - a Deployment whose pods are labelled `kubeapp.dev/pod=never-ready` runs them (`Running`,
//!   scheduled by the real scheduler) but never becomes available, and with a short
//!   `progressDeadlineSeconds` the Deployment controller reports `ProgressDeadlineExceeded`;
//! - a pod annotated `kubeapp.dev/ready-after: 1h` stays `Pending` while one created after it
//!   without the annotation becomes Ready;
//! - a Job's pod succeeds and the Job controller marks the Job `Complete`;
//! - a node made NotReady (`set_node_ready`) is tainted `node.kubernetes.io/not-ready` by the node
//!   lifecycle controller, and untainted once Ready again;
//!
//! and, on a cluster of its own, dropping the `TestEnv` ends all five processes and removes the
//! directory.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kubeapp::sdk::testenv::cluster::{NEVER_READY, POD_BEHAVIOUR_LABEL, READY_AFTER_ANNOTATION};
use kubeapp::sdk::testenv::{ClusterOptions, SharedTestEnv, TestEnv};
use serde_json::json;

static CLUSTER: SharedTestEnv =
    SharedTestEnv::new(|| TestEnv::builder().cluster_with(ClusterOptions::default().nodes(2)));

const WAIT: Duration = Duration::from_secs(60);

async fn wait_for<K, F>(api: Api<K>, name: &str, what: &str, condition: F) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&K) -> bool,
{
    let found = tokio::time::timeout(
        WAIT,
        await_condition(api, name, |object: Option<&K>| {
            object.is_some_and(&condition)
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: not reached within {WAIT:?}"))
    .unwrap_or_else(|e| panic!("{what}: watch failed: {e}"));
    found.unwrap_or_else(|| panic!("{what}: the object is gone"))
}

fn condition(value: &serde_json::Value, type_: &str) -> Option<(String, String)> {
    value["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

#[test]
fn pods_that_never_become_ready_stall_a_rollout_past_its_progress_deadline() {
    CLUSTER.run(|env| async move {
        let ns = env
            .create_namespace("never-ready")
            .await
            .expect("namespace");
        let deployments: Api<Deployment> = Api::namespaced(env.client(), &ns);
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "stuck"},
            "spec": {
                "replicas": 2,
                "progressDeadlineSeconds": 2,
                "selector": {"matchLabels": {"app": "stuck"}},
                "template": {
                    "metadata": {"labels": {"app": "stuck", POD_BEHAVIOUR_LABEL: NEVER_READY}},
                    "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}
                }
            }
        }))
        .expect("a Deployment");
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .expect("create the Deployment");
        let stalled = wait_for(
            deployments,
            "stuck",
            "Progressing=False (ProgressDeadlineExceeded)",
            |d| {
                let value = serde_json::to_value(d).unwrap_or_default();
                condition(&value, "Progressing")
                    == Some(("False".into(), "ProgressDeadlineExceeded".into()))
            },
        )
        .await;
        let value = serde_json::to_value(&stalled).expect("json");
        assert_eq!(
            condition(&value, "Available").map(|c| c.0),
            Some("False".to_string()),
            "{value:#}"
        );
        let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
        let listed = pods
            .list(&ListParams::default().labels("app=stuck"))
            .await
            .expect("list pods");
        assert_eq!(listed.items.len(), 2, "the ReplicaSet made both pods");
        for pod in &listed.items {
            let value = serde_json::to_value(pod).expect("json");
            assert_eq!(value["status"]["phase"], "Running", "{value:#}");
            assert!(
                value["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("kwok-node-")),
                "scheduled: {value:#}"
            );
            assert_eq!(
                condition(&value, "Ready").map(|c| c.0),
                Some("False".to_string()),
                "{value:#}"
            );
        }
    });
}

#[test]
fn a_pods_ready_after_annotation_holds_it_pending_while_others_become_ready() {
    CLUSTER.run(|env| async move {
        let ns = env.create_namespace("ready-after").await.expect("namespace");
        let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
        let node = env.node_names().into_iter().next().expect("a node");
        let pod = |name: &str, annotations: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example/app:1"}]}
            }))
            .expect("a Pod")
        };
        // The slow one goes first: when the quick one is Ready, kwok has seen both.
        pods.create(
            &PostParams::default(),
            &pod("slow", json!({READY_AFTER_ANNOTATION: "1h"})),
        )
        .await
        .expect("create the slow pod");
        pods.create(&PostParams::default(), &pod("quick", json!({})))
            .await
            .expect("create the quick pod");
        wait_for(pods.clone(), "quick", "the quick pod is Ready", |p| {
            let value = serde_json::to_value(p).unwrap_or_default();
            condition(&value, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
        let slow = serde_json::to_value(pods.get("slow").await.expect("slow")).expect("json");
        assert_eq!(slow["status"]["phase"], "Pending", "{slow:#}");
    });
}

#[test]
fn a_jobs_pod_succeeds_and_the_job_completes() {
    CLUSTER.run(|env| async move {
        let ns = env.create_namespace("job").await.expect("namespace");
        let jobs: Api<Job> = Api::namespaced(env.client(), &ns);
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "once"},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "task", "image": "example/task:1"}]
            }}}
        }))
        .expect("a Job");
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("create the Job");
        wait_for(jobs, "once", "the Job is Complete", |j| {
            let value = serde_json::to_value(j).unwrap_or_default();
            condition(&value, "Complete").is_some_and(|c| c.0 == "True")
        })
        .await;
    });
}

fn not_ready_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/not-ready")
        })
}

#[test]
fn a_node_made_not_ready_is_tainted_by_the_node_lifecycle_controller() {
    CLUSTER.run(|env| async move {
        let node = env.node_names().pop().expect("a second node");
        let nodes: Api<Node> = Api::all(env.client());
        env.set_node_ready(&node, false)
            .await
            .expect("the node reports NotReady");
        wait_for(
            nodes.clone(),
            &node,
            "the node lifecycle controller taints it not-ready",
            not_ready_taint,
        )
        .await;
        env.set_node_ready(&node, true)
            .await
            .expect("the node reports Ready again");
        wait_for(nodes, &node, "the not-ready taint is removed", |n| {
            !not_ready_taint(n)
        })
        .await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_cluster_mode_environment_ends_all_five_processes_and_removes_its_directory() {
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    let dir = env.dir().to_path_buf();
    let mut pids = env.cluster_pids().expect("cluster mode").to_vec();
    pids.push(env.etcd_pid());
    pids.extend(env.apiserver_pid());
    assert_eq!(pids.len(), 5);
    drop(env);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived its TestEnv"
        );
    }
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
