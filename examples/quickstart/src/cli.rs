//! The quick start's command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// kubeapp quick start: starts a local kube-apiserver + etcd, installs the reconciler example's
/// CRD and webhook configurations with development certificates, runs the example operator
/// against it, applies a sample Template and prints its reconciled status, the rendered
/// ConfigMap and the metrics URL, then waits. Ctrl-C (SIGINT) or SIGTERM stops the operator and
/// the control plane and removes their files.
///
/// The control-plane binaries are found as kubeapp's testenv finds them ($KUBEBUILDER_ASSETS or
/// the cache that `testbin/build.sh` fills); `scripts/quickstart` builds everything first.
#[derive(Debug, Parser)]
#[command(name = "kubeapp-quickstart", version)]
pub struct Cli {
    /// The reconciler example's binary (default: kubeapp-example-reconciler next to this
    /// program, where cargo builds it).
    #[arg(long, env = "KUBEAPP_QUICKSTART_OPERATOR", value_name = "PATH")]
    pub operator: Option<PathBuf>,
    /// Where the operator serves /metrics, /livez and /readyz (port 0: a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub metrics_addr: SocketAddr,
    /// Where the operator serves its webhooks over HTTPS (port 0: a free port). The
    /// development certificate is issued for this address, 127.0.0.1 and localhost.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub webhook_addr: SocketAddr,
    /// The Template to apply, as YAML (default: examples/reconciler/samples/template.yaml,
    /// built into this program).
    #[arg(long, value_name = "PATH")]
    pub sample: Option<PathBuf>,
    /// How long each step may take: the control plane's start, the operator's readiness, the
    /// reconciliation of the sample, the operator's shutdown (in seconds).
    #[arg(long, default_value = "90", value_parser = parse_seconds, value_name = "SECONDS")]
    pub timeout: Duration,
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("invalid number of seconds {text:?}"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_cli_is_consistent_and_defaults_to_free_loopback_ports() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["q"]).expect("parses");
        assert_eq!(cli.metrics_addr, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(cli.webhook_addr.port(), 0);
        assert_eq!(cli.timeout, Duration::from_secs(90));
        assert!(Cli::try_parse_from(["q", "--timeout", "soon"]).is_err());
    }
}
