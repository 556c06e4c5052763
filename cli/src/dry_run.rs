//! `kubeapp dry-run`: what the project's operator would apply for one custom object, rendered by
//! the operator binary's own `dry-run` command into a directory; with `--check`, every rendered
//! object is also checked by a real apiserver (a server-side dry run: built-in schemas, the CRDs'
//! schemas and CEL rules; nothing stored).
//!
//! Which apiserver checks: the cluster of `--kubeconfig` when given; otherwise a local
//! kube-apiserver + etcd (testenv, plain mode: nothing else is needed to check objects) started
//! for the check, with the CRDs the operator prints with its `crd` command installed, and stopped
//! afterwards. So a CI job can check an operator's rendering with no cluster at all.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubeapp::sdk::error::ErrorChain;
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::simple::operator::dry_run::DryRunArgs as OperatorDryRunArgs;

use crate::binary::{BinaryError, OperatorBinary};
use crate::project::{Project, ProjectError};

/// `kubeapp dry-run`'s flags: the operator binary's own `dry-run` flags, passed on, and where
/// the check runs.
#[derive(Debug, clap::Args)]
pub struct DryRunCommand {
    /// The operator's `dry-run` flags (`--object`, `--existing`, `--out`, `--check`).
    #[command(flatten)]
    pub operator: OperatorDryRunArgs,
    /// With --check: the cluster that checks; without it, a local kube-apiserver + etcd is started
    /// for the check (with the operator's CRDs) and stopped afterwards.
    #[arg(long, value_name = "PATH", requires = "check")]
    pub kubeconfig: Option<PathBuf>,
    /// How long the local control plane may take to start, in seconds.
    #[arg(long, default_value = "120", value_name = "SECONDS")]
    pub timeout: u64,
    /// The project directory.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

/// Why `kubeapp dry-run` failed.
#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    /// The project could not be read.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// The operator binary could not be built, or one of its commands failed (a refused
    /// rendering included: its stderr names the component, object and field).
    #[error(transparent)]
    Binary(#[from] BinaryError),
    /// The local control plane did not start.
    #[error("starting a local control plane for --check: {0}")]
    ControlPlane(String),
    /// The operator's CRDs could not be installed into it.
    #[error("installing the operator's CRDs (from its `crd` command) for --check: {0}")]
    Crds(String),
}

/// Runs the dry run; returns what the operator printed (its summary).
///
/// # Errors
///
/// See [`DryRunError`].
pub async fn run(args: &DryRunCommand) -> Result<String, DryRunError> {
    let project = Project::load(&args.dir)?;
    let binary = OperatorBinary::build(&project)?;
    let flags = &args.operator;
    let mut command: Vec<PathBuf> = vec![
        "dry-run".into(),
        "--object".into(),
        flags.object.clone(),
        "--out".into(),
        flags.out.clone(),
    ];
    if let Some(existing) = &flags.existing {
        command.extend(["--existing".into(), existing.clone()]);
    }
    if !flags.check {
        return Ok(binary.output(&command)?);
    }
    command.push("--check".into());
    if let Some(kubeconfig) = &args.kubeconfig {
        return Ok(binary.output_in(&command, Some(kubeconfig))?);
    }
    let env = TestEnv::builder()
        .start_timeout(Duration::from_secs(args.timeout))
        .start()
        .await
        .map_err(|e| DryRunError::ControlPlane(ErrorChain(&e).to_string()))?;
    let checked = check_locally(&binary, &command, &env).await;
    env.stop();
    checked
}

/// Installs the operator's CRDs into `env` and runs its checked dry run there.
async fn check_locally(
    binary: &OperatorBinary,
    command: &[PathBuf],
    env: &TestEnv,
) -> Result<String, DryRunError> {
    let crds = binary.output(&["crd"])?;
    env.install_crds_yaml(&crds)
        .await
        .map_err(|e| DryRunError::Crds(ErrorChain(&e).to_string()))?;
    let kubeconfig: &Path = env.kubeconfig_path();
    Ok(binary.output_in(command, Some(kubeconfig))?)
}
