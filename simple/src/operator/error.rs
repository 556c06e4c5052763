//! [`OperatorError`]: why a command of an [`Operator`](super::Operator) failed, and the exit code
//! it makes.

use kubeapp_operator::{BoxError, MetricsRegistryError};
use kubeapp_runner::{ClientError, RunnerError};
use kubeapp_sdk::crd::CrdError;
use kubeapp_sdk::deploy::DeployError;
use kubeapp_sdk::monitoring::MonitoringError;
use kubeapp_sdk::rbac::RbacError;

use super::webhooks::WebhookError;
use crate::cli::OperatorArgsError;
use crate::config::AppConfigError;
use crate::manifest_match::KindMismatch;
use crate::telemetry::TelemetryError;

/// Why an [`Operator`](super::Operator) command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// The manifest given to [`Operator::new`](super::Operator::new) is invalid.
    #[error("the operator's manifest: {0}")]
    Manifest(String),
    /// The CRDs could not be built (a type disagrees with the manifest, say).
    #[error("building the CRDs")]
    Crd(#[from] CrdError),
    /// The RBAC could not be built.
    #[error("building the RBAC")]
    Rbac(#[from] RbacError),
    /// The deployment could not be built.
    #[error("building the deployment")]
    Deploy(#[from] DeployError),
    /// The dashboard and alerts of `manifests --monitoring` could not be rendered.
    #[error("the monitoring assets")]
    Monitoring(#[from] MonitoringError),
    /// The file of `manifests --alert-thresholds` cannot be read.
    #[error("reading the alert thresholds {}", .path.display())]
    ThresholdsFile {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Objects could not be written as YAML.
    #[error("writing YAML: {0}")]
    Yaml(String),
    /// Writing to stdout failed.
    #[error("writing to stdout")]
    Stdout(#[source] std::io::Error),
    /// A flag of `run` has a value the operator cannot run with.
    #[error(transparent)]
    Args(#[from] OperatorArgsError),
    /// The webhooks cannot be served or reached as configured.
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
    /// Logs and traces could not be set up or flushed.
    #[error("telemetry")]
    Telemetry(#[from] TelemetryError),
    /// No Kubernetes client could be made from the environment.
    #[error("connecting to Kubernetes")]
    Client(#[from] ClientError),
    /// The app does not match its manifest, or cannot be built.
    #[error(transparent)]
    App(#[from] AppConfigError),
    /// Managed kinds whose Rust types disagree with the manifest on group, kind, version or
    /// plural (found by `run` before it starts anything).
    #[error(
        "{}: make the manifest and the types' #[kube(..)] attributes agree (the CRD and the RBAC \
         come from the manifest, the watch from the type)",
        mismatch_lines(.file, .mismatches)
    )]
    KindMismatch {
        /// The manifest's file ([`Operator::manifest_file`](super::Operator::manifest_file)).
        file: String,
        /// Each kind's first mismatch.
        mismatches: Vec<KindMismatch>,
    },
    /// The Runner failed.
    #[error("running the operator")]
    Runner(#[from] RunnerError),
    /// `manifests` needs the image to deploy (unless `--webhook-url` asks for the webhook
    /// configurations only).
    #[error(
        "manifests: pass --image with the operator's container image (or --webhook-url for the \
         webhook configurations of an operator outside the cluster)"
    )]
    NoImage,
    /// The operator's dry run failed.
    #[error("dry run: {0}")]
    DryRun(String),
    /// Leader election could not start.
    #[error("leader election: {0}")]
    Election(String),
    /// The shard ring could not start.
    #[error("{0}")]
    Sharding(String),
    /// `dry-run` on an operator that gave no [`Operator::dry_run`](super::Operator::dry_run).
    #[error("dry-run: this operator renders nothing without a cluster (it has no dry run)")]
    NoDryRun,
    /// One of the operator's own subcommands failed.
    #[error("{command}")]
    Command {
        /// The subcommand's name.
        command: String,
        /// What failed.
        #[source]
        source: BoxError,
    },
    /// The operator's own flags or subcommands take names of the common ones.
    #[error("the operator's command line: {}", .0.join("; "))]
    CommandLine(Vec<String>),
    /// The app builder of [`Operator::app_with_context`](super::Operator::app_with_context) failed.
    #[error("building the app: {0}")]
    AppBuilder(String),
    /// A metrics registry for an app could not be made.
    #[error("the app's metrics")]
    Metrics(#[from] MetricsRegistryError),
    /// The defaults of `run`'s flags do not parse (for a command that builds the app without
    /// running it).
    #[error("the defaults of run's flags: {0}")]
    DefaultArgs(String),
}

impl OperatorError {
    /// The process exit status for this error: the Runner's
    /// ([`RunnerError::exit_code`]: 3 when work was abandoned at shutdown), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Runner(error) => error.exit_code(),
            _ => 1,
        }
    }
}

/// `file: mismatch` for each mismatch, on one line.
fn mismatch_lines(file: &str, mismatches: &[KindMismatch]) -> String {
    let lines: Vec<String> = mismatches
        .iter()
        .map(|found| format!("{file}: {found}"))
        .collect();
    lines.join("; ")
}
