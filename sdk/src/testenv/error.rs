//! Errors of the test control plane.

use std::path::PathBuf;
use std::time::Duration;

use super::binaries::{ASSETS_ENV, BUILD_SCRIPT};

/// Everything that can go wrong while starting, using or stopping a [`TestEnv`](super::TestEnv).
#[derive(Debug, thiserror::Error)]
pub enum TestEnvError {
    /// A control-plane binary is in none of the searched directories.
    #[error(
        "{binary} not found; searched: {dirs}. Build the control-plane binaries with \
         `{BUILD_SCRIPT}` (run from the kubeapp repository; it prints the directory) or \
         `kubeapp testenv install`, or set {ASSETS_ENV} to a directory holding them (e.g. \
         `export {ASSETS_ENV}=$({BUILD_SCRIPT})`)",
        dirs = display_dirs(searched)
    )]
    BinaryNotFound {
        /// The binary's file name.
        binary: &'static str,
        /// The directories searched, in order.
        searched: Vec<PathBuf>,
    },
    /// A process could not be spawned at all.
    #[error("could not start {binary} ({path})")]
    Spawn {
        /// Which process.
        binary: &'static str,
        /// The executable.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A process exited while it was expected to come up.
    #[error("{binary} exited during start-up ({status}); last lines of {log}:\n{tail}")]
    Exited {
        /// Which process.
        binary: &'static str,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },
    /// A process did not become ready in time.
    #[error("{binary} was not ready after {waited:?} ({reason}); last lines of {log}:\n{tail}")]
    NotReady {
        /// Which process.
        binary: &'static str,
        /// How long it was given.
        waited: Duration,
        /// The last readiness probe's failure.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },
    /// Generating keys or certificates failed.
    #[error("generating {what}")]
    Certificate {
        /// Which certificate or key.
        what: &'static str,
        /// The generator's error.
        source: rcgen::Error,
    },
    /// A file of the environment could not be written or read.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Building a client from the generated kubeconfig failed.
    #[error("building a client for {context}")]
    Kubeconfig {
        /// Which identity the client was for.
        context: String,
        /// kube's error.
        source: kube::config::KubeconfigError,
    },
    /// A request to the API server failed.
    #[error("{action}")]
    Kube {
        /// What was being done.
        action: String,
        /// kube's error.
        source: kube::Error,
    },
    /// Something did not happen within its timeout.
    #[error("timed out after {waited:?} {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// A watch used to await a condition failed.
    #[error("{what}: {message}")]
    Watch {
        /// What was awaited.
        what: String,
        /// The watch's error.
        message: String,
    },
    /// YAML given to a helper could not be parsed.
    #[error("parsing {what}: {message}")]
    InvalidYaml {
        /// What the YAML was supposed to be.
        what: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The operation needs the API server, which was stopped with
    /// [`TestEnv::stop_apiserver`](super::TestEnv::stop_apiserver).
    #[error("kube-apiserver is stopped; call TestEnv::start_apiserver first")]
    ApiServerStopped,
}

fn display_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "(no directory: HOME, XDG_CACHE_HOME and KUBEAPP_CACHE_DIR are all unset)".into();
    }
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
