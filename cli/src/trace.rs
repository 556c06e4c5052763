//! `kubeapp trace KIND/NAME [-n NAMESPACE] [-o text|json] [--wait DURATION]`: where one object
//! of any kubeapp operator stands, from what the operator already records, and an exit code CI
//! can gate on.
//!
//! It prints the verdict and why; the object's conditions and its last status write; a
//! components object's components with every object they applied (read now, with the built-in
//! readiness rules of `kubeapp::components::readiness`); a phase machine's object's phase, its
//! transitions (the `PhaseChanged` Events still kept) and its current analysis; the handlers'
//! failures (`HandlerFailed`: a retry pending, `HandlerGaveUp`); the newest Events; and who acts
//! on it: the newest Event's reporting controller and instance, its slot and owner in every
//! kubeapp shard ring and the holder of every kubeapp leader-election Lease (Leases labelled
//! `sharding.kubeapp.dev/ring` or `election.kubeapp.dev/lease`, in `--lease-namespace` or every
//! namespace). The rules of the verdict are [`model::verdict`]'s; `docs/cli.md` lists what it
//! reads and the RBAC it needs.
//!
//! Exit codes: 0 ready; 1 an error (no such kind or object, the cluster refused to show it);
//! 2 a usage error (clap); 3 not ready (on its way, or not looked at yet); 4 failed (a failed
//! component or a final phase that is a failure, or the operator gave up on it). With
//! `--wait`, it reads again every 2 s until the object is ready or failed or the time is up,
//! and reports the last reading.

mod gather;
pub mod model;
mod operator;
mod text;

use std::process::ExitCode;
use std::time::Duration;

use kubeapp::phases::analysis::Interval;
use kubeapp::sdk::error::ErrorChain;

use crate::target::{self, TargetError};

/// How often `--wait` reads the object again.
const POLL: Duration = Duration::from_secs(2);

/// Which object, and how to report it.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// The object, as KIND/NAME: the kind's name or plural, optionally with `.GROUP`
    /// (e.g. `webapp/shop`, `canaries.canary.kubeapp.dev/web`).
    object: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// `text` for people, `json` for tools (the same content).
    #[arg(short, long, value_enum, default_value = "text")]
    output: Output,
    /// How many of the newest Events to show.
    #[arg(long, default_value_t = 10)]
    pub(crate) events: usize,
    /// Where the operator's Leases are (default: every namespace).
    #[arg(long, value_name = "NAMESPACE")]
    pub(crate) lease_namespace: Option<String>,
    /// Also read the operator's own report from its `/debug/kubeapp` at this address
    /// (`http://HOST:PORT`, e.g. through `kubectl port-forward`): its informer, queue and
    /// failures for the kind, its leader and shard state.
    #[arg(long, value_name = "URL")]
    pub(crate) diagnostics: Option<String>,
    /// A file holding the bearer token for `--diagnostics` (an operator run with
    /// `--metrics-auth`).
    #[arg(long, value_name = "PATH", requires = "diagnostics")]
    pub(crate) token_file: Option<std::path::PathBuf>,
    /// Wait up to this long (e.g. 30s, 5m) for the object to be ready or failed.
    #[arg(long, value_parser = parse_wait, value_name = "DURATION")]
    wait: Option<Duration>,
}

/// The output format.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

fn parse_wait(text: &str) -> Result<Duration, String> {
    text.parse::<Interval>()
        .map(|interval| interval.0)
        .map_err(|e| e.to_string())
}

/// Why a trace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The object could not be resolved.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Reading the object failed.
    #[error("reading {object}")]
    Read {
        /// The object.
        object: String,
        /// The cluster's answer.
        #[source]
        source: kube::Error,
    },
}

/// Traces the object; returns the verdict's exit code, or exit code 1 after printing an error.
pub async fn run(args: &TraceArgs) -> ExitCode {
    match trace(args).await {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {}", ErrorChain(&error));
            ExitCode::FAILURE
        }
    }
}

async fn trace(args: &TraceArgs) -> Result<u8, TraceError> {
    let target = target::resolve(&args.object, args.namespace.as_deref()).await?;
    let deadline = args.wait.map(|wait| tokio::time::Instant::now() + wait);
    let trace = loop {
        let trace = gather::gather(&target, args).await?;
        match deadline {
            Some(deadline)
                if !trace.verdict.is_settled() && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(POLL.min(deadline - tokio::time::Instant::now())).await;
            }
            _ => break trace,
        }
    };
    match args.output {
        Output::Text => print!(
            "{}",
            text::render(&trace, k8s_openapi::jiff::Timestamp::now())
        ),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&trace)
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        ),
    }
    Ok(trace.verdict.exit_code())
}
