//! `kubeapp bench`: how the project's operator does under load, on a local control plane.
//!
//! 1. checks the flags, reads the project and its samples (`samples/*.yaml`, or `--sample`),
//!    and builds the operator (`cargo build --release`; `--debug` for the debug build);
//! 2. starts kube-apiserver + etcd (testenv) with an audit log of the operator's requests
//!    (`kubeapp::sdk::benchmark::audit`), installs the CRDs (the binary's `crd`), creates a
//!    namespace and an identity for the tool itself (its requests are not the operator's);
//! 3. starts the operator (`<binary> run`, the control plane's admin kubeconfig, its log in
//!    the run's directory) and waits for its `/readyz`; creates one warm-up copy of each sample
//!    and waits until it is handled, so the clock starts with the operator listed, watching and
//!    able to write (and a kind that never reports being handled fails here, saying so);
//! 4. creates `--objects` copies of the samples (cycled; names `<sample>-00000`...; `--set`
//!    values cycled over them), `--concurrency` at a time, each announced to the tool's watch
//!    before it is sent; waits until every one is handled (`--ready`, see
//!    `kubeapp::sdk::benchmark::readiness`);
//! 5. with `--churn RATE --duration D`: spec updates round-robin over the objects (each moves
//!    every `--set` field to its next value), then waits until every update is handled;
//! 6. waits until the operator's requests stop (the audit log quiet for 1 s), reads its handler
//!    calls (`/metrics`), peak RSS and CPU time (`/proc`), checks with a fresh list that every
//!    object is handled, stops it and the control plane, counts its requests from the audit log
//!    from the first create on, and prints the report ([`report`]).
//!
//! Why `observed-generation` is the default readiness: it is what every kubeapp template's
//! status reports, it is exact for each generation (so update latencies mean something), and it
//! says that the operator handled the object. A `Ready` condition often says more (the world the
//! object asks for is ready, e.g. a Deployment rolled out), which on a bare control plane may
//! never happen and is not the operator's speed; `--ready condition` measures it when the kind
//! reports one.
//!
//! Progress lines go to stderr; the report to stdout. Files (audit log, operator log) are in a
//! temporary directory, removed after a successful run unless `--keep`, kept (and named) after
//! a failure.

mod flags;
mod measure;
mod report;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use kubeapp::sdk::benchmark::audit::AuditError;
use kubeapp::sdk::benchmark::process::ProcessError;

use self::flags::Variation;
use crate::binary::{BinaryError, OperatorBinary, Profile};
use crate::objects::{self, ObjectsError};
use crate::project::{Project, ProjectError};
use crate::run::child;

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A summary, one fact a line.
    Text,
    /// JSON, stable for CI regression gates (docs/cli.md).
    Json,
}

/// What counts as handled (`--ready`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyFlag {
    /// `status.observedGeneration` equals `metadata.generation`.
    ObservedGeneration,
    /// A `Ready` condition is `True` for the object's generation.
    Condition,
}

/// The settings of `kubeapp bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The project's directory.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// How many objects to create (copies of the samples, cycled).
    #[arg(long, default_value = "100", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub objects: u32,
    /// A YAML file of sample objects to copy (repeatable; default: every samples/*.yaml of the
    /// project). Only objects of the project's kinds are used.
    #[arg(long, value_name = "PATH")]
    pub sample: Vec<PathBuf>,
    /// A spec field's values, cycled over the objects (object i gets value i mod n); a churn
    /// update moves it to the next value. Repeatable.
    #[arg(long = "set", value_name = "PATH=V1,V2,...", value_parser = flags::variation)]
    pub variations: Vec<Variation>,
    /// After the creates, spec updates at this rate (e.g. 20/s), round-robin over the objects;
    /// needs --duration and a --set with at least two values.
    #[arg(long, value_name = "RATE", value_parser = flags::rate, requires = "duration")]
    pub churn: Option<f64>,
    /// How long the churn lasts (e.g. 30s, 2m).
    #[arg(long, value_name = "DURATION", value_parser = flags::duration, requires = "churn")]
    pub duration: Option<Duration>,
    /// What shows that the operator handled an object's generation.
    #[arg(long, value_enum, default_value = "observed-generation")]
    pub ready: ReadyFlag,
    /// The report's format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: Output,
    /// How long each wait may take: the control plane's start, the operator's readiness, all
    /// objects handled after the creates, and after the churn.
    #[arg(long, value_parser = flags::duration, default_value = "5m", value_name = "DURATION")]
    pub timeout: Duration,
    /// Writes in flight at once (creates, and churn updates).
    #[arg(long, default_value = "16", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub concurrency: u16,
    /// Build and measure the debug build (default: release, as deployed).
    #[arg(long)]
    pub debug: bool,
    /// Keep the run's files (audit log, operator log) after a successful run.
    #[arg(long)]
    pub keep: bool,
}

/// Why `bench` failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The flags do not go together.
    #[error("{0}")]
    Flags(String),
    /// The project cannot be read.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// Its binary cannot be built or run.
    #[error(transparent)]
    Binary(#[from] BinaryError),
    /// A sample cannot be read or has no usable object.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    /// No sample of the project's kinds.
    #[error("{0}")]
    Samples(String),
    /// The control plane did not start, or a setup call failed.
    #[error("the control plane: {0} (kubeapp testenv install builds kube-apiserver and etcd)")]
    ControlPlane(String),
    /// A file of the run could not be written or read.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The audit log could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The operator process could not be started or inspected.
    #[error("the operator")]
    Process(#[from] ProcessError),
    /// The operator did not do its job, or a write of the tool failed.
    #[error("{problem}\n(files kept in {dir})\nlast lines of the operator's log:\n{log}")]
    Failed {
        /// What was wrong.
        problem: String,
        /// The run's directory.
        dir: PathBuf,
        /// The tail of the operator's log.
        log: String,
    },
}

/// Checks the flags that clap cannot: churn needs a field to change.
fn check_flags(args: &BenchArgs) -> Result<(), BenchError> {
    if args.churn.is_some() && !args.variations.iter().any(|v| v.values.len() >= 2) {
        return Err(BenchError::Flags(
            "--churn needs a --set PATH=V1,V2,... with at least two values: each update moves \
             the object's field to its next value (e.g. --set spec.message=a,b)"
                .to_string(),
        ));
    }
    Ok(())
}

/// The sample documents of the project's kinds (`(group, kind)` of its manifest), in file
/// order.
fn samples(
    args: &BenchArgs,
    project: &Project,
    kinds: &[(String, String)],
) -> Result<Vec<(PathBuf, serde_json::Value)>, BenchError> {
    let files = if args.sample.is_empty() {
        child::samples(&project.dir)
    } else {
        args.sample.clone()
    };
    let mut found = Vec::new();
    for path in &files {
        let yaml = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
            path: path.clone(),
            source,
        })?;
        for doc in objects::parse_documents(&yaml, &path.display().to_string())? {
            let group = doc["apiVersion"]
                .as_str()
                .and_then(|v| v.split_once('/'))
                .map(|(group, _)| group.to_string());
            let kind = doc["kind"].as_str().map(str::to_string);
            if let (Some(group), Some(kind)) = (group, kind)
                && kinds.contains(&(group, kind))
            {
                found.push((path.clone(), doc));
            }
        }
    }
    if found.is_empty() {
        let shown: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(BenchError::Samples(format!(
            "no sample object of the project's kinds ({}) in {}: kubeapp bench copies them \
             (--sample PATH names a file)",
            kinds
                .iter()
                .map(|(g, k)| format!("{k}.{g}"))
                .collect::<Vec<_>>()
                .join(", "),
            if shown.is_empty() {
                format!("{}/samples/ (no YAML file)", project.dir.display())
            } else {
                shown.join(", ")
            }
        )));
    }
    Ok(found)
}

/// `kubeapp bench`: the report, as text or JSON.
///
/// # Errors
///
/// See [`BenchError`].
pub async fn run(args: &BenchArgs) -> Result<String, BenchError> {
    check_flags(args)?;
    let project = Project::load(&args.dir)?;
    let manifest = project.manifest()?;
    if !manifest.declared_webhooks().is_empty()
        || manifest
            .kinds()
            .iter()
            .any(|kind| kind.conversion && kind.versions.len() > 1)
    {
        return Err(BenchError::Flags(format!(
            "{}: kubeapp bench does not run operators with webhooks or conversion yet (kubeapp \
             run does)",
            project.manifest_path().display()
        )));
    }
    // The samples are checked before the (long) build.
    let kinds: Vec<(String, String)> = manifest
        .kinds()
        .iter()
        .map(|kind| (manifest.group.clone(), kind.kind.to_string()))
        .collect();
    let samples = samples(args, &project, &kinds)?;
    let profile = if args.debug {
        Profile::Debug
    } else {
        Profile::Release
    };
    let binary = OperatorBinary::build_profile(&project, profile)?;
    let crd_yaml = binary.output(&["crd"])?;

    let dir = tempfile::Builder::new()
        .prefix("kubeapp-bench-")
        .tempdir()
        .map_err(|source| BenchError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
    let inputs = measure::Inputs {
        args,
        project: &project,
        binary: &binary,
        crd_yaml: &crd_yaml,
        samples: &samples,
        dir: dir.path(),
    };
    let outcome = measure::measure(&inputs).await;
    match outcome {
        Ok(report) => {
            if args.keep {
                eprintln!("files kept in {}", dir.keep().display());
            }
            Ok(match args.output {
                Output::Text => report.text(),
                Output::Json => serde_json::to_string_pretty(&report)
                    .map_or_else(|e| format!("{{\"error\": \"{e}\"}}"), |json| json + "\n"),
            })
        }
        Err(error) => {
            // Failed runs keep their files: the error names the directory.
            let _ = dir.keep();
            Err(error)
        }
    }
}
