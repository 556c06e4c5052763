//! Helpers of the watcher example's end-to-end test (`tests/example_watcher.rs`): the binary
//! as a child process, polling with deadlines, HTTP probes, Prometheus text, and the Probes,
//! Events and RBAC objects the test works with.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};

use crate::example_support as shared;
pub use crate::example_support::{eventually, free_port, get};

/// The example binary (and its package).
pub const BINARY: &str = "kubeapp-example-watcher";
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// The app name: the Events' reportingController.
pub const APP: &str = "probe-watcher";
/// The finalizer the opinionated watcher puts on handled Probes
/// (`{group}/{app}-{plural}-{version}`).
pub const FINALIZER: &str = "watcher.example.kubeapp.dev/probe-watcher-probes-v1";
/// The custom metric.
pub const STEPS: &str = "probe_lifecycle_events_total";

/// The example binary, next to this test's `deps/` directory; fails loudly when it was not built.
pub fn binary() -> PathBuf {
    shared::binary(BINARY, BINARY)
}

/// Runs the binary to completion with `args`; returns its stdout (and asserts success).
pub fn output_of(args: &[&str]) -> String {
    shared::output_of(&binary(), args)
}

/// The sum of the samples of `name` whose labels contain every one of `labels` (`key="value"`).
pub fn sample(exposition: &str, name: &str, labels: &[&str]) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `probe_lifecycle_events_total{step}` in an exposition, or `None` when the series is absent.
pub fn steps(exposition: &str, step: &str) -> Option<f64> {
    let prefix = format!("{STEPS}{{step=\"{step}\"}} ");
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
}

/// The operator binary running as a child process, its stderr (JSON logs) in a file.
pub struct Operator {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub addr: SocketAddr,
    pub log_path: PathBuf,
}

impl Operator {
    /// Starts `run` with `kubeconfig`, logs in JSON into `log_path`, and `extra` flags.
    pub fn start(kubeconfig: &Path, log_path: PathBuf, extra: &[&str]) -> Self {
        let log_file = std::fs::File::create(&log_path).expect("log file");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = tokio::process::Command::new(binary())
            .arg("run")
            .args(["--metrics-addr", &addr.to_string()])
            .args(["--log-format", "json"])
            .args([
                "--shutdown-timeout",
                &format!("{}s", SHUTDOWN_TIMEOUT.as_secs()),
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .env_remove("POD_NAME")
            .env_remove("WATCH_NAMESPACE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .expect("start the example binary");
        let pid = child.id().expect("a pid");
        Self {
            child,
            pid,
            addr,
            log_path,
        }
    }

    /// The logs so far, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "operator logs ({}):\n{}",
            self.log_path.display(),
            std::fs::read_to_string(&self.log_path).unwrap_or_default()
        )
    }

    /// The JSON log lines so far, as `(message, fields)`.
    pub fn log_lines(&self) -> Vec<(String, serde_json::Value)> {
        std::fs::read_to_string(&self.log_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .map(|line| {
                let fields = line["fields"].clone();
                (
                    fields["message"].as_str().unwrap_or_default().to_string(),
                    fields,
                )
            })
            .collect()
    }

    /// The index of the first log line with `message` whose fields contain `fields`.
    pub fn log_index(&self, message: &str, fields: &[(&str, &str)]) -> Option<usize> {
        self.log_lines()
            .iter()
            .position(|(m, f)| m == message && fields.iter().all(|(key, value)| f[*key] == *value))
    }

    pub async fn wait_ready(&self) {
        eventually(
            "/readyz answers 200",
            || self.logs(),
            || async {
                get(self.addr, "/readyz")
                    .await
                    .filter(|(status, _)| *status == 200)
            },
        )
        .await;
    }

    /// `/metrics` once `accept` holds for it.
    pub async fn metrics_when(&self, what: &str, accept: impl Fn(&str) -> bool) -> String {
        eventually(
            what,
            || self.logs(),
            || async {
                get(self.addr, "/metrics")
                    .await
                    .filter(|(status, body)| *status == 200 && accept(body))
                    .map(|(_, body)| body)
            },
        )
        .await
    }

    /// Sends SIGTERM and asserts a clean exit (status 0) within the shutdown timeout.
    pub async fn terminate(mut self) -> Self {
        let signalled = std::process::Command::new("/usr/bin/kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .expect("run /usr/bin/kill");
        assert!(signalled.success(), "kill -TERM {}: {signalled}", self.pid);
        let exit =
            tokio::time::timeout(SHUTDOWN_TIMEOUT + Duration::from_secs(5), self.child.wait())
                .await
                .unwrap_or_else(|_| panic!("no exit within the shutdown timeout\n{}", self.logs()))
                .expect("wait for the operator");
        assert!(exit.success(), "exit status {exit}\n{}", self.logs());
        assert!(
            self.log_index("operator stopped", &[]).is_some(),
            "{}",
            self.logs()
        );
        self
    }
}

pub fn probes_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("watcher.example.kubeapp.dev", "v1", "Probe");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "probes");
    Api::namespaced_with(client.clone(), ns, &resource)
}

pub async fn create_probe(
    probes: &Api<DynamicObject>,
    name: &str,
    target: &str,
    processing_millis: u32,
) -> DynamicObject {
    let probe: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "watcher.example.kubeapp.dev/v1",
        "kind": "Probe",
        "metadata": {"name": name},
        "spec": {"target": target, "processingMillis": processing_millis},
    }))
    .expect("a Probe");
    probes
        .create(&PostParams::default(), &probe)
        .await
        .unwrap_or_else(|e| panic!("create Probe {name}: {e}"))
}

pub async fn set_target(probes: &Api<DynamicObject>, name: &str, target: &str) -> DynamicObject {
    let patch = serde_json::json!({"spec": {"target": target}});
    probes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("update Probe {name}: {e}"))
}

/// The Events in `ns` about the object with `uid`.
pub async fn events_about(events: &Api<Event>, uid: &str) -> Vec<Event> {
    events
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid))
        .collect()
}

/// How often `reason` was recorded for the object with `uid` (a repeated Event counts its
/// series).
pub async fn count_of(events: &Api<Event>, uid: &str, reason: &str) -> i32 {
    events_about(events, uid)
        .await
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// Waits for the Event with `reason` about the object with `uid`, and returns it.
pub async fn event(
    events: &Api<Event>,
    uid: &str,
    reason: &str,
    context: impl Fn() -> String,
) -> Event {
    eventually(&format!("a {reason} Event"), context, || async {
        events_about(events, uid)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    })
    .await
}

pub fn uid_of(object: &DynamicObject) -> String {
    object.uid().expect("a uid")
}

/// Waits until the object with this `name` and `uid` is gone.
pub async fn gone(
    probes: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    context: impl Fn() -> String,
) {
    eventually(&format!("Probe {name} disappears"), context, || async {
        match probes.get_opt(name).await {
            Ok(None) => Some(()),
            Ok(Some(p)) if p.uid().as_deref() != Some(uid) => Some(()),
            _ => None,
        }
    })
    .await;
}

/// Applies the ServiceAccount, ClusterRole and binding of the `manifests` output.
pub async fn apply_rbac(client: &kube::Client, manifests: &str) {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(manifests).expect("the manifests parse as YAML");
    let mut applied = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let pp = PostParams::default();
        match kind.as_str() {
            "ServiceAccount" => {
                let sa: ServiceAccount = serde_json::from_value(doc).expect("ServiceAccount");
                let ns = sa.namespace().expect("a namespace");
                Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                    .create(&pp, &sa)
                    .await
                    .expect("create the ServiceAccount");
            }
            "ClusterRole" => {
                let role: ClusterRole = serde_json::from_value(doc).expect("ClusterRole");
                Api::<ClusterRole>::all(client.clone())
                    .create(&pp, &role)
                    .await
                    .expect("create the ClusterRole");
            }
            "ClusterRoleBinding" => {
                let binding: ClusterRoleBinding =
                    serde_json::from_value(doc).expect("ClusterRoleBinding");
                Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&pp, &binding)
                    .await
                    .expect("create the ClusterRoleBinding");
            }
            _ => continue,
        }
        applied.push(kind);
    }
    assert_eq!(
        applied,
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"],
        "{manifests}"
    );
}
