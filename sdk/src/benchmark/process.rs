//! The measured operator as a child process: started with its output in a log file, its resident
//! memory (current and peak) and CPU time read from `/proc`, its peak reset through
//! `/proc/<pid>/clear_refs` (to measure the peak of one phase), killed when the run ends or the
//! tool goes away. Linux only: everything is read from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Starting or inspecting a measured process failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The binary could not be started.
    #[error("starting {binary}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The log file could not be created.
    #[error("creating the log file {path}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `/proc/<pid>/status` could not be read or has no `VmHWM` (`VmRSS`) line.
    #[error("reading the RSS of process {pid} from /proc/{pid}/status: {reason}")]
    PeakRss {
        /// The process.
        pid: u32,
        /// What went wrong.
        reason: String,
    },
    /// `/proc/<pid>/stat` could not be read or parsed.
    #[error("reading the CPU time of process {pid} from /proc/{pid}/stat: {reason}")]
    CpuTime {
        /// The process.
        pid: u32,
        /// What went wrong.
        reason: String,
    },
}

/// A running measured process; killed when dropped.
#[derive(Debug)]
pub struct MeasuredProcess {
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
}

impl MeasuredProcess {
    /// Starts `binary` with `args`, stdout and stderr written to `log`.
    ///
    /// # Errors
    ///
    /// When the log cannot be created or the binary not started.
    pub fn spawn(binary: &Path, args: &[String], log: &Path) -> Result<Self, ProcessError> {
        let mut command = tokio::process::Command::new(binary);
        command.args(args);
        Self::spawn_command(command, binary, log)
    }

    /// Starts `command` (its program is `binary`, for errors) as [`spawn`](Self::spawn) does,
    /// keeping what the caller set (environment, process group, `pre_exec`).
    ///
    /// # Errors
    ///
    /// When the log cannot be created or the command not started.
    pub fn spawn_command(
        mut command: tokio::process::Command,
        binary: &Path,
        log: &Path,
    ) -> Result<Self, ProcessError> {
        let log_error = |source| ProcessError::Log {
            path: log.to_path_buf(),
            source,
        };
        let out = std::fs::File::create(log).map_err(log_error)?;
        let err = out.try_clone().map_err(log_error)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ProcessError::Spawn {
                binary: binary.to_path_buf(),
                source,
            })?;
        let pid = child.id().ok_or_else(|| ProcessError::Spawn {
            binary: binary.to_path_buf(),
            source: std::io::Error::other("the process exited at once"),
        })?;
        Ok(Self {
            child,
            pid,
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The peak resident set size so far, in bytes (`VmHWM`).
    ///
    /// # Errors
    ///
    /// When the process is gone or the file has no `VmHWM` line.
    pub fn peak_rss_bytes(&self) -> Result<u64, ProcessError> {
        self.read_proc(
            "status",
            |pid, reason| ProcessError::PeakRss { pid, reason },
            |status| parse_vm_hwm(status).ok_or_else(|| "no VmHWM line".to_string()),
        )
    }

    /// CPU time the process has used so far (user + system, all threads), in seconds.
    ///
    /// # Errors
    ///
    /// When the process is gone or its `stat` line cannot be parsed.
    pub fn cpu_seconds(&self) -> Result<f64, ProcessError> {
        self.read_proc(
            "stat",
            |pid, reason| ProcessError::CpuTime { pid, reason },
            |stat| {
                parse_cpu_seconds(stat).ok_or_else(|| format!("no utime/stime fields in {stat:?}"))
            },
        )
    }

    /// Reads `/proc/<pid>/<file>` and parses it; a failure of either becomes `error(pid, why)`.
    fn read_proc<T>(
        &self,
        file: &str,
        error: impl Fn(u32, String) -> ProcessError,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, ProcessError> {
        let path = format!("/proc/{}/{file}", self.pid);
        let text = std::fs::read_to_string(&path).map_err(|e| error(self.pid, e.to_string()))?;
        parse(&text).map_err(|reason| error(self.pid, reason))
    }

    /// The resident set size now, in bytes (`VmRSS`).
    ///
    /// # Errors
    ///
    /// When the process is gone or the file has no `VmRSS` line.
    pub fn rss_bytes(&self) -> Result<u64, ProcessError> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).map_err(|e| ProcessError::PeakRss {
            pid: self.pid,
            reason: e.to_string(),
        })?;
        parse_kib_line(&status, "VmRSS:").ok_or_else(|| ProcessError::PeakRss {
            pid: self.pid,
            reason: "no VmRSS line".to_string(),
        })
    }

    /// Resets the peak RSS (`VmHWM`) to the current RSS (`5` into `/proc/<pid>/clear_refs`,
    /// Linux 4.0 and later), so that a later [`peak_rss_bytes`](Self::peak_rss_bytes) is the
    /// peak since now.
    ///
    /// # Errors
    ///
    /// When the file cannot be written (process gone, or not ours).
    pub fn reset_peak_rss(&self) -> Result<(), ProcessError> {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5").map_err(|e| {
            ProcessError::PeakRss {
                pid: self.pid,
                reason: format!("resetting the peak through clear_refs: {e}"),
            }
        })
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub async fn kill(mut self) {
        // Already gone is fine: the run has what it needed.
        let _ = self.child.kill().await;
    }
}

/// The `VmHWM` of a `/proc/<pid>/status` text, in bytes.
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    parse_kib_line(status, "VmHWM:")
}

/// Clock ticks per second of `/proc/<pid>/stat` times: `USER_HZ`, which Linux fixes at 100 for
/// user space on every architecture it runs on (what `sysconf(_SC_CLK_TCK)` returns).
const USER_HZ: f64 = 100.0;

/// User + system CPU seconds from a `/proc/<pid>/stat` line (fields 14 and 15, counted after the
/// command name in parentheses, which may itself hold spaces and parentheses).
pub fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state): utime is field 14, stime field 15.
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    #[allow(clippy::cast_precision_loss)]
    let ticks = (utime + stime) as f64;
    Some(ticks / USER_HZ)
}

/// The value of the `kB` line starting with `key` of a `/proc/<pid>/status` text, in bytes.
fn parse_kib_line(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let mut fields = line[key.len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => Some(value * 1024),
        _ => None,
    }
}

/// The last `lines` lines of a file (empty when it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_are_utime_plus_stime_after_the_name() {
        // The name holds a space and a parenthesis; utime 250 and stime 50 ticks.
        let stat = "4242 (kube app) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 3 0 \
                    100 2000000 500 18446744073709551615\n";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_cpu_seconds("4242 (short) S 1 2"), None);
        assert_eq!(parse_cpu_seconds("no name"), None);
    }

    #[test]
    fn vm_hwm_is_read_in_bytes() {
        let status = "Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(2048 * 1024));
        assert_eq!(parse_vm_hwm("Name:\tx\n"), None);
    }

    #[tokio::test]
    async fn the_peak_rss_of_a_running_child_is_readable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let process = MeasuredProcess::spawn(
            Path::new("sleep"),
            &["30".to_string()],
            &dir.path().join("sleep.log"),
        )
        .expect("spawn sleep");
        // Right after the spawn the child may still be exec'ing and loading `sleep`, its RSS still
        // growing (a peak read then can be below a later one, reset or not): wait until it sleeps.
        let stat = format!("/proc/{}/stat", process.pid());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains("(sleep) S")) {
            assert!(
                std::time::Instant::now() < deadline,
                "`sleep 30` never reached its sleep: {stat} reads {:?}",
                std::fs::read_to_string(&stat)
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let rss = process.peak_rss_bytes().expect("VmHWM");
        assert!(rss > 0);
        assert!(process.rss_bytes().expect("VmRSS") > 0);
        process.reset_peak_rss().expect("clear_refs");
        assert!(process.peak_rss_bytes().expect("VmHWM after the reset") <= rss);
        process.kill().await;
    }
}
