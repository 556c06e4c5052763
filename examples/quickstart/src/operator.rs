//! The reconciler example's binary: finding it, running its `crd` and `manifests` commands, and
//! running the operator as a child process that stops when asked and never outlives this
//! program.
//!
//! The child runs in its own process group, so the terminal's Ctrl-C reaches only this program,
//! which then stops the operator with one SIGTERM (a second signal would make the operator's
//! Runner exit at once) and waits for it. A parent-death signal kills it should this program
//! die without that (SIGKILL, a crash).

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

use crate::certs::DevCerts;
use crate::signals::Signals;

/// The example's binary name.
pub const BINARY: &str = "kubeapp-example-reconciler";

/// The reconciler example's binary.
#[derive(Clone, Debug)]
pub struct OperatorBinary {
    path: PathBuf,
}

impl OperatorBinary {
    /// `explicit`, or else [`BINARY`] next to this program.
    ///
    /// # Errors
    ///
    /// When the file does not exist, with the command that builds it.
    pub fn locate(explicit: Option<PathBuf>) -> anyhow::Result<Self> {
        let path = match explicit {
            Some(path) => path,
            None => std::env::current_exe()
                .context("finding this program's own path")?
                .with_file_name(format!("{BINARY}{}", std::env::consts::EXE_SUFFIX)),
        };
        if !path.is_file() {
            bail!(
                "the operator binary {} is missing: build it with `cargo build -p {BINARY}` \
                 (scripts/quickstart does), or pass --operator",
                path.display()
            );
        }
        Ok(Self { path })
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs a printing command (`crd`, `manifests`) and returns its output.
    ///
    /// # Errors
    ///
    /// When it cannot be run or fails; the message has its stderr.
    pub async fn output<S: AsRef<OsStr>>(&self, args: &[S]) -> anyhow::Result<String> {
        let shown: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        let output = Command::new(&self.path)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {} {}", self.path.display(), shown.join(" ")))?;
        if !output.status.success() {
            bail!(
                "{} {} failed ({}): {}",
                self.path.display(),
                shown.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        String::from_utf8(output.stdout).context("the operator printed something not UTF-8")
    }

    /// Starts `run` against the cluster of `kubeconfig`, serving metrics on `metrics_addr` and
    /// webhooks on `webhook_addr` with `certs`. Its logs go to this program's stderr.
    ///
    /// # Errors
    ///
    /// When the process cannot be started.
    pub fn spawn_run(
        &self,
        kubeconfig: &Path,
        metrics_addr: SocketAddr,
        webhook_addr: SocketAddr,
        certs: &DevCerts,
    ) -> anyhow::Result<RunningOperator> {
        let mut command = Command::new(&self.path);
        command
            .arg("run")
            .arg("--metrics-addr")
            .arg(metrics_addr.to_string())
            .arg("--webhook-addr")
            .arg(webhook_addr.to_string())
            .arg("--webhook-cert-file")
            .arg(&certs.cert_file)
            .arg("--webhook-key-file")
            .arg(&certs.key_file)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        arm_parent_death_signal(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("starting {} run", self.path.display()))?;
        let pid = child
            .id()
            .context("the operator exited before its pid was known")?;
        Ok(RunningOperator { child, pid })
    }
}

/// Asks the kernel to SIGKILL the child when the thread that forked it ends. This program runs
/// on a single-threaded runtime, so that thread is the main thread, which lives as long as the
/// process.
#[allow(unsafe_code)]
fn arm_parent_death_signal(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only calls the
    // async-signal-safe prctl and getppid; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; the signal would never come.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }
}

/// The operator process.
#[derive(Debug)]
pub struct RunningOperator {
    child: Child,
    pid: u32,
}

impl RunningOperator {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its exit status if it has exited, without waiting.
    ///
    /// # Errors
    ///
    /// When the status cannot be read.
    pub fn exited(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        self.child
            .try_wait()
            .context("checking on the operator process")
    }

    /// Waits until it exits on its own.
    ///
    /// # Errors
    ///
    /// When the status cannot be read.
    pub async fn wait(&mut self) -> anyhow::Result<ExitStatus> {
        self.child
            .wait()
            .await
            .context("waiting for the operator process")
    }

    /// Stops it: one SIGTERM (graceful shutdown), then waits up to `timeout`; a further signal to
    /// this program, or the timeout, kills it at once. Returns how it ended.
    ///
    /// # Errors
    ///
    /// When it cannot be signalled or waited for.
    pub async fn stop(
        mut self,
        timeout: Duration,
        signals: &mut Signals,
    ) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.exited()? {
            return Ok(status);
        }
        terminate(self.pid)?;
        tokio::select! {
            status = self.child.wait() => status.context("waiting for the operator process"),
            () = tokio::time::sleep(timeout) => {
                eprintln!("the operator did not stop within {timeout:?}: killing it");
                self.kill().await
            }
            name = signals.next() => {
                eprintln!("{name} again: killing the operator");
                self.kill().await
            }
        }
    }

    async fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        self.child.kill().await.context("killing the operator")?;
        self.wait().await
    }
}

/// Sends SIGTERM to `pid`.
#[allow(unsafe_code)]
fn terminate(pid: u32) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(pid).context("the operator's pid does not fit a pid_t")?;
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, not yet
    // reaped, so it cannot name another process.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(std::io::Error::last_os_error()).context("sending SIGTERM to the operator");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_the_build_command() {
        let err = OperatorBinary::locate(Some(PathBuf::from("/nonexistent/operator")))
            .expect_err("missing");
        let message = err.to_string();
        assert!(
            message.contains("/nonexistent/operator")
                && message.contains("cargo build -p kubeapp-example-reconciler"),
            "{message}"
        );
    }
}
