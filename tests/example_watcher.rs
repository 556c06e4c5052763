//! End-to-end test of the watcher example binary (`examples/watcher`), run as a child process
//! against a real kube-apiserver + etcd with a `testenv` kubeconfig.
//!
//! The binary is the one cargo built next to this test (`target/<profile>/kubeapp-example-watcher`);
//! build it first with `cargo build -p kubeapp-example-watcher --all-features` (`cargo test
//! --workspace` builds it too). The test never runs cargo itself.
//!
//! Every wait is a condition polled against a deadline; the operator's JSON log lines are what
//! tell the test that a step is in flight.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kubeapp::sdk::testenv::TestEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BINARY: &str = "kubeapp-example-watcher";
const TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// The app name: the Events' reportingController.
const APP: &str = "probe-watcher";
/// The finalizer the opinionated watcher puts on handled Probes (`{app}-{plural}-finalizer`).
const FINALIZER: &str = "probe-watcher-probes-finalizer";
/// The custom metric.
const STEPS: &str = "probe_lifecycle_events_total";

/// The example binary, next to this test's `deps/` directory; fails loudly when it was not built.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let binary = profile_dir.join(format!("{BINARY}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "the example binary {} is missing: build it first with \
         `cargo build -p kubeapp-example-watcher --all-features` (same profile and target dir as \
         the tests), or run the tests with `cargo test --workspace --all-features`",
        binary.display()
    );
    binary
}

/// Runs the binary to completion with `args`; returns its stdout (and asserts success).
fn output_of(args: &[&str]) -> String {
    let output = std::process::Command::new(binary())
        .args(args)
        .output()
        .expect("run the example binary");
    assert!(
        output.status.success(),
        "{args:?} failed with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Polls `probe` until it returns `Some`, failing with `what` (and `context()`) at the deadline.
async fn eventually<T, F, Fut>(what: &str, context: impl Fn() -> String, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: not reached within {TIMEOUT:?}\n{}", context());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `GET path` over HTTP/1.0; `None` when nothing answers (yet).
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()??;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The sum of the samples of `name` whose labels contain every one of `labels` (`key="value"`).
fn sample(exposition: &str, name: &str, labels: &[&str]) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `probe_lifecycle_events_total{step}` in an exposition, or `None` when the series is absent.
fn steps(exposition: &str, step: &str) -> Option<f64> {
    let prefix = format!("{STEPS}{{step=\"{step}\"}} ");
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// The operator binary running as a child process, its stderr (JSON logs) in a file.
struct Operator {
    child: tokio::process::Child,
    pid: u32,
    addr: SocketAddr,
    log_path: PathBuf,
}

impl Operator {
    /// Starts `run` with `kubeconfig`, logs in JSON into `log_path`, and `extra` flags.
    fn start(kubeconfig: &Path, log_path: PathBuf, extra: &[&str]) -> Self {
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
    fn logs(&self) -> String {
        format!(
            "operator logs ({}):\n{}",
            self.log_path.display(),
            std::fs::read_to_string(&self.log_path).unwrap_or_default()
        )
    }

    /// The JSON log lines so far, as `(message, fields)`.
    fn log_lines(&self) -> Vec<(String, serde_json::Value)> {
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
    fn log_index(&self, message: &str, fields: &[(&str, &str)]) -> Option<usize> {
        self.log_lines()
            .iter()
            .position(|(m, f)| m == message && fields.iter().all(|(key, value)| f[*key] == *value))
    }

    async fn wait_ready(&self) {
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
    async fn metrics_when(&self, what: &str, accept: impl Fn(&str) -> bool) -> String {
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
    async fn terminate(mut self) -> Self {
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

fn probes_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("watcher.example.kubeapp.dev", "v1", "Probe");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "probes");
    Api::namespaced_with(client.clone(), ns, &resource)
}

async fn create_probe(
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

async fn set_target(probes: &Api<DynamicObject>, name: &str, target: &str) -> DynamicObject {
    let patch = serde_json::json!({"spec": {"target": target}});
    probes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("update Probe {name}: {e}"))
}

/// The Events in `ns` about the object with `uid`.
async fn events_about(events: &Api<Event>, uid: &str) -> Vec<Event> {
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
async fn count_of(events: &Api<Event>, uid: &str, reason: &str) -> i32 {
    events_about(events, uid)
        .await
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// Waits for the Event with `reason` about the object with `uid`, and returns it.
async fn event(
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

fn uid_of(object: &DynamicObject) -> String {
    object.uid().expect("a uid")
}

/// Waits until the object with this `name` and `uid` is gone.
async fn gone(probes: &Api<DynamicObject>, name: &str, uid: &str, context: impl Fn() -> String) {
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
async fn apply_rbac(client: &kube::Client, manifests: &str) {
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

#[test]
fn crd_help_and_manifests_describe_the_operator() {
    let yaml = output_of(&["crd"]);
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&yaml).expect("the crd output parses as CRD YAML");
    assert_eq!(crds.len(), 1, "{yaml}");
    let crd = &crds[0];
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("probes.watcher.example.kubeapp.dev")
    );
    assert_eq!(crd.spec.names.kind, "Probe");
    assert_eq!(crd.spec.scope, "Namespaced");
    let version = &crd.spec.versions[0];
    assert_eq!((version.name.as_str(), version.storage), ("v1", true));
    let schema = serde_json::to_value(&version.schema).expect("schema");
    assert_eq!(
        schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["processingMillis"]["type"],
        "integer",
        "{yaml}"
    );

    let help = output_of(&["--help"]);
    for flag in [
        "--metrics-addr",
        "--namespace",
        "--log-format",
        "--otlp-endpoint",
        "--shutdown-timeout",
        "--instance",
        "METRICS_ADDR",
        "WATCH_NAMESPACE",
        "LOG_FORMAT",
        "SHUTDOWN_TIMEOUT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "POD_NAME",
        "crd",
        "manifests",
        "run",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }

    let manifests = output_of(&["manifests", "--namespace", "ops", "--image", "example:1"]);
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&manifests).expect("the manifests parse as YAML");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service"
        ],
        "{manifests}"
    );
    let role: ClusterRole = serde_json::from_value(docs[1].clone()).expect("a ClusterRole");
    let grants = |group: &str, resource: &str, verb: &str| {
        role.rules.iter().flatten().any(|rule| {
            let has = |items: &Option<Vec<String>>, value: &str| {
                items.iter().flatten().any(|item| item == value)
            };
            has(&rule.api_groups, group)
                && rule.resources.iter().flatten().any(|r| r == resource)
                && rule.verbs.iter().any(|v| v == verb)
        })
    };
    assert!(grants("events.k8s.io", "events", "create"), "{manifests}");
    assert!(grants("", "events", "create"), "{manifests}");
    assert!(
        grants("watcher.example.kubeapp.dev", "probes", "patch"),
        "{manifests}"
    );
    let container = &docs[3]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example:1", "{manifests}");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["ports"][0]["name"], "metrics");
    let service = &docs[4];
    assert_eq!(service["metadata"]["namespace"], "ops", "{manifests}");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
}

/// The operator runs with exactly the RBAC its `manifests` command generates: readiness follows
/// the CRD, each lifecycle step becomes an Event and a count, and SIGTERM lets a step in flight
/// finish before a clean exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_steps_become_events_and_metrics_and_sigterm_finishes_the_step_in_flight() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("example-watcher")
        .await
        .expect("namespace");
    let client = env.client();

    // The operator's identity: the generated ServiceAccount, bound to the generated ClusterRole.
    apply_rbac(&client, &output_of(&["manifests", "--namespace", &ns])).await;
    let user = format!("system:serviceaccount:{ns}:{BINARY}");
    let identity = env
        .identity(&user, &["system:serviceaccounts"])
        .await
        .expect("the operator's identity");

    let operator = Operator::start(
        &identity.kubeconfig_path,
        env.dir().join("example-watcher.log"),
        &["--namespace", &ns, "--instance", "e2e-instance"],
    );
    let logs = || operator.logs();

    // The CRD is not installed yet: the informer cannot list, so /readyz fails (while /livez
    // passes); once the generated CRD is installed, the informer syncs and /readyz passes.
    let (status, body) =
        eventually("/readyz answers", logs, || get(operator.addr, "/readyz")).await;
    assert_eq!(status, 503, "not ready before the informers synced: {body}");
    assert!(body.contains("probes"), "names the unsynced kind: {body}");
    let (status, _) = get(operator.addr, "/livez").await.expect("/livez answers");
    assert_eq!(status, 200, "alive while not ready");
    env.install_crds_yaml(&output_of(&["crd"]))
        .await
        .expect("the apiserver accepts the generated CRD");
    operator.wait_ready().await;

    let probes = probes_api(&client, &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // add: an Added Event about the Probe, and the finalizer that makes downtime safe.
    let web = create_probe(&probes, "web", "https://example.com/healthz", 50).await;
    let uid = uid_of(&web);
    let added = event(&events, &uid, "Added", logs).await;
    let regarding = added.regarding.clone().expect("regarding");
    assert_eq!(
        (
            regarding.api_version.as_deref(),
            regarding.kind.as_deref(),
            regarding.name.as_deref(),
            regarding.namespace.as_deref(),
        ),
        (
            Some("watcher.example.kubeapp.dev/v1"),
            Some("Probe"),
            Some("web"),
            Some(ns.as_str()),
        )
    );
    assert_eq!(added.type_.as_deref(), Some("Normal"));
    assert_eq!(added.action.as_deref(), Some("Add"));
    assert_eq!(added.reporting_controller.as_deref(), Some(APP));
    assert_eq!(added.reporting_instance.as_deref(), Some("e2e-instance"));
    let note = added.note.clone().unwrap_or_default();
    assert!(
        note.contains(&format!("Probe {ns}/web added"))
            && note.contains("https://example.com/healthz"),
        "{note}"
    );
    eventually("the finalizer is on the Probe", logs, || async {
        probes
            .get("web")
            .await
            .ok()
            .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
    })
    .await;

    // update: a spec change.
    set_target(&probes, "web", "https://example.com/readyz").await;
    let updated = event(&events, &uid, "Updated", logs).await;
    let note = updated.note.unwrap_or_default();
    assert!(
        note.contains("generation 1 -> 2")
            && note.contains("\"https://example.com/healthz\" -> \"https://example.com/readyz\""),
        "{note}"
    );

    // delete: the Event is written while the finalizer holds the object, then it goes.
    probes
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the Probe");
    let deleted = event(&events, &uid, "Deleted", logs).await;
    assert!(
        deleted
            .note
            .unwrap_or_default()
            .contains("last target \"https://example.com/readyz\""),
        "Deleted Event note"
    );
    gone(&probes, "web", &uid, logs).await;

    // Exactly one Event per step, and the same counts in the custom metric.
    for reason in ["Added", "Updated", "Deleted"] {
        assert_eq!(count_of(&events, &uid, reason).await, 1, "{reason} Events");
    }
    assert_eq!(count_of(&events, &uid, "Synced").await, 0, "Synced Events");
    let exposition = operator
        .metrics_when("/metrics counts the delete", |body| {
            steps(body, "delete") == Some(1.0)
        })
        .await;
    for (step, count) in [
        ("add", 1.0),
        ("update", 1.0),
        ("delete", 1.0),
        ("sync", 0.0),
    ] {
        assert_eq!(
            steps(&exposition, step),
            Some(count),
            "{step}:\n{exposition}"
        );
    }
    // The SDK's metrics, for the kind, next to it.
    let kind = "kind=\"probes\"";
    for (name, labels) in [
        ("informer_events_total", vec![kind, "event_type=\"CREATE\""]),
        ("informer_events_total", vec![kind, "event_type=\"UPDATE\""]),
        ("informer_events_total", vec![kind, "event_type=\"DELETE\""]),
        ("watcher_process_duration_seconds_count", vec![kind]),
        ("informer_reconcile_duration_seconds_count", vec![kind]),
        (
            "kubernetes_client_requests_total",
            vec!["kind=\"events\"", "verb=\"create\"", "status_code=\"201\""],
        ),
    ] {
        assert!(
            sample(&exposition, name, &labels) > 0.0,
            "{name}{labels:?} missing or zero:\n{exposition}"
        );
    }
    assert!(
        exposition.contains("ongoing_reconcile_processes{"),
        "{exposition}"
    );

    // SIGTERM while a step is in flight: the step finishes (its Event is written), then the
    // process exits 0.
    let slow = create_probe(&probes, "slow", "https://example.com/slow", 3000).await;
    let slow_uid = uid_of(&slow);
    let slow_key = format!("{ns}/slow");
    let in_flight = [("step", "add"), ("probe", slow_key.as_str())];
    eventually("the slow add is in flight", logs, || async {
        operator.log_index("processing started", &in_flight)
    })
    .await;
    let operator = operator.terminate().await;
    let started = operator.log_index("processing started", &in_flight);
    let stopping = operator.log_index("stopping the apps", &[]);
    let recorded = operator.log_index("step recorded", &in_flight);
    assert!(
        started < stopping && stopping < recorded && started.is_some(),
        "expected: processing started < stopping the apps < step recorded, got \
         {started:?} {stopping:?} {recorded:?}\n{}",
        operator.logs()
    );
    let slow_added = events_about(&events, &slow_uid).await;
    assert!(
        slow_added
            .iter()
            .any(|e| e.reason.as_deref() == Some("Added")),
        "the in-flight step's Event: {slow_added:?}\n{}",
        operator.logs()
    );
}

/// The opinionated watcher's finalizer: a Probe deleted while the operator is down gets its
/// `Deleted` step when the operator starts again, and a Probe changed meanwhile gets `Synced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_while_the_operator_is_down_is_recorded_after_the_restart() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("example-watcher-down")
        .await
        .expect("namespace");
    let client = env.client();
    env.install_crds_yaml(&output_of(&["crd"]))
        .await
        .expect("the apiserver accepts the generated CRD");
    let probes = probes_api(&client, &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // First run, all namespaces: both Probes are added and get the finalizer.
    let first = Operator::start(env.kubeconfig_path(), env.dir().join("first.log"), &[]);
    first.wait_ready().await;
    let kept = create_probe(&probes, "kept", "https://example.com/a", 0).await;
    let doomed = create_probe(&probes, "doomed", "https://example.com/b", 0).await;
    let (kept_uid, doomed_uid) = (uid_of(&kept), uid_of(&doomed));
    for (name, uid) in [("kept", &kept_uid), ("doomed", &doomed_uid)] {
        event(&events, uid, "Added", || first.logs()).await;
        eventually(
            &format!("the finalizer is on {name}"),
            || first.logs(),
            || async {
                probes
                    .get(name)
                    .await
                    .ok()
                    .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
            },
        )
        .await;
    }
    let first = first.terminate().await;

    // Downtime: one Probe is deleted (the finalizer holds it), the other changed.
    probes
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete doomed");
    let held = probes.get("doomed").await.expect("doomed is still there");
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "held by the finalizer: {held:?}"
    );
    set_target(&probes, "kept", "https://example.com/changed").await;

    // Second run: doomed gets Deleted and goes, kept gets Synced (no second Added).
    let second = Operator::start(env.kubeconfig_path(), env.dir().join("second.log"), &[]);
    let logs = || format!("{}\n{}", first.logs(), second.logs());
    let deleted = event(&events, &doomed_uid, "Deleted", logs).await;
    assert_eq!(deleted.reporting_controller.as_deref(), Some(APP));
    assert_eq!(deleted.reporting_instance.as_deref(), Some(APP));
    gone(&probes, "doomed", &doomed_uid, logs).await;
    let synced = event(&events, &kept_uid, "Synced", logs).await;
    assert!(
        synced
            .note
            .unwrap_or_default()
            .contains("https://example.com/changed"),
        "Synced sees the change made during the downtime"
    );
    assert_eq!(count_of(&events, &kept_uid, "Added").await, 1);
    assert_eq!(count_of(&events, &doomed_uid, "Deleted").await, 1);

    let exposition = second
        .metrics_when("/metrics counts the delete and the sync", |body| {
            steps(body, "delete") == Some(1.0) && steps(body, "sync") == Some(1.0)
        })
        .await;
    for (step, count) in [
        ("add", 0.0),
        ("update", 0.0),
        ("delete", 1.0),
        ("sync", 1.0),
    ] {
        assert_eq!(
            steps(&exposition, step),
            Some(count),
            "{step}:\n{exposition}"
        );
    }
    second.terminate().await;
}
