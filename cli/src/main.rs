//! `kubeapp`: the command line of the kubeapp SDK (see docs/cli.md).
//!
//! - `init`: a new operator project from a template (reconciler, watcher, components, phases);
//! - `kind add`: a second kind in a project;
//! - `generate`: the project's deploy YAML (CRDs, RBAC, Deployment, Services, webhooks) into
//!   files marked as generated;
//! - `testenv install`: kube-apiserver and etcd built from their Go modules into the cache;
//! - `run`: the project on a local control plane, until Ctrl-C;
//! - `deploy`: the deploy YAML with an image and a namespace, printed or applied.
//!
//! Errors are one line on stderr naming the file and the field or flag at fault; exit code 1
//! (2 for a usage error, from clap).

mod init;
mod kind_add;
mod names;
mod project;
mod template;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kubeapp: make, generate, run and deploy Kubernetes operators written with kubeapp.
#[derive(Debug, Parser)]
#[command(name = "kubeapp", version)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Create an operator project: manifest, kind type, one-page main.rs, handler stub,
    /// end-to-end test, README and Dockerfile.
    Init(init::InitArgs),
    /// Kinds of the project in the current directory.
    #[command(subcommand)]
    Kind(kind_add::KindCommand),
}

/// Any command's failure.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Init(#[from] init::InitError),
    #[error(transparent)]
    KindAdd(#[from] kind_add::KindAddError),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), CliError> = match cli.command {
        Command::Init(args) => init::run(&args).map_err(CliError::from),
        Command::Kind(kind_add::KindCommand::Add(args)) => {
            kind_add::run(&args).map_err(CliError::from)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
