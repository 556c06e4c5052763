//! [`OperatorProcess`]: the operator under test as the binary users deploy, one child process
//! per run (and per crash), for a kubeapp operator binary or any binary with the same flags.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use kubeapp_sdk::diagnostics::RECORD_CALLS_ENV;

use crate::calls::KEEP_CALLS;
use crate::scenario::{BoxError, OperatorUnderTest, RunContext, RunningOperator};

/// How much of a process's log a failure report shows (its end).
const LOG_TAIL_BYTES: usize = 8 << 10;

/// Starts `<program> <args> --metrics-addr <a free port> --namespace <the run's namespace>`
/// with `KUBECONFIG` naming the run's fault proxy: the flags of a kubeapp operator binary's
/// `run` command (`kubeapp::simple::cli::OperatorArgs`).
///
/// ```no_run
/// # async fn example(env: &kubeapp_sdk::testenv::TestEnv, scenario: kubeapp_testing::Scenario)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_testing::{FaultHarness, OperatorProcess};
///
/// // In a project's tests: `env!("CARGO_BIN_EXE_my-operator")`.
/// let operator = OperatorProcess::new("target/debug/my-operator");
/// let report = FaultHarness::new(env.client(), env.dir().join("faults"))
///     .run(&scenario, &operator)
///     .await?;
/// report.assert_passed();
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct OperatorProcess {
    program: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl OperatorProcess {
    /// The binary at `program`, started with `run` and the flags above.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: vec!["run".to_owned()],
            envs: vec![("RUST_LOG".to_owned(), "info".to_owned())],
        }
    }

    /// Replaces the arguments before the metrics and namespace flags (`run` by default).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets an environment variable of every process (`RUST_LOG=info` by default).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.push((name.into(), value.into()));
        self
    }
}

#[async_trait::async_trait]
impl OperatorUnderTest for OperatorProcess {
    async fn start(&self, run: &RunContext) -> Result<Box<dyn RunningOperator>, BoxError> {
        // A free port: bound and released at once (the process binds it a moment later).
        let addr = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?;
        let log_path = run.dir.join(format!("operator-{}.log", run.process));
        let log = std::fs::File::create(&log_path)?;
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .args(["--metrics-addr", &addr.to_string()])
            .args(["--namespace", &run.namespace])
            .env("KUBECONFIG", &run.kubeconfig)
            // Its handler calls on /debug/kubeapp, for the harness's checks on them.
            .env(RECORD_CALLS_ENV, KEEP_CALLS.to_string())
            .env_remove("WATCH_NAMESPACE")
            .env_remove("METRICS_ADDR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        for (name, value) in &self.envs {
            command.env(name, value);
        }
        let child = command
            .spawn()
            .map_err(|error| format!("start {}: {error}", self.program.display()))?;
        Ok(Box::new(RunningProcess {
            child,
            addr,
            log_path,
        }))
    }
}

/// One started operator process.
struct RunningProcess {
    child: tokio::process::Child,
    addr: SocketAddr,
    log_path: PathBuf,
}

#[async_trait::async_trait]
impl RunningOperator for RunningProcess {
    fn metrics_addr(&self) -> SocketAddr {
        self.addr
    }

    fn logs(&self) -> String {
        tail(&self.log_path)
    }

    async fn kill(mut self: Box<Self>) {
        // SIGKILL, then reap.
        let _ = self.child.kill().await;
    }
}

/// The end of the log at `path` (at most 8 KiB, from a line start).
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut from = text.len().saturating_sub(LOG_TAIL_BYTES);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let end = &text[from..];
    match end.find('\n') {
        Some(newline) if from > 0 => end[newline + 1..].to_owned(),
        _ => end.to_owned(),
    }
}
