//! What every Rust contender binary takes on its command line, and its client.
//!
//! The tool starts each contender as `BINARY --kubeconfig FILE --namespace NS --workers N
//! --metrics-port P` (the Go contender takes the same flags).

use std::path::PathBuf;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The flags of a contender binary.
#[derive(Clone, Debug, clap::Parser)]
pub struct ContenderArgs {
    /// The kubeconfig file to connect with.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// The namespace whose objects to reconcile.
    #[arg(long)]
    pub namespace: String,
    /// Objects handled at once.
    #[arg(long, default_value_t = 10)]
    pub workers: usize,
    /// Port of the metrics and health server on 127.0.0.1 (for contenders that have one).
    #[arg(long, default_value_t = 0)]
    pub metrics_port: u16,
    /// Log each reconcile call to this file (`kubeapp-bench latency`; see
    /// [`call_log`](crate::call_log)).
    #[arg(long)]
    pub call_log: Option<PathBuf>,
}

/// A client for the cluster in `path`. kube-rs clients have no client-side rate limit.
///
/// # Errors
///
/// When the file cannot be read or names no usable cluster.
pub async fn client_from(path: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kubeconfig =
        Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading {}", path.display()))?;
    kube::Client::try_from(config).context("building the client")
}

/// Logs at `warn` and above to stderr (the tool keeps it in a file per run).
pub fn init_logs() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}
