//! kubeapp example operator: records each lifecycle step of a `Probe` as a Kubernetes Event and
//! in a Prometheus metric.
//!
//! What it shows:
//!
//! - a custom kind ([`kind`]) and an app manifest embedded in the binary, against which the app
//!   is validated;
//! - a watcher behind the simple App's opinionated wrapper ([`watch`]): `add`, `update`, `delete`
//!   and `sync` each become an `events.k8s.io/v1` Event about the Probe ([`lifecycle`]), and
//!   deletions made while the operator was down are still seen, through the wrapper's finalizer;
//! - an app-specific metric, `probe_lifecycle_events_total{step}` ([`metrics`]), handed to the
//!   Runner through the app's metric collectors ([`app`]), next to the SDK's metrics, and a
//!   Kubernetes client whose requests are counted there too;
//! - an operator binary ([`cli`]): flags with environment fallbacks, telemetry in one call, the
//!   Runner serving `/metrics`, `/livez` and `/readyz`, and a graceful stop on SIGTERM/SIGINT
//!   that lets in-flight steps finish;
//! - generated deployment artefacts ([`deploy`]): the CRD, the RBAC (including Events), a
//!   Deployment with probes and a metrics Service.
//!
//! Exit codes: 0 after a clean shutdown or a printed command, 1 on any error (the message goes to
//! stderr), 2 on a usage error.

mod app;
mod cli;
mod deploy;
mod kind;
mod lifecycle;
mod metrics;
mod watch;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use kubeapp::operator::runner::default_client;
use kubeapp::operator::{Runner, RunnerConfig};
use kubeapp::simple::telemetry::{self, Otlp, TelemetryConfig};

use crate::app::{ProbeAppSettings, probe_app};
use crate::cli::{Cli, Command, RunArgs};
use crate::metrics::StepMetrics;

/// The service name in logs and traces.
const SERVICE_NAME: &str = "kubeapp-example-watcher";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.into_command() {
        Command::Crd => print_crd(),
        Command::Manifests(args) => print_manifests(&args),
        Command::Run(args) => run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_crd() -> anyhow::Result<()> {
    let manifest = kind::manifest().context("reading the embedded manifest")?;
    print!("{}", deploy::crd_yaml(&manifest)?);
    Ok(())
}

fn print_manifests(args: &cli::ManifestArgs) -> anyhow::Result<()> {
    let manifest = kind::manifest().context("reading the embedded manifest")?;
    let deploy = deploy::Deploy {
        namespace: args.namespace.clone(),
        image: args.image.clone(),
        metrics_port: args.metrics_port,
    };
    print!("{}", deploy.manifests_yaml(&manifest)?);
    Ok(())
}

/// How long the controller lets in-flight watcher calls run after a stop: a tenth less than the
/// runner's shutdown timeout, so the app has returned (cleanly) before the runner gives up on it.
fn controller_grace(shutdown_timeout: Duration) -> Duration {
    shutdown_timeout.saturating_sub(shutdown_timeout / 10)
}

/// Runs the operator until SIGTERM or SIGINT.
async fn run(args: RunArgs) -> anyhow::Result<()> {
    let log_format = match args.log_format {
        cli::LogFormat::Text => telemetry::LogFormat::Text,
        cli::LogFormat::Json => telemetry::LogFormat::Json,
    };
    let otlp = match &args.otlp_endpoint {
        Some(url) => Otlp::Endpoint {
            url: url.clone(),
            protocol: match args.otlp_protocol {
                cli::OtlpProtocol::Grpc => telemetry::OtlpProtocol::Grpc,
                cli::OtlpProtocol::Http => telemetry::OtlpProtocol::HttpProtobuf,
            },
        },
        None => Otlp::FromEnv,
    };
    let guard = telemetry::init(
        TelemetryConfig::new(SERVICE_NAME)
            .log_format(log_format)
            .otlp(otlp),
    )
    .context("setting up logs and traces")?;
    let result = run_operator(&args).await;
    if let Err(err) = &result {
        tracing::error!(error = format!("{err:#}"), "operator failed");
    }
    let flushed = guard.shutdown().await.context("flushing traces");
    result?;
    flushed
}

async fn run_operator(args: &RunArgs) -> anyhow::Result<()> {
    let manifest = kind::manifest().context("reading the embedded manifest")?;
    let mut runner = Runner::new(
        RunnerConfig::default()
            .metrics_addr(args.metrics_addr)
            .shutdown_timeout(args.shutdown_timeout),
    )
    .context("configuring the runner")?;
    // The default client counts and times its requests (`kubernetes_client_requests_total`,
    // ...) in the collectors every Runner serves, so /metrics also shows the Events written.
    let client = default_client()
        .await
        .context("creating the Kubernetes client")?;
    let metrics = StepMetrics::new().context("creating the step metric")?;
    let settings = ProbeAppSettings {
        namespace: args.namespace.clone(),
        instance: args.instance.clone(),
        shutdown_grace: controller_grace(args.shutdown_timeout),
    };
    let app = probe_app(manifest, client, &metrics, &settings).context("building the app")?;
    runner.add_app(Arc::new(app));
    tracing::info!(
        metrics_addr = %args.metrics_addr,
        namespace = args.namespace.as_deref().unwrap_or("(all)"),
        shutdown_timeout = ?args.shutdown_timeout,
        "operator starting"
    );
    runner.run().await.context("running the operator")?;
    tracing::info!("operator stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_grace_ends_before_the_runner_timeout() {
        assert_eq!(
            controller_grace(Duration::from_secs(30)),
            Duration::from_secs(27)
        );
        assert!(controller_grace(Duration::from_millis(1)) <= Duration::from_millis(1));
        assert_eq!(controller_grace(Duration::ZERO), Duration::ZERO);
    }
}
