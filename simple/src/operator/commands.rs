//! The command line of an [`Operator`](super::Operator) binary: `crd`, `rbac`, `manifests` and
//! `run`, each with `--help`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::dry_run::DryRunArgs;
use crate::cli::OperatorArgs;

/// An operator binary's command line.
#[derive(Debug, Parser)]
pub(crate) struct OperatorCommand {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands every [`Operator`](super::Operator) binary has.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions of the operator's kinds as YAML.
    Crd(CrdArgs),
    /// Print the ServiceAccount, role and role binding the operator needs as YAML.
    Rbac(RbacArgs),
    /// Print everything that deploys the operator as YAML: RBAC, Deployment, metrics Service and,
    /// when the manifest declares webhooks, the webhook Service and configurations.
    Manifests(ManifestArgs),
    /// Run the operator until SIGTERM or SIGINT.
    Run(Box<OperatorArgs>),
    /// Render what the operator would apply for one custom object into a directory, with no
    /// cluster (for operators that give a dry run).
    DryRun(DryRunArgs),
}

/// Where the apiserver reaches the webhooks (only for manifests that declare webhooks).
#[derive(Clone, Debug, Default, Args)]
pub struct WebhookTargetArgs {
    /// The CA certificate (PEM) that signed the webhook server's certificate; written into every
    /// caBundle. Required when the manifest declares webhooks.
    #[arg(long, env = "WEBHOOK_CA_FILE", value_name = "PATH")]
    pub webhook_ca_file: Option<PathBuf>,
    /// Point the webhooks at this https:// base URL (e.g. https://127.0.0.1:8443) instead of the
    /// in-cluster webhook Service: for an operator running outside the cluster.
    #[arg(long, env = "WEBHOOK_URL", value_name = "URL")]
    pub webhook_url: Option<String>,
}

/// Settings of `crd`.
#[derive(Clone, Debug, Args)]
pub struct CrdArgs {
    /// The operator's namespace, where the conversion webhook's Service is (only used when the
    /// manifest declares conversion and no --webhook-url is given).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Where the conversion webhook is reached.
    #[command(flatten)]
    pub webhook: WebhookTargetArgs,
}

/// Settings of `rbac`.
#[derive(Clone, Debug, Args)]
pub struct RbacArgs {
    /// The namespace of the operator's ServiceAccount.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Grant the rules in this namespace only (a Role), for an operator run with --namespace;
    /// default: cluster-wide (a ClusterRole).
    #[arg(long, value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Print instead the ClusterRole `<app>-gates` for the people who gate the app's objects
    /// (`kubeapp pause|resume|promote|abort`): get, list, watch and patch on the app's kinds.
    #[arg(long)]
    pub gate_users: bool,
}

/// Settings of `manifests`.
#[derive(Clone, Debug, Args)]
pub struct ManifestArgs {
    /// The namespace of the Deployment, Services and ServiceAccount.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// The operator's container image (required unless --webhook-url is given: then only the
    /// webhook configurations are printed, for an operator running outside the cluster).
    #[arg(long)]
    pub image: Option<String>,
    /// Replicas of the operator's Deployment; more than one runs them with --leader-elect (one
    /// acts, the others stand by with warm caches) and grants the Lease permissions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
    pub replicas: i32,
    /// Run the replicas with --shard instead: each handles its share of the objects (a shard
    /// ring of Leases), and the Deployment can be scaled at any time; grants the Lease
    /// permissions.
    #[arg(long)]
    pub shard: bool,
    /// Where the webhooks are reached (when the manifest declares webhooks).
    #[command(flatten)]
    pub webhook: WebhookTargetArgs,
    /// The operator's metrics prefix: passed to `run` in the Deployment and used by the
    /// monitoring queries.
    #[arg(long, value_name = "PREFIX")]
    pub metrics_prefix: Option<String>,
    /// Run the operator with --metrics-auth (a bearer token reviewed by the apiserver on
    /// /metrics and /debug/kubeapp): grants it `create` on tokenreviews and
    /// subjectaccessreviews, and adds a ClusterRole `{name}-metrics-reader` (get on those two
    /// paths) to bind to the scraper's ServiceAccount.
    #[arg(long)]
    pub metrics_auth: bool,
    /// The dashboard and alerts too (see docs/monitoring.md).
    #[command(flatten)]
    pub monitoring: MonitoringArgs,
}

/// What `manifests --monitoring` adds.
#[derive(Clone, Debug, Default, Args)]
pub struct MonitoringArgs {
    /// Add the monitoring assets: a PrometheusRule with the alerts and a ConfigMap with the
    /// Grafana dashboard (label grafana_dashboard: "1").
    #[arg(long)]
    pub monitoring: bool,
    /// With --monitoring, also a ServiceMonitor or PodMonitor (Prometheus operator) scraping the
    /// operator.
    #[arg(long, value_enum, default_value_t = ScrapeObject::None, requires = "monitoring")]
    pub scrape: ScrapeObject,
    /// With --monitoring, a YAML or JSON file of alert thresholds to change (camelCase fields of
    /// kubeapp_sdk::monitoring::Thresholds, e.g. `queueDepth: 500`).
    #[arg(long, value_name = "PATH", requires = "monitoring")]
    pub alert_thresholds: Option<PathBuf>,
}

/// The scrape object `--scrape` adds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ScrapeObject {
    /// None.
    #[default]
    None,
    /// A ServiceMonitor selecting the metrics Service.
    ServiceMonitor,
    /// A PodMonitor selecting the operator's pods.
    PodMonitor,
}
