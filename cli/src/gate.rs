//! `kubeapp pause|resume|promote|abort KIND/NAME [-n NAMESPACE] [--timeout 60s]`: sets a phase
//! machine's gate annotation (`phases.kubeapp.dev/gate`, what `kubectl annotate` would) and
//! waits until the operator applied it: the annotation removed and the change visible in the
//! status (a new phase for promote and abort, `Paused=True` for pause, not paused for resume).
//!
//! Exit codes: 0 applied; 1 an error (no such kind or object, the cluster refused, or the
//! operator removed the annotation without applying it: see the object's `GateIgnored` Event);
//! 2 a usage error (clap); 3 not applied within `--timeout` (the annotation stays, applied when
//! the operator gets to it). The user needs `get` and `patch` on the kind.

use std::process::ExitCode;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams};
use kubeapp::phases::analysis::Interval;
use kubeapp::phases::gate::PAUSED;
use kubeapp::phases::{GATE_ANNOTATION, Gate};
use kubeapp::sdk::error::ErrorChain;
use serde_json::{Value, json};

use crate::target::{self, TargetError};

/// The gate commands.
#[derive(Debug, clap::Subcommand)]
pub enum GateCommand {
    /// Stop a phase machine's object where it is (no worker, no measurement) until `resume`.
    Pause(GateArgs),
    /// Let a paused object go on (an inconclusive analysis measures again).
    Resume(GateArgs),
    /// Skip the rest of the object's analysis: its success transition.
    Promote(GateArgs),
    /// Stop the object's analysis: its failure transition (or the machine's abort phase).
    Abort(GateArgs),
}

/// Which object, and how long to wait.
#[derive(Debug, clap::Args)]
pub struct GateArgs {
    /// The object, as KIND/NAME: the kind's name or plural, optionally with `.GROUP`
    /// (e.g. `canary/web`, `canaries.canary.kubeapp.dev/web`).
    object: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// How long to wait for the operator to apply the gate (e.g. 30s, 2m).
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    text.parse::<Interval>()
        .map(|interval| interval.0)
        .map_err(|e| e.to_string())
}

/// Why a gate command failed.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The object could not be resolved.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Reading or annotating the object failed.
    #[error("{action} {object}")]
    Api {
        /// What was done.
        action: &'static str,
        /// The object.
        object: String,
        /// The cluster's answer.
        #[source]
        source: kube::Error,
    },
    /// The operator removed the annotation and nothing changed.
    #[error(
        "{object}: the operator did not apply {gate} (phase {phase}); see the object's GateIgnored Event"
    )]
    Ignored {
        /// The object.
        object: String,
        /// The gate.
        gate: Gate,
        /// Its phase.
        phase: String,
    },
    /// The gate was not applied in time.
    #[error(
        "{object}: {gate} not applied within {timeout:?} (phase {phase}; the annotation stays: is the operator running, and may it patch the kind?)"
    )]
    TimedOut {
        /// The object.
        object: String,
        /// The gate.
        gate: Gate,
        /// How long it waited.
        timeout: Duration,
        /// Its phase.
        phase: String,
    },
}

impl GateError {
    /// The exit code documented in the [module docs](self).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::TimedOut { .. } => 3,
            _ => 1,
        }
    }
}

/// Prints `error` on stderr and returns its exit code.
pub fn fail(error: &GateError) -> ExitCode {
    eprintln!("error: {}", ErrorChain(error));
    ExitCode::from(error.exit_code())
}

/// Runs a gate command; prints what was applied.
///
/// # Errors
///
/// See [`GateError`].
pub async fn run(command: &GateCommand) -> Result<(), GateError> {
    let (gate, args) = match command {
        GateCommand::Pause(args) => (Gate::Pause, args),
        GateCommand::Resume(args) => (Gate::Resume, args),
        GateCommand::Promote(args) => (Gate::Promote, args),
        GateCommand::Abort(args) => (Gate::Abort, args),
    };
    let target = target::resolve(&args.object, args.namespace.as_deref()).await?;
    let (api, name, object) = (&target.api, target.name.as_str(), target.described.clone());
    let api_error = |action| {
        let object = object.clone();
        move |source| GateError::Api {
            action,
            object,
            source,
        }
    };
    let before = api.get(name).await.map_err(api_error("reading"))?;
    let before = phase(&before);
    let annotate = json!({"metadata": {"annotations": {GATE_ANNOTATION: gate.as_str()}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .map_err(api_error("annotating"))?;
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        let current = api.get(name).await.map_err(api_error("reading"))?;
        let now = phase(&current);
        if !annotated(&current) {
            let applied = match gate {
                Gate::Promote | Gate::Abort => now != before,
                Gate::Pause => paused(&current),
                Gate::Resume => !paused(&current),
            };
            if !applied {
                return Err(GateError::Ignored {
                    object,
                    gate,
                    phase: now,
                });
            }
            match gate {
                Gate::Promote | Gate::Abort => {
                    println!("{object}: {gate} applied: {before} -> {now}")
                }
                Gate::Pause | Gate::Resume => println!("{object}: {gate} applied in phase {now}"),
            }
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(GateError::TimedOut {
                object,
                gate,
                timeout: args.timeout,
                phase: now,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn phase(object: &DynamicObject) -> String {
    object.data["status"]["phase"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn annotated(object: &DynamicObject) -> bool {
    object
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(GATE_ANNOTATION))
}

fn paused(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c: &Value| c["type"] == PAUSED && c["status"] == "True")
}
