//! `kubeapp-bench cache`: the memory and sync time of a cache of many objects, kubeapp's
//! shared-informer store against kube-runtime's reflector store (as it comes, and with
//! `managedFields` stripped), on one control plane; and kubeapp's cache of a projection of the
//! kind (only the fields a typical handler reads), against its cache of the full kind.
//!
//! 1. Start kube-apiserver + etcd with an audit log of `admin`'s requests, install the bench CRD,
//!    create a namespace with N objects (many creates in flight) and an empty one. The objects
//!    are of the bench kind (`--object bench`, a 32-byte payload) or Pods with a full spec and
//!    a status the tool writes through the status subresource as a kubelet would
//!    (`--object pod`, [`pod`]). One object is read back and its JSON size recorded
//!    ([`ObjectSize`]).
//! 2. For each cache contender ([`crate::cache_contender`]), one after the other:
//!    - run it on the empty namespace until synced, wait `settle`, read its RSS: the RSS of the
//!      same process with 0 objects; stop it;
//!    - run it on the full namespace; the **time to sync** runs from its start until its
//!      `/metrics` says synced with N objects; wait `settle`, read the **steady RSS** (`VmRSS`)
//!      and the **peak RSS** so far (`VmHWM`); **bytes per object** = (steady RSS - RSS with 0
//!      objects) / N;
//!    - force a **re-list**: reset its peak RSS, stop kube-apiserver, write a key to etcd
//!      directly (so the etcd revision moves past the contender's last resourceVersion while no
//!      apiserver runs), start kube-apiserver again. Its new watch cache starts at the newer
//!      revision, so the contender's watch resumes with a version that is too old, gets 410
//!      Gone and lists everything again. The re-list is done when the audit log shows the
//!      contender's first list after the restart and a watch after it (a watcher opens its watch
//!      once the list with all its pages is in); then wait `settle` and read the **re-list peak**
//!      (`VmHWM` since the reset) and the RSS after it. A contender that does not re-list within
//!      the timeout fails the run;
//!    - stop it.
//! 3. Report each contender's figures and kubeapp / kube-runtime ratios ([`crate::cache_report`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kubeapp::sdk::testenv::{TestEnv, TestEnvError};

use kubeapp::sdk::benchmark::audit::{self, AuditError};
use kubeapp::sdk::benchmark::process::{MeasuredProcess, ProcessError};

use crate::cache_contender::{CACHE_OBJECTS, CACHE_SYNCED, CacheObject};
use crate::cache_report::{CacheResult, ObjectSize};
use crate::kind::{BenchObject, BenchSpec};
use crate::run::object_name;
use crate::scrape::{self, ScrapeError};

/// How often the tool polls a contender's gauges and the audit log.
const POLL: Duration = Duration::from_millis(50);
/// The etcd key written while kube-apiserver is down (outside `/registry`, so no apiserver reads
/// it), base64 of `/kubeapp-bench/relist`, and its value, base64 of `x`.
const RELIST_KEY_B64: &str = "L2t1YmVhcHAtYmVuY2gvcmVsaXN0";
const RELIST_VALUE_B64: &str = "eA==";
/// The payload of every cached object: small (32 bytes).
const PAYLOAD: &str = "0123456789abcdef0123456789abcdef";

pub mod pod;

/// The cache contenders: the name in the report and the binary.
pub const CACHE_CONTENDERS: [(&str, &str); 4] = [
    ("kubeapp", "kubeapp-bench-cache-kubeapp"),
    (
        "kubeapp-projection",
        "kubeapp-bench-cache-kubeapp-projection",
    ),
    ("kube-runtime", "kubeapp-bench-cache-kube-runtime"),
    (
        "kube-runtime-stripped",
        "kubeapp-bench-cache-kube-runtime-stripped",
    ),
];

/// What the cache benchmark is run with.
#[derive(Clone, Debug)]
pub struct CacheSettings {
    /// The kind created and cached.
    pub object: CacheObject,
    /// Objects cached.
    pub objects: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// How long a contender is left alone before its RSS is read (after a sync or re-list).
    pub settle: Duration,
    /// How long a sync or a re-list may take.
    pub timeout: Duration,
    /// Where the run keeps its audit log and contender logs.
    pub work_dir: PathBuf,
    /// How many times each contender runs on the same objects (the order reversed every other
    /// round, so that no contender always runs first); ratios are of the medians.
    pub rounds: usize,
}

/// The cache benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The control plane did not start or a setup call failed.
    #[error("the test control plane")]
    TestEnv(#[from] TestEnvError),
    /// A file could not be written.
    #[error("writing {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A request of the tool failed.
    #[error("{action}")]
    Kube {
        /// What the tool was doing.
        action: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// A Pod could not be built from its JSON (a bug of [`pod`]).
    #[error("building Pod {name}")]
    PodJson {
        /// The Pod.
        name: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// An object read back could not be serialised to measure its size.
    #[error("serialising {name} to measure its size")]
    SizeJson {
        /// The object.
        name: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// Writing to etcd failed.
    #[error("writing a key to etcd at {url}")]
    Etcd {
        /// etcd's URL.
        url: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// A contender process could not be started or inspected.
    #[error("{contender}")]
    Process {
        /// The contender.
        contender: &'static str,
        /// The cause.
        source: ProcessError,
    },
    /// The audit log could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// A contender did not do its job in time.
    #[error("{contender}: {problem}\nlast lines of its log:\n{log}")]
    Failed {
        /// The contender.
        contender: &'static str,
        /// What was wrong.
        problem: String,
        /// The tail of its log.
        log: String,
    },
}

/// What one cache benchmark run measured.
#[derive(Clone, Debug)]
pub struct CacheRun {
    /// Each contender's figures, in the order they ran.
    pub results: Vec<CacheResult>,
    /// Seconds the creates (and, for Pods, the status writes) took.
    pub create_seconds: f64,
    /// The size of the first object, read back once everything was created.
    pub object_size: ObjectSize,
}

/// Runs the cache benchmark with `bins` (contender name and binary, in order).
///
/// # Errors
///
/// See [`CacheError`].
pub async fn run_cache(
    bins: &[(&'static str, PathBuf)],
    settings: &CacheSettings,
) -> Result<CacheRun, CacheError> {
    let dir = &settings.work_dir;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CacheError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let (builder, audit_log) = audit::with_audit_log(TestEnv::builder(), dir)?;
    let env = builder.start().await?;
    env.install_crd::<BenchObject>().await?;
    let full = env.create_namespace("cache").await?;
    let empty = env.create_namespace("empty").await?;
    let driver = env
        .identity(audit::DRIVER_USER, &["system:masters"])
        .await?;
    eprintln!(
        "creating {} objects ({}, {} in flight) ...",
        settings.objects, settings.object, settings.create_concurrency
    );
    let created = Instant::now();
    let resource = match settings.object {
        CacheObject::Bench => {
            let api = Api::namespaced(driver.client.clone(), &full);
            create_bench_objects(&api, settings.objects, settings.create_concurrency).await?;
            ApiResource::erase::<BenchObject>(&())
        }
        CacheObject::Pod => {
            let api = Api::namespaced(driver.client.clone(), &full);
            create_pods(&api, settings.objects, settings.create_concurrency).await?;
            ApiResource::erase::<Pod>(&())
        }
    };
    let create_seconds = created.elapsed().as_secs_f64();
    let object_size = measure_object(
        &Api::namespaced_with(driver.client.clone(), &full, &resource),
        &object_name(0),
    )
    .await?;
    eprintln!(
        "  {create_seconds:.1} s; one object is {} bytes of JSON ({} without managedFields)",
        object_size.json_bytes, object_size.json_bytes_without_managed_fields
    );

    let mut results = Vec::new();
    let mut empty_rss_of = std::collections::HashMap::new();
    for round in 1..=settings.rounds.max(1) {
        let order: Vec<&(&'static str, PathBuf)> = if !round.is_multiple_of(2) {
            bins.iter().collect()
        } else {
            bins.iter().rev().collect()
        };
        for (name, binary) in order {
            if settings.rounds > 1 {
                eprintln!("round {round} of {}:", settings.rounds);
            }
            let empty_rss = match empty_rss_of.get(name) {
                Some(&rss) => rss,
                None => {
                    let rss = empty_rss_run(name, binary, &env, &empty, settings).await?;
                    empty_rss_of.insert(*name, rss);
                    rss
                }
            };
            let mut result =
                contender_run(name, binary, &env, &full, &audit_log, settings, empty_rss).await?;
            result.round = round;
            results.push(result);
        }
    }
    Ok(CacheRun {
        results,
        create_seconds,
        object_size,
    })
}

/// The RSS of `name`'s process with 0 objects cached.
async fn empty_rss_run(
    name: &'static str,
    binary: &Path,
    env: &TestEnv,
    empty: &str,
    settings: &CacheSettings,
) -> Result<u64, CacheError> {
    eprintln!("{name}: 0 objects ...");
    let mut process = CacheProcess::start(name, binary, env, empty, settings, "empty")?;
    process.wait_synced(0, settings.timeout).await?;
    tokio::time::sleep(settings.settle).await;
    let rss = process.rss()?;
    process.stop().await;
    Ok(rss)
}

/// One run of `name` on the full namespace: its sync, steady RSS and forced re-list.
async fn contender_run(
    name: &'static str,
    binary: &Path,
    env: &TestEnv,
    full: &str,
    audit_log: &Path,
    settings: &CacheSettings,
    empty_rss: u64,
) -> Result<CacheResult, CacheError> {
    eprintln!("{name}: {} objects ...", settings.objects);
    let mut process = CacheProcess::start(name, binary, env, full, settings, "full")?;
    let started = Instant::now();
    process
        .wait_synced(settings.objects, settings.timeout)
        .await?;
    let sync_seconds = started.elapsed().as_secs_f64();
    let sync_cpu_seconds = process.cpu_seconds()?;
    tokio::time::sleep(settings.settle).await;
    let steady_rss = process.rss()?;
    let peak_rss = process.peak()?;
    eprintln!(
        "  synced in {sync_seconds:.2} s ({sync_cpu_seconds:.2} s CPU), RSS {:.1} MiB, peak {:.1} MiB; forcing a re-list ...",
        mib(steady_rss),
        mib(peak_rss)
    );
    process.reset_peak()?;
    let from = Timestamp::now();
    env.stop_apiserver();
    etcd_put(env.etcd_url()).await?;
    env.start_apiserver().await?;
    let restarted = Instant::now();
    process
        .wait_relisted(audit_log, settings.object.plural(), from, settings.timeout)
        .await?;
    let relist_seconds = restarted.elapsed().as_secs_f64();
    process
        .wait_synced(settings.objects, settings.timeout)
        .await?;
    tokio::time::sleep(settings.settle).await;
    let relist_peak_rss = process.peak()?;
    let relist_rss = process.rss()?;
    process.stop().await;
    let mut result = CacheResult::new(
        name,
        settings.objects,
        sync_seconds,
        empty_rss,
        steady_rss,
        peak_rss,
        relist_peak_rss,
        relist_rss,
        relist_seconds,
    );
    result.sync_cpu_seconds = sync_cpu_seconds;
    eprintln!(
        "  re-listed ({relist_seconds:.2} s after the restart), peak {:.1} MiB ({:.2}x steady)",
        result.relist_peak_rss_mib, result.relist_spike
    );
    Ok(result)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One cache contender process and how to read it.
struct CacheProcess {
    name: &'static str,
    process: MeasuredProcess,
    metrics_port: u16,
}

impl CacheProcess {
    fn start(
        name: &'static str,
        binary: &Path,
        env: &TestEnv,
        namespace: &str,
        settings: &CacheSettings,
        phase: &str,
    ) -> Result<Self, CacheError> {
        let dir = &settings.work_dir;
        let io = |source| CacheError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(io)?;
        let args = [
            "--kubeconfig".to_string(),
            env.kubeconfig_path().display().to_string(),
            "--namespace".to_string(),
            namespace.to_string(),
            "--metrics-port".to_string(),
            metrics_port.to_string(),
            "--object".to_string(),
            settings.object.flag().to_string(),
        ];
        let log = dir.join(format!("{name}-{phase}.log"));
        let process =
            MeasuredProcess::spawn(binary, &args, &log).map_err(|source| CacheError::Process {
                contender: name,
                source,
            })?;
        Ok(Self {
            name,
            process,
            metrics_port,
        })
    }

    fn failed(&self, problem: String) -> CacheError {
        CacheError::Failed {
            contender: self.name,
            problem,
            log: self.process.log_tail(20),
        }
    }

    fn process_error(&self, source: ProcessError) -> CacheError {
        CacheError::Process {
            contender: self.name,
            source,
        }
    }

    fn rss(&self) -> Result<u64, CacheError> {
        self.process
            .rss_bytes()
            .map_err(|source| self.process_error(source))
    }

    fn peak(&self) -> Result<u64, CacheError> {
        self.process
            .peak_rss_bytes()
            .map_err(|source| self.process_error(source))
    }

    fn cpu_seconds(&self) -> Result<f64, CacheError> {
        self.process
            .cpu_seconds()
            .map_err(|source| self.process_error(source))
    }

    fn reset_peak(&self) -> Result<(), CacheError> {
        self.process
            .reset_peak_rss()
            .map_err(|source| self.process_error(source))
    }

    /// `(synced, objects)` from the contender's gauges.
    async fn gauges(&self) -> Result<(bool, usize), ScrapeError> {
        let text = scrape::metrics_text(self.metrics_port).await?;
        let synced = scrape::sum_of(&text, |n| n == CACHE_SYNCED).unwrap_or(0.0) >= 1.0;
        let objects = scrape::sum_of(&text, |n| n == CACHE_OBJECTS).unwrap_or(0.0);
        Ok((synced, objects as usize))
    }

    /// Waits until the contender's cache is synced with `objects` objects.
    async fn wait_synced(&mut self, objects: usize, timeout: Duration) -> Result<(), CacheError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exited() {
                return Err(self.failed(format!("exited ({status})")));
            }
            let last = match self.gauges().await {
                Ok((true, seen)) if seen == objects => return Ok(()),
                // Not up yet, or not synced yet.
                Ok(state) => format!("{state:?}"),
                Err(error) => error.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(self.failed(format!(
                    "not synced with {objects} objects within {timeout:?}; last (synced, objects): {last}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the audit log shows the contender's re-list of `plural` after `from`.
    async fn wait_relisted(
        &mut self,
        audit_log: &Path,
        plural: &str,
        from: Timestamp,
        timeout: Duration,
    ) -> Result<(), CacheError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exited() {
                return Err(self.failed(format!("exited ({status})")));
            }
            if audit::list_then_watch(audit_log, audit::ADMIN_USER, plural, from)?.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.failed(format!(
                    "no re-list (a list, then a watch) in the audit log within {timeout:?} of \
                     the apiserver's restart"
                )));
            }
            tokio::time::sleep(POLL * 10).await;
        }
    }

    async fn stop(self) {
        self.process.kill().await;
    }
}

/// Writes [`RELIST_KEY_B64`] through etcd's JSON gateway (`POST /v3/kv/put`): the revision moves on.
async fn etcd_put(url: &str) -> Result<(), CacheError> {
    let error = |source| CacheError::Etcd {
        url: url.to_string(),
        source,
    };
    let body = format!(r#"{{"key":"{RELIST_KEY_B64}","value":"{RELIST_VALUE_B64}"}}"#);
    reqwest::Client::new()
        .post(format!("{url}/v3/kv/put"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(error)?;
    Ok(())
}

/// Creates the bench objects with `concurrency` creates in flight.
async fn create_bench_objects(
    api: &Api<BenchObject>,
    objects: usize,
    concurrency: usize,
) -> Result<(), CacheError> {
    let mut creates = futures::stream::iter(0..objects)
        .map(|index| {
            let object = BenchObject::new(
                &object_name(index),
                BenchSpec {
                    payload: PAYLOAD.to_string(),
                },
            );
            async move { api.create(&PostParams::default(), &object).await }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = creates.next().await {
        result.map_err(|source| CacheError::Kube {
            action: "creating the objects",
            source,
        })?;
    }
    Ok(())
}

/// Creates the Pods ([`pod::pod`]) and writes each one's status ([`pod::status_patch`]) right
/// after its create, with `concurrency` Pods in flight.
async fn create_pods(api: &Api<Pod>, objects: usize, concurrency: usize) -> Result<(), CacheError> {
    let mut creates = futures::stream::iter(0..objects)
        .map(|index| async move {
            let name = object_name(index);
            let pod = pod::pod(&name, index).map_err(|source| CacheError::PodJson {
                name: name.clone(),
                source,
            })?;
            api.create(&PostParams::default(), &pod)
                .await
                .map_err(|source| CacheError::Kube {
                    action: "creating the Pods",
                    source,
                })?;
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(pod::status_patch(index)),
            )
            .await
            .map_err(|source| CacheError::Kube {
                action: "writing the Pods' status",
                source,
            })?;
            Ok::<_, CacheError>(())
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = creates.next().await {
        result?;
    }
    Ok(())
}

/// Reads object `name` back and measures its JSON.
async fn measure_object(api: &Api<DynamicObject>, name: &str) -> Result<ObjectSize, CacheError> {
    let object = api.get(name).await.map_err(|source| CacheError::Kube {
        action: "reading an object back to measure it",
        source,
    })?;
    ObjectSize::of(&object).map_err(|source| CacheError::SizeJson {
        name: name.to_string(),
        source,
    })
}
