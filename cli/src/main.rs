//! `kubeapp`: the command line of the kubeapp SDK (see docs/cli.md).
//!
//! - `init`: a new operator project from a template (reconciler, watcher, components, phases);
//! - `kind add`: a second kind in a project;
//! - `generate`: the project's deploy YAML (CRDs, RBAC, Deployment, Services, webhooks) into
//!   files marked as generated;
//! - `testenv install`: kube-apiserver and etcd built from their Go modules into the cache;
//! - `run`: the project on a local control plane, until Ctrl-C;
//! - `deploy`: the deploy YAML with an image and a namespace, printed or applied;
//! - `dry-run`: the operator's rendering for one object, checked by an apiserver with `--check`
//!   (a local one when no kubeconfig is given);
//! - `pause`, `resume`, `promote`, `abort`: a phase machine's gate on one object, waiting until
//!   the operator applied it (exit code 3 when it did not in time; see `gate`);
//! - `bench`: the project's operator under load on a local control plane (time to all
//!   reconciled, write-to-handled latencies, reconciles and API requests per object, peak RSS
//!   and CPU), as text or JSON for CI (see `bench`);
//! - `trace`: where one object stands (its tree, phases, failures, Events, owner), with an exit
//!   code for CI (see `trace`).
//!
//! Errors are one line on stderr naming the file and the field or flag at fault; exit code 1
//! (2 for a usage error, from clap).

mod bench;
mod binary;
mod deploy;
mod dry_run;
mod gate;
mod generate;
mod init;
mod kind_add;
mod names;
mod objects;
mod project;
mod run;
mod target;
mod template;
mod testenv_install;
mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kubeapp::sdk::error::ErrorChain;

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
    /// Write the project's deploy YAML (CRDs, RBAC, Deployment, Services, webhook
    /// configurations) into files marked as generated; a re-run rewrites only those.
    Generate(generate::GenerateArgs),
    /// The control plane that tests and `kubeapp run` use.
    #[command(subcommand)]
    Testenv(testenv_install::TestenvCommand),
    /// Run the project on a local kube-apiserver + etcd with its CRDs, webhooks and samples,
    /// until Ctrl-C.
    Run(run::RunArgs),
    /// Print the project's deploy YAML for an image and a namespace, or apply it (--apply)
    /// through the current kubeconfig.
    Deploy(deploy::DeployArgs),
    /// Render what the operator would apply for one custom object into a directory (its
    /// `dry-run` command); with --check, an apiserver checks every object (a local one started
    /// for it, with the operator's CRDs, unless --kubeconfig is given).
    DryRun(dry_run::DryRunCommand),
    /// A phase machine's gates on one object.
    #[command(flatten)]
    Gate(gate::GateCommand),
    /// Measure the project's operator under load on a local control plane: N copies of its
    /// samples (optionally churned), time to all reconciled, write-to-handled latency, reconciles
    /// and API requests per object, peak RSS and CPU; -o json for CI regression gates.
    Bench(bench::BenchArgs),
    /// Where one object stands: its components' objects or its phases and analysis, the
    /// handlers' failures, Events and its owner replica; exits 0 ready, 3 not ready, 4 failed.
    Trace(trace::TraceArgs),
}

/// Any command's failure.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Init(#[from] init::InitError),
    #[error(transparent)]
    KindAdd(#[from] kind_add::KindAddError),
    #[error(transparent)]
    Generate(#[from] generate::GenerateError),
    #[error(transparent)]
    Install(#[from] testenv_install::InstallError),
    #[error(transparent)]
    Run(#[from] run::RunError),
    #[error(transparent)]
    Deploy(#[from] deploy::DeployError),
    #[error(transparent)]
    DryRun(#[from] dry_run::DryRunError),
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// A single-threaded runtime: `run`'s operator child gets a parent-death signal tied to the
/// thread that forks it, which must live as long as the program.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> Result<T, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    Ok(runtime.block_on(future))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), CliError> = match cli.command {
        Command::Init(args) => init::run(&args).map_err(CliError::from),
        Command::Kind(kind_add::KindCommand::Add(args)) => {
            kind_add::run(&args).map_err(CliError::from)
        }
        Command::Generate(args) => generate::run(&args).map_err(CliError::from),
        Command::Testenv(testenv_install::TestenvCommand::Install) => {
            testenv_install::run().map_err(CliError::from)
        }
        Command::Run(args) => match block_on(run::run(&args)) {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => return ExitCode::FAILURE,
            Ok(Err(error)) => Err(error.into()),
            Err(error) => Err(error),
        },
        Command::Deploy(args) => block_on(deploy::run(&args)).and_then(|r| r.map_err(Into::into)),
        Command::DryRun(args) => block_on(dry_run::run(&args)).and_then(|r| match r {
            Ok(summary) => {
                print!("{summary}");
                Ok(())
            }
            Err(error) => Err(error.into()),
        }),
        Command::Gate(command) => match block_on(gate::run(&command)) {
            Ok(Err(error)) => return gate::fail(&error),
            other => other.map(|_| ()),
        },
        Command::Bench(args) => block_on(bench::run(&args)).and_then(|r| match r {
            Ok(report) => {
                print!("{report}");
                Ok(())
            }
            Err(error) => Err(error.into()),
        }),
        Command::Trace(args) => match block_on(trace::run(&args)) {
            Ok(code) => return code,
            Err(error) => Err(error),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", ErrorChain(&error));
            ExitCode::FAILURE
        }
    }
}
