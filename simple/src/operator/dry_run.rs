//! The `dry-run` command: an operator that renders objects (a component graph, say) writes what
//! it would apply for one custom object, with no cluster. The operator supplies the rendering
//! through [`Operator::dry_run`](super::Operator::dry_run); the command reads the flags below,
//! calls it and prints what it returned.

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
}

/// What an operator's dry run returns: a summary to print, or what failed.
pub type DryRunFuture = Pin<Box<dyn Future<Output = Result<String, BoxError>> + Send>>;

/// The operator's dry run.
pub(crate) type DryRunFn = dyn Fn(DryRunArgs) -> DryRunFuture + Send + Sync;
