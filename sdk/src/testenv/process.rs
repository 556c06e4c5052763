//! Child processes that cannot outlive the test binary.
//!
//! Three layers make sure no etcd or kube-apiserver is left behind:
//!
//! - [`ManagedProcess`] kills (SIGKILL) and reaps its child when dropped, which covers a test that
//!   returns or panics (unwinding drops the `TestEnv`).
//! - Each child asks the kernel (`PR_SET_PDEATHSIG`) to be killed when the thread that forked it
//!   ends. All children are forked by one dedicated spawner thread that lives as long as the
//!   process, so the signal fires exactly when the test binary exits for any reason: `exit()`,
//!   `abort()`, an uncaught signal, or a `TestEnv` kept in a `static` that is never dropped. (Forking
//!   from the test's own thread would kill a shared control plane when that one test finished.)
//! - A child forked after its parent already died (a race during exit) notices that its parent id
//!   changed and refuses to exec.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use super::TestEnvError;

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

/// The sender side of the spawner thread's queue.
fn spawner() -> &'static Mutex<mpsc::Sender<(Command, SpawnReply)>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        // The thread must never end while the process runs: its exit would SIGKILL every child.
        // It only ends when every sender is gone, and the one sender lives in this static.
        let spawned = std::thread::Builder::new()
            .name("kubeapp-testenv-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    // The requester may have given up; nothing to do then but let the child drop,
                    // which does not kill it, so kill it here.
                    if let Err(mpsc::SendError(Ok(mut child))) = reply.send(command.spawn()) {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            });
        if let Err(err) = spawned {
            tracing::error!(%err, "cannot start the testenv spawner thread");
        }
        Mutex::new(tx)
    })
}

/// Spawns `command` from the spawner thread, with the parent-death signal armed.
fn spawn(mut command: Command) -> std::io::Result<Child> {
    arm_parent_death_signal(&mut command);
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = spawner()
        .lock()
        .map_err(|_| std::io::Error::other("testenv spawner lock poisoned"))?
        .send((command, reply_tx));
    sent.map_err(|_| std::io::Error::other("testenv spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("testenv spawner thread did not answer"))?
}

#[allow(unsafe_code)]
fn arm_parent_death_signal(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only calls async-signal-safe
    // functions (prctl, getppid); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; the signal would never come then.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }
}

/// A running etcd or kube-apiserver, killed when dropped.
#[derive(Debug)]
pub(crate) struct ManagedProcess {
    binary: &'static str,
    child: Child,
    log: PathBuf,
}

impl ManagedProcess {
    /// Starts `path` with `args`, stdout and stderr appended to `log`.
    pub(crate) fn start(
        binary: &'static str,
        path: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<Self, TestEnvError> {
        Self::start_with_env(binary, path, args, &[], log)
    }

    /// [`start`](Self::start) with extra environment variables.
    pub(crate) fn start_with_env(
        binary: &'static str,
        path: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        log: PathBuf,
    ) -> Result<Self, TestEnvError> {
        let io_err = |action, source| TestEnvError::Io {
            action,
            path: log.clone(),
            source,
        };
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| io_err("opening log", e))?;
        let err = out.try_clone().map_err(|e| io_err("opening log", e))?;
        let mut command = Command::new(path);
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = spawn(command).map_err(|source| TestEnvError::Spawn {
            binary,
            path: path.to_path_buf(),
            source,
        })?;
        tracing::debug!(binary, pid = child.id(), log = %log.display(), "started");
        Ok(Self { binary, child, log })
    }

    /// The operating system's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Which binary this is.
    pub(crate) fn binary(&self) -> &'static str {
        self.binary
    }

    /// The log file.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// An error when the process has exited, carrying its status and the tail of its log.
    pub(crate) fn check_running(&mut self) -> Result<(), TestEnvError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(TestEnvError::Exited {
                binary: self.binary,
                status: status.to_string(),
                log: self.log.clone(),
                tail: log_tail(&self.log, 40),
            }),
            Err(source) => Err(TestEnvError::Io {
                action: "waiting for",
                path: self.log.clone(),
                source,
            }),
        }
    }

    /// Kills the process and reaps it.
    pub(crate) fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        tracing::debug!(binary = self.binary, pid = self.child.id(), "stopped");
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a log file (reading at most its last 64 KiB).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(err) => format!("(log unreadable: {err})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_managed_process_kills_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let proc = ManagedProcess::start(
            "sleep",
            Path::new("/bin/sleep"),
            &["600".into()],
            dir.path().join("sleep.log"),
        )
        .expect("start sleep");
        let pid = proc.pid();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        drop(proc);
        // Reaped by kill(): the pid no longer names a process (not even a zombie).
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn exited_process_reports_log_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut proc = ManagedProcess::start(
            "sh",
            Path::new("/bin/sh"),
            &["-c".into(), "echo first; echo boom-line; exit 3".into()],
            dir.path().join("sh.log"),
        )
        .expect("start sh");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let err = loop {
            match proc.check_running() {
                Err(err) => break err,
                Ok(()) if std::time::Instant::now() > deadline => panic!("sh never exited"),
                Ok(()) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        let text = err.to_string();
        assert!(
            text.contains("boom-line") && text.contains("exit status: 3"),
            "{text}"
        );
    }
}
