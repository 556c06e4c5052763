//! The command line: flags with environment fallbacks, and the `run`, `crd` and `manifests`
//! commands.
//!
//! Without a command the binary runs the operator, so `kubeapp-example-reconciler
//! --metrics-addr 127.0.0.1:9090` and `kubeapp-example-reconciler run --metrics-addr
//! 127.0.0.1:9090` are the same.
//!
//! The webhook flags: `run` needs `--webhook-cert-file` and `--webhook-key-file` (the manifest
//! declares admission and conversion, see [`crate::webhook`]); `crd` and `manifests` need
//! `--webhook-ca-file`, and take `--webhook-url` for an operator outside the cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// kubeapp example operator: renders a ConfigMap from each Template.
///
/// The Template kind has admission (validation, mutation) and conversion (v1 <-> v2) webhooks,
/// so `run` requires --webhook-cert-file and --webhook-key-file, and `crd` and `manifests`
/// require --webhook-ca-file.
#[derive(Debug, Parser)]
#[command(name = "kubeapp-example-reconciler", version)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The operator's settings, for the default `run`.
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// The command to execute, `run` with the top-level flags when none was given.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.run))
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator (the default). Serves the webhooks over HTTPS: requires
    /// --webhook-cert-file and --webhook-key-file.
    Run(RunArgs),
    /// Print the CustomResourceDefinition of Template (v1 stored, v2 served, conversion webhook)
    /// as YAML.
    Crd(CrdArgs),
    /// Print the deployment manifests as YAML: RBAC, Deployment, metrics and webhook Services,
    /// Validating/MutatingWebhookConfigurations. With --webhook-url, only the webhook
    /// configurations (for an operator running outside the cluster).
    Manifests(ManifestArgs),
}

/// Settings of the running operator.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Where /metrics, /livez and /readyz are served.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,
    /// Watch Templates in this namespace only (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// The format of log lines on stderr (filter them with RUST_LOG).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export traces over OTLP to this endpoint (overrides OTEL_EXPORTER_OTLP_ENDPOINT, which is
    /// honoured otherwise).
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
    /// The protocol for --otlp-endpoint.
    #[arg(long, value_enum, default_value_t = OtlpProtocol::Grpc, requires = "otlp_endpoint")]
    pub otlp_protocol: OtlpProtocol,
    /// How long in-flight work may take to finish after SIGTERM or SIGINT (e.g. 30s).
    #[arg(long, env = "SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// The webhook server's certificate (PEM, with its chain). Required: the manifest declares
    /// admission and conversion webhooks. Re-read when the file changes.
    #[arg(long, env = "WEBHOOK_CERT_FILE", value_name = "PATH")]
    pub webhook_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --webhook-cert-file. Required with it.
    #[arg(long, env = "WEBHOOK_KEY_FILE", value_name = "PATH")]
    pub webhook_key_file: Option<PathBuf>,
    /// Where the webhooks (/validate, /mutate, /convert) are served over HTTPS.
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,
}

/// Where the apiserver reaches the webhooks, and the CA it trusts them with (`crd` and
/// `manifests`).
#[derive(Clone, Debug, Default, Args)]
pub struct WebhookTargetArgs {
    /// The CA certificate (PEM) that signed the webhook server's certificate; written into every
    /// caBundle. Required: the manifest declares admission and conversion webhooks.
    #[arg(long, env = "WEBHOOK_CA_FILE", value_name = "PATH")]
    pub webhook_ca_file: Option<PathBuf>,
    /// Point the webhooks at this https:// base URL (e.g. https://127.0.0.1:8443) instead of the
    /// in-cluster webhook Service: for an operator running outside the cluster, such as on a
    /// local control plane.
    #[arg(long, env = "WEBHOOK_URL", value_name = "URL")]
    pub webhook_url: Option<String>,
}

/// Settings of the `crd` command.
#[derive(Clone, Debug, Args)]
pub struct CrdArgs {
    /// The namespace of the webhook Service the conversion webhook points at (the operator's
    /// namespace; not used with --webhook-url).
    #[arg(long, default_value = "kubeapp-system")]
    pub namespace: String,
    /// The webhook's address and CA.
    #[command(flatten)]
    pub webhook: WebhookTargetArgs,
}

/// Settings of the `manifests` command.
#[derive(Clone, Debug, Args)]
pub struct ManifestArgs {
    /// The namespace the operator is deployed in.
    #[arg(long, default_value = "kubeapp-system")]
    pub namespace: String,
    /// The container image of the operator.
    #[arg(long, default_value = "kubeapp-example-reconciler:latest")]
    pub image: String,
    /// The port of /metrics, /livez and /readyz in the container.
    #[arg(long, default_value_t = 9090)]
    pub metrics_port: u16,
    /// The port of the webhook server in the container. Its certificate and key come from the
    /// Secret kubeapp-example-reconciler-webhook-tls (tls.crt, tls.key), which you create.
    #[arg(long, default_value_t = 8443)]
    pub webhook_port: u16,
    /// The webhook's address and CA.
    #[command(flatten)]
    pub webhook: WebhookTargetArgs,
}

/// The log format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
}

/// The OTLP transport of `--otlp-endpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OtlpProtocol {
    /// gRPC (usually port 4317).
    Grpc,
    /// HTTP with protobuf bodies (usually port 4318).
    Http,
}

/// Parses `500ms`, `30s`, `2m`, `1h`, or a plain number of seconds.
///
/// # Errors
///
/// A message saying what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let invalid = || format!("invalid duration {text:?}: use e.g. 500ms, 30s, 2m or 1h");
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let seconds = |factor: u64| number.checked_mul(factor).ok_or_else(invalid);
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "" | "s" => Ok(Duration::from_secs(number)),
        "m" => seconds(60).map(Duration::from_secs),
        "h" => seconds(3600).map(Duration::from_secs),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn no_command_means_run_with_the_top_level_flags() {
        let cli = Cli::try_parse_from([
            "x",
            "--metrics-addr",
            "127.0.0.1:1234",
            "--shutdown-timeout",
            "1s",
        ])
        .expect("parses");
        let Command::Run(args) = cli.into_command() else {
            panic!("not run");
        };
        assert_eq!(args.metrics_addr, SocketAddr::from(([127, 0, 0, 1], 1234)));
        assert_eq!(args.shutdown_timeout, Duration::from_secs(1));
        assert_eq!(args.webhook_addr, SocketAddr::from(([0, 0, 0, 0], 8443)));
        assert!(args.webhook_cert_file.is_none() && args.webhook_key_file.is_none());
    }

    #[test]
    fn subcommands_parse() {
        let cli = Cli::try_parse_from(["x", "manifests", "--namespace", "ops", "--image", "i:1"])
            .expect("parses");
        let Command::Manifests(args) = cli.into_command() else {
            panic!("not manifests");
        };
        assert_eq!(
            (args.namespace.as_str(), args.image.as_str()),
            ("ops", "i:1")
        );
        let cli = Cli::try_parse_from([
            "x",
            "crd",
            "--webhook-ca-file",
            "ca.crt",
            "--webhook-url",
            "https://127.0.0.1:8443",
        ])
        .expect("parses");
        let Command::Crd(args) = cli.into_command() else {
            panic!("not crd");
        };
        assert_eq!(
            args.webhook.webhook_ca_file.as_deref(),
            Some(std::path::Path::new("ca.crt"))
        );
        assert_eq!(
            args.webhook.webhook_url.as_deref(),
            Some("https://127.0.0.1:8443")
        );
        let cli = Cli::try_parse_from(["x", "run", "--log-format", "json"]).expect("parses");
        let Command::Run(args) = cli.into_command() else {
            panic!("not run");
        };
        assert_eq!(args.log_format, LogFormat::Json);
    }
}
