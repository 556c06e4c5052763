//! The Runner with small test apps (no Kubernetes): its HTTP endpoints, its stop sequence, and,
//! through the `runner_signal` example run as a child process, its signal handling.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use kube::api::ApiResource;
use kubeapp_runner::{Runner, RunnerConfig, RunnerError};
use kubeapp_sdk::app::{App, AppError, HealthCheck};
use prometheus::{IntCounter, Opts};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Bound on every wait in these tests; conditions are awaited, never slept for.
const WAIT: Duration = Duration::from_secs(10);

/// `GET path` over HTTP/1.0 (the server closes the connection after the response).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .expect("read response");
        response
    };
    let response = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("response in time");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    (status, body.to_string())
}

/// A readiness check that passes once its flag is set.
struct Flag(Arc<AtomicBool>);

#[async_trait]
impl HealthCheck for Flag {
    fn name(&self) -> String {
        "synced".to_string()
    }
    async fn check(&self) -> Result<(), String> {
        if self.0.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("informer not synced yet".to_string())
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Idle,
    Running,
    Stopping,
}

/// An app that runs until stopped, then takes `finish` to finish its in-flight work.
struct TestApp {
    name: &'static str,
    finish: Duration,
    ready: Arc<AtomicBool>,
    counter: Option<IntCounter>,
    /// Where `run` is.
    phase: watch::Sender<Phase>,
    /// Set when `run` returns after its work finished.
    finished: Arc<AtomicBool>,
}

impl TestApp {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            finish: Duration::ZERO,
            ready: Arc::new(AtomicBool::new(true)),
            counter: None,
            phase: watch::channel(Phase::Idle).0,
            finished: Arc::new(AtomicBool::new(false)),
        }
    }

    fn finishing_in(mut self, finish: Duration) -> Self {
        self.finish = finish;
        self
    }

    /// Completes once `run` has reached `phase`.
    fn reached(&self, phase: Phase) -> impl Future<Output = ()> + use<> {
        let mut current = self.phase.subscribe();
        async move {
            tokio::time::timeout(WAIT, current.wait_for(|current| *current >= phase))
                .await
                .unwrap_or_else(|_| panic!("app did not reach {phase:?} in time"))
                .expect("app alive");
        }
    }

    fn started(&self) -> impl Future<Output = ()> + use<> {
        self.reached(Phase::Running)
    }
}

#[async_trait]
impl App for TestApp {
    fn name(&self) -> &str {
        self.name
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        Vec::new()
    }
    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        self.phase.send_replace(Phase::Running);
        stop.cancelled().await;
        self.phase.send_replace(Phase::Stopping);
        tokio::time::sleep(self.finish).await; // in-flight work
        self.finished.store(true, Ordering::SeqCst);
        Ok(())
    }
    fn health_checks(&self) -> Vec<Arc<dyn HealthCheck>> {
        vec![Arc::new(Flag(Arc::clone(&self.ready)))]
    }
    fn metric_collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        // The same collector twice: the runner must accept the second as already registered.
        self.counter
            .iter()
            .flat_map(|counter| {
                [
                    Box::new(counter.clone()) as _,
                    Box::new(counter.clone()) as _,
                ]
            })
            .collect()
    }
}

/// An app that fails once started, or panics.
struct Broken {
    panic: bool,
}

#[async_trait]
impl App for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        Vec::new()
    }
    async fn run(&self, _stop: CancellationToken) -> Result<(), AppError> {
        assert!(!self.panic, "broken on purpose");
        Err(AppError::Run {
            app: "broken".to_string(),
            source: "the informer lost its watch".into(),
        })
    }
}

fn test_config() -> RunnerConfig {
    RunnerConfig::default()
        .metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .shutdown_timeout(WAIT)
}

/// Binds `runner` and runs it until the returned token is cancelled.
async fn start(
    mut runner: Runner,
) -> (
    SocketAddr,
    CancellationToken,
    JoinHandle<Result<(), RunnerError>>,
) {
    let addr = runner.bind().await.expect("bind");
    assert_eq!(runner.local_addr(), Some(addr));
    let stop = CancellationToken::new();
    let running = tokio::spawn(runner.run_until(stop.clone().cancelled_owned()));
    (addr, stop, running)
}

async fn finish(running: JoinHandle<Result<(), RunnerError>>) -> Result<(), RunnerError> {
    tokio::time::timeout(WAIT, running)
        .await
        .expect("runner returned in time")
        .expect("runner task joined")
}

#[tokio::test]
async fn metrics_show_the_registry_and_an_app_collector_registered_twice() {
    let counter = IntCounter::with_opts(Opts::new("test_app_events_total", "events")).unwrap();
    counter.inc_by(3);
    let mut app = TestApp::new("counting");
    app.counter = Some(counter.clone());
    let runner = Runner::new(test_config().metrics_prefix("kubeapp"))
        .unwrap()
        .with_app(Arc::new(app));
    // What a controller does: register into the runner's registry.
    let controller_counter =
        IntCounter::with_opts(Opts::new("controller_like_total", "from the controller")).unwrap();
    controller_counter.inc();
    runner
        .registry()
        .register(Box::new(controller_counter))
        .unwrap();

    let (addr, stop, running) = start(runner).await;
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    // The prefix names kubeapp's metrics; collectors of one's own keep their names.
    assert!(body.contains("\ntest_app_events_total 3\n"), "{body}");
    assert!(body.contains("\ncontroller_like_total 1\n"), "{body}");
    // Live values, not a snapshot taken at start.
    counter.inc();
    let (_, body) = get(addr, "/metrics").await;
    assert!(body.contains("\ntest_app_events_total 4\n"), "{body}");

    stop.cancel();
    finish(running).await.expect("clean stop");
}

#[tokio::test]
async fn a_collector_refused_for_another_reason_fails_the_start_naming_the_app() {
    let mut app = TestApp::new("clashing");
    app.counter = Some(IntCounter::with_opts(Opts::new("clash_total", "ours")).unwrap());
    let runner = Runner::new(test_config()).unwrap().with_app(Arc::new(app));
    // Same name, another help text and labels: a real conflict, not "already registered".
    let theirs =
        IntCounter::with_opts(Opts::new("clash_total", "theirs").const_label("origin", "other"))
            .unwrap();
    runner.registry().register(Box::new(theirs)).unwrap();
    let err = tokio::time::timeout(WAIT, runner.run_until(std::future::pending()))
        .await
        .expect("refused at start")
        .expect_err("refused");
    assert!(
        matches!(&err, RunnerError::Metrics { app, .. } if app == "clashing"),
        "{err:?}"
    );
}

#[tokio::test]
async fn readyz_is_evaluated_on_every_request_and_names_the_failing_check() {
    let app = TestApp::new("steady");
    app.ready.store(false, Ordering::SeqCst);
    let ready = Arc::clone(&app.ready);
    let runner = Runner::new(test_config()).unwrap().with_app(Arc::new(app));
    let (addr, stop, running) = start(runner).await;

    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("steady/synced: error: informer not synced yet\n"),
        "{body}"
    );

    ready.store(true, Ordering::SeqCst);
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "steady/synced: ok\nready\n");

    ready.store(false, Ordering::SeqCst);
    assert_eq!(get(addr, "/readyz").await.0, 503);

    stop.cancel();
    finish(running).await.expect("clean stop");
}

#[tokio::test]
async fn livez_answers_while_the_runner_runs() {
    let runner = Runner::new(test_config())
        .unwrap()
        .with_app(Arc::new(TestApp::new("alive")));
    let (addr, stop, running) = start(runner).await;
    assert_eq!(get(addr, "/livez").await, (200, "ok\n".to_string()));
    assert_eq!(get(addr, "/nothing-here").await.0, 404);
    stop.cancel();
    finish(running).await.expect("clean stop");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the server stopped with the runner"
    );
}

#[tokio::test]
async fn run_until_stops_the_apps_and_waits_for_their_in_flight_work() {
    let slow = TestApp::new("slow").finishing_in(Duration::from_millis(200));
    let fast = TestApp::new("fast");
    let (slow_started, fast_started) = (slow.started(), fast.started());
    let (slow_finished, fast_finished) = (Arc::clone(&slow.finished), Arc::clone(&fast.finished));
    let runner = Runner::new(test_config())
        .unwrap()
        .with_app(Arc::new(slow))
        .with_app(Arc::new(fast));
    let (_, stop, running) = start(runner).await;
    slow_started.await;
    fast_started.await;

    let asked = tokio::time::Instant::now();
    stop.cancel();
    finish(running).await.expect("clean stop");
    assert!(
        slow_finished.load(Ordering::SeqCst),
        "returned before the slow app's work finished"
    );
    assert!(fast_finished.load(Ordering::SeqCst));
    assert!(asked.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn a_shutdown_timeout_shorter_than_the_work_names_the_app_still_running() {
    let slow = TestApp::new("slow").finishing_in(Duration::from_millis(200));
    let fast = TestApp::new("fast");
    let (slow_started, slow_finished) = (slow.started(), Arc::clone(&slow.finished));
    let runner = Runner::new(test_config().shutdown_timeout(Duration::from_millis(50)))
        .unwrap()
        .with_app(Arc::new(fast))
        .with_app(Arc::new(slow));
    let (_, stop, running) = start(runner).await;
    slow_started.await;

    stop.cancel();
    let err = finish(running).await.expect_err("timed out");
    assert!(
        matches!(&err, RunnerError::ShutdownTimeout { timeout, apps }
            if *timeout == Duration::from_millis(50) && apps == &["slow".to_string()]),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "shutdown timed out after 50ms; still running: slow"
    );
    assert!(!slow_finished.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_failing_app_stops_the_others_and_the_error_names_it() {
    let steady = TestApp::new("steady").finishing_in(Duration::from_millis(50));
    let steady_finished = Arc::clone(&steady.finished);
    let runner = Runner::new(test_config())
        .unwrap()
        .with_app(Arc::new(steady))
        .with_app(Arc::new(Broken { panic: false }));
    // Nothing stops it but the failure.
    let err = tokio::time::timeout(WAIT, runner.run_until(std::future::pending()))
        .await
        .expect("returned in time")
        .expect_err("failed");
    assert!(
        matches!(&err, RunnerError::App { app, source: AppError::Run { .. } } if app == "broken"),
        "{err:?}"
    );
    // The app is named in the chain, each cause once (issue #33).
    assert_eq!(
        kubeapp_sdk::error::error_chain(&err),
        "an app failed; the runner stopped the others: app broken failed: the informer lost its \
         watch"
    );
    assert!(
        steady_finished.load(Ordering::SeqCst),
        "the other app was stopped and waited for"
    );
}

#[tokio::test]
async fn a_panicking_app_is_reported_with_its_message() {
    let steady = TestApp::new("steady");
    let steady_finished = Arc::clone(&steady.finished);
    let runner = Runner::new(test_config())
        .unwrap()
        .with_app(Arc::new(steady))
        .with_app(Arc::new(Broken { panic: true }));
    let err = tokio::time::timeout(WAIT, runner.run_until(std::future::pending()))
        .await
        .expect("returned in time")
        .expect_err("panicked");
    assert!(
        matches!(&err, RunnerError::AppPanicked { app, message }
            if app == "broken" && message == "broken on purpose"),
        "{err:?}"
    );
    assert!(steady_finished.load(Ordering::SeqCst));
}

/// An app whose `run` returns `Ok` without being asked to stop.
struct Quits;

#[async_trait]
impl App for Quits {
    fn name(&self) -> &str {
        "quits"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        Vec::new()
    }
    async fn run(&self, _stop: CancellationToken) -> Result<(), AppError> {
        Ok(())
    }
}

#[tokio::test]
async fn an_app_that_returns_before_it_is_asked_to_is_an_error() {
    let steady = TestApp::new("steady");
    let steady_finished = Arc::clone(&steady.finished);
    let runner = Runner::new(test_config())
        .unwrap()
        .with_app(Arc::new(Quits))
        .with_app(Arc::new(steady));
    let err = tokio::time::timeout(WAIT, runner.run_until(std::future::pending()))
        .await
        .expect("returned in time")
        .expect_err("exited early");
    assert!(
        matches!(&err, RunnerError::AppExited { app } if app == "quits"),
        "{err:?}"
    );
    assert!(steady_finished.load(Ordering::SeqCst));
}

#[tokio::test]
async fn readyz_fails_while_the_runner_shuts_down() {
    let slow = TestApp::new("slow").finishing_in(Duration::from_secs(3));
    let (slow_started, slow_stopping) = (slow.started(), slow.reached(Phase::Stopping));
    let runner = Runner::new(test_config()).unwrap().with_app(Arc::new(slow));
    let (addr, stop, running) = start(runner).await;
    slow_started.await;
    assert_eq!(get(addr, "/readyz").await.0, 200);
    stop.cancel();
    // The runner fails readiness before it cancels the apps.
    slow_stopping.await;
    // The server keeps serving while the apps drain: readiness fails, liveness holds.
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("runner: error: shutting down\n"), "{body}");
    assert_eq!(get(addr, "/livez").await.0, 200);
    running.abort();
}

#[tokio::test]
async fn a_port_in_use_is_a_bind_error_naming_the_address() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let mut runner = Runner::new(test_config().metrics_addr(addr)).unwrap();
    let err = runner.bind().await.expect_err("in use");
    assert!(
        matches!(&err, RunnerError::Bind { addr: a, .. } if *a == addr),
        "{err:?}"
    );
    assert_eq!(err.to_string(), format!("listening on {addr}"));
    let chain = kubeapp_sdk::error::error_chain(&err);
    assert!(
        chain.starts_with(&format!("listening on {addr}: "))
            && chain.len() > err.to_string().len() + 2,
        "the system's reason follows: {chain}"
    );
}

// ---- signals, through the `runner_signal` example as a child process ----

/// The `runner_signal` example binary, which `cargo test` builds with all targets (the README's
/// test command does). A run limited to this test (`--test runner`) does not build examples: then
/// build it first, `cargo build -p kubeapp-runner --example runner_signal`. The test does not
/// build it itself: a nested `cargo build` would wait for the build-directory lock that the
/// outer `cargo test` holds, and hang.
fn example_binary() -> PathBuf {
    // target/<profile>/deps/runner-<hash> -> target/<profile>/examples/runner_signal
    let exe = std::env::current_exe().expect("test binary path");
    let binary = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples")
        .join(format!("runner_signal{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build -p kubeapp-runner --example runner_signal` (or the \
         whole `cargo test -p kubeapp-runner`, which builds examples)",
        binary.display()
    );
    binary
}

/// The example as a child process, with its stdout read line by line.
struct Child {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: Vec<String>,
    /// Reads stderr as it comes, so the child never blocks on a full pipe.
    stderr: JoinHandle<String>,
}

impl Child {
    fn spawn(args: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(example_binary())
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn runner_signal");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        Self {
            child,
            lines: BufReader::new(stdout).lines(),
            seen: Vec::new(),
            stderr,
        }
    }

    /// Reads lines until one starts with `prefix`; returns it.
    async fn wait_for_line(&mut self, prefix: &str) -> String {
        let lines = &mut self.lines;
        let seen = &mut self.seen;
        let found = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                seen.push(line.clone());
                if line.starts_with(prefix) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            _ => panic!("no line starting with {prefix:?}; saw {:?}", self.seen),
        }
    }

    fn signal(&self, name: &str) {
        let pid = self.child.id().expect("child running").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {pid}");
    }

    /// Waits for the exit; returns the exit code, the rest of stdout, and stderr.
    async fn exit(mut self, within: Duration) -> (Option<i32>, Vec<String>, String) {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("child did not exit within {within:?}"))
            .expect("wait for child");
        while let Some(line) = self.lines.next_line().await.expect("read stdout") {
            self.seen.push(line);
        }
        let err = tokio::time::timeout(WAIT, self.stderr)
            .await
            .expect("stderr closed")
            .expect("stderr reader");
        (status.code(), self.seen, err)
    }
}

#[tokio::test]
async fn sigterm_stops_gracefully_after_in_flight_work_and_exits_zero() {
    let mut child = Child::spawn(&["300", "10000"]);
    let addr: SocketAddr = child
        .wait_for_line("listening on ")
        .await
        .trim_start_matches("listening on ")
        .parse()
        .expect("an address");
    // `app started` is printed from inside `run`, after the signal handlers were installed.
    child.wait_for_line("app started").await;
    assert_eq!(get(addr, "/livez").await.0, 200);

    child.signal("TERM");
    let (code, stdout, stderr) = child.exit(WAIT).await;
    assert_eq!(code, Some(0), "stdout {stdout:?}, stderr {stderr}");
    let finished = stdout
        .iter()
        .position(|l| l == "app finished in-flight work");
    let stopped = stdout.iter().position(|l| l == "runner stopped cleanly");
    assert!(
        finished.is_some() && finished < stopped,
        "in-flight work finished before the runner returned: {stdout:?}"
    );
}

#[tokio::test]
async fn a_second_signal_during_the_shutdown_exits_at_once_with_an_error() {
    // The app would take a minute to stop, within a two-minute timeout.
    let mut child = Child::spawn(&["60000", "120000"]);
    child.wait_for_line("app started").await;
    child.signal("TERM");
    // The first signal has been handled once the app sees its stop.
    child.wait_for_line("app stopping").await;
    child.signal("INT");
    let (code, stdout, stderr) = child.exit(Duration::from_secs(5)).await;
    assert_eq!(code, Some(1), "stdout {stdout:?}, stderr {stderr}");
    assert!(
        stderr.contains("second signal (SIGINT) during graceful shutdown"),
        "{stderr}"
    );
    assert!(!stdout.iter().any(|l| l == "app finished in-flight work"));
}

#[tokio::test]
async fn default_client_says_what_it_tried() {
    let missing = std::env::temp_dir().join("kubeapp-runner-test-no-such-kubeconfig");
    let mut child = tokio::process::Command::new(example_binary());
    child
        .arg("client")
        .env("KUBECONFIG", &missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(WAIT, child.output())
        .await
        .expect("exited in time")
        .expect("ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "no Kubernetes configuration found; tried the kubeconfig in KUBECONFIG={}",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("KUBERNETES_SERVICE_HOST is not set"),
        "{stderr}"
    );
}

/// An app that refuses every Gadget with a fixed message.
struct Refuser;

#[async_trait]
impl App for Refuser {
    fn name(&self) -> &str {
        "refuser"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "g.example.com",
            "v1",
            "Gadget",
        ))]
    }
    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        stop.cancelled().await;
        Ok(())
    }
    fn declared_webhooks(&self) -> Vec<String> {
        vec!["Gadget: validation".to_string()]
    }
    async fn validate(
        &self,
        _request: &kube::core::admission::AdmissionRequest<kube::api::DynamicObject>,
    ) -> Result<(), kubeapp_sdk::app::AdmissionError> {
        Err(kubeapp_sdk::app::AdmissionError::denied("no thanks"))
    }
}

#[tokio::test]
async fn an_app_declaring_webhooks_does_not_start_without_a_webhook_server() {
    let steady = TestApp::new("steady");
    let steady_finished = Arc::clone(&steady.finished);
    let runner = Runner::new(test_config())
        .unwrap()
        .with_app(Arc::new(steady))
        .with_app(Arc::new(Refuser));
    let err = tokio::time::timeout(WAIT, runner.run_until(std::future::pending()))
        .await
        .expect("returned in time")
        .expect_err("webhooks are required");
    assert!(
        matches!(&err, RunnerError::WebhooksRequired { app, declared }
            if app == "refuser" && declared == "Gadget: validation"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("RunnerConfig::webhook"),
        "the error says what to configure: {err}"
    );
    // Nothing ran: the check comes before any app starts (a started app would have been
    // stopped, and finished, before the runner returned).
    assert!(!steady_finished.load(Ordering::SeqCst));
}

/// `POST /validate` over HTTPS (trusting `ca_pem`), returning the status line and body.
async fn post_validate_tls(addr: SocketAddr, ca_pem: &str, body: &str) -> String {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let mut tls = connector.connect(name, tcp).await.expect("handshake");
        let request = format!(
            "POST /validate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes()).await.expect("send");
        let mut response = Vec::new();
        // The server closes after the response (Connection: close); a TLS close without
        // close_notify is fine here.
        let _ = tls.read_to_end(&mut response).await;
        String::from_utf8_lossy(&response).into_owned()
    };
    tokio::time::timeout(WAIT, exchange)
        .await
        .expect("response in time")
}

#[tokio::test]
async fn the_runner_serves_app_webhooks_over_https_when_configured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = kubeapp_sdk::testenv::CertificateAuthority::new("runner-test-ca").expect("ca");
    let cert = ca.issue_serving(&["127.0.0.1"]).expect("cert");
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).expect("write");
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).expect("write");
    let webhook = kubeapp_runner::webhook::WebhookConfig::new(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
    )
    .addr(SocketAddr::from(([127, 0, 0, 1], 0)));
    let config = RunnerConfig::default()
        .metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .webhook(webhook);
    let mut runner = Runner::new(config)
        .expect("runner")
        .with_app(Arc::new(Refuser));
    runner.bind().await.expect("bind");
    let addr = runner.webhook_addr().expect("webhook bound");
    let stop = CancellationToken::new();
    let running = tokio::spawn(runner.run_until({
        let stop = stop.clone();
        async move { stop.cancelled().await }
    }));

    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "g.example.com", "version": "v1", "kind": "Gadget"},
            "resource": {"group": "g.example.com", "version": "v1", "resource": "gadgets"},
            "operation": "CREATE",
            "userInfo": {},
            "object": {"apiVersion": "g.example.com/v1", "kind": "Gadget", "metadata": {"name": "a"}},
            "dryRun": false
        }
    });
    let response = post_validate_tls(addr, &ca.cert_pem(), &review.to_string()).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("no thanks") && response.contains("\"allowed\":false"),
        "{response}"
    );

    stop.cancel();
    let result = tokio::time::timeout(WAIT, running)
        .await
        .expect("runner stops in time");
    result.expect("joined").expect("clean stop");
}

#[tokio::test]
async fn a_missing_webhook_certificate_fails_the_start_naming_the_file() {
    let webhook =
        kubeapp_runner::webhook::WebhookConfig::new("/nonexistent/tls.crt", "/nonexistent/tls.key")
            .addr(SocketAddr::from(([127, 0, 0, 1], 0)));
    let config = RunnerConfig::default()
        .metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .webhook(webhook);
    let mut runner = Runner::new(config).expect("runner");
    let err = runner.bind().await.expect_err("no certificate");
    assert!(matches!(err, RunnerError::Webhook(_)), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/tls.crt"), "{err}");
}
