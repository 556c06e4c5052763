//! Memory per cached object: 10,000 realistic ConfigMaps in kubeapp's informer cache and in
//! kube-runtime's reflector `Store`, and 10,000 Pods in kubeapp's cache in full and as a
//! projection (`kubeapp_operator::projection`), measured with a counting global allocator.
//!
//! ```sh
//! cargo bench -p kubeapp-operator --bench memory
//! ```
//!
//! Each ConfigMap looks like one `kubectl apply` made and the API server stored: name, namespace,
//! uid, resourceVersion, creationTimestamp, 3 labels, 2 annotations (one a short
//! last-applied-configuration), 4 data keys of 40 to 200 bytes, and the `managedFields` entry the
//! server adds. The figure for each cache is the heap it holds after the whole list went in
//! (requested bytes, as the allocator was asked; glibc adds about 8 to 16 bytes per allocation,
//! so the allocation count is printed too), divided by the number of objects:
//!
//! - kubeapp: `Informer::from_watch_stream::<ConfigMap>` fed `Init`, `InitApply` x N, `InitDone`,
//!   default options (`managedFields` dropped) and with `keep_managed_fields`;
//! - kube-runtime: `reflector::store::Writer::apply_watcher_event` with the same events as typed
//!   objects, as they are (`managedFields` kept, kube-runtime's default) and with `managedFields`
//!   cleared first (what `.modify()` on the watch stream would do).
//!
//! The bench binary is single-threaded (a current-thread runtime), so the counts are exact.
#![allow(unsafe_code)] // The counting global allocator.

use kube::core::GroupVersionKind;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition};
use kube::api::DynamicObject;
use kube_runtime::{reflector, watcher};
use kubeapp_operator::Informer;
use kubeapp_operator::list_watch::ListWatchOptions;
use kubeapp_operator::projection::Projection;

/// Counts live heap bytes and allocations; delegates the work to the system allocator.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);

fn signed(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and only adds
// bookkeeping on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            LIVE_BYTES.fetch_add(signed(layout.size()), Ordering::Relaxed);
            LIVE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            LIVE_BYTES.fetch_add(signed(layout.size()), Ordering::Relaxed);
            LIVE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(pointer, layout) };
        LIVE_BYTES.fetch_sub(signed(layout.size()), Ordering::Relaxed);
        LIVE_ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            LIVE_BYTES.fetch_add(signed(new_size) - signed(layout.size()), Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live bytes and allocations right now.
fn live() -> (isize, isize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_ALLOCATIONS.load(Ordering::Relaxed),
    )
}

const OBJECTS: usize = 10_000;

/// The JSON of ConfigMap `i` as the API server returns it after a `kubectl apply`.
fn config_map_json(i: usize) -> serde_json::Value {
    let name = format!("settings-{i:05}");
    let data = serde_json::json!({
        "log-level": "info",
        "endpoint": format!("https://service-{i}.backend.svc.cluster.local:8443/api/v2"),
        "feature-flags": "tracing=true,metrics=true,experimental-routing=false,cache-ttl=300",
        "config.yaml": format!(
            "server:\n  port: 8080\n  replicas: {}\nlimits:\n  cpu: 500m\n  memory: 256Mi\nowner: team-{}\n",
            i % 7 + 1,
            i % 13
        ),
    });
    let last_applied = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "production" },
        "data": { "log-level": "info" },
    })
    .to_string();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "production",
            "uid": format!("6f1c2a4e-{:04x}-4b7d-9c21-{:012x}", i % 65536, i),
            "resourceVersion": (100_000 + i).to_string(),
            "creationTimestamp": "2026-11-02T09:14:27Z",
            "labels": {
                "app.kubernetes.io/name": "backend",
                "app.kubernetes.io/part-of": "shop",
                "team": format!("team-{}", i % 13),
            },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "example.com/checksum": format!("sha256:{:064x}", i),
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-02T09:14:27Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:data": {
                        ".": {},
                        "f:config.yaml": {},
                        "f:endpoint": {},
                        "f:feature-flags": {},
                        "f:log-level": {},
                    },
                    "f:metadata": {
                        "f:annotations": {
                            ".": {},
                            "f:example.com/checksum": {},
                            "f:kubectl.kubernetes.io/last-applied-configuration": {},
                        },
                        "f:labels": {
                            ".": {},
                            "f:app.kubernetes.io/name": {},
                            "f:app.kubernetes.io/part-of": {},
                            "f:team": {},
                        },
                    },
                },
            }],
        },
        "data": data,
    })
}

fn dynamic(i: usize) -> DynamicObject {
    match serde_json::from_value(config_map_json(i)) {
        Ok(object) => object,
        Err(error) => panic!("the bench's ConfigMap JSON does not decode: {error}"),
    }
}

fn typed(i: usize) -> ConfigMap {
    match serde_json::from_value(config_map_json(i)) {
        Ok(object) => object,
        Err(error) => panic!("the bench's ConfigMap JSON does not decode: {error}"),
    }
}

/// Bytes and allocations a cache holds, per object.
struct Held {
    bytes: f64,
    allocations: f64,
}

#[allow(clippy::cast_precision_loss)]
fn per_object(before: (isize, isize), after: (isize, isize)) -> Held {
    Held {
        bytes: (after.0 - before.0) as f64 / OBJECTS as f64,
        allocations: (after.1 - before.1) as f64 / OBJECTS as f64,
    }
}

/// kubeapp's informer cache after one list of every object; the cache lives in the stream, which
/// is measured before it is dropped. The events are dropped as they come: handlers share the
/// cached objects, they do not copy them.
fn kubeapp(runtime: &tokio::runtime::Runtime, options: ListWatchOptions) -> Held {
    cache(runtime, dynamic, |rx| {
        Informer::from_watch_stream::<ConfigMap>(
            GroupVersionKind::gvk("", "v1", "Test"),
            rx,
            options,
        )
    })
}

/// The stream of raw watch events an informer of the bench reads.
type RawEvents = futures::channel::mpsc::UnboundedReceiver<
    Result<watcher::Event<DynamicObject>, watcher::Error>,
>;

/// The heap an informer made by `informer` holds once it cached `object(i)` for every `i`.
fn cache(
    runtime: &tokio::runtime::Runtime,
    object: fn(usize) -> DynamicObject,
    informer: impl FnOnce(RawEvents) -> Informer,
) -> Held {
    runtime.block_on(async {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let informer = informer(rx);
        let mut events = match informer.into_stream() {
            Ok(events) => events,
            Err(error) => panic!("informer metrics: {error}"),
        };
        // The informer's fixed state (metrics, channel) is made; what grows from here is the cache.
        let before = live();
        let send = |event| {
            if tx.unbounded_send(Ok(event)).is_err() {
                panic!("the informer dropped its input");
            }
        };
        send(watcher::Event::Init);
        let mut added = 0;
        // Fed one object at a time, so that the raw objects never pile up in the channel; each
        // listed object comes out as an Add at once.
        for i in 0..OBJECTS {
            send(watcher::Event::InitApply(object(i)));
            if let std::task::Poll::Ready(Some(_event)) = futures::poll!(events.next()) {
                added += 1;
            }
        }
        send(watcher::Event::InitDone);
        while added < OBJECTS {
            match events.next().await {
                Some(_event) => added += 1,
                None => panic!("the informer ended after {added} objects"),
            }
        }
        let held = per_object(before, live());
        drop(events);
        drop(tx);
        held
    })
}

/// kube-runtime's reflector store after one list of every object.
fn kube_runtime(strip_managed_fields: bool) -> Held {
    let (store, mut writer) = reflector::store::<ConfigMap>();
    let before = live();
    writer.apply_watcher_event(&watcher::Event::Init);
    for i in 0..OBJECTS {
        let mut object = typed(i);
        if strip_managed_fields {
            object.metadata.managed_fields = None;
        }
        // The writer keeps its own copy; the event's object is dropped here.
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let held = per_object(before, live());
    assert_eq!(store.len(), OBJECTS, "every object is in the store");
    held
}

/// The JSON of Pod `i` as the API server returns it once its kubelet reported it running: a
/// Deployment's replica with two containers (images, args, env, ports, resources, probes, volume
/// mounts), volumes, a toleration, anti-affinity, the defaults the apiserver fills in, and a
/// status with five conditions and two container statuses (`managedFields` left out: both caches
/// below drop them).
fn pod_json(i: usize) -> serde_json::Value {
    let container = |name: &str, image: &str, port: u16| {
        serde_json::json!({
            "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "args": ["--port", port.to_string(), "--log-format=json"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "MODE", "value": "production"}],
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "livenessProbe": {"httpGet": {"path": "/livez", "port": port, "scheme": "HTTP"},
                "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": port, "scheme": "HTTP"},
                "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": true},
                             {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        })
    };
    let condition = |kind: &str| serde_json::json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-28T01:00:00Z"});
    let running = |name: &str, image: &str| {
        serde_json::json!({
            "name": name, "image": image, "imageID": format!("{image}@sha256:{:064x}", i),
            "containerID": format!("containerd://{:064x}", i * 7 + 1), "ready": true, "started": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-11-28T01:00:00Z"}}, "lastState": {},
        })
    };
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("checkout-7d9f8b6c5d-{i:05}"), "generateName": "checkout-7d9f8b6c5d-",
            "namespace": "production", "uid": format!("6f1c2a4e-{:04x}-4b7d-9c21-{:012x}", i % 65536, i),
            "resourceVersion": (200_000 + i).to_string(), "creationTimestamp": "2026-11-28T01:00:00Z",
            "labels": {"app.kubernetes.io/name": "checkout", "app.kubernetes.io/instance": "checkout-prod",
                       "pod-template-hash": "7d9f8b6c5d"},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-7d9f8b6c5d",
                "uid": "0a7e6c1d-5b2f-4c8e-9d3a-7f1e2b4c6d8e", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "containers": [container("app", "registry.example.com/shop/checkout:v2.14.3", 8080),
                           container("log-shipper", "docker.io/fluent/fluent-bit:3.2.4", 2020)],
            "volumes": [{"name": "config", "configMap": {"name": "checkout-config", "defaultMode": 420}},
                        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "checkout", "serviceAccount": "checkout",
            "nodeName": format!("node-{}", i % 50), "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "checkout"}},
                "topologyKey": "kubernetes.io/hostname"}}]}},
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                           condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "hostIP": "172.18.0.2", "hostIPs": [{"ip": "172.18.0.2"}],
            "podIP": format!("10.244.{}.{}", i / 254 % 256, i % 254 + 1),
            "podIPs": [{"ip": format!("10.244.{}.{}", i / 254 % 256, i % 254 + 1)}],
            "startTime": "2026-11-28T01:00:00Z", "qosClass": "Burstable",
            "containerStatuses": [running("app", "registry.example.com/shop/checkout:v2.14.3"),
                                  running("log-shipper", "docker.io/fluent/fluent-bit:3.2.4")],
        },
    })
}

fn pod(i: usize) -> DynamicObject {
    match serde_json::from_value(pod_json(i)) {
        Ok(object) => object,
        Err(error) => panic!("the bench's Pod JSON does not decode: {error}"),
    }
}

/// A typical projection of a Pod: what a handler that follows placement and health reads.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(default)]
struct PodPlacement {
    spec: Placement,
    status: Health,
}

#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(default, rename_all = "camelCase")]
struct Placement {
    node_name: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(default)]
struct Health {
    phase: Option<String>,
    conditions: Vec<PodCondition>,
}

impl Projection for PodPlacement {
    type Of = Pod;
}

/// kubeapp's cache of full Pods and of their `PodPlacement` projection.
fn pods(runtime: &tokio::runtime::Runtime) -> (Held, Held) {
    let gvk = || GroupVersionKind::gvk("", "v1", "Pod");
    let full = cache(runtime, pod, |rx| {
        Informer::from_watch_stream::<Pod>(gvk(), rx, ListWatchOptions::default())
    });
    let projected = cache(runtime, pod, |rx| {
        Informer::projection_from_watch_stream::<PodPlacement>(
            gvk(),
            rx,
            ListWatchOptions::default(),
        )
    });
    (full, projected)
}

fn main() {
    // `cargo bench` passes `--bench`; run as a test target (`cargo test --benches`), this binary
    // has nothing to check and returns.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("cannot start a current-thread tokio runtime: {error}"),
    };
    let sample = serde_json::to_vec(&config_map_json(OBJECTS / 2)).map_or(0, |json| json.len());
    println!(
        "Memory per cached object, {OBJECTS} ConfigMaps (about {sample} bytes of JSON each), \
         requested heap bytes (allocations in parentheses)"
    );
    let ours = kubeapp(&runtime, ListWatchOptions::default());
    let ours_kept = kubeapp(&runtime, ListWatchOptions::default().keep_managed_fields());
    let theirs = kube_runtime(false);
    let theirs_stripped = kube_runtime(true);
    println!("| cache | managedFields | bytes/object | allocations/object |");
    println!("|---|---|---|---|");
    for (name, fields, held) in [
        ("kubeapp informer cache", "dropped (default)", &ours),
        ("kubeapp informer cache", "kept", &ours_kept),
        ("kube-runtime reflector Store", "kept (default)", &theirs),
        (
            "kube-runtime reflector Store",
            "cleared by the caller",
            &theirs_stripped,
        ),
    ] {
        println!(
            "| {name} | {fields} | {:.0} | {:.1} |",
            held.bytes, held.allocations
        );
    }
    println!(
        "kubeapp (default) / kube-runtime (default): {:.2}x the bytes",
        ours.bytes / theirs.bytes
    );
    println!(
        "kubeapp / kube-runtime, both keeping managedFields: {:.2}x; both without: {:.2}x",
        ours_kept.bytes / theirs.bytes,
        ours.bytes / theirs_stripped.bytes
    );

    let pod_json = pod_json(OBJECTS / 2);
    let pod_bytes = serde_json::to_vec(&pod_json).map_or(0, |json| json.len());
    println!(
        "\nMemory per cached Pod, {OBJECTS} Pods (about {pod_bytes} bytes of JSON each without \
         managedFields), kubeapp's informer cache, requested heap bytes"
    );
    let (full, projected) = pods(&runtime);
    println!("| cache | bytes/object | allocations/object |");
    println!("|---|---|---|");
    for (name, held) in [
        ("Pod (full)", &full),
        (
            "PodPlacement projection (metadata, nodeName, phase, conditions)",
            &projected,
        ),
    ] {
        println!("| {name} | {:.0} | {:.1} |", held.bytes, held.allocations);
    }
    println!(
        "projection / full: {:.2}x the bytes",
        projected.bytes / full.bytes
    );
}
