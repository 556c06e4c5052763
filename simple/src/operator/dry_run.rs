//! The `dry-run` command: an operator that renders objects (a component graph, say) writes what
//! it would apply for one custom object, with no cluster. The operator supplies the rendering
//! through [`Operator::dry_run`](super::Operator::dry_run); the command reads the flags below,
//! calls it and prints what it returned.
//!
//! With `--check`, the rendering is also sent to the cluster of the kubeconfig (`KUBECONFIG`, or
//! in-cluster) as a server-side dry run, so the apiserver checks every object against its schemas
//! (built-in, CRDs', CEL rules) and stores nothing: the operator's dry run asks
//! [`DryRunArgs::cluster`] for the client and passes it to
//! `kubeapp::components::dry_run::DryRun::check_on_server`. The cluster must serve the CRDs of the rendered custom
//! resources (install them with the operator's `crd` command, e.g. into testenv).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use clap::Args;
use kubeapp_operator::BoxError;

/// Settings of `dry-run`.
#[derive(Clone, Debug, Args)]
pub struct DryRunArgs {
    /// The custom object to render for (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    pub object: PathBuf,
    /// A directory of existing objects (YAML or JSON files) the rendering may take the state of.
    #[arg(long, value_name = "DIR")]
    pub existing: Option<PathBuf>,
    /// Where the rendered objects are written.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also send every rendered object to the kubeconfig's cluster as a server-side dry run, so
    /// the apiserver checks it (nothing is stored).
    #[arg(long)]
    pub check: bool,
}

impl DryRunArgs {
    /// With `--check`, a client of the kubeconfig's cluster (`KUBECONFIG`, or in-cluster) to check
    /// the rendering on; without it, `None`.
    ///
    /// # Errors
    ///
    /// When `--check` is given and no client can be made (no kubeconfig, a broken one).
    pub async fn cluster(&self) -> Result<Option<kube::Client>, kube::Error> {
        if self.check {
            kube::Client::try_default().await.map(Some)
        } else {
            Ok(None)
        }
    }
}

/// What an operator's dry run returns: a summary to print, or what failed.
pub(crate) type DryRunFuture = Pin<Box<dyn Future<Output = Result<String, BoxError>> + Send>>;

/// The operator's dry run.
pub(crate) type DryRunFn = dyn Fn(DryRunArgs) -> DryRunFuture + Send + Sync;
