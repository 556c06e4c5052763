//! What the end-to-end tests of the example binaries share: finding a binary cargo built next to
//! the test, polling a condition against a deadline, plain HTTP requests, and running the
//! reconciler example as a child process with development certificates against a `TestEnv`,
//! with its CRD and webhook configurations installed from its own `crd` and `manifests` output.
//!
//! Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

pub mod canary;
pub mod proxy;
pub mod replica;
pub mod shard_log;

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kubeapp::sdk::testenv::{CertificateAuthority, TestEnv};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Child;

/// The reconciler example's binary.
pub const RECONCILER: &str = "kubeapp-example-reconciler";
/// The reconciler example's package, for the build command in messages.
pub const RECONCILER_PACKAGE: &str = "kubeapp-example-reconciler";
/// How long any awaited condition may take.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(100);
/// The Template's API group.
pub const GROUP: &str = "reconciler.example.kubeapp.dev";
/// The label the example's mutator puts on every Template.
pub const OPERATOR_LABEL: &str = "reconciler.example.kubeapp.dev/operator";
/// Its value: the app's name.
pub const APP_NAME: &str = "template-reconciler";

/// The binary `name` of package `package`, next to this test's `deps/` directory; fails loudly
/// when it was not built.
pub fn binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let binary = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "the binary {} is missing: build it first with `cargo build -p {package}` (same profile \
         and target dir as the tests), or run the tests with `scripts/test`",
        binary.display()
    );
    binary
}

/// The reconciler example's binary.
pub fn reconciler_binary() -> PathBuf {
    binary(RECONCILER, RECONCILER_PACKAGE)
}

/// Runs `binary` to completion with `args`; returns its stdout (and asserts success).
pub fn output_of(binary: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new(binary)
        .args(args)
        .output()
        .expect("run the binary");
    assert!(
        output.status.success(),
        "{args:?} failed with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Polls `probe` until it returns `Some`, failing with `what` (and `context()`) at the deadline.
pub async fn eventually<T, F, Fut>(what: &str, context: impl Fn() -> String, mut probe: F) -> T
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
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
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

/// Waits until the operator serving metrics on `addr` answers `/readyz` with 200 (`logs` are
/// shown when it does not).
pub async fn until_ready(addr: SocketAddr, logs: impl Fn() -> String) {
    eventually("/readyz answers 200", logs, || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
}

/// A loopback port nothing listens on (at the time of the call).
pub fn free_port() -> u16 {
    // Chosen below the ephemeral range (32768 and up on Linux), not by binding port 0: between
    // the choice and the child process's bind, an outgoing connection of any of the processes a
    // test runs (replicas, apiservers) could take a port of the ephemeral range, and a port
    // returned to one parallel test could be returned to another. A counter per test binary,
    // started at an offset of its pid, keeps parallel tests (and binaries) apart.
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id() % COUNT;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (offset + n) % COUNT).expect("below 32000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {FIRST} and {}", FIRST + COUNT);
}

/// The `Template` resource in `version` (`v1` or `v2`).
pub fn template_resource(version: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(GROUP, version, "Template");
    ApiResource::from_gvk_with_plural(&gvk, "templates")
}

/// The Templates of namespace `ns`, read and written as `version`.
pub fn templates(client: &kube::Client, ns: &str, version: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &template_resource(version))
}

/// A Template object in `version` with `spec`.
pub fn template(version: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{GROUP}/{version}"),
        "kind": "Template",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a Template")
}

/// Whether `observedGeneration == generation` and `Ready == True`.
pub fn reconciled(template: &DynamicObject) -> bool {
    let status = &template.data["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let generation = template.metadata.generation;
    generation.is_some() && status["observedGeneration"].as_i64() == generation && ready
}

/// Development certificates for a webhook server on 127.0.0.1, written as files.
pub struct DevCerts {
    /// The CA certificate the apiserver trusts.
    pub ca_file: PathBuf,
    /// The serving certificate.
    pub cert_file: PathBuf,
    /// Its key.
    pub key_file: PathBuf,
}

impl DevCerts {
    /// A new CA and a serving certificate for 127.0.0.1 and localhost, written into `dir`.
    pub fn write(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("certificate directory");
        let ca = CertificateAuthority::new("example-webhook-ca").expect("CA");
        let serving = ca
            .issue_serving(&["127.0.0.1", "localhost"])
            .expect("serving certificate");
        let certs = Self {
            ca_file: dir.join("ca.crt"),
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
        };
        std::fs::write(&certs.ca_file, ca.cert_pem()).expect("write ca.crt");
        std::fs::write(&certs.cert_file, &serving.cert_pem).expect("write tls.crt");
        std::fs::write(&certs.key_file, &serving.key_pem).expect("write tls.key");
        certs
    }
}

/// The reconciler example running as a child process, with its webhook server on loopback.
pub struct Operator {
    /// The child process (killed when dropped).
    pub child: Child,
    /// Its pid.
    pub pid: u32,
    /// Where `/metrics`, `/livez` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// The base URL of its webhook server.
    pub webhook_url: String,
    /// Its certificates.
    pub certs: DevCerts,
    /// Its stderr.
    pub log_path: PathBuf,
}

impl Operator {
    /// Starts `run` against `env` for namespace `ns` with `extra` flags, certificates in
    /// `env.dir()/webhook-tls` and free ports.
    pub fn start(env: &TestEnv, ns: &str, extra: &[&str]) -> Self {
        Self::start_with_certs_in(env, ns, extra, &env.dir().join("webhook-tls"))
    }

    /// [`start`](Self::start) with the certificates written into `certs_dir`: for a second
    /// operator next to one whose certificates must stay as they are.
    pub fn start_with_certs_in(env: &TestEnv, ns: &str, extra: &[&str], certs_dir: &Path) -> Self {
        Self::start_through(env, env.kubeconfig_path(), ns, extra, certs_dir, "")
    }

    /// [`start_with_certs_in`](Self::start_with_certs_in) reaching the apiserver through
    /// `kubeconfig` (e.g. a fault proxy's), its log named with `suffix` (one per process).
    pub fn start_through(
        env: &TestEnv,
        kubeconfig: &Path,
        ns: &str,
        extra: &[&str],
        certs_dir: &Path,
        suffix: &str,
    ) -> Self {
        let certs = DevCerts::write(certs_dir);
        let log_path = env.dir().join(format!("{RECONCILER}-{ns}{suffix}.log"));
        let log_file = std::fs::File::create(&log_path).expect("log file");
        let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let webhook_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = tokio::process::Command::new(reconciler_binary())
            .arg("run")
            .args(["--metrics-addr", &metrics_addr.to_string()])
            .args(["--webhook-addr", &webhook_addr.to_string()])
            .arg("--webhook-cert-file")
            .arg(&certs.cert_file)
            .arg("--webhook-key-file")
            .arg(&certs.key_file)
            .args(["--namespace", ns])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            // Its recent handler calls on /debug/kubeapp, for the fault harness's checks.
            .env(kubeapp::sdk::diagnostics::RECORD_CALLS_ENV, "8192")
            .env("RUST_LOG", "info")
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
            metrics_addr,
            webhook_url: format!("https://{webhook_addr}"),
            certs,
            log_path,
        }
    }

    /// The operator's log so far, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "operator logs:\n{}",
            std::fs::read_to_string(&self.log_path).unwrap_or_default()
        )
    }

    /// The `crd` and `manifests` arguments that point at this operator's webhook server.
    fn webhook_args(&self) -> Vec<String> {
        vec![
            "--webhook-url".into(),
            self.webhook_url.clone(),
            "--webhook-ca-file".into(),
            self.certs.ca_file.display().to_string(),
        ]
    }

    /// Installs the CRD printed by `crd --webhook-url ...` (and waits until it is Established).
    pub async fn install_crd(&self, env: &TestEnv) {
        let mut args = vec!["crd".to_string()];
        args.extend(self.webhook_args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.install_crds_yaml(&output_of(&reconciler_binary(), &args))
            .await
            .expect("the generated CRD installs");
    }

    /// Applies the webhook configurations printed by `manifests --webhook-url ...`.
    pub async fn install_webhook_configurations(&self, env: &TestEnv) {
        let mut args = vec!["manifests".to_string()];
        args.extend(self.webhook_args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let yaml = output_of(&reconciler_binary(), &args);
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&yaml).expect("the manifests output parses");
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ValidatingWebhookConfiguration",
                "MutatingWebhookConfiguration"
            ],
            "with --webhook-url, only the webhook configurations:\n{yaml}"
        );
        let apply = PatchParams::apply("kubeapp-example-tests").force();
        let validating: ValidatingWebhookConfiguration =
            serde_json::from_value(docs[0].clone()).expect("a ValidatingWebhookConfiguration");
        Api::<ValidatingWebhookConfiguration>::all(env.client())
            .patch(&validating.name_any(), &apply, &Patch::Apply(&validating))
            .await
            .expect("apply the ValidatingWebhookConfiguration");
        let mutating: MutatingWebhookConfiguration =
            serde_json::from_value(docs[1].clone()).expect("a MutatingWebhookConfiguration");
        Api::<MutatingWebhookConfiguration>::all(env.client())
            .patch(&mutating.name_any(), &apply, &Patch::Apply(&mutating))
            .await
            .expect("apply the MutatingWebhookConfiguration");
    }

    /// Waits until the apiserver calls every webhook: a dry-run create of a valid `v2` Template
    /// comes back labelled by the mutator (so conversion and mutation are live) and one without
    /// data is refused by the validator. The apiserver picks configurations up asynchronously.
    pub async fn wait_for_webhooks(&self, client: &kube::Client, ns: &str) {
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let v2 = templates(client, ns, "v2");
        let valid = template(
            "v2",
            "webhook-probe",
            serde_json::json!({"entries": [{"key": "k", "value": "v"}]}),
        );
        eventually(
            "a dry-run v2 create is converted and mutated",
            || self.logs(),
            || async {
                let created = v2.create(&dry, &valid).await.ok()?;
                created.labels().contains_key(OPERATOR_LABEL).then_some(())
            },
        )
        .await;
        let v1 = templates(client, ns, "v1");
        let empty = template("v1", "webhook-probe", serde_json::json!({"data": {}}));
        eventually(
            "a dry-run create without data is refused by the validator",
            || self.logs(),
            || async {
                match v1.create(&dry, &empty).await {
                    Err(kube::Error::Api(status))
                        if status.message.contains("validate.templates") =>
                    {
                        Some(())
                    }
                    _ => None,
                }
            },
        )
        .await;
    }

    /// Sends SIGTERM or SIGINT (`signal` as `kill` spells it: `TERM`, `INT`).
    pub fn signal(&self, signal: &str) {
        send_signal(self.pid, signal);
    }
}

/// Sends `signal` (`TERM`, `INT`, ...) to `pid` with `/usr/bin/kill`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("/usr/bin/kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run /usr/bin/kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// Runs `kubeapp <args>` as the user of `kubeconfig`; returns its exit code, stdout and stderr.
pub async fn kubeapp(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let binary = binary("kubeapp", "kubeapp-cli");
    let output = tokio::process::Command::new(binary)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .expect("run kubeapp");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
