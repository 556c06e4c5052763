//! The Pods of `kubeapp-bench cache --object pod`: what a Deployment's replica looks like once
//! it runs, a full spec ([`pod`]) and the status a kubelet would write ([`status_patch`]).
//!
//! The test control plane has no scheduler and no kubelet: the spec names its node
//! (`spec.nodeName`, one of [`NODES`] made-up nodes, which the apiserver does not check) and the
//! tool writes the status itself through the status subresource, playing the kubelet. Every Pod
//! differs from the others only where real replicas differ: name, IPs, container IDs, the
//! node.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The made-up nodes the Pods are spread over.
pub const NODES: usize = 50;

/// When every Pod started (the status's timestamps; no kubelet runs, so they are fixed).
const STARTED: &str = "2026-11-28T01:00:00Z";

/// The Pod `name` (number `index`) as the tool creates it: two containers (an app and a log
/// shipper) with images, args, env, ports, resources, probes, volume mounts; volumes, a
/// toleration, pod anti-affinity, labels, an annotation. Each of them once or twice, so
/// that with the apiserver's defaults, the status and `managedFields` (a second copy of every
/// field's name) the Pod is 7.4 KB of JSON (4.2 KB without `managedFields`).
///
/// # Errors
///
/// Never for the JSON built here (a test decodes it); typed, so that a bad edit fails the run
/// with its cause rather than a panic.
pub fn pod(name: &str, index: usize) -> Result<Pod, serde_json::Error> {
    serde_json::from_value(pod_json(name, index))
}

/// The merge patch of the status subresource that makes Pod `index` a running, ready Pod.
pub fn status_patch(index: usize) -> Value {
    let [a, b] = ip_octets(index);
    let pod_ip = format!("10.244.{a}.{b}");
    let node = index % NODES;
    let host_ip = format!("172.18.0.{}", node + 2);
    let condition = |kind: &str| json!({ "type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": STARTED });
    let running = |name: &str, image: &str, digest: u64| {
        json!({
            "name": name,
            "image": image,
            "imageID": format!("{}@sha256:{}", image_repository(image), hex64(digest)),
            "containerID": format!("containerd://{}", hex64(digest ^ index as u64)),
            "ready": true,
            "started": true,
            "restartCount": 0,
            "state": { "running": { "startedAt": STARTED } },
            "lastState": {}
        })
    };
    json!({
        "status": {
            "phase": "Running",
            "conditions": [
                condition("PodReadyToStartContainers"),
                condition("Initialized"),
                condition("Ready"),
                condition("ContainersReady"),
                condition("PodScheduled"),
            ],
            "hostIP": host_ip,
            "hostIPs": [{ "ip": host_ip }],
            "podIP": pod_ip,
            "podIPs": [{ "ip": pod_ip }],
            "startTime": STARTED,
            "qosClass": "Burstable",
            "containerStatuses": [
                running("app", APP_IMAGE, 1),
                running("log-shipper", SHIPPER_IMAGE, 2),
            ]
        }
    })
}

const APP_IMAGE: &str = "registry.example.com/shop/checkout:v2.14.3";
const SHIPPER_IMAGE: &str = "docker.io/fluent/fluent-bit:3.2.4";

fn image_repository(image: &str) -> &str {
    image
        .rsplit_once(':')
        .map_or(image, |(repository, _)| repository)
}

/// 64 hex digits derived from `seed` (container IDs and image digests).
fn hex64(seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = String::with_capacity(64);
    for _ in 0..4 {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let _ = write!(out, "{:016x}", x.wrapping_mul(0x2545_F491_4F6C_DD1D));
    }
    out
}

/// The last two octets of Pod `index`'s IP in `10.244.0.0/16`.
fn ip_octets(index: usize) -> [usize; 2] {
    [(index / 254) % 256, index % 254 + 1]
}

fn pod_json(name: &str, index: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "checkout",
                "app.kubernetes.io/instance": "checkout-prod",
                "pod-template-hash": "7d9f8b6c5d"
            },
            "annotations": { "prometheus.io/scrape": "true" }
        },
        "spec": {
            "nodeName": format!("node-{:02}", index % NODES),
            "serviceAccountName": "checkout",
            "securityContext": { "runAsNonRoot": true, "runAsUser": 10001 },
            "containers": [
                {
                    "name": "app",
                    "image": APP_IMAGE,
                    "args": ["serve", "--listen=:8080", "--metrics-listen=:9090"],
                    "env": [
                        { "name": "DATABASE_URL", "value": "postgres://db.shop:5432/checkout" },
                        { "name": "LOG_LEVEL", "value": "info" }
                    ],
                    "ports": [{ "name": "http", "containerPort": 8080 }],
                    "resources": {
                        "requests": { "cpu": "250m", "memory": "256Mi" },
                        "limits": { "memory": "512Mi" }
                    },
                    "livenessProbe": { "httpGet": { "path": "/healthz", "port": "http" } },
                    "readinessProbe": { "httpGet": { "path": "/ready", "port": "http" } },
                    "volumeMounts": [
                        { "name": "config", "mountPath": "/etc/checkout", "readOnly": true }
                    ]
                },
                {
                    "name": "log-shipper",
                    "image": SHIPPER_IMAGE,
                    "args": ["--config=/etc/checkout/fluent-bit.yaml"],
                    "resources": { "requests": { "cpu": "20m", "memory": "32Mi" } },
                    "volumeMounts": [{ "name": "tmp", "mountPath": "/var/log/app" }]
                }
            ],
            "volumes": [
                { "name": "config", "configMap": { "name": "checkout-config" } },
                { "name": "tmp", "emptyDir": {} }
            ],
            "tolerations": [
                { "key": "workload", "operator": "Equal", "value": "shop", "effect": "NoSchedule" }
            ],
            "affinity": {
                "podAntiAffinity": { "preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": { "matchLabels": { "app.kubernetes.io/name": "checkout" } }
                    }
                }] }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact_len(value: &impl serde::Serialize) -> usize {
        serde_json::to_vec(value).expect("serialises").len()
    }

    #[test]
    fn a_pod_with_its_status_is_a_few_kilobytes_of_json() {
        let mut pod = pod("checkout-7d9f8b6c5d-00042", 42).expect("the JSON is a Pod");
        let patch = status_patch(42);
        pod.status = Some(serde_json::from_value(patch["status"].clone()).expect("a PodStatus"));
        // What the tool sends; the apiserver adds defaults (pull policies, termination message
        // paths, DNS policy, default tolerations, ...) and `managedFields` on top.
        let sent = compact_len(&pod);
        // 3,057 bytes; read back from kube-apiserver v1.36 it is 4,194 without `managedFields` and
        // 7,371 with them.
        assert!((2_700..=3_500).contains(&sent), "{sent} bytes");
        let spec = pod.spec.as_ref().expect("a spec");
        assert_eq!(spec.containers.len(), 2);
        assert_eq!(spec.node_name.as_deref(), Some("node-42"));
        let status = pod.status.as_ref().expect("a status");
        assert_eq!(status.pod_ip.as_deref(), Some("10.244.0.43"));
        assert_eq!(status.container_statuses.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn pods_differ_in_name_ips_and_container_ids() {
        let (a, b) = (status_patch(0), status_patch(300));
        assert_eq!(a["status"]["podIP"], "10.244.0.1");
        assert_eq!(b["status"]["podIP"], "10.244.1.47");
        assert_ne!(
            a["status"]["containerStatuses"][0]["containerID"],
            b["status"]["containerStatuses"][0]["containerID"]
        );
        assert_eq!(
            a["status"]["containerStatuses"][0]["imageID"],
            b["status"]["containerStatuses"][0]["imageID"]
        );
        assert_eq!(hex64(5).len(), 64);
        let pod = pod("p", 7).expect("a pod");
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
    }
}
