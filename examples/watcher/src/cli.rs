//! The command line: flags with environment fallbacks, and the `run`, `crd` and `manifests`
//! commands.
//!
//! Without a command the binary runs the operator, so `kubeapp-example-watcher
//! --metrics-addr 127.0.0.1:9090` and `kubeapp-example-watcher run --metrics-addr
//! 127.0.0.1:9090` are the same.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// kubeapp example operator: records each lifecycle step of a Probe as an Event and a metric.
#[derive(Debug, Parser)]
#[command(name = "kubeapp-example-watcher", version, about, long_about = None)]
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
    /// Run the operator (the default).
    Run(RunArgs),
    /// Print the CustomResourceDefinition of Probe as YAML.
    Crd,
    /// Print the deployment manifests: RBAC, Deployment and metrics Service, as YAML.
    Manifests(ManifestArgs),
}

/// Settings of the running operator.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Where /metrics, /livez and /readyz are served.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,
    /// Watch Probes in this namespace only (default: all namespaces).
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
    /// How long in-flight work may take to finish after SIGTERM or SIGINT (e.g. 30s). Keep it
    /// above the largest spec.processingMillis of your Probes (at most 60s).
    #[arg(long, env = "SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// The reportingInstance of the Events written (e.g. the pod name; default: the app name).
    #[arg(long, env = "POD_NAME")]
    pub instance: Option<String>,
}

/// Settings of the `manifests` command.
#[derive(Clone, Debug, Args)]
pub struct ManifestArgs {
    /// The namespace the operator is deployed in.
    #[arg(long, default_value = "kubeapp-system")]
    pub namespace: String,
    /// The container image of the operator.
    #[arg(long, default_value = "kubeapp-example-watcher:latest")]
    pub image: String,
    /// The port of /metrics, /livez and /readyz in the container.
    #[arg(long, default_value_t = 9090)]
    pub metrics_port: u16,
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
            "5s",
            "--instance",
            "pod-1",
        ])
        .expect("parses");
        let Command::Run(args) = cli.into_command() else {
            panic!("not run");
        };
        assert_eq!(args.metrics_addr, SocketAddr::from(([127, 0, 0, 1], 1234)));
        assert_eq!(args.shutdown_timeout, Duration::from_secs(5));
        assert_eq!(args.instance.as_deref(), Some("pod-1"));
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
        let cli = Cli::try_parse_from(["x", "crd"]).expect("parses");
        assert!(matches!(cli.into_command(), Command::Crd));
        let cli = Cli::try_parse_from(["x", "run", "--log-format", "json"]).expect("parses");
        let Command::Run(args) = cli.into_command() else {
            panic!("not run");
        };
        assert_eq!(args.log_format, LogFormat::Json);
    }
}
