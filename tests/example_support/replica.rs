//! A replica of `examples/minimal` run as a child process against a `TestEnv`: started with the
//! flags of the mode under test (sharded, leader-elected), its `/metrics` read by name, its log
//! file read, stopped with SIGTERM (or killed by the test through `pid` and `child`).

use std::net::SocketAddr;
use std::path::PathBuf;

use kubeapp::sdk::testenv::TestEnv;

use super::{binary, free_port, get, send_signal};

/// The minimal example's binary and package.
pub const MINIMAL: &str = "kubeapp-example-minimal";

/// Flags of a sharded replica (JSON logs, which the sharding test parses).
pub const SHARDED: &[&str] = &[
    "--shard",
    "--log-format",
    "json",
    "--shutdown-timeout",
    "10s",
];

/// Flags of a leader-elected replica that reports ready only while leading.
pub const LEADER_ELECTED: &[&str] = &["--leader-elect", "--leader-ready"];

/// How a replica is started beyond its flags.
pub struct Options {
    /// `--lease-duration`, `--renew-deadline`, `--retry-period`.
    pub timings: [&'static str; 3],
    /// The kubeconfig it uses (default: the test environment's).
    pub kubeconfig: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timings: ["4s", "3s", "1s"],
            kubeconfig: None,
        }
    }
}

/// One running replica; its fields are what the tests signal, wait on and read.
pub struct Replica {
    /// Its instance name (`--instance`), also its Lease holder identity.
    pub name: &'static str,
    /// The child process.
    pub child: tokio::process::Child,
    /// Its process id, for signals.
    pub pid: u32,
    /// Where it serves `/metrics`, `/livez` and `/readyz`.
    pub metrics: SocketAddr,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl Replica {
    /// Starts replica `name` in namespace `ns` (Leases go there; it watches every namespace) with
    /// short lease timings, `flags` and `RUST_LOG=rust_log`.
    pub fn start(
        env: &TestEnv,
        ns: &str,
        name: &'static str,
        flags: &[&str],
        rust_log: &str,
    ) -> Self {
        Self::start_with(env, ns, name, flags, rust_log, &Options::default())
    }

    /// As [`start`](Self::start), with other timings or another kubeconfig.
    pub fn start_with(
        env: &TestEnv,
        ns: &str,
        name: &'static str,
        flags: &[&str],
        rust_log: &str,
        options: &Options,
    ) -> Self {
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = env.dir().join(format!("{name}.log"));
        let [lease, renew, retry] = options.timings;
        let kubeconfig = options
            .kubeconfig
            .clone()
            .unwrap_or_else(|| env.kubeconfig_path().to_path_buf());
        let child = tokio::process::Command::new(binary(MINIMAL, MINIMAL))
            .args(["run", "--metrics-addr", &metrics.to_string()])
            .args(["--instance", name, "--leader-election-namespace", ns])
            .args(["--lease-duration", lease, "--renew-deadline", renew])
            .args(["--retry-period", retry])
            .args(flags)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", rust_log)
            .env_remove("WATCH_NAMESPACE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(std::fs::File::create(&log).expect("log file"))
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log)
                    .expect("log file"),
            )
            .kill_on_drop(true)
            .spawn()
            .expect("start a replica");
        let pid = child.id().expect("a pid");
        Self {
            name,
            child,
            pid,
            metrics,
            log,
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of the samples of `name` whose line contains `filter` (`None` until `/metrics`
    /// answers).
    pub async fn metric_where(&self, name: &str, filter: &str) -> Option<f64> {
        let (status, body) = get(self.metrics, "/metrics").await?;
        (status == 200).then(|| {
            body.lines()
                .filter(|l| l.starts_with(name) && l.contains(filter))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
    }

    /// Its `/debug/kubeapp` report, parsed (`None` until it answers; read from loopback, so no
    /// token is needed).
    pub async fn diagnostics(&self) -> Option<kubeapp::sdk::diagnostics::Diagnostics> {
        let (status, body) = get(self.metrics, "/debug/kubeapp").await?;
        assert_eq!(status, 200, "/debug/kubeapp from loopback: {body}");
        Some(serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
    }

    /// The sum of the samples of `name` (`None` until `/metrics` answers).
    pub async fn metric(&self, name: &str) -> Option<f64> {
        self.metric_where(name, "").await
    }

    /// Stops it with SIGTERM; fails unless it exits successfully within a minute.
    pub async fn stop(mut self) {
        send_signal(self.pid, "TERM");
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), self.child.wait())
            .await
            .expect("stops within a minute of SIGTERM")
            .expect("wait");
        assert!(
            status.success(),
            "{} exited with {status}\n{}",
            self.name,
            self.log()
        );
    }
}
