//! The contenders and where their binaries are.

use std::fmt;
use std::path::{Path, PathBuf};

/// One operator implementation under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Contender {
    /// kubeapp's simple App with an opinionated reconciler.
    Kubeapp,
    /// kube-runtime's `Controller` with its `finalizer` helper.
    KubeRuntime,
    /// grafana-app-sdk's simple App (Go) with an opinionated reconciler.
    GrafanaAppSdk,
    /// A plain client doing the same writes.
    Floor,
}

impl Contender {
    /// Every contender, in the order they run.
    pub const ALL: [Contender; 4] = [
        Contender::Kubeapp,
        Contender::KubeRuntime,
        Contender::GrafanaAppSdk,
        Contender::Floor,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Kubeapp => "kubeapp",
            Contender::KubeRuntime => "kube-runtime",
            Contender::GrafanaAppSdk => "grafana-app-sdk",
            Contender::Floor => "floor",
        }
    }

    /// The Rust binary of the contender (built by cargo with the tool); `None` for the Go one.
    pub fn rust_binary(self) -> Option<&'static str> {
        match self {
            Contender::Kubeapp => Some("kubeapp-bench-kubeapp"),
            Contender::KubeRuntime => Some("kubeapp-bench-kube-runtime"),
            Contender::Floor => Some("kubeapp-bench-floor"),
            Contender::GrafanaAppSdk => None,
        }
    }
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust contender binary is missing.
#[derive(Debug, thiserror::Error)]
#[error(
    "the contender binary {path} is missing: build it with \
     `cargo build --release -p kubeapp-bench --bins` (same profile as the tool), or run `scripts/bench`"
)]
pub struct MissingBinary {
    /// Where it was looked for.
    pub path: PathBuf,
}

/// The path of Rust binary `name` in `dir`, checked to exist.
///
/// # Errors
///
/// [`MissingBinary`] with the build command.
pub fn rust_binary_in(dir: &Path, name: &str) -> Result<PathBuf, MissingBinary> {
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if path.is_file() {
        Ok(path)
    } else {
        Err(MissingBinary { path })
    }
}
