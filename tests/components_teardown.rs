//! Ordered teardown of a component graph, end to end against a real kube-apiserver + etcd in
//! testenv's cluster mode (its garbage collector and Deployment/ReplicaSet controllers run, so a
//! Deployment has a ReplicaSet and Pods of its own, and foreground deletion completes).
//!
//! The graph: a ServiceAccount and a Secret, and a Deployment that runs as the one and mounts the
//! other (it depends on both). Deleting the custom object must delete the Deployment first, in the
//! foreground (its ReplicaSet goes before it), and the Secret and ServiceAccount only once the
//! Deployment is gone. A finalizer the test puts on the Deployment holds it: the teardown waits,
//! says so in the custom object's status (`Ready=False`, `TearingDown`, naming the Deployment and
//! the finalizer) and in a Warning Event (`TeardownStuck`), and leaves the Secret and the
//! ServiceAccount alone. Removing the finalizer lets the teardown finish and the custom object go.
//!
//! The order is read from watches: the resourceVersion of each object's deletion (etcd's revision,
//! one counter for all these resources), so events of different watches need not arrive in order.

mod call_log;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use call_log::{WAIT, eventually, logs, wait_object};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{CustomResource, Resource, ResourceExt};
use kubeapp::components::{ComponentGraph, ComponentsReconciler, ComponentsSummary, Rendered};
use kubeapp::operator::{
    CancellationToken, ControllerConfig, InformerController, InformerOptions, OpinionatedOptions,
};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "teardown.kubeapp.dev",
    version = "v1",
    kind = "Worker",
    namespaced,
    status = "WorkerStatus"
)]
struct WorkerSpec {
    image: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WorkerStatus {
    #[serde(default)]
    #[schemars(schema_with = "kubeapp::operator::apply::conditions::schema")]
    conditions: Vec<Condition>,
    components: Option<ComponentsSummary>,
    observed_generation: Option<i64>,
}

const HOLD: &str = "teardown.kubeapp.dev/hold";

fn graph() -> ComponentGraph<Worker> {
    ComponentGraph::<Worker>::builder()
        .render("account", |s| {
            Ok(vec![Rendered::value(json!({
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": s.object().name_any(), "namespace": s.object().namespace()}
            }))])
        })
        .render("secret", |s| {
            Ok(vec![Rendered::value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": s.object().name_any(), "namespace": s.object().namespace()},
                "stringData": {"token": "t"}
            }))])
        })
        .render("workload", |s| {
            let name = s.object().name_any();
            let deployment: Deployment = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": s.object().namespace()},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "serviceAccountName": name,
                            "containers": [{"name": "work", "image": s.object().spec.image,
                                            "volumeMounts": [{"name": "token", "mountPath": "/t"}]}],
                            "volumes": [{"name": "token", "secret": {"secretName": name}}]
                        }
                    }
                }
            }))
            .map_err(|e| kubeapp::components::ComponentError::Failed(e.to_string()))?;
            Ok(vec![Rendered::of(&deployment)?])
        })
        .depends_on("account")
        .depends_on("secret")
        .build()
        .expect("a valid graph")
}

/// Records, per `Kind/name`, the resourceVersion of its deletion as a watch of `api` reports it.
fn record_deletions<K>(api: Api<K>, deleted: Arc<Mutex<HashMap<String, u64>>>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Delete(object)) = event {
                let rv = object
                    .resource_version()
                    .and_then(|rv| rv.parse().ok())
                    .expect("a deleted object's resourceVersion");
                deleted
                    .lock()
                    .unwrap()
                    .insert(format!("{}/{}", K::kind(&()), object.name_any()), rv);
            }
        }
    });
}

fn tearing_down(worker: &Worker) -> Option<&Condition> {
    worker
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.reason == "TearingDown")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_is_torn_down_in_reverse_dependency_order_and_a_held_wave_stops_the_next() {
    logs();
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    env.install_crd::<Worker>().await.expect("CRD");
    let ns = env.create_namespace("teardown").await.expect("namespace");
    let client = env.client();

    let controller = InformerController::new(ControllerConfig::default().name("teardown-test"));
    let workers = controller.kind(
        Api::<Worker>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let _reconciler = workers
        .reconcile_opinionated(
            ComponentsReconciler::new(graph())
                .with_status()
                .not_ready_backoff(Duration::from_millis(200), Duration::from_secs(2)),
            OpinionatedOptions::default(),
        )
        .expect("a valid finalizer name");
    let stop = CancellationToken::new();
    tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    let deleted = Arc::new(Mutex::new(HashMap::new()));
    record_deletions(
        Api::<Deployment>::namespaced(client.clone(), &ns),
        Arc::clone(&deleted),
    );
    record_deletions(
        Api::<ReplicaSet>::namespaced(client.clone(), &ns),
        Arc::clone(&deleted),
    );
    record_deletions(
        Api::<Secret>::namespaced(client.clone(), &ns),
        Arc::clone(&deleted),
    );
    record_deletions(
        Api::<ServiceAccount>::namespaced(client.clone(), &ns),
        Arc::clone(&deleted),
    );

    let worker_api: Api<Worker> = Api::namespaced(client.clone(), &ns);
    let created = worker_api
        .create(
            &PostParams::default(),
            &Worker::new(
                "batch",
                WorkerSpec {
                    image: "busybox:1".into(),
                },
            ),
        )
        .await
        .expect("create the Worker");
    wait_object(&worker_api, "batch", "the Worker ready", |w: &Worker| {
        w.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    })
    .await;
    // The Deployment has a child of its own, made by the cluster's Deployment controller.
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let rs_name = {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let listed = replica_sets
                .list(&ListParams::default())
                .await
                .expect("list");
            if let Some(rs) = listed.items.first() {
                break rs.name_any();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no ReplicaSet within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };

    // Hold the Deployment with a finalizer of the test's, then delete the Worker.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "batch",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
        )
        .await
        .expect("hold the Deployment");
    worker_api
        .delete("batch", &DeleteParams::default())
        .await
        .expect("delete the Worker");

    wait_object(
        &worker_api,
        "batch",
        "the Worker's status says the teardown waits for the held Deployment",
        |w: &Worker| {
            tearing_down(w)
                .is_some_and(|c| c.message.contains("Deployment/batch") && c.message.contains(HOLD))
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let stuck_event = {
        let mut found = false;
        let params = ListParams::default().fields("involvedObject.name=batch");
        for _ in 0..(WAIT.as_millis() / 200) {
            found = events
                .list(&params)
                .await
                .expect("list Events")
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("TeardownStuck")
                        && e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("Deployment/batch") && m.contains(HOLD))
                });
            if found {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        found
    };
    assert!(
        stuck_event,
        "a Warning TeardownStuck Event naming the Deployment and the finalizer"
    );
    // The status and Event were written after the Deployment's wave was read again: the teardown
    // stopped there, so the next wave was never deleted.
    for (what, deleting) in [
        (
            "Secret",
            Api::<Secret>::namespaced(client.clone(), &ns)
                .get("batch")
                .await
                .expect("the Secret is still there")
                .metadata
                .deletion_timestamp,
        ),
        (
            "ServiceAccount",
            Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                .get("batch")
                .await
                .expect("the ServiceAccount is still there")
                .metadata
                .deletion_timestamp,
        ),
    ] {
        assert!(
            deleting.is_none(),
            "the {what} must wait for the Deployment's wave"
        );
    }
    assert!(
        worker_api
            .get_opt("batch")
            .await
            .expect("get the Worker")
            .is_some(),
        "the Worker's finalizer holds it until the teardown is done"
    );

    // Release the Deployment: the teardown finishes and the Worker goes.
    // Only the test's finalizer goes (the garbage collector's `foregroundDeletion` stays while it
    // deletes the ReplicaSet; it may be gone already), on the version read: a conflict with the
    // garbage collector's own update reads again.
    let mut attempts = 0;
    loop {
        let held = deployments.get("batch").await.expect("get the Deployment");
        let finalizers: Vec<String> = held
            .finalizers()
            .iter()
            .filter(|f| *f != HOLD)
            .cloned()
            .collect();
        let released = deployments
            .patch(
                "batch",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": held.resource_version()
                }})),
            )
            .await;
        match released {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 20 => attempts += 1,
            Err(error) => panic!("release the Deployment: {error}"),
        }
    }
    let gone = tokio::time::timeout(
        WAIT,
        kube::runtime::wait::await_condition(
            worker_api.clone(),
            "batch",
            kube::runtime::wait::conditions::is_deleted(&created.uid().expect("a uid")),
        ),
    )
    .await;
    assert!(
        matches!(gone, Ok(Ok(_))),
        "the Worker is deleted once its teardown finished"
    );

    let order = |deleted: &HashMap<String, u64>| {
        (
            deleted.get(&format!("ReplicaSet/{rs_name}")).copied(),
            deleted.get("Deployment/batch").copied(),
            deleted.get("Secret/batch").copied(),
            deleted.get("ServiceAccount/batch").copied(),
        )
    };
    eventually("every deletion seen by the watches", || {
        let (rs, deployment, secret, account) = order(&deleted.lock().unwrap());
        rs.is_some() && deployment.is_some() && secret.is_some() && account.is_some()
    })
    .await;
    let (rs, deployment, secret, account) = order(&deleted.lock().unwrap());
    let (rs, deployment, secret, account) = (
        rs.unwrap(),
        deployment.unwrap(),
        secret.unwrap(),
        account.unwrap(),
    );
    assert!(
        rs < deployment,
        "foreground: the ReplicaSet (rv {rs}) goes before its Deployment (rv {deployment})"
    );
    assert!(
        deployment < secret && deployment < account,
        "the Deployment (rv {deployment}) goes before the Secret (rv {secret}) and the \
         ServiceAccount (rv {account}) it depends on"
    );
    stop.cancel();
}
