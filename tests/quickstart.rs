//! End-to-end test of the quick start: `scripts/quickstart` is `kubeapp run --dir
//! examples/reconciler`. The `kubeapp` binary runs as a child process, starts its own control
//! plane and the reconciler example, and prints the refused sample, the samples' status, the
//! labels the mutating webhook set, the sample read as v2, the ConfigMap it owns and the metrics
//! URL; the test checks that output against the cluster through the printed kubeconfig, scrapes
//! the printed metrics URL, sends SIGINT, and checks that `kubeapp` exits 0 and that the
//! operator, kube-apiserver and etcd it started, and its directory, are gone.
//!
//! Both binaries are the ones cargo built next to this test; build them first with
//! `cargo build -p kubeapp-cli -p kubeapp-example-reconciler` (`scripts/test` does).
//! `kubeapp run` runs `cargo build` of the example itself, offline and in this test's target
//! directory, where it finds the example built.

mod example_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncBufReadExt, BufReader};

use example_support::{
    APP_NAME, OPERATOR_LABEL, binary, get, reconciled, reconciler_binary, send_signal, templates,
};

/// How long the quick start may take to print `ready:` (it starts a control plane and waits
/// for the operator, its webhooks and the sample's reconciliation).
const READY_TIMEOUT: Duration = Duration::from_secs(240);
/// How long it may take to stop after SIGINT.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// The value after `prefix` on the first line that starts with it.
fn after<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{}", lines.join("\n")))
}

/// The number after `label ` in `text`, e.g. `pid` in `... pid 42, ...`.
fn number_after(text: &str, label: &str) -> u32 {
    let rest = text
        .split_once(label)
        .unwrap_or_else(|| panic!("{label:?} not in {text:?}"))
        .1;
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {text:?}"))
}

/// Whether a process `pid` exists whose command line mentions `name` (a zombie has none).
fn running(pid: u32, name: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_shows_the_reconciled_sample_and_stops_everything_on_sigint() {
    let kubeapp = binary("kubeapp", "kubeapp-cli");
    reconciler_binary();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target_dir = kubeapp
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in <target>/<profile>/");
    let logs = tempfile::tempdir().expect("temp dir");
    let stderr_path = logs.path().join("quickstart.stderr");
    let stderr_file = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = tokio::process::Command::new(&kubeapp)
        .args(["run", "--dir", "examples/reconciler"])
        .current_dir(checkout)
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_NET_OFFLINE", "true")
        .env("RUST_LOG", "info")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start the quick start");
    let pid = child.id().expect("a pid");
    let stderr = || {
        format!(
            "kubeapp run stderr:\n{}",
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        )
    };
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();

    // Everything up to `ready:`.
    let mut lines: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        let line = tokio::time::timeout_at(deadline, stdout.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no `ready:` within {READY_TIMEOUT:?}; stdout so far:\n{}\n{}",
                    lines.join("\n"),
                    stderr()
                )
            })
            .expect("read stdout");
        let Some(line) = line else {
            panic!(
                "the quick start ended before `ready:`; stdout:\n{}\n{}",
                lines.join("\n"),
                stderr()
            );
        };
        let ready = line.starts_with("ready:");
        lines.push(line);
        if ready {
            break;
        }
    }
    let output = lines.join("\n");

    // What it started.
    let control_plane = after(&lines, "control plane: ");
    let apiserver_pid = number_after(control_plane, "kube-apiserver pid");
    let etcd_pid = number_after(control_plane, "etcd pid");
    let operator_pid = number_after(after(&lines, "operator: "), "pid");
    let dir = PathBuf::from(
        control_plane
            .split_once("files in ")
            .map(|(_, dir)| dir.trim_end_matches(')'))
            .expect("the directory"),
    );
    for (pid, name) in [
        (apiserver_pid, "kube-apiserver"),
        (etcd_pid, "etcd"),
        (operator_pid, "kubeapp-example-reconciler"),
    ] {
        assert!(
            running(pid, name),
            "{name} (pid {pid}) is not running\n{output}"
        );
    }
    assert!(dir.is_dir(), "{}", dir.display());

    // The printed status and ConfigMap.
    let status = after(&lines, "status: Template default/greeting ");
    assert!(
        status.starts_with("generation=1 observedGeneration=1 Ready=True (ConfigMapApplied:"),
        "{output}"
    );
    assert!(
        after(&lines, "labels: Template default/greeting ")
            .contains("reconciler.example.kubeapp.dev/operator=template-reconciler"),
        "{output}"
    );
    let configmap_at = lines
        .iter()
        .position(|l| l == "owned: ConfigMap default/greeting")
        .unwrap_or_else(|| panic!("no ConfigMap in:\n{output}"));
    assert_eq!(
        lines[configmap_at + 1..configmap_at + 3],
        ["  audience: world", "  greeting: hello"],
        "{output}"
    );
    let as_v2 = after(&lines, "v2: Template default/greeting spec ");
    assert!(
        as_v2.contains(r#"{"key":"greeting","value":"hello"}"#)
            && as_v2.ends_with("(converted by the conversion webhook)"),
        "{output}"
    );
    // The v2 sample went in through the conversion webhook and is shown as v1.
    assert!(
        after(&lines, "v1: Template default/farewell spec ").contains(r#""farewell":"goodbye""#),
        "{output}"
    );
    assert!(
        after(&lines, "refused: Template default/empty from ")
            .contains("cannot render a ConfigMap: it has no data"),
        "{output}"
    );

    // The printed kubeconfig reaches the same cluster, where the sample is reconciled.
    let kubeconfig_path = Path::new(after(&lines, "export KUBECONFIG="));
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path).expect("the printed kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client configuration");
    let client = kube::Client::try_from(config).expect("a client");
    let sample = templates(&client, "default", "v1")
        .get("greeting")
        .await
        .expect("the sample through the printed kubeconfig");
    assert!(reconciled(&sample), "{:?}", sample.data["status"]);
    assert_eq!(
        sample.labels().get(OPERATOR_LABEL).map(String::as_str),
        Some(APP_NAME)
    );
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get("greeting")
        .await
        .expect("the rendered ConfigMap");
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("greeting")
            .map(String::as_str),
        Some("hello")
    );

    // The printed metrics URL serves the operator's metrics.
    let metrics_url = after(&lines, "metrics: ");
    let addr: SocketAddr = metrics_url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("not an http://ADDR/metrics URL: {metrics_url}"));
    let (code, body) = get(addr, "/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.lines()
            .any(|l| l.starts_with("informer_events_total{") && l.contains("kind=\"templates\"")),
        "{body}"
    );
    // Each sample is reconciled once: two samples, two reconciler calls. The echoes of the
    // operator's own writes (its finalizer, its status, the ConfigMap it created) reconcile
    // nothing (issue #35: every sample used to be reconciled twice).
    let templates_sum = |name: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter(|l| l.contains("kind=\"templates\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let calls = templates_sum("reconciler_process_duration_seconds_count");
    assert_eq!(calls, 2.0, "one reconcile per sample\n{body}");

    // SIGINT: a clean stop, exit 0, nothing left behind.
    send_signal(pid, "INT");
    let exit = tokio::time::timeout(STOP_TIMEOUT, child.wait())
        .await
        .unwrap_or_else(|_| panic!("no exit within {STOP_TIMEOUT:?} of SIGINT\n{}", stderr()))
        .expect("wait for the quick start");
    let mut rest = Vec::new();
    while let Some(line) = stdout.next_line().await.expect("read stdout") {
        rest.push(line);
    }
    let rest = rest.join("\n");
    assert!(exit.success(), "exit status {exit}\n{rest}\n{}", stderr());
    assert!(
        rest.contains("stopped: operator") && rest.contains("stopped: control plane"),
        "{rest}"
    );
    for (pid, name) in [
        (apiserver_pid, "kube-apiserver"),
        (etcd_pid, "etcd"),
        (operator_pid, "kubeapp-example-reconciler"),
    ] {
        assert!(
            !running(pid, name),
            "{name} (pid {pid}) outlived the quick start"
        );
    }
    assert!(!dir.exists(), "{} was left behind", dir.display());
    assert!(
        stderr().contains("operator stopped"),
        "the operator shut down gracefully: {}",
        stderr()
    );
}
