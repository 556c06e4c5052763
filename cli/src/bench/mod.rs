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
mod report;
mod workload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kubeapp::sdk::benchmark::audit::{self, AuditError};
use kubeapp::sdk::benchmark::latency::Percentiles;
use kubeapp::sdk::benchmark::metrics_text;
use kubeapp::sdk::benchmark::process::{MeasuredProcess, ProcessError};
use kubeapp::sdk::benchmark::readiness::{Readiness, ReadinessTracker, WriteKind};
use kubeapp::sdk::error::ErrorChain;
use kubeapp::sdk::testenv::TestEnv;

use self::flags::Variation;
use self::report::{BenchReport, Churn, Operator, Phase, Requests};
use self::workload::{Copy, Target};
use crate::binary::{BinaryError, OperatorBinary, Profile};
use crate::objects::{self, ObjectsError};
use crate::project::{Project, ProjectError};
use crate::run::child;

/// How long the audit log must stay unchanged for the operator to count as quiet.
const QUIET: Duration = Duration::from_secs(1);
/// The longest wait for quiet.
const QUIET_LIMIT: Duration = Duration::from_secs(15);
/// How many objects still not handled an error names.
const SHOWN: usize = 5;

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

/// The sample documents of the project's kinds (those of `crds`), in file order.
fn samples(
    args: &BenchArgs,
    project: &Project,
    crds: &[(String, String)],
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
                && crds.contains(&(group, kind))
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
            crds.iter()
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

/// `(group, kind)` of every CRD in the binary's `crd` output.
fn crd_kinds(yaml: &str, origin: &str) -> Result<Vec<(String, String)>, BenchError> {
    Ok(objects::parse_documents(yaml, origin)?
        .iter()
        .filter(|doc| doc["kind"] == "CustomResourceDefinition")
        .filter_map(|doc| {
            let spec = &doc["spec"];
            Some((
                spec["group"].as_str()?.to_string(),
                spec["names"]["kind"].as_str()?.to_string(),
            ))
        })
        .collect())
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
    let profile = if args.debug {
        Profile::Debug
    } else {
        Profile::Release
    };
    let binary = OperatorBinary::build_profile(&project, profile)?;
    let crd_yaml = binary.output(&["crd"])?;
    let kinds = crd_kinds(&crd_yaml, &format!("{} crd", binary.path().display()))?;
    let samples = samples(args, &project, &kinds)?;

    let dir = tempfile::Builder::new()
        .prefix("kubeapp-bench-")
        .tempdir()
        .map_err(|source| BenchError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
    let outcome = measure(args, &project, &binary, &crd_yaml, &samples, dir.path()).await;
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

/// `GET path` answered 200 at `addr`.
async fn ready(addr: SocketAddr) -> bool {
    crate::run::http_status(addr, "/readyz").await == Some(200)
}

/// Steps 2 to 6, in `dir`.
#[allow(clippy::too_many_lines)]
async fn measure(
    args: &BenchArgs,
    project: &Project,
    binary: &OperatorBinary,
    crd_yaml: &str,
    samples: &[(PathBuf, serde_json::Value)],
    dir: &Path,
) -> Result<BenchReport, BenchError> {
    let plane = |e: &dyn std::error::Error| BenchError::ControlPlane(ErrorChain(e).to_string());
    let (builder, audit_log) =
        audit::with_audit_log(TestEnv::builder().start_timeout(args.timeout), dir)?;
    eprintln!(
        "starting kube-apiserver and etcd (files in {})",
        dir.display()
    );
    let env = builder.start().await.map_err(|e| plane(&e))?;
    env.install_crds_yaml(crd_yaml)
        .await
        .map_err(|e| plane(&e))?;
    let namespace = env.create_namespace("bench").await.map_err(|e| plane(&e))?;
    let driver = env
        .identity(audit::DRIVER_USER, &["system:masters"])
        .await
        .map_err(|e| plane(&e))?;
    let readiness = match args.ready {
        ReadyFlag::ObservedGeneration => Readiness::ObservedGeneration,
        ReadyFlag::Condition => Readiness::Condition,
    };

    // One watch per kind; one target per sample document.
    let mut trackers: Vec<(GroupVersionKind, Api<DynamicObject>, Arc<ReadinessTracker>)> =
        Vec::new();
    let mut targets = Vec::new();
    for (path, sample) in samples {
        let api_version = sample["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk =
            GroupVersionKind::gvk(group, version, sample["kind"].as_str().unwrap_or_default());
        let existing = trackers.iter().find(|(g, _, _)| *g == gvk);
        let (api, tracker) = if let Some((_, api, tracker)) = existing {
            (api.clone(), Arc::clone(tracker))
        } else {
            let (resource, capabilities): (ApiResource, _) =
                kube::discovery::pinned_kind(&driver.client, &gvk)
                    .await
                    .map_err(|e| {
                        BenchError::Samples(format!(
                            "{}: {} {api_version} is not served: {e}",
                            path.display(),
                            gvk.kind
                        ))
                    })?;
            let api: Api<DynamicObject> = match capabilities.scope {
                Scope::Namespaced => {
                    Api::namespaced_with(driver.client.clone(), &namespace, &resource)
                }
                Scope::Cluster => Api::all_with(driver.client.clone(), &resource),
            };
            let tracker = Arc::new(ReadinessTracker::start(api.clone(), readiness));
            trackers.push((gvk.clone(), api.clone(), Arc::clone(&tracker)));
            (api, tracker)
        };
        targets.push(Target {
            kind: format!("{}.{}", gvk.kind, gvk.group),
            sample: sample.clone(),
            api,
            tracker,
        });
    }

    let metrics_addr = crate::run::free_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .map_err(|e| BenchError::ControlPlane(e.to_string()))?;
    let mut command = tokio::process::Command::new(binary.path());
    command
        .arg("run")
        .arg("--metrics-addr")
        .arg(metrics_addr.to_string())
        .env("KUBECONFIG", env.kubeconfig_path())
        .env_remove("WATCH_NAMESPACE")
        .process_group(0);
    child::arm_parent_death_signal(&mut command);
    let log = dir.join("operator.log");
    let mut operator = MeasuredProcess::spawn_command(command, binary.path(), &log)?;
    eprintln!(
        "operator: pid {}, {} run --metrics-addr {metrics_addr} (log {})",
        operator.pid(),
        binary.path().display(),
        log.display()
    );
    let failed = |operator: &MeasuredProcess, problem: String| BenchError::Failed {
        problem,
        dir: dir.to_path_buf(),
        log: operator.log_tail(30),
    };
    let deadline = Instant::now() + args.timeout;
    while !ready(metrics_addr).await {
        if let Some(status) = operator.exited() {
            return Err(failed(&operator, format!("the operator exited ({status})")));
        }
        if Instant::now() >= deadline {
            return Err(failed(
                &operator,
                format!(
                    "the operator's http://{metrics_addr}/readyz did not answer 200 within {:?}",
                    args.timeout
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Warm-up: one copy of each sample, handled before the clock starts.
    let warmups: Vec<Copy> = targets
        .iter()
        .enumerate()
        .map(|(index, target)| Copy {
            target: index,
            name: workload::copy_name(
                target.sample["metadata"]["name"]
                    .as_str()
                    .unwrap_or("bench"),
                &format!("warmup{index}"),
            ),
            index: 0,
            generation: 1,
        })
        .collect();
    let concurrency = usize::from(args.concurrency);
    workload::create_all(
        &targets,
        &warmups,
        &args.variations,
        &namespace,
        concurrency,
        WriteKind::Warmup,
    )
    .await
    .map_err(|problem| failed(&operator, problem))?;
    wait_handled(
        &trackers,
        readiness,
        &mut operator,
        args.timeout,
        "the warm-up objects",
    )
    .await
    .map_err(|problem| failed(&operator, problem))?;

    let reconciles_before = handler_calls(metrics_addr).await;
    let cpu_before = operator.cpu_seconds()?;
    let from = jiff_now();
    let objects = args.objects as usize;
    let mut copies: Vec<Copy> = (0..objects)
        .map(|index| {
            let target = index % targets.len();
            Copy {
                target,
                name: workload::copy_name(
                    targets[target].sample["metadata"]["name"]
                        .as_str()
                        .unwrap_or("bench"),
                    &format!("{index:05}"),
                ),
                index,
                generation: 1,
            }
        })
        .collect();
    eprintln!("creating {objects} objects ({concurrency} in flight)");
    let started = Instant::now();
    let write_time = workload::create_all(
        &targets,
        &copies,
        &args.variations,
        &namespace,
        concurrency,
        WriteKind::Create,
    )
    .await
    .map_err(|problem| failed(&operator, problem))?;
    wait_handled(
        &trackers,
        readiness,
        &mut operator,
        args.timeout,
        "the created objects",
    )
    .await
    .map_err(|problem| failed(&operator, problem))?;
    let create = Phase {
        writes: objects,
        write_seconds: write_time.as_secs_f64(),
        seconds_to_all_reconciled: started.elapsed().as_secs_f64(),
        superseded: superseded(&trackers, WriteKind::Create),
        latency: Percentiles::of(&latencies(&trackers, WriteKind::Create)),
    };

    let churn = match (args.churn, args.duration) {
        (Some(rate), Some(duration)) => {
            eprintln!("churn: {rate}/s for {duration:?}");
            let started = Instant::now();
            let outcome = workload::churn(
                &targets,
                &mut copies,
                &args.variations,
                rate,
                duration,
                concurrency,
            )
            .await
            .map_err(|problem| failed(&operator, problem))?;
            wait_handled(
                &trackers,
                readiness,
                &mut operator,
                args.timeout,
                "the updated objects",
            )
            .await
            .map_err(|problem| failed(&operator, problem))?;
            Some(Churn {
                rate_per_second: rate,
                achieved_per_second: outcome.updates as f64 / outcome.sending.as_secs_f64(),
                duration_seconds: outcome.sending.as_secs_f64(),
                phase: Phase {
                    writes: outcome.updates,
                    write_seconds: outcome.elapsed.as_secs_f64(),
                    seconds_to_all_reconciled: started.elapsed().as_secs_f64(),
                    superseded: superseded(&trackers, WriteKind::Update),
                    latency: Percentiles::of(&latencies(&trackers, WriteKind::Update)),
                },
            })
        }
        _ => None,
    };

    audit::wait_quiet(&audit_log, QUIET, QUIET_LIMIT).await;
    let reconciles_after = handler_calls(metrics_addr).await;
    let cpu_seconds = operator.cpu_seconds()? - cpu_before;
    let peak_rss_bytes = operator.peak_rss_bytes()?;
    if let Some(status) = operator.exited() {
        return Err(failed(&operator, format!("the operator exited ({status})")));
    }
    let mut reconciled = 0;
    for (index, target) in targets.iter().enumerate() {
        let list = target
            .api
            .list(&ListParams::default())
            .await
            .map_err(|e| failed(&operator, format!("listing {}: {e}", target.kind)))?;
        reconciled += copies
            .iter()
            .filter(|copy| copy.target == index)
            .filter(|copy| {
                list.items.iter().any(|object| {
                    object.metadata.name.as_deref() == Some(copy.name.as_str())
                        && readiness
                            .handled_generation(object)
                            .is_some_and(|g| g >= copy.generation)
                })
            })
            .count();
    }
    let to = jiff_now();
    let log_tail = operator.log_tail(30);
    operator.kill().await;
    drop(targets);
    drop(trackers);
    drop(env);

    let counts = audit::count_requests(&audit_log, audit::ADMIN_USER, from, to)?;
    let mut problems = Vec::new();
    if reconciled != objects {
        problems.push(format!(
            "the final list found {reconciled} of {objects} objects handled at their last \
             generation"
        ));
    }
    if counts.errors > 0 {
        problems.push(format!(
            "{} requests of the operator failed; requests by kind: {:?}",
            counts.errors, counts.by_kind
        ));
    }
    if !problems.is_empty() {
        return Err(BenchError::Failed {
            problem: problems.join("; "),
            dir: dir.to_path_buf(),
            log: log_tail,
        });
    }
    let reconciles = reconciles_before
        .zip(reconciles_after)
        .map(|(before, after)| after.saturating_sub(before));
    let objects_f = objects as f64;
    let mut kinds: Vec<String> = samples_kinds(samples);
    kinds.dedup();
    Ok(BenchReport {
        schema: report::SCHEMA,
        project: project.name.clone(),
        profile: if args.debug { "debug" } else { "release" },
        kinds,
        objects,
        ready: readiness.name(),
        create,
        churn,
        reconciled,
        reconciles,
        reconciles_per_object: reconciles.map(|r| r as f64 / objects_f),
        requests_per_object: counts.total as f64 / objects_f,
        requests: Requests {
            total: counts.total,
            conflicts: counts.conflicts,
            errors: counts.errors,
            by_kind: counts.by_kind,
        },
        operator: Operator {
            peak_rss_bytes,
            cpu_seconds,
        },
    })
}

/// `Kind.group` of each sample, in order.
fn samples_kinds(samples: &[(PathBuf, serde_json::Value)]) -> Vec<String> {
    let mut kinds: Vec<String> = Vec::new();
    for (_, sample) in samples {
        let group = sample["apiVersion"]
            .as_str()
            .and_then(|v| v.split_once('/'))
            .map_or("", |(group, _)| group);
        let kind = format!("{}.{group}", sample["kind"].as_str().unwrap_or_default());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

fn jiff_now() -> audit::Timestamp {
    audit::Timestamp::now()
}

/// The operator's handler calls so far; `None` when `/metrics` cannot be read or has none.
async fn handler_calls(addr: SocketAddr) -> Option<u64> {
    match metrics_text::fetch(addr).await {
        Ok(text) => metrics_text::handler_calls(&text),
        Err(error) => {
            eprintln!("warning: {error}");
            None
        }
    }
}

fn latencies(
    trackers: &[(GroupVersionKind, Api<DynamicObject>, Arc<ReadinessTracker>)],
    kind: WriteKind,
) -> Vec<Duration> {
    trackers
        .iter()
        .flat_map(|(_, _, tracker)| tracker.latencies(kind))
        .collect()
}

fn superseded(
    trackers: &[(GroupVersionKind, Api<DynamicObject>, Arc<ReadinessTracker>)],
    kind: WriteKind,
) -> usize {
    trackers
        .iter()
        .map(|(_, _, tracker)| tracker.tally().superseded.get(&kind).copied().unwrap_or(0))
        .sum()
}

/// Waits until every announced write of every kind is handled, failing when the operator exits
/// or `timeout` passes (naming a few objects not handled and what they show).
async fn wait_handled(
    trackers: &[(GroupVersionKind, Api<DynamicObject>, Arc<ReadinessTracker>)],
    readiness: Readiness,
    operator: &mut MeasuredProcess,
    timeout: Duration,
    what: &str,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    for (gvk, _, tracker) in trackers {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if tracker
                .wait_all_handled(left.min(Duration::from_millis(500)))
                .await
            {
                break;
            }
            if let Some(status) = operator.exited() {
                return Err(format!("the operator exited ({status})"));
            }
            if Instant::now() >= deadline {
                let tally = tracker.tally();
                return Err(format!(
                    "{what} were not all handled within {timeout:?}: {} {} not handled, e.g.\n  {}\n\
                     (handled means {}; --ready chooses)",
                    tally.outstanding,
                    gvk.kind,
                    tracker.outstanding(SHOWN).join("\n  "),
                    readiness.describe()
                ));
            }
        }
    }
    Ok(())
}
