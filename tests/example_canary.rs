//! End-to-end test of `examples/canary` (a phase machine) as its users run it: the binary's `crd`
//! output installed into a real kube-apiserver + etcd, `run` started as a child process, then:
//!
//! - `good` (success rate 0.99, from the ConfigMap the test writes) walks Initializing -> Waiting
//!   -> Evaluating -> Promoting -> Succeeded; `bad` (0.5) walks ... -> Evaluating -> RollingBack ->
//!   Failed. testenv runs in cluster mode: the canary and primary Deployments roll out through
//!   the real controllers, scheduler and a kwok node (the test writes no status) while Waiting
//!   waits for both (two inputs of one type, told apart by name). Each transition shows in `status.phase`,
//!   in `PhaseChanged` Events and in `phase_transitions_total`; the outputs carry owner references;
//! - `stuck`'s canary Deployment has pods that never become ready (kwok) and a 2 s progress
//!   deadline: the Deployment controller reports `ProgressDeadlineExceeded` and Waiting rolls
//!   back (Waiting -> RollingBack -> Failed, never evaluated, the canary scaled to zero);
//! - `third` has no success rate yet and stays in Evaluating (its evaluation interval is an hour);
//!   deleting its traffic ConfigMap re-creates it (the `owns` trigger: the interval cannot have);
//! - the operator is killed (SIGKILL) while `third` is in Evaluating and restarted with
//!   `--prometheus-url` pointing at a **real Prometheus** (Debian's `prometheus` package) that
//!   scrapes the restarted operator's own `/metrics`; `third`'s success-rate query is
//!   `max(up{job="canary-operator"})`, 1 once Prometheus scraped the operator: `third` resumes at
//!   Evaluating and reaches Succeeded without repeating a finished phase (no second
//!   `Initializing -> Waiting` Event, the restarted operator counts no transition out of them);
//! - deleting `good` runs the finalizer hook exactly once (one "canary finalized" log line);
//! - SIGTERM stops it with exit code 0.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use example_support::{binary, eventually, free_port, get, output_of, send_signal, until_ready};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::sdk::testenv::cluster::{NEVER_READY, POD_BEHAVIOUR_LABEL};
use serde_json::json;

const EXAMPLE: &str = "kubeapp-example-canary";

fn canaries(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("canary.kubeapp.dev", "v1", "Canary"),
        "canaries",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn canary(ns: &str, name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "canary.kubeapp.dev/v1", "kind": "Canary",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"stableImage": "shop:1", "image": "shop:2", "minSuccessRate": 0.9,
                 "successRateQuery": "max(up{job=\"canary-operator\"})"}
    }))
    .expect("a Canary")
}

fn phase(canary: &DynamicObject) -> &str {
    canary.data["status"]["phase"].as_str().unwrap_or("")
}

/// The operator as a child process, logging into `log`.
struct Running {
    child: tokio::process::Child,
    pid: u32,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Running {
    async fn start(
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

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn metrics(&self) -> String {
        get(self.metrics, "/metrics").await.expect("/metrics").1
    }

    async fn stop(mut self) {
        send_signal(self.pid, "TERM");
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), self.child.wait())
            .await
            .expect("stops within a minute of SIGTERM")
            .expect("wait for the operator");
        assert!(status.success(), "exit status {status}\n{}", self.logs());
    }

    async fn kill(mut self) {
        send_signal(self.pid, "KILL");
        self.child
            .wait()
            .await
            .expect("wait for the killed operator");
    }
}

async fn success_rate(config_maps: &Api<ConfigMap>, canary: &str, rate: &str) {
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{canary}-success-rate")}, "data": {"rate": rate}
    }))
    .expect("a ConfigMap");
    config_maps
        .create(&PostParams::default(), &map)
        .await
        .expect("write the success rate");
}

/// The `PhaseChanged` Event notes about `name`.
async fn transitions(events: &Api<Event>, name: &str) -> Vec<String> {
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
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real Prometheus (Debian's package) scraping `target` every second, listening on `port`.
fn start_prometheus(dir: &Path, port: u16, target: SocketAddr) -> Reaped {
    let binary = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: canary-operator\n    static_configs:\n      \
             - targets: ['{target}']\n"
        ),
    )
    .expect("write the Prometheus config");
    let child = std::process::Command::new(&binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("log file"))
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {binary} ({error}): install it with `apt-get install prometheus` \
                 (.ci/run does), or set PROMETHEUS to its path"
            )
        });
    Reaped(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_walk_their_phases_resume_after_a_kill_and_finalize_once() {
    let example = binary(EXAMPLE, EXAMPLE);
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    env.install_crds_yaml(&output_of(&example, &["crd"]))
        .await
        .expect("the generated CRD installs");
    let ns = env.create_namespace("canary").await.expect("namespace");
    let client = env.client();
    let apps = canaries(&client, &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    success_rate(&config_maps, "good", "0.99").await;
    success_rate(&config_maps, "bad", "0.5").await;

    let metrics_1 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let operator = Running::start(
        &example,
        &env,
        env.dir().join("canary-1.log"),
        metrics_1,
        &["--evaluation-interval", "1h"],
    )
    .await;
    let logs = || operator.logs();
    let mut uids = Vec::new();
    for name in ["good", "bad", "third"] {
        let created = apps
            .create(&PostParams::default(), &canary(&ns, name))
            .await
            .expect("create a Canary");
        uids.push(created.uid().expect("uid"));
    }
    for name in ["good", "bad", "third"] {
        let deployment = format!("{name}-canary");
        let found = eventually("the canary Deployment", logs, || async {
            deployments.get_opt(&deployment).await.ok().flatten()
        })
        .await;
        assert!(
            found
                .owner_references()
                .iter()
                .any(|o| o.name == name && o.controller == Some(true)),
            "{deployment} is owned by its Canary"
        );
    }
    for (name, last) in [("good", "Succeeded"), ("bad", "Failed")] {
        eventually("a final phase", logs, || async {
            apps.get(name).await.ok().filter(|c| phase(c) == last)
        })
        .await;
    }
    // The phase's Event is posted after its status is written: the last one may still be on
    // its way when the final phase is seen.
    for (name, steps) in [
        (
            "good",
            &[
                "Initializing -> Waiting",
                "Waiting -> Evaluating",
                "Evaluating -> Promoting",
                "Promoting -> Succeeded",
            ][..],
        ),
        (
            "bad",
            &["Evaluating -> RollingBack", "RollingBack -> Failed"][..],
        ),
    ] {
        eventually("every phase change reported as an Event", logs, || async {
            let seen = transitions(&events, name).await;
            steps
                .iter()
                .all(|step| seen.iter().any(|n| n == step))
                .then_some(())
        })
        .await;
    }
    let promoted = deployments.get("good-primary").await.expect("primary");
    let image =
        serde_json::to_value(&promoted).expect("json")["spec"]["template"]["spec"]["containers"][0]
            ["image"]
            .clone();
    assert_eq!(
        image, "shop:2",
        "Promoting moved the primary to the new image"
    );
    let traffic = config_maps.get("bad-traffic").await.expect("traffic");
    assert_eq!(
        traffic
            .data
            .as_ref()
            .and_then(|d| d.get("canary"))
            .map(String::as_str),
        Some("0"),
        "RollingBack sent all traffic to the primary"
    );
    let metrics = operator.metrics().await;
    for line in [
        "phase_transitions_total{from=\"Evaluating\",kind=\"Canary\",to=\"Promoting\"} 1",
        "phase_transitions_total{from=\"Evaluating\",kind=\"Canary\",to=\"RollingBack\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics");
    }

    // `stuck`: its canary's pods never become ready (kwok's never-ready label, put on the pod
    // template by the test before the operator applies the Deployment; server-side apply keeps
    // another writer's fields), so the rollout passes its progress deadline and the real
    // Deployment controller reports ProgressDeadlineExceeded: Waiting rolls back, with no
    // evaluation.
    let stuck: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "stuck-canary"},
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": 2,
            "selector": {"matchLabels": {"app": "stuck", "track": "stuck-canary"}},
            "template": {
                "metadata": {"labels": {"app": "stuck", "track": "stuck-canary",
                                        POD_BEHAVIOUR_LABEL: NEVER_READY}},
                "spec": {"containers": [{"name": "app", "image": "shop:2"}]}
            }
        }
    }))
    .expect("a Deployment");
    deployments
        .create(&PostParams::default(), &stuck)
        .await
        .expect("create the canary Deployment whose pods never become ready");
    apps.create(&PostParams::default(), &canary(&ns, "stuck"))
        .await
        .expect("create the stuck Canary");
    let failed = eventually("stuck is rolled back", logs, || async {
        apps.get("stuck")
            .await
            .ok()
            .filter(|c| phase(c) == "Failed")
    })
    .await;
    eventually("stuck's phase changes as Events", logs, || async {
        let seen = transitions(&events, "stuck").await;
        (seen.iter().any(|n| n == "Waiting -> RollingBack")
            && seen.iter().any(|n| n == "RollingBack -> Failed"))
        .then_some(seen)
    })
    .await;
    assert!(
        !transitions(&events, "stuck")
            .await
            .iter()
            .any(|n| n.starts_with("Evaluating")),
        "a failed rollout is never evaluated"
    );
    let scaled_down = deployments.get("stuck-canary").await.expect("canary");
    assert_eq!(
        scaled_down.spec.as_ref().and_then(|s| s.replicas),
        Some(0),
        "RollingBack scaled the canary to zero: {:?}\n{}",
        failed.data["status"],
        logs()
    );

    // `third` has no success rate: it stays in Evaluating (interval: one hour).
    eventually("third evaluates", logs, || async {
        apps.get("third")
            .await
            .ok()
            .filter(|c| phase(c) == "Evaluating")
    })
    .await;
    let old = config_maps
        .get("third-traffic")
        .await
        .expect("traffic")
        .uid();
    config_maps
        .delete("third-traffic", &DeleteParams::default())
        .await
        .expect("delete an output");
    eventually("the deleted output is re-created", logs, || async {
        config_maps
            .get_opt("third-traffic")
            .await
            .ok()
            .flatten()
            .filter(|m| m.uid() != old)
    })
    .await;

    // Killed mid-Evaluating; restarted against a real Prometheus scraping it. Until the first
    // scrape the query has no result and `third` keeps evaluating, every 2 s now.
    operator.kill().await;
    let metrics_2 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let prometheus_port = free_port();
    let prometheus_dir = env.dir().join("prometheus");
    std::fs::create_dir_all(&prometheus_dir).expect("dir");
    let prometheus = start_prometheus(&prometheus_dir, prometheus_port, metrics_2);
    // Prometheus answers queries once it is ready; before that the operator's queries fail to
    // connect and back off (5 s, 10 s, 20 s ...), which on a loaded machine outlasts the wait.
    let prometheus_log = prometheus_dir.join("prometheus.log");
    let prometheus_logs = || std::fs::read_to_string(&prometheus_log).unwrap_or_default();
    eventually("Prometheus is ready", prometheus_logs, || async {
        get(
            SocketAddr::from(([127, 0, 0, 1], prometheus_port)),
            "/-/ready",
        )
        .await
        .filter(|(status, _)| *status == 200)
    })
    .await;
    let url = format!("http://127.0.0.1:{prometheus_port}");
    let operator = Running::start(
        &example,
        &env,
        env.dir().join("canary-2.log"),
        metrics_2,
        &["--prometheus-url", &url, "--evaluation-interval", "2s"],
    )
    .await;
    let logs = || operator.logs();
    let resumed = eventually("third resumes and succeeds", logs, || async {
        apps.get("third")
            .await
            .ok()
            .filter(|c| phase(c) == "Succeeded")
    })
    .await;
    assert_eq!(
        resumed.data["status"]["details"]["successRate"], 1.0,
        "the rate is Prometheus' answer (up of the scraped operator)"
    );
    drop(prometheus);
    let third = transitions(&events, "third").await;
    assert_eq!(
        third
            .iter()
            .filter(|n| *n == "Initializing -> Waiting")
            .count(),
        1,
        "no finished phase ran again: {third:?}"
    );
    let metrics = operator.metrics().await;
    assert!(
        !metrics.contains("from=\"Initializing\"") && !metrics.contains("from=\"Waiting\""),
        "the restarted operator moved nothing out of a finished phase"
    );

    // Deleting a canary runs its finalizer hook once.
    apps.delete("good", &DeleteParams::default())
        .await
        .expect("delete good");
    eventually("good is gone", logs, || async {
        matches!(apps.get_opt("good").await, Ok(None)).then_some(())
    })
    .await;
    let finalized = operator
        .logs()
        .lines()
        .filter(|l| l.contains("canary finalized") && l.contains("good"))
        .count();
    assert_eq!(
        finalized,
        1,
        "the hook ran exactly once\n{}",
        operator.logs()
    );
    operator.stop().await;
}
