//! kubeapp example operator: renders a ConfigMap from each `Template`.
//!
//! What it shows:
//!
//! - a custom kind in two versions with a status subresource ([`kind`]) and an app manifest
//!   embedded in the binary, against which the app is validated;
//! - a reconciler behind the simple App's opinionated wrapper ([`reconcile`]): server-side apply
//!   of a ConfigMap, status with `observedGeneration` and a `Ready` condition, drift corrected
//!   at once because the app `owns` the rendered ConfigMaps (no periodic requeue), and cleanup on
//!   delete through the wrapper's finalizer;
//! - admission webhooks ([`admission`]): a validator that rejects specs which cannot render a
//!   ConfigMap, and a mutator that labels Templates; a conversion webhook between `v1` and `v2`
//!   ([`convert`]); the Runner serves them over HTTPS, required because the manifest declares
//!   them ([`webhook`]);
//! - an operator binary ([`cli`]): flags with environment fallbacks, telemetry in one call, the
//!   Runner serving `/metrics`, `/livez` and `/readyz` and stopping cleanly on SIGTERM/SIGINT;
//! - generated deployment artefacts ([`deploy`]): the CRD with its conversion webhook, the RBAC,
//!   a Deployment with probes, metrics and webhook Services, and the webhook configurations.
//!
//! Exit codes: 0 after a clean shutdown or a printed command, 1 on any error (the message goes to
//! stderr), 2 on a usage error.

mod admission;
mod cli;
mod convert;
mod deploy;
mod kind;
mod reconcile;
mod webhook;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use kubeapp::operator::runner::default_client;
use kubeapp::operator::{Runner, RunnerConfig};
use kubeapp::simple::telemetry::{self, Otlp, TelemetryConfig};
use kubeapp::simple::{App, AppConfig, ManagedKind};

use crate::admission::{TemplateMutator, TemplateValidator};
use crate::cli::{Cli, Command, RunArgs};
use crate::kind::Template;
use crate::reconcile::{TEMPLATE_LABEL, TemplateReconciler};

/// The service name in logs and traces.
const SERVICE_NAME: &str = "kubeapp-example-reconciler";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.into_command() {
        Command::Crd(args) => print_crd(&args),
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

fn print_crd(args: &cli::CrdArgs) -> anyhow::Result<()> {
    let manifest = kind::manifest().context("reading the embedded manifest")?;
    let endpoint = webhook::endpoint(&manifest, &args.webhook, &args.namespace)?;
    print!("{}", deploy::crd_yaml(&manifest, &endpoint)?);
    Ok(())
}

/// In-cluster: everything that deploys the operator. With `--webhook-url` the operator runs
/// outside the cluster, so only the webhook configurations are printed.
fn print_manifests(args: &cli::ManifestArgs) -> anyhow::Result<()> {
    let manifest = kind::manifest().context("reading the embedded manifest")?;
    let endpoint = webhook::endpoint(&manifest, &args.webhook, &args.namespace)?;
    if args.webhook.webhook_url.is_some() {
        let docs = deploy::webhook_configurations_yaml(&manifest, &endpoint)?;
        print!("{}", deploy::join_documents(docs));
        return Ok(());
    }
    let deploy = deploy::Deploy {
        namespace: args.namespace.clone(),
        image: args.image.clone(),
        metrics_port: args.metrics_port,
        webhook_port: args.webhook_port,
    };
    print!("{}", deploy.manifests_yaml(&manifest, &endpoint)?);
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
    // Checked before anything else: without its webhooks the operator must not start at all.
    let webhook = webhook::server_config(
        &manifest,
        args.webhook_cert_file.as_deref(),
        args.webhook_key_file.as_deref(),
        args.webhook_addr,
    )?;
    let client = default_client().await.context("connecting to Kubernetes")?;
    let mut templates = ManagedKind::<Template>::new();
    if let Some(namespace) = &args.namespace {
        templates = templates.namespace(namespace);
    }
    let templates = templates
        .reconciler(TemplateReconciler)
        // A rendered ConfigMap that is edited or deleted reconciles its Template at once; only
        // the operator's ConfigMaps (those with the label) are cached.
        .owns::<ConfigMap>(watcher::Config::default().labels(TEMPLATE_LABEL))
        .validator(TemplateValidator)
        .mutator(TemplateMutator::new(manifest.app_name.clone()))
        .converter(convert::converter());
    let config = AppConfig::new(manifest.app_name.clone())
        .manifest(manifest)
        .managed_kind(templates);
    let app = App::new(config, client).context("building the app")?;
    let mut runner_config = RunnerConfig::default()
        .metrics_addr(args.metrics_addr)
        .shutdown_timeout(args.shutdown_timeout);
    if let Some(webhook) = webhook {
        runner_config = runner_config.webhook(webhook);
    }
    let runner = Runner::new(runner_config)
        .context("configuring the runner")?
        .with_app(Arc::new(app));
    tracing::info!(
        metrics_addr = %args.metrics_addr,
        webhook_addr = %args.webhook_addr,
        namespace = args.namespace.as_deref().unwrap_or("(all)"),
        "operator starting"
    );
    runner.run().await.context("running the operator")?;
    tracing::info!("operator stopped");
    Ok(())
}
