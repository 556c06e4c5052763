//! The webhook server in a whole process: the `webhook_server` example runs as a child process,
//! under `prlimit` for the open-file limit (which applies to a process, not to a server), and
//! stopped by SIGTERM for the shutdown sequence.
//!
//! The example binary is built by `cargo test -p kubeapp-runner` (all targets); a run limited
//! to this test file needs `cargo build -p kubeapp-runner --example webhook_server` first (a
//! nested cargo build would wait for the lock the outer `cargo test` holds).

mod webhook_support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;
use webhook_support::{Certs, WAIT, admitted};

fn example_binary() -> PathBuf {
    // target/<profile>/deps/webhook_process-<hash> -> target/<profile>/examples/webhook_server
    let exe = std::env::current_exe().expect("test binary path");
    let binary = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples")
        .join(format!("webhook_server{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build -p kubeapp-runner --example webhook_server`",
        binary.display()
    );
    binary
}

/// The example as a child process: its addresses, its stdout lines, and its stderr counted.
struct Server {
    child: tokio::process::Child,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    webhook: SocketAddr,
    metrics: SocketAddr,
    /// stderr lines so far.
    log_lines: Arc<AtomicUsize>,
    /// stderr lines about failed accepts so far.
    accept_failures: watch::Receiver<usize>,
}

impl Server {
    /// Starts the example with `settings`, under `prlimit --nofile=<n>` when `open_files` is set.
    async fn start(certs: &Certs, settings: &[&str], open_files: Option<u32>) -> Self {
        let mut command = match open_files {
            Some(limit) => {
                let mut command = tokio::process::Command::new("prlimit");
                command
                    .arg(format!("--nofile={limit}:{limit}"))
                    .arg("--")
                    .arg(example_binary());
                command
            }
            None => tokio::process::Command::new(example_binary()),
        };
        let mut child = command
            .arg(&certs.cert)
            .arg(&certs.key)
            .args(settings)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn webhook_server");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let log_lines = Arc::new(AtomicUsize::new(0));
        let (failures_tx, accept_failures) = watch::channel(0);
        tokio::spawn({
            let log_lines = Arc::clone(&log_lines);
            async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    log_lines.fetch_add(1, Ordering::SeqCst);
                    if line.contains("accept failed") {
                        failures_tx.send_modify(|count| *count += 1);
                    }
                }
            }
        });
        let mut server = Self {
            child,
            stdout: BufReader::new(stdout).lines(),
            webhook: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            log_lines,
            accept_failures,
        };
        server.metrics = addr_of(&server.line_starting("metrics on ").await);
        server.webhook = addr_of(&server.line_starting("webhook on ").await);
        // A first /readyz answer means `run` has started, so its SIGTERM handler is installed
        // (the addresses are printed after `bind`, before `run`).
        let metrics = server.metrics;
        tokio::time::timeout(WAIT, async {
            while get_status(metrics, "/readyz").await != Some(200) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("/readyz answers 200 once the runner runs");
        server
    }

    /// Reads stdout until a line starts with `prefix`.
    async fn line_starting(&mut self, prefix: &str) -> String {
        let lines = &mut self.stdout;
        let found = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                if line.starts_with(prefix) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            _ => panic!("the child printed no line starting with {prefix:?}"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("child running")
    }

    fn sigterm(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM");
    }

    /// User plus system CPU time of the child so far, in clock ticks (fields 14 and 15 of
    /// `/proc/<pid>/stat`).
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // The command name (field 2) may hold spaces: count from the closing parenthesis.
        let after_name = &stat[stat.rfind(')').expect("stat format") + 2..];
        let fields: Vec<&str> = after_name.split(' ').collect();
        // after_name starts at field 3.
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }

    async fn exit_code(mut self) -> Option<i32> {
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the child exits in time")
            .expect("wait for the child")
            .code()
    }
}

fn addr_of(line: &str) -> SocketAddr {
    line.rsplit(' ')
        .next()
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// `GET path` over HTTP/1.0: the status code.
async fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split(' ').nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_open_file_limit_neither_flood_the_log_nor_block_admission() {
    let certs = Certs::new();
    let mut server = Server::start(&certs, &["handshake_ms=1000"], Some(64)).await;
    let addr = server.webhook;

    // More idle connections than the process may open files: accepting fails with EMFILE.
    let mut idle = Vec::new();
    for _ in 0..150 {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
    }
    tokio::time::timeout(
        WAIT,
        server.accept_failures.wait_for(|failures| *failures > 0),
    )
    .await
    .expect("the child ran out of file descriptors")
    .expect("stderr reader alive");

    // While the idle clients stay connected, a valid admission request is served: the handshake
    // timeout closes idle connections, the freed descriptors accept the ones waiting.
    // (Shorter than the client's own bound, so that a failure reports the log and CPU first.)
    let served = tokio::time::timeout(
        WAIT - Duration::from_secs(5),
        certs.validate(addr, "valid", 0),
    )
    .await;
    let (lines, cpu_ticks) = (server.log_lines.load(Ordering::SeqCst), server.cpu_ticks());
    println!("{lines} log lines and {cpu_ticks} CPU ticks while out of file descriptors");
    assert!(
        lines < 1_000,
        "{lines} log lines while out of file descriptors (the accept loop spins)"
    );
    // Clock ticks are 1/100 s on Linux: 10 s of CPU would mean a spinning loop.
    assert!(cpu_ticks < 1_000, "the child used {cpu_ticks} ticks of CPU");
    let response = served.expect("a valid admission request is served while idle clients stay");
    assert!(admitted(&response), "{response}");
    drop(idle);
    server.sigterm();
    assert_eq!(server.exit_code().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_new_connections_are_served_during_the_shutdown_delay() {
    let certs = Certs::new();
    let server = Server::start(&certs, &["delay_ms=4000"], None).await;
    server.sigterm();
    // Readiness fails at once (503, or no answer from a runner already gone), so the endpoint
    // is being removed ...
    tokio::time::timeout(WAIT, async {
        while get_status(server.metrics, "/readyz").await == Some(200) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("/readyz stops answering 200 after SIGTERM");
    // ... while a client that still has the old endpoint opens a new connection and is served.
    let response = certs.validate(server.webhook, "late", 0).await;
    assert!(admitted(&response), "{response:?}");
    assert_eq!(server.exit_code().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_at_sigterm_is_answered() {
    let certs = Arc::new(Certs::new());
    let mut server = Server::start(&certs, &[], None).await;
    let addr = server.webhook;
    let call = tokio::spawn({
        let certs = Arc::clone(&certs);
        async move { certs.validate(addr, "in-flight", 1500).await }
    });
    server.line_starting("hook started in-flight").await;
    server.sigterm();
    let response = tokio::time::timeout(WAIT, call)
        .await
        .expect("answered in time")
        .expect("joined");
    assert!(admitted(&response), "{response:?}");
    assert_eq!(server.exit_code().await, Some(0));
}
