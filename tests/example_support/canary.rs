//! What the canary example's end-to-end test runs besides the control plane: the operator as a
//! child process, a real Prometheus (Debian's `prometheus` package) scraping chosen targets,
//! the `kubeapp` command, and reading a Canary's phase, conditions, Events and analysis.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::TestEnv;
use serde_json::Value;

use super::{get, send_signal, until_ready};

/// The annotation a gate is written in.
pub const GATE: &str = "phases.kubeapp.dev/gate";

/// A Canary `name` of `shop:2` over `shop:1`, decided by `analysis`.
pub fn canary(ns: &str, name: &str, analysis: Value, annotations: Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "canary.kubeapp.dev/v1", "kind": "Canary",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"stableImage": "shop:1", "image": "shop:2", "analysis": analysis}
    }))
    .expect("a Canary")
}

/// An analysis of `query`: successful at `>= 0.9`, `count` measurements `interval` apart.
pub fn analysis(query: &str, count: u32, interval: &str) -> Value {
    serde_json::json!({"metric": "successRate", "query": query, "success": ">= 0.9",
                       "count": count, "interval": interval})
}

/// The image of a Deployment's first container.
pub fn image(deployment: &k8s_openapi::api::apps::v1::Deployment) -> Value {
    serde_json::to_value(deployment).expect("json")["spec"]["template"]["spec"]["containers"][0]
        ["image"]
        .clone()
}

/// The Canaries of namespace `ns`.
pub fn canaries(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("canary.kubeapp.dev", "v1", "Canary"),
        "canaries",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// A Canary's `status.phase`.
pub fn phase(canary: &DynamicObject) -> &str {
    canary.data["status"]["phase"].as_str().unwrap_or("")
}

/// A Canary's condition of `type_` (`Null` when not set).
pub fn condition(canary: &DynamicObject, type_: &str) -> Value {
    canary.data["status"]["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

/// The operator as a child process, logging into `log`.
pub struct Running {
    child: tokio::process::Child,
    pid: u32,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Running {
    /// Starts `example run` on `metrics` with `extra` flags; returns once it is ready.
    pub async fn start(
        example: &Path,
        env: &TestEnv,
        log: PathBuf,
        metrics: SocketAddr,
        extra: &[&str],
    ) -> Self {
        let child = tokio::process::Command::new(example)
            .args(["run", "--metrics-addr", &metrics.to_string()])
            .args(extra)
            .env("KUBECONFIG", env.kubeconfig_path())
            .env("RUST_LOG", "info")
            .env_remove("WATCH_NAMESPACE")
            .env_remove("PROMETHEUS_URL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("start the canary operator");
        let pid = child.id().expect("a pid");
        let running = Self {
            child,
            pid,
            metrics,
            log,
        };
        until_ready(metrics, || running.logs()).await;
        running
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its `/metrics`.
    pub async fn metrics(&self) -> String {
        get(self.metrics, "/metrics").await.expect("/metrics").1
    }

    /// SIGTERM; asserts it stops with exit code 0 within a minute.
    pub async fn stop(mut self) {
        send_signal(self.pid, "TERM");
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), self.child.wait())
            .await
            .expect("stops within a minute of SIGTERM")
            .expect("wait for the operator");
        assert!(status.success(), "exit status {status}\n{}", self.logs());
    }

    /// SIGKILL.
    pub async fn kill(mut self) {
        send_signal(self.pid, "KILL");
        self.child
            .wait()
            .await
            .expect("wait for the killed operator");
    }
}

/// The `PhaseChanged` Event notes about `name`.
pub async fn transitions(events: &Api<Event>, name: &str) -> Vec<String> {
    let params = ListParams::default().fields(&format!("involvedObject.name={name}"));
    events
        .list(&params)
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PhaseChanged"))
        .filter_map(|e| e.message)
        .collect()
}

/// A child process killed (and reaped) when dropped, also when the test fails.
pub struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real Prometheus (Debian's package) scraping each `(job, target)` every second, listening
/// on `port`; returns once it answers `/-/ready`.
pub async fn start_prometheus(dir: &Path, port: u16, jobs: &[(&str, SocketAddr)]) -> Reaped {
    let mut scrape_configs = String::new();
    for (job, target) in jobs {
        scrape_configs.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        ));
    }
    start_prometheus_with(dir, port, &scrape_configs, &[]).await
}

/// A real Prometheus with `scrape_configs` (YAML list items, indented two spaces) and the rule
/// files `rule_files`, scraping and evaluating every second, listening on `port`; returns once it
/// answers `/-/ready`.
pub async fn start_prometheus_with(
    dir: &Path,
    port: u16,
    scrape_configs: &str,
    rule_files: &[&Path],
) -> Reaped {
    let binary = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let config = dir.join("prometheus.yml");
    let mut text = String::from("global: {scrape_interval: 1s, evaluation_interval: 1s}\n");
    if !rule_files.is_empty() {
        text.push_str("rule_files:\n");
        for file in rule_files {
            text.push_str(&format!("  - '{}'\n", file.display()));
        }
    }
    text.push_str("scrape_configs:\n");
    text.push_str(scrape_configs);
    std::fs::write(&config, text).expect("write the Prometheus config");
    let log = dir.join("prometheus.log");
    let child = std::process::Command::new(&binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {binary} ({error}): install it with `apt-get install prometheus` \
                 (.ci/run does), or set PROMETHEUS to its path"
            )
        });
    let reaped = Reaped(child);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    super::eventually("Prometheus is ready", logs, || async {
        get(SocketAddr::from(([127, 0, 0, 1], port)), "/-/ready")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    reaped
}
