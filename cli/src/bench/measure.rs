//! Steps 2 to 6 of `kubeapp bench` (see [`super`]): the control plane with its audit log, the
//! tool's watches, the operator, the warm-up, the creates, the churn, and the figures.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kubeapp::sdk::benchmark::audit;
use kubeapp::sdk::benchmark::latency::Percentiles;
use kubeapp::sdk::benchmark::metrics_text;
use kubeapp::sdk::benchmark::process::MeasuredProcess;
use kubeapp::sdk::benchmark::readiness::{Readiness, ReadinessTracker, WriteKind};
use kubeapp::sdk::error::ErrorChain;
use kubeapp::sdk::testenv::TestEnv;
use serde_json::Value;

use super::report::{self, BenchReport, Churn, Operator, Phase, Requests};
use super::workload::{self, Copy, Target};
use super::{BenchArgs, BenchError, ReadyFlag};
use crate::binary::OperatorBinary;
use crate::project::Project;
use crate::run::child;

/// How long the audit log must stay unchanged for the operator to count as quiet.
const QUIET: Duration = Duration::from_secs(1);
/// The longest wait for quiet.
const QUIET_LIMIT: Duration = Duration::from_secs(15);
/// How many objects still not handled an error names.
const SHOWN: usize = 5;

/// What a measurement starts from.
pub struct Inputs<'a> {
    /// The flags.
    pub args: &'a BenchArgs,
    /// The project.
    pub project: &'a Project,
    /// Its operator, built.
    pub binary: &'a OperatorBinary,
    /// The binary's `crd` output.
    pub crd_yaml: &'a str,
    /// The sample documents (file, document).
    pub samples: &'a [(PathBuf, Value)],
    /// The run's directory (audit log, operator log).
    pub dir: &'a Path,
}

/// The tool's watch of one kind.
struct Watched {
    gvk: GroupVersionKind,
    tracker: Arc<ReadinessTracker>,
}

/// A running measurement: the targets, their watches and the operator.
struct Session<'a> {
    inputs: &'a Inputs<'a>,
    namespace: String,
    readiness: Readiness,
    targets: Vec<Target>,
    watched: Vec<Watched>,
    operator: MeasuredProcess,
}

/// Runs the measurement and returns the report.
///
/// # Errors
///
/// See [`BenchError`].
pub async fn measure(inputs: &Inputs<'_>) -> Result<BenchReport, BenchError> {
    let args = inputs.args;
    let plane = |e: &dyn std::error::Error| BenchError::ControlPlane(ErrorChain(e).to_string());
    let (builder, audit_log) =
        audit::with_audit_log(TestEnv::builder().start_timeout(args.timeout), inputs.dir)?;
    eprintln!(
        "starting kube-apiserver and etcd (files in {})",
        inputs.dir.display()
    );
    let env = builder.start().await.map_err(|e| plane(&e))?;
    env.install_crds_yaml(inputs.crd_yaml)
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
    let (targets, watched) = watch_targets(inputs, &driver.client, &namespace, readiness).await?;
    let (operator, metrics_addr) = start_operator(inputs, &env)?;
    let mut session = Session {
        inputs,
        namespace,
        readiness,
        targets,
        watched,
        operator,
    };
    session.wait_ready(metrics_addr).await?;

    // Warm-up: one copy of each sample, handled before the clock starts.
    let warmups: Vec<Copy> = (0..session.targets.len())
        .map(|target| Copy::new(&session.targets, target, 0, &format!("warmup{target}")))
        .collect();
    session
        .write_phase(&warmups, WriteKind::Warmup, "the warm-up objects")
        .await?;

    let reconciles_before = handler_calls(metrics_addr).await;
    let cpu_before = session.operator.cpu_seconds()?;
    let from = audit::Timestamp::now();
    let objects = args.objects as usize;
    let mut copies: Vec<Copy> = (0..objects)
        .map(|index| {
            let target = index % session.targets.len();
            Copy::new(&session.targets, target, index, &format!("{index:05}"))
        })
        .collect();
    eprintln!(
        "creating {objects} objects ({} in flight)",
        args.concurrency
    );
    let (write_time, all_handled) = session
        .write_phase(&copies, WriteKind::Create, "the created objects")
        .await?;
    let create = session.phase(WriteKind::Create, objects, write_time, all_handled);
    let churn = match (args.churn, args.duration) {
        (Some(rate), Some(duration)) => Some(session.churn(&mut copies, rate, duration).await?),
        _ => None,
    };

    audit::wait_quiet(&audit_log, QUIET, QUIET_LIMIT).await;
    let reconciles = reconciles_before
        .zip(handler_calls(metrics_addr).await)
        .map(|(before, after)| after.saturating_sub(before));
    let cpu_seconds = session.operator.cpu_seconds()? - cpu_before;
    let peak_rss_bytes = session.operator.peak_rss_bytes()?;
    if let Some(status) = session.operator.exited() {
        return Err(session.failed(format!("the operator exited ({status})")));
    }
    let reconciled = session.reconciled(&copies).await?;
    let to = audit::Timestamp::now();
    let log_tail = session.operator.log_tail(30);
    session.operator.kill().await;
    drop(session.watched);
    drop(env);

    let counts = audit::count_requests(&audit_log, audit::ADMIN_USER, from, to)?;
    let mut problems = Vec::new();
    if reconciled != objects {
        problems.push(format!(
            "the final list found {reconciled} of {objects} objects handled at their last \
             generation"
        ));
    }
    problems.extend(counts.failures("the operator"));
    if !problems.is_empty() {
        return Err(BenchError::Failed {
            problem: problems.join("; "),
            dir: inputs.dir.to_path_buf(),
            log: log_tail,
        });
    }
    let objects_f = objects as f64;
    Ok(BenchReport {
        schema: report::SCHEMA,
        project: inputs.project.name.clone(),
        profile: if args.debug { "debug" } else { "release" },
        kinds: session
            .targets
            .iter()
            .fold(Vec::new(), |mut kinds, target| {
                if !kinds.contains(&target.kind) {
                    kinds.push(target.kind.clone());
                }
                kinds
            }),
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

/// One target per sample document, one watch (through the tool's `client`) per kind.
async fn watch_targets(
    inputs: &Inputs<'_>,
    client: &kube::Client,
    namespace: &str,
    readiness: Readiness,
) -> Result<(Vec<Target>, Vec<Watched>), BenchError> {
    let mut watched: Vec<(Watched, Api<DynamicObject>)> = Vec::new();
    let mut targets = Vec::new();
    for (path, sample) in inputs.samples {
        let api_version = sample["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = sample["kind"].as_str().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group, version, kind);
        if !watched.iter().any(|(w, _)| w.gvk == gvk) {
            let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|e| {
                    BenchError::Samples(format!(
                        "{}: {kind} {api_version} is not served: {e}",
                        path.display()
                    ))
                })?;
            let api: Api<DynamicObject> = match capabilities.scope {
                Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
                Scope::Cluster => Api::all_with(client.clone(), &resource),
            };
            let tracker = Arc::new(ReadinessTracker::start(api.clone(), readiness));
            watched.push((
                Watched {
                    gvk: gvk.clone(),
                    tracker,
                },
                api,
            ));
        }
        let (kind_watch, api) = watched
            .iter()
            .find(|(w, _)| w.gvk == gvk)
            .ok_or_else(|| BenchError::Samples(format!("{kind}: no watch")))?;
        targets.push(Target {
            kind: format!("{kind}.{group}"),
            sample: sample.clone(),
            api: api.clone(),
            tracker: Arc::clone(&kind_watch.tracker),
        });
    }
    Ok((targets, watched.into_iter().map(|(w, _)| w).collect()))
}

/// Starts `<binary> run` against `env` with a free metrics port, in its own process group and
/// with a parent-death signal (it never outlives `kubeapp`), its output in `operator.log`.
fn start_operator(
    inputs: &Inputs<'_>,
    env: &TestEnv,
) -> Result<(MeasuredProcess, SocketAddr), BenchError> {
    let binary = inputs.binary.path();
    let metrics_addr = crate::run::free_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .map_err(|e| BenchError::ControlPlane(e.to_string()))?;
    let mut command = tokio::process::Command::new(binary);
    command
        .arg("run")
        .arg("--metrics-addr")
        .arg(metrics_addr.to_string())
        .env("KUBECONFIG", env.kubeconfig_path())
        .env_remove("WATCH_NAMESPACE")
        .process_group(0);
    child::arm_parent_death_signal(&mut command);
    let log = inputs.dir.join("operator.log");
    let operator = MeasuredProcess::spawn_command(command, binary, &log)?;
    eprintln!(
        "operator: pid {}, {} run --metrics-addr {metrics_addr} (log {})",
        operator.pid(),
        binary.display(),
        log.display()
    );
    Ok((operator, metrics_addr))
}

impl Session<'_> {
    /// The run failed: `problem`, the run's directory and the operator log's tail.
    fn failed(&self, problem: String) -> BenchError {
        BenchError::Failed {
            problem,
            dir: self.inputs.dir.to_path_buf(),
            log: self.operator.log_tail(30),
        }
    }

    /// Waits until the operator's `/readyz` answers 200.
    async fn wait_ready(&mut self, metrics_addr: SocketAddr) -> Result<(), BenchError> {
        let timeout = self.inputs.args.timeout;
        let deadline = Instant::now() + timeout;
        while crate::run::http_status(metrics_addr, "/readyz").await != Some(200) {
            if let Some(status) = self.operator.exited() {
                return Err(self.failed(format!("the operator exited ({status})")));
            }
            if Instant::now() >= deadline {
                return Err(self.failed(format!(
                    "the operator's http://{metrics_addr}/readyz did not answer 200 within \
                     {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Creates `copies` (announced as `kind`) and waits until all are handled; returns how
    /// long the creates took and how long until all were handled.
    async fn write_phase(
        &mut self,
        copies: &[Copy],
        kind: WriteKind,
        what: &str,
    ) -> Result<(Duration, Duration), BenchError> {
        let started = Instant::now();
        let args = self.inputs.args;
        let write_time = workload::create_all(
            &self.targets,
            copies,
            &args.variations,
            &self.namespace,
            usize::from(args.concurrency),
            kind,
        )
        .await
        .map_err(|problem| self.failed(problem))?;
        self.wait_handled(what).await?;
        Ok((write_time, started.elapsed()))
    }

    /// Churn updates at `rate` for `duration`, then waits until all are handled.
    async fn churn(
        &mut self,
        copies: &mut [Copy],
        rate: f64,
        duration: Duration,
    ) -> Result<Churn, BenchError> {
        eprintln!("churn: {rate}/s for {duration:?}");
        let started = Instant::now();
        let args = self.inputs.args;
        let outcome = workload::churn(
            &self.targets,
            copies,
            &args.variations,
            rate,
            duration,
            usize::from(args.concurrency),
        )
        .await
        .map_err(|problem| self.failed(problem))?;
        self.wait_handled("the updated objects").await?;
        Ok(Churn {
            rate_per_second: rate,
            achieved_per_second: outcome.updates as f64 / outcome.sending.as_secs_f64(),
            duration_seconds: outcome.sending.as_secs_f64(),
            phase: self.phase(
                WriteKind::Update,
                outcome.updates,
                outcome.elapsed,
                started.elapsed(),
            ),
        })
    }

    /// The figures of the writes of `kind`.
    fn phase(
        &self,
        kind: WriteKind,
        writes: usize,
        write_time: Duration,
        all_handled: Duration,
    ) -> Phase {
        let latencies: Vec<Duration> = self
            .watched
            .iter()
            .flat_map(|w| w.tracker.latencies(kind))
            .collect();
        Phase {
            writes,
            write_seconds: write_time.as_secs_f64(),
            seconds_to_all_reconciled: all_handled.as_secs_f64(),
            superseded: self
                .watched
                .iter()
                .map(|w| {
                    w.tracker
                        .tally()
                        .superseded
                        .get(&kind)
                        .copied()
                        .unwrap_or(0)
                })
                .sum(),
            latency: Percentiles::of(&latencies),
        }
    }

    /// Waits until every announced write of every kind is handled, failing when the operator
    /// exits or `--timeout` passes (naming a few objects not handled and what they show).
    async fn wait_handled(&mut self, what: &str) -> Result<(), BenchError> {
        let timeout = self.inputs.args.timeout;
        let deadline = Instant::now() + timeout;
        for watched in &self.watched {
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let slice = left.min(Duration::from_millis(500));
                if watched.tracker.wait_all_handled(slice).await {
                    break;
                }
                if let Some(status) = self.operator.exited() {
                    return Err(self.failed(format!("the operator exited ({status})")));
                }
                if Instant::now() >= deadline {
                    return Err(self.failed(format!(
                        "{what} were not all handled within {timeout:?}: {} {} not handled, \
                         e.g.\n  {}\n(handled means {}; --ready chooses)",
                        watched.tracker.tally().outstanding,
                        watched.gvk.kind,
                        watched.tracker.outstanding(SHOWN).join("\n  "),
                        self.readiness.describe()
                    )));
                }
            }
        }
        Ok(())
    }

    /// How many of `copies` a fresh list finds handled at their last generation.
    async fn reconciled(&self, copies: &[Copy]) -> Result<usize, BenchError> {
        let mut reconciled = 0;
        for (index, target) in self.targets.iter().enumerate() {
            let list = target
                .api
                .list(&ListParams::default())
                .await
                .map_err(|e| self.failed(format!("listing {}: {e}", target.kind)))?;
            reconciled += copies
                .iter()
                .filter(|copy| copy.target == index)
                .filter(|copy| {
                    list.items.iter().any(|object| {
                        object.metadata.name.as_deref() == Some(copy.name.as_str())
                            && self
                                .readiness
                                .handled_generation(object)
                                .is_some_and(|g| g >= copy.generation)
                    })
                })
                .count();
        }
        Ok(reconciled)
    }
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
