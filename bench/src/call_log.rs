//! The handler-call log of `kubeapp-bench latency` ([`crate::latency`]): a contender started with
//! `--call-log FILE` appends one line per reconcile call, as the call starts, with the object's
//! name, the `metadata.generation` it was called with and the wall-clock time; the tool matches
//! the lines against the times its own writes were answered.
//!
//! The time is the system's real-time clock (nanoseconds since the Unix epoch): the tool and the
//! contender are two processes on one machine, and that is the clock they share. Each line is
//! written as the call starts (a line-buffered file behind a mutex): one `write` per call, the
//! same cost for every contender.

use std::fs::File;
use std::io::{BufRead as _, BufReader, LineWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

/// The log this process writes to, once [`init`] opened it.
static LOG: OnceLock<Mutex<LineWriter<File>>> = OnceLock::new();

/// Opens (creates or truncates) `path` as this process's call log; without a path, calls are not
/// logged.
///
/// # Errors
///
/// When the file cannot be created, or a log was opened before.
pub fn init(path: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = path else {
        return Ok(());
    };
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    LOG.set(Mutex::new(LineWriter::new(file)))
        .map_err(|_| anyhow::anyhow!("the call log was opened twice"))
}

/// Logs a call for `name` at `generation`, now (nothing when no log was opened).
pub fn record(name: &str, generation: i64) {
    let Some(log) = LOG.get() else {
        return;
    };
    let at = unix_nanos(SystemTime::now());
    // A poisoned lock only means another call panicked mid-line; the log is diagnostic.
    let mut log = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Err(error) = writeln!(log, "{name} {generation} {at}") {
        tracing::warn!(%error, "writing the call log");
    }
}

/// Nanoseconds since the Unix epoch (0 for a time before it).
pub fn unix_nanos(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0)
}

/// One logged call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The object's name.
    pub name: String,
    /// The `metadata.generation` the handler was called with.
    pub generation: i64,
    /// When the call started, in nanoseconds since the Unix epoch.
    pub at: u128,
}

/// A call log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CallLogError {
    /// The file could not be read.
    #[error("reading {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not `NAME GENERATION NANOS`.
    #[error("{path}:{line}: not `NAME GENERATION NANOS`: {text:?}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// The line.
        text: String,
    },
}

/// The calls logged in `path` so far. A last line without its newline (being written) is left
/// out.
///
/// # Errors
///
/// When the file cannot be read or a complete line is malformed.
pub fn read(path: &Path) -> Result<Vec<Call>, CallLogError> {
    let io = |source| CallLogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    let mut calls = Vec::new();
    let mut text = String::new();
    for line in 1.. {
        text.clear();
        if reader.read_line(&mut text).map_err(io)? == 0 || !text.ends_with('\n') {
            break;
        }
        let call = parse(text.trim_end()).ok_or_else(|| CallLogError::Malformed {
            path: path.to_path_buf(),
            line,
            text: text.trim_end().to_string(),
        })?;
        calls.push(call);
    }
    Ok(calls)
}

fn parse(line: &str) -> Option<Call> {
    let mut fields = line.split(' ');
    let call = Call {
        name: fields.next().filter(|name| !name.is_empty())?.to_string(),
        generation: fields.next()?.parse().ok()?,
        at: fields.next()?.parse().ok()?,
    };
    fields.next().is_none().then_some(call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_lines_are_read_and_a_partial_last_line_is_left_for_later() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("calls.log");
        std::fs::write(&path, "obj-00001 2 1700000000000000001\nobj-00002 3 17").expect("write");
        let calls = read(&path).expect("read");
        assert_eq!(
            calls,
            [Call {
                name: "obj-00001".into(),
                generation: 2,
                at: 1_700_000_000_000_000_001
            }]
        );
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_the_file_and_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("calls.log");
        std::fs::write(&path, "a 1 5\nb x 6\n").expect("write");
        let error = read(&path).expect_err("malformed").to_string();
        assert!(
            error.ends_with("calls.log:2: not `NAME GENERATION NANOS`: \"b x 6\""),
            "{error}"
        );
    }
}
