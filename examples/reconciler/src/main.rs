//! kubeapp example operator: renders a ConfigMap from each `Template`.
//!
//! What it shows:
//!
//! - a custom kind with a status subresource ([`kind`]) and an app manifest embedded in the
//!   binary, against which the app is validated;
//! - a reconciler behind the simple App's opinionated wrapper ([`reconcile`]): server-side apply
//!   of a ConfigMap, status with `observedGeneration` and a `Ready` condition, a periodic requeue
//!   that corrects drift, and cleanup on delete through the wrapper's finalizer;
//! - an operator binary ([`cli`]): flags with environment fallbacks, telemetry in one call, the
//!   Runner serving `/metrics`, `/livez` and `/readyz` and stopping cleanly on SIGTERM/SIGINT;
//! - generated deployment artefacts ([`deploy`]): the CRD, the RBAC, a Deployment with probes and
//!   a metrics Service.
//!
//! Exit codes: 0 after a clean shutdown or a printed command, 1 on any error (the message goes to
//! stderr), 2 on a usage error.

mod cli;
mod deploy;
mod kind;
mod reconcile;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use kubeapp::operator::runner::default_client;
use kubeapp::operator::{InformerOptions, Runner, RunnerConfig};
use kubeapp::simple::telemetry::{self, Otlp, TelemetryConfig};
use kubeapp::simple::{App, AppConfig, ManagedKind};

use crate::cli::{Cli, Command, RunArgs};
use crate::kind::Template;
use crate::reconcile::TemplateReconciler;

/// The service name in logs and traces.
const SERVICE_NAME: &str = "kubeapp-example-reconciler";

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
    let client = default_client().await.context("connecting to Kubernetes")?;
    let mut options = InformerOptions::default();
    if let Some(namespace) = &args.namespace {
        options = options.namespace(namespace);
    }
    let templates = ManagedKind::<Template>::new()
        .options(options)
        .reconciler(TemplateReconciler::new(client.clone(), args.requeue_after));
    let config = AppConfig::new(manifest.app_name.clone())
        .manifest(manifest)
        .managed_kind(templates);
    let app = App::new(config, client).context("building the app")?;
    let runner = Runner::new(
        RunnerConfig::default()
            .metrics_addr(args.metrics_addr)
            .shutdown_timeout(args.shutdown_timeout),
    )
    .context("configuring the runner")?
    .with_app(Arc::new(app));
    tracing::info!(
        metrics_addr = %args.metrics_addr,
        namespace = args.namespace.as_deref().unwrap_or("(all)"),
        requeue_after = ?args.requeue_after,
        "operator starting"
    );
    runner.run().await.context("running the operator")?;
    tracing::info!("operator stopped");
    Ok(())
}
