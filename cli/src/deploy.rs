//! `kubeapp deploy`: the project's deploy objects (CRDs, RBAC, Deployment, Services, webhook
//! configurations) for an image and a namespace, printed as YAML or server-side applied through
//! the current kubeconfig.

use std::path::PathBuf;

use serde_json::json;

use crate::binary::OperatorBinary;
use crate::generate::{self, GenerateError, Target};
use crate::objects::{self, ObjectsError};
use crate::project::Project;

/// The settings of `kubeapp deploy`.
#[derive(Debug, clap::Args)]
pub struct DeployArgs {
    /// The image, namespace and webhook CA.
    #[command(flatten)]
    pub target: Target,
    /// Apply the objects (server-side apply, field manager `kubeapp`) through the current
    /// kubeconfig instead of printing them.
    #[arg(long)]
    pub apply: bool,
    /// With --apply: a server-side dry run (the apiserver checks everything, stores nothing).
    #[arg(long, requires = "apply")]
    pub dry_run: bool,
    /// The project's directory.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

/// Why `deploy` failed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The objects could not be made.
    #[error(transparent)]
    Generate(#[from] GenerateError),
    /// `deploy` needs the image.
    #[error("deploy: pass --image with the operator's container image")]
    NoImage,
    /// No client from the kubeconfig.
    #[error("the current kubeconfig: {0}")]
    Client(String),
    /// An object was refused.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
}

/// `kubeapp deploy`.
///
/// # Errors
///
/// See [`DeployError`].
pub async fn run(args: &DeployArgs) -> Result<(), DeployError> {
    if args.target.image.is_none() {
        return Err(DeployError::NoImage);
    }
    let project = Project::load(&args.dir).map_err(GenerateError::from)?;
    project.manifest().map_err(GenerateError::from)?;
    let binary = OperatorBinary::build(&project).map_err(GenerateError::from)?;
    let mut docs = generate::deploy_objects(&project, &binary, &args.target, None)?;
    if args.target.namespace != "default" {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": args.target.namespace}});
        docs.insert(0, namespace);
    }
    if !args.apply {
        let yaml = kubeapp::sdk::manifest::to_yaml_documents(&docs).map_err(|message| {
            GenerateError::Yaml {
                file: "stdout".into(),
                message,
            }
        })?;
        print!("{yaml}");
        return Ok(());
    }
    let client = kube::Client::try_default()
        .await
        .map_err(|e| DeployError::Client(kubeapp::sdk::error::error_chain(&e)))?;
    let suffix = if args.dry_run {
        " (server dry run)"
    } else {
        ""
    };
    for (index, doc) in docs.iter().enumerate() {
        let applied = objects::apply(&client, doc, "deploy", index + 1, args.dry_run).await?;
        println!("applied: {applied}{suffix}");
    }
    Ok(())
}
