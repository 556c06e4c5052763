//! One measured run of one contender on a fresh control plane.
//!
//! 1. Start kube-apiserver + etcd (`TestEnv`, etcd with fsync on under `--etcd-fsync`) with an
//!    audit log of the operators' requests (`kubeapp::sdk::benchmark::audit`), install the bench CRD, create a
//!    namespace, an identity for the tool, and the contender's identity ([`crate::identity`]:
//!    admin, or a ServiceAccount with a token).
//! 2. Start the tool's watch ([`crate::tracker`]) and the contender (its kubeconfig, the
//!    namespace, the worker count, a free metrics port).
//! 3. Create the object `warmup` and wait until it is done: the contender has listed, watched and
//!    written at least once. Only then does the clock start; the contender's reconcile count is
//!    read from its `/metrics` ([`crate::scrape`]).
//! 4. Create the N objects with a fixed concurrency; stop the clock when the watch has seen every
//!    one done (status `observedGeneration` = `metadata.generation` and the finalizer present).
//! 5. Wait until the contender's requests stop (the audit log stays the same size for a second,
//!    15 s at most), read its peak RSS and its reconcile count again (the difference is its
//!    reconciles of the N objects), check with a fresh list that every object is done, and
//!    that the contender is still running; stop it; count its requests from the first create on.
//!
//! A run fails (and yields no figure) when an object is not done in time, the contender exits,
//! any create fails, any request of the contender is answered with an error other than 409, a
//! Rust contender's `/metrics` cannot be read, or (ServiceAccount identity) the audit log shows
//! no request of the ServiceAccount or any request of `admin` in the measured window.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use kubeapp::sdk::testenv::{TestEnv, TestEnvError};

use kubeapp::sdk::benchmark::audit::{self, AuditError, RequestCounts};
use kubeapp::sdk::benchmark::process::{MeasuredProcess, ProcessError};

use crate::contender::Contender;
use crate::identity::{self, IdentityError, IdentityKind};
use crate::kind::{BenchObject, BenchSpec};
use crate::scrape::{self, ScrapeError};
use crate::tracker::{Progress, Tracker, WARMUP};

/// How long the warm-up object may take at most (less when the run's timeout is shorter).
const WARMUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the audit log must stay unchanged to count as quiet.
const QUIET: Duration = Duration::from_secs(1);
/// The longest wait for quiet.
const QUIET_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a wait checks that the contender is still alive.
const POLL: Duration = Duration::from_millis(200);
/// The payload of every object, so that objects have a realistic size (256 bytes).
const PAYLOAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\
                       0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\
                       0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\
                       0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// What every run of a benchmark shares.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Objects created and reconciled.
    pub objects: usize,
    /// Objects each contender handles at once.
    pub workers: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// How long the N objects may take.
    pub timeout: Duration,
    /// Where runs keep their audit logs and contender logs.
    pub work_dir: PathBuf,
    /// Keep a successful run's files (failed runs always keep them).
    pub keep_files: bool,
    /// Who the contender connects as.
    pub identity: IdentityKind,
    /// Run etcd with fsync on (a test control plane's default is off).
    pub etcd_fsync: bool,
}

/// The figures of one successful run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunResult {
    /// The contender.
    pub contender: String,
    /// Objects created and reconciled.
    pub objects: usize,
    /// From the first create until every object was done, in seconds.
    pub seconds: f64,
    /// From the first create until the last create was answered, in seconds: no contender can
    /// finish before, so a contender close to it is held back by the creates, not by itself.
    pub create_seconds: f64,
    /// Watch events about the objects in that time (every contender's watch got the same).
    pub events: u64,
    /// `events / seconds`.
    pub events_per_second: f64,
    /// `objects / seconds`.
    pub objects_per_second: f64,
    /// The contender's peak resident set size (`VmHWM`), in MiB.
    pub peak_rss_mib: f64,
    /// CPU seconds (user + system) the contender used from the clock's start until it went quiet:
    /// on a machine whose cores it shares with kube-apiserver and etcd, time it spends is time
    /// they do not get.
    pub cpu_seconds: f64,
    /// The contender's API requests from the first create until it was stopped.
    pub requests: RequestCounts,
    /// `requests.total / objects`.
    pub requests_per_object: f64,
    /// The contender's reconcile calls from the clock's start until it went quiet; `None` when
    /// it exports no count (see [`crate::scrape`]).
    pub reconciles: Option<u64>,
    /// `reconciles / objects`.
    pub reconciles_per_object: Option<f64>,
    /// The user the contender's requests came from (audit log).
    pub user: String,
    /// Objects found done by the final list.
    pub reconciled: usize,
    /// Objects found carrying the finalizer by the final list.
    pub with_finalizer: usize,
}

/// A run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The control plane did not start or a setup call failed.
    #[error("{contender}: the test control plane")]
    TestEnv {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: TestEnvError,
    },
    /// A file of the run could not be written.
    #[error("{contender}: writing {path}")]
    Io {
        /// The contender.
        contender: Contender,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The contender process could not be started or inspected.
    #[error("{contender}")]
    Process {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: ProcessError,
    },
    /// A request of the tool failed.
    #[error("{contender}: {action}")]
    Kube {
        /// The contender.
        contender: Contender,
        /// What the tool was doing.
        action: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// The contender's ServiceAccount identity could not be set up.
    #[error("{contender}: the ServiceAccount identity")]
    Identity {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: IdentityError,
    },
    /// The contender's metrics could not be read.
    #[error("{contender}")]
    Scrape {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: ScrapeError,
    },
    /// The audit log could not be read.
    #[error("{contender}")]
    Audit {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: AuditError,
    },
    /// The contender did not do its job.
    #[error(
        "{contender}: {problem}\n(files kept in {dir})\nlast lines of the contender's log:\n{log}"
    )]
    Failed {
        /// The contender.
        contender: Contender,
        /// What was wrong.
        problem: String,
        /// The run's directory.
        dir: PathBuf,
        /// The tail of the contender's log.
        log: String,
    },
}

/// Runs `contender` (the program at `binary`) once; `label` names the run's directory.
///
/// # Errors
///
/// See [`RunError`]: any failure, including a contender that did not reconcile everything.
pub async fn run_once(
    contender: Contender,
    binary: &Path,
    label: &str,
    settings: &RunSettings,
) -> Result<RunResult, RunError> {
    let dir = settings.work_dir.join(label);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunError::Io {
            contender,
            path,
            source,
        }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let test_env = |source| RunError::TestEnv { contender, source };
    let mut builder = TestEnv::builder();
    if settings.etcd_fsync {
        builder = builder.etcd_fsync();
    }
    let (builder, audit_log) = audit::with_audit_log(builder, &dir)
        .map_err(|source| RunError::Audit { contender, source })?;
    let env = builder.start().await.map_err(test_env)?;
    env.install_crd::<BenchObject>().await.map_err(test_env)?;
    let namespace = env.create_namespace("bench").await.map_err(test_env)?;
    let driver = env
        .identity(audit::DRIVER_USER, &["system:masters"])
        .await
        .map_err(test_env)?;
    let operator = match settings.identity {
        IdentityKind::Admin => identity::admin(&env),
        IdentityKind::ServiceAccount => identity::service_account(&env, &namespace, &dir)
            .await
            .map_err(|source| RunError::Identity { contender, source })?,
    };
    let api: Api<BenchObject> = Api::namespaced(driver.client.clone(), &namespace);
    let tracker = Tracker::start(api.clone());

    let metrics_port = free_port().map_err(io(&dir))?;
    let args = vec![
        "--kubeconfig".to_string(),
        operator.kubeconfig.display().to_string(),
        "--namespace".to_string(),
        namespace.clone(),
        "--workers".to_string(),
        settings.workers.to_string(),
        "--metrics-port".to_string(),
        metrics_port.to_string(),
    ];
    let log = dir.join("contender.log");
    let mut process = MeasuredProcess::spawn(binary, &args, &log)
        .map_err(|source| RunError::Process { contender, source })?;
    let failed = |process: &MeasuredProcess, problem: String| RunError::Failed {
        contender,
        problem,
        dir: dir.clone(),
        log: process.log_tail(30),
    };

    create(&api, WARMUP)
        .await
        .map_err(|source| RunError::Kube {
            contender,
            action: "creating the warm-up object",
            source,
        })?;
    if let Err(problem) = wait_for(
        &tracker,
        &mut process,
        WARMUP_TIMEOUT.min(settings.timeout),
        |p| p.warmup_done,
    )
    .await
    {
        return Err(failed(&process, format!("warm-up: {problem}")));
    }
    let scrape_error = |source| RunError::Scrape { contender, source };
    let reconciles_before = reconciles(contender, metrics_port)
        .await
        .map_err(scrape_error)?;
    let process_error = |source| RunError::Process { contender, source };
    let cpu_before = process.cpu_seconds().map_err(process_error)?;

    let from = Timestamp::now();
    let started = Instant::now();
    let creates = tokio::spawn(create_all(
        api.clone(),
        settings.objects,
        settings.create_concurrency,
    ));
    let objects = settings.objects;
    let waited = wait_for(&tracker, &mut process, settings.timeout, |p| {
        p.done >= objects
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let progress = tracker.progress();
    if let Err(problem) = waited {
        return Err(failed(&process, problem));
    }
    let create_seconds = match creates.await {
        Ok(Ok(elapsed)) => elapsed.as_secs_f64(),
        Ok(Err(error)) => return Err(failed(&process, format!("a create failed: {error}"))),
        Err(error) => return Err(failed(&process, format!("the creates panicked: {error}"))),
    };

    audit::wait_quiet(&audit_log, QUIET, QUIET_TIMEOUT).await;
    let reconciles_after = reconciles(contender, metrics_port)
        .await
        .map_err(scrape_error)?;
    let cpu_seconds = process.cpu_seconds().map_err(process_error)? - cpu_before;
    let peak_rss = process.peak_rss_bytes().map_err(process_error)?;
    if let Some(status) = process.exited() {
        return Err(failed(&process, format!("the contender exited ({status})")));
    }
    let (reconciled, with_finalizer, total) =
        final_check(&api).await.map_err(|source| RunError::Kube {
            contender,
            action: "listing the objects",
            source,
        })?;
    let to = Timestamp::now();
    let log_tail = process.log_tail(30);
    process.kill().await;
    drop(tracker);
    drop(env);

    let audit_error = |source| RunError::Audit { contender, source };
    let requests =
        audit::count_requests(&audit_log, &operator.user, from, to).map_err(audit_error)?;
    let mut problems = Vec::new();
    if operator.user != audit::ADMIN_USER {
        // The requests must come from the ServiceAccount, and none from the admin.
        let as_admin =
            audit::count_requests(&audit_log, audit::ADMIN_USER, from, to).map_err(audit_error)?;
        if requests.total == 0 || as_admin.total > 0 {
            problems.push(format!(
                "{} requests as {} and {} as {} (by kind: {:?})",
                requests.total,
                operator.user,
                as_admin.total,
                audit::ADMIN_USER,
                as_admin.by_kind
            ));
        }
    }
    if total != objects + 1 {
        problems.push(format!("{total} objects listed, {} expected", objects + 1));
    }
    if reconciled != objects + 1 || with_finalizer != objects + 1 {
        problems.push(format!(
            "of {} objects, {reconciled} reconciled and {with_finalizer} with the finalizer",
            objects + 1
        ));
    }
    problems.extend(requests.failures("the contender"));
    if !problems.is_empty() {
        return Err(RunError::Failed {
            contender,
            problem: problems.join("; "),
            dir,
            log: log_tail,
        });
    }
    if !settings.keep_files {
        // Best effort: a leftover directory costs disk, not correctness.
        let _ = std::fs::remove_dir_all(&dir);
    }
    let objects_f = objects as f64;
    let reconciles = reconciles_before
        .zip(reconciles_after)
        .map(|(before, after)| after.saturating_sub(before));
    Ok(RunResult {
        contender: contender.name().to_string(),
        objects,
        seconds,
        create_seconds,
        events: progress.events,
        events_per_second: progress.events as f64 / seconds,
        objects_per_second: objects_f / seconds,
        peak_rss_mib: peak_rss as f64 / (1024.0 * 1024.0),
        cpu_seconds,
        requests_per_object: requests.total as f64 / objects_f,
        requests,
        reconciles,
        reconciles_per_object: reconciles.map(|r| r as f64 / objects_f),
        user: operator.user,
        reconciled: reconciled - 1,
        with_finalizer: with_finalizer - 1,
    })
}

/// The contender's reconcile calls so far (`None`: it exports no count).
async fn reconciles(contender: Contender, port: u16) -> Result<Option<u64>, ScrapeError> {
    let text = scrape::metrics_text(port).await?;
    Ok(scrape::reconciles_in(contender, &text))
}

pub(crate) fn free_port() -> Result<u16, std::io::Error> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
}

/// The name of measured object `index`.
pub fn object_name(index: usize) -> String {
    format!("obj-{index:05}")
}

async fn create(api: &Api<BenchObject>, name: &str) -> Result<(), kube::Error> {
    let object = BenchObject::new(
        name,
        BenchSpec {
            payload: PAYLOAD.to_string(),
        },
    );
    api.create(&PostParams::default(), &object).await.map(drop)
}

/// Creates the measured objects; returns how long that took.
pub(crate) async fn create_all(
    api: Api<BenchObject>,
    objects: usize,
    concurrency: usize,
) -> Result<Duration, kube::Error> {
    let started = Instant::now();
    let mut creates = futures::stream::iter(0..objects)
        .map(|index| {
            let api = api.clone();
            async move { create(&api, &object_name(index)).await }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = creates.next().await {
        result?;
    }
    Ok(started.elapsed())
}

/// Waits until `done(progress)`, failing when the contender exits or `timeout` passes.
pub(crate) async fn wait_for(
    tracker: &Tracker,
    process: &mut MeasuredProcess,
    timeout: Duration,
    done: impl Fn(&Progress) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut progress = tracker.subscribe();
    loop {
        if let Ok(result) = tokio::time::timeout(POLL, progress.wait_for(&done)).await {
            return result
                .map(drop)
                .map_err(|_| "the tracker stopped".to_string());
        }
        if let Some(status) = process.exited() {
            return Err(format!("the contender exited ({status})"));
        }
        if Instant::now() >= deadline {
            let p = tracker.progress();
            return Err(format!(
                "not done within {timeout:?}: {} objects done, {} watch events, warm-up done: {}",
                p.done, p.events, p.warmup_done
            ));
        }
    }
}

/// `(reconciled, with finalizer, total)` from a fresh list.
async fn final_check(api: &Api<BenchObject>) -> Result<(usize, usize, usize), kube::Error> {
    let list = api.list(&ListParams::default()).await?;
    let reconciled = list.items.iter().filter(|o| o.is_reconciled()).count();
    let with_finalizer = list.items.iter().filter(|o| o.has_finalizer()).count();
    Ok((reconciled, with_finalizer, list.items.len()))
}
