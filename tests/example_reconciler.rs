//! End-to-end test of the reconciler example binary (`examples/reconciler`), run as a child
//! process against a real kube-apiserver + etcd with the `testenv` kubeconfig.
//!
//! The binary is the one cargo built next to this test (`target/<profile>/kubeapp-example-reconciler`);
//! build it first with `cargo build -p kubeapp-example-reconciler` (`cargo test --workspace`
//! builds it too). The test never runs cargo itself.
//!
//! Every wait is a condition polled against a deadline.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kubeapp::sdk::testenv::TestEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BINARY: &str = "kubeapp-example-reconciler";
const TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

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
         `cargo build -p kubeapp-example-reconciler` (same profile and target dir as the tests), \
         or run the tests with `cargo test --workspace`",
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

/// The sum of the samples of `name` for kind `templates` in a Prometheus exposition.
fn samples(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| {
            line.starts_with(&format!("{name}{{")) && line.contains("kind=\"templates\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn data_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

/// `(observedGeneration == generation, Ready == True)` of a Template.
fn reconciled(template: &DynamicObject) -> bool {
    let status = &template.data["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let generation = template.metadata.generation;
    generation.is_some() && status["observedGeneration"].as_i64() == generation && ready
}

#[test]
fn crd_output_is_a_crd_and_help_lists_the_flags() {
    let yaml = output_of(&["crd"]);
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&yaml).expect("the crd output parses as CRD YAML");
    assert_eq!(crds.len(), 1, "{yaml}");
    let crd = &crds[0];
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("templates.reconciler.example.kubeapp.dev")
    );
    assert_eq!(crd.spec.names.kind, "Template");
    assert_eq!(crd.spec.scope, "Namespaced");
    let version = &crd.spec.versions[0];
    assert_eq!((version.name.as_str(), version.storage), ("v1", true));
    assert!(
        version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()),
        "{yaml}"
    );

    let help = output_of(&["--help"]);
    for flag in [
        "--metrics-addr",
        "--namespace",
        "--log-format",
        "--otlp-endpoint",
        "--requeue-after",
        "--shutdown-timeout",
        "METRICS_ADDR",
        "WATCH_NAMESPACE",
        "LOG_FORMAT",
        "crd",
        "manifests",
        "run",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }

    let manifests = output_of(&["manifests", "--namespace", "ops", "--image", "example:1"]);
    assert!(manifests.contains("kind: ClusterRole"), "{manifests}");
    assert!(manifests.contains("path: /livez"), "{manifests}");
    assert!(manifests.contains("path: /readyz"), "{manifests}");
    assert!(manifests.contains("image: example:1"), "{manifests}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_reconciles_corrects_drift_cleans_up_and_stops_on_sigterm() {
    let binary = binary();
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("example-reconciler")
        .await
        .expect("namespace");
    let client = env.client();

    let log_path = env.dir().join("example-reconciler.log");
    let log_file = std::fs::File::create(&log_path).expect("log file");
    let logs = || {
        format!(
            "operator logs:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        )
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = tokio::process::Command::new(&binary)
        .arg("run")
        .args(["--metrics-addr", &addr.to_string()])
        .args(["--namespace", &ns])
        .args(["--requeue-after", "1s"])
        .args([
            "--shutdown-timeout",
            &format!("{}s", SHUTDOWN_TIMEOUT.as_secs()),
        ])
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("RUST_LOG", "info")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start the example binary");
    let pid = child.id().expect("a pid");

    // The CRD is not installed yet: the informer cannot list, so /readyz fails (while /livez
    // passes); once the generated CRD is installed, the informer syncs and /readyz passes.
    let (status, body) = eventually("/readyz answers", logs, || get(addr, "/readyz")).await;
    assert_eq!(status, 503, "not ready before the informers synced: {body}");
    assert!(
        body.contains("templates"),
        "names the unsynced kind: {body}"
    );
    env.install_crds_yaml(&output_of(&["crd"]))
        .await
        .expect("the generated CRD installs");
    eventually("/readyz answers 200", logs, || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    let (status, _) = get(addr, "/livez").await.expect("/livez answers");
    assert_eq!(status, 200);

    // A sample reaches its expected state.
    let gvk = GroupVersionKind::gvk("reconciler.example.kubeapp.dev", "v1", "Template");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "templates");
    let templates: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let sample: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "reconciler.example.kubeapp.dev/v1",
        "kind": "Template",
        "metadata": {"name": "greeting"},
        "spec": {"data": {"greeting": "hello", "audience": "world"}},
    }))
    .expect("sample");
    let created = templates
        .create(&PostParams::default(), &sample)
        .await
        .expect("create the sample");
    let expected: BTreeMap<String, String> = [
        ("greeting".to_string(), "hello".to_string()),
        ("audience".to_string(), "world".to_string()),
    ]
    .into();
    let cm = eventually("the ConfigMap is rendered", logs, || async {
        configmaps
            .get_opt("greeting")
            .await
            .ok()
            .flatten()
            .filter(|cm| data_of(cm) == expected)
    })
    .await;
    assert!(
        cm.managed_fields().iter().any(|f| f.manager.as_deref()
            == Some("kubeapp-example-reconciler")
            && f.operation.as_deref() == Some("Apply")),
        "server-side applied: {:?}",
        cm.managed_fields()
    );
    eventually("status observedGeneration and Ready=True", logs, || async {
        templates.get("greeting").await.ok().filter(reconciled)
    })
    .await;

    // An update of the spec reaches the ConfigMap and the status.
    let update = serde_json::json!({"spec": {"data": {"greeting": "bonjour"}}});
    let updated = templates
        .patch("greeting", &PatchParams::default(), &Patch::Merge(&update))
        .await
        .expect("update the sample");
    let generation = updated.metadata.generation;
    eventually("the ConfigMap follows the update", logs, || async {
        configmaps
            .get_opt("greeting")
            .await
            .ok()
            .flatten()
            .filter(|cm| data_of(cm).get("greeting").map(String::as_str) == Some("bonjour"))
    })
    .await;
    eventually("status follows the new generation", logs, || async {
        templates
            .get("greeting")
            .await
            .ok()
            .filter(|t| t.metadata.generation == generation && reconciled(t))
    })
    .await;

    // Drift: someone deletes the ConfigMap; the requeue puts it back.
    let old_uid = configmaps
        .get("greeting")
        .await
        .expect("the ConfigMap")
        .uid()
        .expect("a uid");
    configmaps
        .delete("greeting", &DeleteParams::default())
        .await
        .expect("delete the ConfigMap");
    eventually("the deleted ConfigMap is re-created", logs, || async {
        configmaps
            .get_opt("greeting")
            .await
            .ok()
            .flatten()
            .filter(|cm| cm.uid().as_deref() != Some(old_uid.as_str()))
    })
    .await;

    // Metrics of the events caused.
    let exposition = eventually("/metrics has counts for templates", logs, || async {
        get(addr, "/metrics")
            .await
            .filter(|(status, body)| {
                *status == 200
                    && samples(body, "informer_events_total") > 0.0
                    && samples(body, "reconciler_process_duration_seconds_count") > 0.0
            })
            .map(|(_, body)| body)
    })
    .await;
    assert!(
        samples(&exposition, "reconciler_process_duration_seconds_count") >= 2.0,
        "{exposition}"
    );

    // Deleting the sample removes the ConfigMap, then the object goes (the finalizer is removed).
    templates
        .delete("greeting", &DeleteParams::default())
        .await
        .expect("delete the sample");
    eventually("the ConfigMap is cleaned up", logs, || async {
        match configmaps.get_opt("greeting").await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    let uid = created.uid().expect("a uid");
    eventually("the sample disappears", logs, || async {
        match templates.get_opt("greeting").await {
            Ok(None) => Some(()),
            Ok(Some(t)) if t.uid().as_deref() != Some(uid.as_str()) => Some(()),
            _ => None,
        }
    })
    .await;

    // SIGTERM: a clean exit with status 0 within the shutdown timeout.
    let signalled = std::process::Command::new("/usr/bin/kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run /usr/bin/kill");
    assert!(signalled.success(), "kill -TERM {pid}: {signalled}");
    let exit = tokio::time::timeout(SHUTDOWN_TIMEOUT + Duration::from_secs(5), child.wait())
        .await
        .unwrap_or_else(|_| panic!("no exit within the shutdown timeout\n{}", logs()))
        .expect("wait for the operator");
    assert!(exit.success(), "exit status {exit}\n{}", logs());
    let log = logs();
    assert!(log.contains("operator stopped"), "{log}");
}
