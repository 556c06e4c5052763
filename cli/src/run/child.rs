//! The operator as a child process of `kubeapp run`: its own process group (the terminal's
//! Ctrl-C reaches only `kubeapp`, which then stops it with one SIGTERM, a graceful shutdown),
//! and a parent-death signal so it never outlives `kubeapp` (SIGKILL of `kubeapp`, a crash).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use super::RunError;
use super::certs::DevCerts;

/// The running operator.
#[derive(Debug)]
pub struct RunningOperator {
    child: Child,
    pid: u32,
}

/// Starts `binary run` against the cluster of `kubeconfig`; its logs go to this program's
/// stderr. Must be called from the thread that lives as long as the program (the parent-death
/// signal is tied to the forking thread): `kubeapp run` uses a single-threaded runtime.
///
/// # Errors
///
/// When the process cannot be started.
pub fn spawn(
    binary: &Path,
    kubeconfig: &Path,
    metrics_addr: SocketAddr,
    webhooks: Option<(SocketAddr, &DevCerts)>,
) -> Result<RunningOperator, RunError> {
    let mut command = Command::new(binary);
    command
        .arg("run")
        .arg("--metrics-addr")
        .arg(metrics_addr.to_string())
        .env("KUBECONFIG", kubeconfig)
        .env_remove("WATCH_NAMESPACE")
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    if let Some((addr, certs)) = webhooks {
        command
            .arg("--webhook-addr")
            .arg(addr.to_string())
            .arg("--webhook-cert-file")
            .arg(&certs.cert_file)
            .arg("--webhook-key-file")
            .arg(&certs.key_file);
    }
    arm_parent_death_signal(&mut command);
    let failed = |source| RunError::Operator {
        binary: binary.to_path_buf(),
        source,
    };
    let child = command.spawn().map_err(failed)?;
    let pid = child
        .id()
        .ok_or_else(|| failed(std::io::Error::other("exited before its pid was known")))?;
    Ok(RunningOperator { child, pid })
}

/// Asks the kernel to SIGKILL the child when the thread that forked it ends.
#[allow(unsafe_code)]
pub(crate) fn arm_parent_death_signal(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only calls the
    // async-signal-safe prctl and getppid; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: the signal would never come.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }
}

impl RunningOperator {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until it exits on its own.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Stops it: one SIGTERM, then up to `timeout` for it to exit, then SIGKILL.
    ///
    /// # Errors
    ///
    /// When it cannot be signalled or waited for.
    pub async fn stop(mut self, timeout: Duration) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        terminate(self.pid)?;
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                eprintln!("the operator did not stop within {timeout:?}: killing it");
                self.child.kill().await?;
                self.child.wait().await
            }
        }
    }
}

/// Sends SIGTERM to `pid`.
#[allow(unsafe_code)]
fn terminate(pid: u32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, not yet
    // reaped, so it cannot name another process.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The sample files of a project: `samples/*.yaml`, sorted.
pub fn samples(dir: &Path) -> Vec<PathBuf> {
    yaml_files(&dir.join("samples"))
}

/// The YAML files directly in `dir` (none when it does not exist), sorted.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}
