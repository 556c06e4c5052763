//! End-to-end tests of projections (`kubeapp::operator::projection`: caching only the fields a
//! handler reads) against a real kube-apiserver + etcd.
//!
//! The test control plane has no scheduler and no kubelet: the tests create Pods with a node
//! already named and write their status themselves through the status subresource, playing the
//! kubelet, and say so where they do.

mod call_log;

use std::collections::BTreeMap;
use std::time::Duration;

use call_log::{eventually, logs};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kubeapp::operator::projection::{Projected, Projection};
use kubeapp::operator::{
    CancellationToken, Context, ControllerConfig, InformerController, InformerOptions, KubeObject,
    ReconcileRequest, ReconcileResult,
};
use kubeapp::sdk::testenv::TestEnv;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Enough Pods that every one reaching its handler with its last status is not luck.
const PODS: usize = 2_000;
/// Concurrent writes of the test's own workload.
const WRITERS: usize = 32;
/// The made-up nodes the Pods are placed on.
const NODES: usize = 10;
const LABEL: &str = "projections.kubeapp.dev/placed-on";

/// What the handler reads of a Pod: its node, phase and conditions.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct PodPlacement {
    spec: Placement,
    status: Health,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct Placement {
    node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Health {
    phase: Option<String>,
    conditions: Vec<PodCondition>,
}

impl Projection for PodPlacement {
    type Of = Pod;
}

fn pod(name: &str, index: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "projected"}},
        "spec": {
            "nodeName": format!("node-{}", index % NODES),
            "containers": [{
                "name": "app", "image": "registry.example.com/app:v1",
                "args": ["--serve", "--port=8080"],
                "env": [{"name": "MODE", "value": "production"}],
                "ports": [{"containerPort": 8080}],
            }],
        },
    }))
    .expect("a Pod")
}

/// The kubelet's part, played by the test: the Pod runs and is ready.
fn running() -> serde_json::Value {
    json!({"status": {
        "phase": "Running",
        "podIP": "10.244.0.7",
        "conditions": [{"type": "Ready", "status": "True"}],
    }})
}

fn ready(pod: &Projected<PodPlacement>) -> bool {
    pod.status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// For every Pod seen running and ready, the handler applies a ConfigMap of the same name with
/// its node, owned by the Pod (an owner reference from the projection), and labels the Pod with
/// it, both through server-side apply of the full kinds.
async fn place(
    request: ReconcileRequest<Projected<PodPlacement>>,
    ctx: Context,
) -> Result<ReconcileResult, kubeapp::operator::ReconcileError> {
    let pod = &request.object;
    if pod.status.phase.as_deref() != Some("Running") || !ready(pod) {
        return Ok(ReconcileResult::done());
    }
    let node = pod.spec.node_name.clone().unwrap_or_default();
    let mut record = ConfigMap::default();
    record.metadata.name = pod.meta().name.clone();
    record.metadata.namespace = pod.meta().namespace.clone();
    record.data = Some(BTreeMap::from([
        ("node".to_string(), node.clone()),
        ("phase".to_string(), "Running".to_string()),
    ]));
    ctx.apply(record).owned_by(pod.as_ref())?.await?;
    let mut label = Pod::default();
    label.metadata.name = pod.meta().name.clone();
    label.metadata.namespace = pod.meta().namespace.clone();
    label.metadata.labels = Some(BTreeMap::from([(LABEL.to_string(), node)]));
    ctx.apply(label).await?;
    Ok(ReconcileResult::done())
}

#[tokio::test]
async fn a_projection_of_two_thousand_pods_sees_every_status_caches_only_its_fields_and_writes_with_the_full_kind()
 {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("projections")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);

    let controller = InformerController::new(ControllerConfig::default().name("projections"));
    let placements = controller.projection::<PodPlacement>(
        pods.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    placements.reconcile_fn(place);
    let records = controller.informers().store(
        config_maps.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let stop = CancellationToken::new();
    let running_controller = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    let names: Vec<String> = (0..PODS).map(|i| format!("pod-{i:04}")).collect();
    // Each Pod is created and then, playing the kubelet, made running and ready, while other Pods
    // are still being created and the reconciler is already writing: the creates, the status
    // writes and the handler's own writes overlap.
    stream::iter(names.iter().enumerate())
        .map(|(i, name)| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &pod(name, i)).await?;
                pods.patch_status(name, &PatchParams::default(), &Patch::Merge(running()))
                    .await
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<_>>()
        .await
        .expect("create the Pods and write their status");

    eventually("every Pod's record says it runs on its node", || {
        records
            .state()
            .iter()
            .filter(|cm| {
                let data = cm.data.clone().unwrap_or_default();
                let index: usize = cm.metadata.name.as_deref().unwrap_or("")[4..]
                    .parse()
                    .unwrap_or(usize::MAX);
                data.get("phase").map(String::as_str) == Some("Running")
                    && data.get("node") == Some(&format!("node-{}", index % NODES))
            })
            .count()
            == PODS
    })
    .await;

    // The Pods were labelled through apply of the full kind, which left the rest of each Pod as it
    // was: the container the projection never held is still there.
    let store = placements.store();
    eventually("the projection's cache shows every Pod's label", || {
        store
            .state()
            .iter()
            .filter(|pod| {
                pod.meta().labels.as_ref().and_then(|l| l.get(LABEL)) == pod.spec.node_name.as_ref()
            })
            .count()
            == PODS
    })
    .await;
    let full = pods.get("pod-0007").await.expect("read the Pod");
    let record = config_maps.get("pod-0007").await.expect("read the record");
    let owner = &record.metadata.owner_references.expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), Some(&owner.uid)),
        ("Pod", full.metadata.uid.as_ref())
    );
    let spec = full.spec.expect("a spec");
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some("registry.example.com/app:v1")
    );
    assert_eq!(full.metadata.labels.expect("labels")[LABEL], "node-7");

    // The cache holds the projection only: no containers, no Pod IP.
    let cached = store
        .get_named(Some(&ns), "pod-0007")
        .expect("pod-0007 is cached");
    let cached_json = cached.to_json().expect("serializable");
    assert_eq!(cached_json["spec"], json!({"nodeName": "node-7"}));
    assert_eq!(cached_json["status"]["phase"], "Running");
    assert!(
        cached_json["status"].get("podIP").is_none(),
        "{cached_json}"
    );
    assert_eq!(cached.meta().uid, full.metadata.uid);

    // A full read on demand returns the whole object.
    let whole = cached.get_full(env.client()).await.expect("full read");
    assert_eq!(whole.spec.expect("a spec").containers.len(), 1);
    assert_eq!(
        whole.status.and_then(|s| s.pod_ip).as_deref(),
        Some("10.244.0.7")
    );

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), running_controller)
        .await
        .expect("the controller stops")
        .expect("the controller task")
        .expect("the controller's run");
}

#[tokio::test]
async fn a_kind_and_its_projection_are_two_informers_and_one_projection_is_shared() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("projections")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    pods.create(&PostParams::default(), &pod("one", 1))
        .await
        .expect("create a Pod");

    let informers = kubeapp::operator::Informers::new();
    let projected = informers.projection_store::<PodPlacement>(
        pods.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let again = informers.projection_store::<PodPlacement>(
        pods.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let full = informers.store(
        pods.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    for store in [&projected, &again] {
        tokio::time::timeout(call_log::WAIT, store.wait_until_synced())
            .await
            .expect("the projection syncs");
    }
    tokio::time::timeout(call_log::WAIT, full.wait_until_synced())
        .await
        .expect("the full kind syncs");
    assert_eq!(
        informers.open_watches(),
        2,
        "Pods, and Pods as PodPlacement"
    );
    let one = projected.get_named(Some(&ns), "one").expect("cached");
    assert_eq!(one.spec.node_name.as_deref(), Some("node-1"));
    assert!(
        std::sync::Arc::ptr_eq(&one, &again.get_named(Some(&ns), "one").expect("cached")),
        "the second store reads the same cache"
    );
    let whole: std::sync::Arc<Pod> = full.get_named(Some(&ns), "one").expect("cached in full");
    assert_eq!(whole.spec.as_ref().expect("a spec").containers.len(), 1);
}

/// What a handler that only needs names and labels reads of a ConfigMap: nothing but the
/// metadata (the projection is empty).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct ConfigMapMetadata {}

impl Projection for ConfigMapMetadata {
    type Of = ConfigMap;
}

/// The names a handler saw.
type Names = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// A watcher closure that records the name of each object it is called for in `names`.
fn record_name_in(
    names: &Names,
) -> impl Fn(
    std::sync::Arc<Projected<ConfigMapMetadata>>,
    Context,
) -> std::future::Ready<Result<(), kubeapp::operator::BoxError>>
+ Send
+ Sync
+ 'static {
    let names = names.clone();
    move |cm, _ctx| {
        names
            .lock()
            .expect("lock")
            .insert(cm.meta().name.clone().unwrap_or_default());
        std::future::ready(Ok(()))
    }
}

/// The opinionated wrapper works on a projection: its finalizer goes on every object, and every
/// delete reaches the handler before the finalizer is released. ConfigMaps have no
/// `metadata.generation`, so the wrapper tells its own finalizer patch from a change by comparing
/// the projection's JSON.
#[tokio::test]
async fn an_opinionated_watcher_on_a_projection_sees_every_delete_and_releases_its_finalizer() {
    const CONFIG_MAPS: usize = 300;
    logs();
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("projections")
        .await
        .expect("namespace");
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);

    let controller = InformerController::new(ControllerConfig::default().name("projections"));
    let handle = controller.projection::<ConfigMapMetadata>(
        config_maps.clone(),
        watcher::Config::default().labels("test=projections"),
        InformerOptions::default(),
    );
    let added = Names::default();
    let deleted = Names::default();
    let watcher = handle
        .watcher_fns()
        .on_add(record_name_in(&added))
        .on_delete(record_name_in(&deleted));
    handle
        .watch_opinionated(watcher, kubeapp::operator::OpinionatedOptions::default())
        .expect("valid finalizer names");
    let store = handle.store();
    let stop = CancellationToken::new();
    tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    let names: Vec<String> = (0..CONFIG_MAPS).map(|i| format!("cm-{i:04}")).collect();
    stream::iter(names.iter())
        .map(|name| {
            let config_maps = config_maps.clone();
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(name.clone());
            cm.metadata.labels = Some(BTreeMap::from([("test".into(), "projections".into())]));
            async move { config_maps.create(&PostParams::default(), &cm).await }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<_>>()
        .await
        .expect("create the ConfigMaps");
    eventually("every ConfigMap has the finalizer and was added", || {
        added.lock().expect("lock").len() == CONFIG_MAPS
            && store
                .state()
                .iter()
                .filter(|cm| cm.meta().finalizers.as_ref().is_some_and(|f| !f.is_empty()))
                .count()
                == CONFIG_MAPS
    })
    .await;

    stream::iter(names.iter())
        .map(|name| {
            let config_maps = config_maps.clone();
            async move { config_maps.delete(name, &Default::default()).await }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<_>>()
        .await
        .expect("delete the ConfigMaps");
    eventually(
        "every delete reached the handler and every ConfigMap is gone",
        || deleted.lock().expect("lock").len() == CONFIG_MAPS && store.is_empty(),
    )
    .await;
    let left = config_maps
        .list(&kube::api::ListParams::default().labels("test=projections"))
        .await
        .expect("list ConfigMaps");
    assert!(
        left.items.is_empty(),
        "no ConfigMap held by a finalizer: {:?}",
        left.items.len()
    );
    stop.cancel();
}
