//! End-to-end tests of an operator binary's first hour (issue #33), against a real
//! kube-apiserver + etcd, through the `first_hour` example run as a child process:
//!
//! - a manifest that disagrees with the Rust type (group, kind, version, plural) is one error
//!   line at start naming the manifest file, the field and both values, and exit status 1;
//! - a kind whose CRD is not installed is one error line naming the CRD and the command that
//!   installs it (not a warning per retry), and the operator becomes ready once it is installed;
//! - writes refused by RBAC are counted by cause (`handler_failures_total`), logged once per
//!   missing permission with the rule that grants it, and fail `/readyz` with
//!   `--ready-requires-writes`;
//! - handler calls abandoned at the shutdown timeout make exit status 3 and an error line naming
//!   how many.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kubeapp_sdk::testenv::TestEnv;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

/// How long any awaited condition may take.
const TIMEOUT: Duration = Duration::from_secs(60);
const GROUP: &str = "first-hour.kubeapp.dev";
const CRD: &str = "widgets.first-hour.kubeapp.dev";

/// The `first_hour` example, next to this test's `deps/` directory.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let binary = profile
        .join("examples")
        .join(format!("first_hour{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} is missing: build it with `cargo build -p kubeapp-simple --all-features --example \
         first_hour` (a full `cargo test` builds it)",
        binary.display()
    );
    binary
}

/// Runs `first_hour args` to completion and returns its stdout.
async fn output_of(args: &[&str]) -> String {
    let output = Command::new(binary())
        .args(args)
        .output()
        .await
        .expect("run first_hour");
    assert!(
        output.status.success(),
        "first_hour {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The operator, running as `first_hour run` with its log in a file.
struct Operator {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Operator {
    fn start(kubeconfig: &Path, log: PathBuf, env: &[(&str, &str)], args: &[&str]) -> Self {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port");
        let child = Command::new(binary())
            .args(["run", "--metrics-addr", &addr.to_string()])
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .env_remove("WATCH_NAMESPACE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("start first_hour");
        Self { child, addr, log }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit; fails with the log when it still runs after `within`.
    async fn exit_status(&mut self, within: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.expect("wait for first_hour"),
            Err(_) => panic!(
                "first_hour still runs after {within:?}; its log:\n{}",
                self.logs()
            ),
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill {signal} {pid}");
    }
}

/// `GET path`; `None` while nothing answers.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
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
    Some((head.split(' ').nth(1)?.parse().ok()?, body.to_string()))
}

/// The value of the series `name{labels}` (labels as the text format writes them, in order).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Polls `probe` until it gives a value; fails after [`TIMEOUT`] with `context()`.
async fn eventually<T, Fut>(
    what: &str,
    context: impl Fn() -> String,
    mut probe: impl FnMut() -> Fut,
) -> T
where
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not reached within {TIMEOUT:?}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn widgets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, "v1", "Widget");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    )
}

async fn create_widgets(client: &kube::Client, ns: &str, count: usize) {
    let api = widgets(client, ns);
    for n in 0..count {
        let widget: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "Widget",
            "metadata": {"name": format!("w{n}")},
            "spec": {"message": "hello"},
        }))
        .expect("a Widget");
        api.create(&PostParams::default(), &widget)
            .await
            .expect("create a Widget");
    }
}

/// The built-in manifest with one field changed.
fn manifest(group: &str, kind: &str, version: &str, plural: &str) -> String {
    format!(
        "appName: first-hour\ngroup: {group}\nversions:\n  - name: {version}\n    kinds:\n      - kind: {kind}\n        plural: {plural}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_disagrees_with_the_type_is_one_error_line_at_start_and_exit_1() {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds_yaml(&output_of(&["crd"]).await)
        .await
        .expect("the CRD installs");
    let cases = [
        (
            "plural",
            manifest(GROUP, "Widget", "v1", "widgetz"),
            r#"versions[0].kinds[0].plural: the manifest says "widgetz", the Rust type of kind Widget says "widgets""#,
        ),
        (
            "version",
            manifest(GROUP, "Widget", "v2", "widgets"),
            r#"versions[0].name: the manifest says "v2" (the version listing it), the Rust type of kind Widget says "v1""#,
        ),
        (
            "kind",
            manifest(GROUP, "Gadget", "v1", "widgets"),
            r#"versions[*].kinds[*].kind: the manifest says "Gadget", the Rust type of kind Widget says "Widget""#,
        ),
        (
            "group",
            manifest("other.kubeapp.dev", "Widget", "v1", "widgets"),
            r#"group: the manifest says "other.kubeapp.dev", the Rust type of kind Widget says "first-hour.kubeapp.dev""#,
        ),
    ];
    for (field, text, expected) in cases {
        let file = env.dir().join(format!("manifest-{field}.yaml"));
        std::fs::write(&file, text).expect("write the manifest");
        let file = file.to_str().expect("UTF-8").to_string();
        let mut operator = Operator::start(
            env.kubeconfig_path(),
            env.dir().join(format!("first-hour-{field}.log")),
            &[("FIRST_HOUR_MANIFEST", &file)],
            &[],
        );
        let status = operator.exit_status(Duration::from_secs(30)).await;
        let log = operator.logs();
        assert_eq!(status.code(), Some(1), "{field}: {status}; log:\n{log}");
        let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{field}: one error line; log:\n{log}");
        assert!(
            errors[0].starts_with(&format!("error: {file}: {expected}")),
            "{field}: {}",
            errors[0]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_whose_crd_is_not_installed_is_one_error_naming_the_crd_and_how_to_install_it() {
    let env = TestEnv::start().await.expect("control plane");
    let operator = Operator::start(
        env.kubeconfig_path(),
        env.dir().join("first-hour-no-crd.log"),
        &[],
        &[],
    );
    let logs = || operator.logs();
    // Retries go on (with backoff) while the CRD is missing: wait for a few of them.
    eventually("three failed lists of widgets", logs, || async {
        let (_, metrics) = get(operator.addr, "/metrics").await?;
        let errors = sample(&metrics, r#"kubernetes_watch_errors_total{kind="widgets"}"#)?;
        (errors >= 3.0).then_some(())
    })
    .await;
    let log = logs();
    let named: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(&format!("the CRD {CRD} is not installed")))
        .collect();
    assert_eq!(named.len(), 1, "one error line for the outage; log:\n{log}");
    assert!(
        named[0].contains("ERROR") && named[0].contains("first_hour crd | kubectl apply -f -"),
        "{}",
        named[0]
    );
    assert!(
        !log.contains("watch failed; retrying"),
        "no warning per retry; log:\n{log}"
    );
    let (status, body) = get(operator.addr, "/readyz").await.expect("/readyz");
    assert_eq!(status, 503, "not ready without the CRD: {body}");

    env.install_crds_yaml(&output_of(&["crd"]).await)
        .await
        .expect("the CRD installs");
    eventually("/readyz 200 once the CRD is installed", logs, || async {
        let (status, _) = get(operator.addr, "/readyz").await?;
        (status == 200).then_some(())
    })
    .await;
}

/// The generated ClusterRole without `patch` on widgets, bound to the generated ServiceAccount.
async fn rbac_without_patch(client: &kube::Client, ns: &str) {
    let yaml = output_of(&["rbac", "--namespace", ns]).await;
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let pp = PostParams::default();
    for mut doc in docs.into_iter().filter(|doc| !doc.is_null()) {
        match doc["kind"].as_str() {
            Some("ServiceAccount") => {
                let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                    Api::namespaced(client.clone(), ns);
                api.create(&pp, &serde_json::from_value(doc).expect("SA"))
                    .await
                    .expect("create the ServiceAccount");
            }
            Some("ClusterRole") => {
                let mut removed = false;
                for rule in doc["rules"].as_array_mut().expect("rules") {
                    let widgets = rule["resources"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|r| r == "widgets"));
                    if widgets && let Some(verbs) = rule["verbs"].as_array_mut() {
                        let before = verbs.len();
                        verbs.retain(|verb| verb != "patch");
                        removed |= verbs.len() < before;
                    }
                }
                assert!(
                    removed,
                    "the generated role grants patch on widgets: {yaml}"
                );
                Api::<ClusterRole>::all(client.clone())
                    .create(&pp, &serde_json::from_value(doc).expect("ClusterRole"))
                    .await
                    .expect("create the ClusterRole");
            }
            Some("ClusterRoleBinding") => {
                Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&pp, &serde_json::from_value(doc).expect("binding"))
                    .await
                    .expect("create the ClusterRoleBinding");
            }
            other => panic!("unexpected {other:?} in the rbac output"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_writes_are_counted_logged_once_per_permission_and_fail_readiness_on_request() {
    let env = TestEnv::start().await.expect("control plane");
    let client = env.client();
    env.install_crds_yaml(&output_of(&["crd"]).await)
        .await
        .expect("the CRD installs");
    let ns = env.create_namespace("first-hour").await.expect("namespace");
    rbac_without_patch(&client, &ns).await;
    let identity = env
        .identity(
            &format!("system:serviceaccount:{ns}:first-hour-operator"),
            &["system:serviceaccounts"],
        )
        .await
        .expect("the operator's identity");
    let operator = Operator::start(
        &identity.kubeconfig_path,
        env.dir().join("first-hour-forbidden.log"),
        &[],
        &["--ready-requires-writes", "3"],
    );
    let logs = || operator.logs();
    eventually("the informers synced", logs, || async {
        let (_, body) = get(operator.addr, "/readyz").await?;
        body.contains("informers-synced: ok").then_some(())
    })
    .await;

    // Each Widget's apply succeeds, then adding the finalizer (a patch) is forbidden.
    create_widgets(&client, &ns, 3).await;
    let forbidden = r#"handler_failures_total{cause="forbidden",kind="widgets"}"#;
    eventually("three forbidden handler calls counted", logs, || async {
        let (_, metrics) = get(operator.addr, "/metrics").await?;
        (sample(&metrics, forbidden)? >= 3.0).then_some(())
    })
    .await;
    let (status, body) = get(operator.addr, "/readyz").await.expect("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("writes-permitted: error: widgets: the last ")
            && body.contains("cannot patch widgets in API group \"first-hour.kubeapp.dev\""),
        "{body}"
    );
    let (_, metrics) = get(operator.addr, "/metrics").await.expect("/metrics");
    for cause in [
        "conflict",
        "not_found",
        "server_error",
        "timeout",
        "handler_error",
    ] {
        let series = format!(r#"handler_failures_total{{cause="{cause}",kind="widgets"}}"#);
        assert_eq!(sample(&metrics, &series), Some(0.0), "{series}\n{metrics}");
    }

    let log = logs();
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("are forbidden to patch widgets"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one line per missing permission; log:\n{log}"
    );
    assert!(
        lines[0].contains("ERROR")
            && lines[0].contains(
                r#"grant it the RBAC rule {apiGroups: ["first-hour.kubeapp.dev"], resources: ["widgets"], verbs: ["patch"]}"#
            ),
        "{}",
        lines[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_calls_abandoned_at_the_shutdown_timeout_make_exit_status_3_naming_them() {
    let env = TestEnv::start().await.expect("control plane");
    let client = env.client();
    env.install_crds_yaml(&output_of(&["crd"]).await)
        .await
        .expect("the CRD installs");
    let ns = env.create_namespace("first-hour").await.expect("namespace");
    let mut operator = Operator::start(
        env.kubeconfig_path(),
        env.dir().join("first-hour-abandoned.log"),
        &[("FIRST_HOUR_WORK", "600s")],
        &["--shutdown-timeout", "2s"],
    );
    let addr = operator.addr;
    let logs = || std::fs::read_to_string(env.dir().join("first-hour-abandoned.log")).unwrap();
    create_widgets(&client, &ns, 5).await;
    let ongoing = r#"ongoing_reconcile_processes{event_type="CREATE",kind="widgets"}"#;
    eventually("five reconciles in flight", logs, || async {
        let (_, metrics) = get(addr, "/metrics").await?;
        (sample(&metrics, ongoing)? >= 5.0).then_some(())
    })
    .await;

    operator.signal("-TERM");
    let status = operator.exit_status(Duration::from_secs(30)).await;
    let log = operator.logs();
    assert_eq!(status.code(), Some(3), "{status}; log:\n{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ")
            && last.contains("5 handler call(s) of app first-hour were abandoned"),
        "{last}"
    );
}
