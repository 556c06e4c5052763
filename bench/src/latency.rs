//! `kubeapp-bench latency`: how long one change waits before its handler runs, under steady
//! churn, for kubeapp and kube-runtime's `Controller` (the contenders of the end-to-end
//! benchmark, with the same logic).
//!
//! One run of one contender, on a fresh control plane:
//!
//! 1. Start kube-apiserver + etcd, install the bench CRD, create a namespace with N objects.
//! 2. Start the contender with `--call-log FILE` ([`crate::call_log`]: a line per reconcile call
//!    with the object's name, the generation it saw and the wall-clock time) and wait until the
//!    tool's watch sees every object done (the contender synced and reconciled them all).
//! 3. Churn: for `duration`, update one object's spec every `1 / rate` seconds, round robin over
//!    the N objects, each update a merge patch of the main resource (so its generation grows).
//!    Every update's answer gives the object's new generation; the tool notes the wall-clock time
//!    it got the answer.
//! 4. Wait until the call log holds, for every update, a call that saw its generation or a newer
//!    one, then stop the contender.
//! 5. An update's **latency** is from its answer to the start of the first call that saw its
//!    generation or a newer one. A call can start before the tool gets the answer (the watch event
//!    raced the response); such an update counts as 0 and the report says how many there were.
//!    p50, p99 and max by nearest rank ([`Percentiles`]).
//!
//! The rate is what the tool sends, not a target a contender can miss: every contender gets the
//! same writes at the same times. Keep it below what the apiserver can take with the contenders'
//! own writes on top (each update makes a status write too): the default 100 updates/s over
//! 1,000 objects does, on this project's 2-core machine.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube::api::{Api, Patch, PatchParams};
use kubeapp::sdk::benchmark::latency::Percentiles;
use kubeapp::sdk::benchmark::process::{MeasuredProcess, ProcessError};
use kubeapp::sdk::testenv::{TestEnv, TestEnvError};
use tokio::sync::Semaphore;

use crate::call_log::{self, Call, CallLogError};
use crate::contender::Contender;
use crate::kind::BenchObject;
use crate::run::{create_all, free_port, object_name, wait_for};
use crate::tracker::Tracker;

/// The contenders of the latency benchmark (Rust ones with a call log).
pub const LATENCY_CONTENDERS: [Contender; 2] = [Contender::Kubeapp, Contender::KubeRuntime];

/// Updates the tool keeps in flight at most (a slow answer must not slow the rate).
const MAX_IN_FLIGHT: usize = 64;
/// How often the tool reads the call log while it waits for the last calls.
const POLL: Duration = Duration::from_millis(200);

/// What a latency run is run with.
#[derive(Clone, Debug)]
pub struct LatencySettings {
    /// Objects created before the contender starts and updated round robin.
    pub objects: usize,
    /// Updates per second.
    pub rate: u32,
    /// How long the churn lasts.
    pub duration: Duration,
    /// Objects the contender handles at once.
    pub workers: usize,
    /// How long the initial reconcile, and the wait for the last calls, may take each.
    pub timeout: Duration,
    /// Where runs keep their files.
    pub work_dir: PathBuf,
    /// Keep a run's files (its call log, `updates.log`: `NAME GENERATION SENT ANSWERED` in
    /// nanoseconds since the Unix epoch, and the contender's log) to look at its latencies over
    /// time.
    pub keep_files: bool,
}

/// The figures of one latency run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LatencyResult {
    /// The contender.
    pub contender: String,
    /// Updates sent (and answered).
    pub updates: usize,
    /// Updates per second actually sent (updates / the churn's time).
    pub rate: f64,
    /// Reconcile calls the contender logged during the churn and after it.
    pub calls: usize,
    /// Updates whose first call started before the tool had the answer (counted as 0).
    pub before_answer: usize,
    /// From an update's answer to the first call that saw it.
    pub latency: Percentiles,
    /// From the update's request being sent to the first call that saw it (the apiserver's
    /// write included; never negative, so it also ranks contenders whose calls often start
    /// before the answer).
    pub from_send: Percentiles,
}

/// A latency run failed.
#[derive(Debug, thiserror::Error)]
pub enum LatencyError {
    /// The control plane did not start or a setup call failed.
    #[error("{contender}: the test control plane")]
    TestEnv {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: TestEnvError,
    },
    /// A file or port of the run could not be had.
    #[error("{contender}: {action}")]
    Io {
        /// The contender.
        contender: Contender,
        /// What the tool was doing.
        action: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The contender process could not be started.
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
    /// The call log could not be read.
    #[error("{contender}")]
    CallLog {
        /// The contender.
        contender: Contender,
        /// The cause.
        source: CallLogError,
    },
    /// The contender did not do its job.
    #[error("{contender}: {problem}\n(files in {dir})\nlast lines of the contender's log:\n{log}")]
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

/// One update the tool sent: the object, the generation it got, when the answer came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// The object's name.
    pub name: String,
    /// The generation the update gave it.
    pub generation: i64,
    /// When the tool sent it, in nanoseconds since the Unix epoch.
    pub sent: u128,
    /// When the tool had the answer, in nanoseconds since the Unix epoch.
    pub answered: u128,
}

/// Runs `contender` (the program at `binary`) once; `label` names the run's directory.
///
/// # Errors
///
/// See [`LatencyError`].
pub async fn run_latency(
    contender: Contender,
    binary: &Path,
    label: &str,
    settings: &LatencySettings,
) -> Result<LatencyResult, LatencyError> {
    let dir = settings.work_dir.join(label);
    let io = |action: String| {
        move |source| LatencyError::Io {
            contender,
            action,
            source,
        }
    };
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let test_env = |source| LatencyError::TestEnv { contender, source };
    let env = TestEnv::builder().start().await.map_err(test_env)?;
    env.install_crd::<BenchObject>().await.map_err(test_env)?;
    let namespace = env.create_namespace("latency").await.map_err(test_env)?;
    let api: Api<BenchObject> = Api::namespaced(env.client(), &namespace);
    create_all(api.clone(), settings.objects, 10)
        .await
        .map_err(|source| LatencyError::Kube {
            contender,
            action: "creating the objects",
            source,
        })?;
    let tracker = Tracker::start(api.clone());
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    let calls_path = dir.join("calls.log");
    let metrics_port = free_port().map_err(io("finding a free port".into()))?;
    let args = [
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--namespace".to_string(),
        namespace.clone(),
        "--workers".to_string(),
        settings.workers.to_string(),
        "--metrics-port".to_string(),
        metrics_port.to_string(),
        "--call-log".to_string(),
        calls_path.display().to_string(),
    ];
    let mut process = MeasuredProcess::spawn(binary, &args, &dir.join("contender.log"))
        .map_err(|source| LatencyError::Process { contender, source })?;
    let failed = |process: &MeasuredProcess, problem: String| LatencyError::Failed {
        contender,
        problem,
        dir: dir.clone(),
        log: process.log_tail(30),
    };
    let objects = settings.objects;
    if let Err(problem) = wait_for(&tracker, &mut process, settings.timeout, |p| {
        p.done >= objects
    })
    .await
    {
        return Err(failed(
            &process,
            format!("the initial reconcile: {problem}"),
        ));
    }

    let started = Instant::now();
    let updates = match churn(&api, settings).await {
        Ok(updates) => updates,
        Err(source) => {
            return Err(failed(&process, format!("an update failed: {source}")));
        }
    };
    let rate = updates.len() as f64 / started.elapsed().as_secs_f64();
    let read_calls = |contender| {
        call_log::read(&calls_path).map_err(|source| LatencyError::CallLog { contender, source })
    };
    let deadline = Instant::now() + settings.timeout;
    let calls = loop {
        let calls = read_calls(contender)?;
        let missing = unmatched(&updates, &calls);
        if missing == 0 {
            break calls;
        }
        if let Some(status) = process.exited() {
            return Err(failed(&process, format!("the contender exited ({status})")));
        }
        if Instant::now() >= deadline {
            return Err(failed(
                &process,
                format!(
                    "{missing} of {} updates saw no call within {:?}",
                    updates.len(),
                    settings.timeout
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    process.kill().await;
    drop(tracker);
    drop(env);
    let found = latencies(&updates, &calls);
    let none_sent = || LatencyError::Failed {
        contender,
        problem: "no update was sent (the churn was too short for the rate)".into(),
        dir: dir.clone(),
        log: String::new(),
    };
    let latency = Percentiles::of(&found.from_answer).ok_or_else(none_sent)?;
    let from_send = Percentiles::of(&found.from_send).ok_or_else(none_sent)?;
    if settings.keep_files {
        let lines: String = updates
            .iter()
            .map(|u| format!("{} {} {} {}\n", u.name, u.generation, u.sent, u.answered))
            .collect();
        let path = dir.join("updates.log");
        std::fs::write(&path, lines).map_err(io(format!("writing {}", path.display())))?;
    } else {
        // Best effort: a leftover directory costs disk, not correctness.
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(LatencyResult {
        contender: contender.name().to_string(),
        updates: updates.len(),
        rate,
        calls: calls.len(),
        before_answer: found.before_answer,
        latency,
        from_send,
    })
}

/// Sends `settings.rate` updates per second for `settings.duration`, round robin over the
/// objects; returns every update with its answer's time.
async fn churn(
    api: &Api<BenchObject>,
    settings: &LatencySettings,
) -> Result<Vec<Update>, kube::Error> {
    let period = Duration::from_secs_f64(1.0 / f64::from(settings.rate.max(1)));
    let total = (settings.duration.as_secs_f64() * f64::from(settings.rate)).round() as usize;
    let mut tick = tokio::time::interval(period);
    // Late ticks are sent at once (the rate over the run holds), not skipped.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut sent = tokio::task::JoinSet::new();
    for index in 0..total {
        tick.tick().await;
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            break;
        };
        let api = api.clone();
        let name = object_name(index % settings.objects.max(1));
        sent.spawn(async move {
            let _permit = permit;
            let patch = serde_json::json!({ "spec": { "payload": format!("update-{index}") } });
            let sent = call_log::unix_nanos(SystemTime::now());
            let object = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let answered = call_log::unix_nanos(SystemTime::now());
            Ok::<_, kube::Error>(Update {
                name,
                generation: object.metadata.generation.unwrap_or_default(),
                sent,
                answered,
            })
        });
    }
    let mut updates = Vec::with_capacity(total);
    while let Some(joined) = sent.join_next().await {
        match joined {
            Ok(update) => updates.push(update?),
            // A panicked update task is a bug of the tool; the count check would miss it.
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
    Ok(updates)
}

/// For each object, its calls' `(generation, start)` in the log's order (the order they started).
fn calls_by_object(calls: &[Call]) -> HashMap<&str, Vec<(i64, u128)>> {
    let mut by_object: HashMap<&str, Vec<(i64, u128)>> = HashMap::new();
    for call in calls {
        by_object
            .entry(call.name.as_str())
            .or_default()
            .push((call.generation, call.at));
    }
    by_object
}

/// The first call of `object_calls` that saw `generation` or a newer one.
fn first_call_seeing(object_calls: Option<&Vec<(i64, u128)>>, generation: i64) -> Option<u128> {
    object_calls?
        .iter()
        .find(|(seen, _)| *seen >= generation)
        .map(|(_, at)| *at)
}

/// How many updates have no call that saw them yet.
fn unmatched(updates: &[Update], calls: &[Call]) -> usize {
    let by_object = calls_by_object(calls);
    updates
        .iter()
        .filter(|u| first_call_seeing(by_object.get(u.name.as_str()), u.generation).is_none())
        .count()
}

/// The matched updates' latencies from their answer and from their sending, and how many of
/// them had their call start before the answer (counted as 0 from the answer).
fn latencies(updates: &[Update], calls: &[Call]) -> Latencies {
    let by_object = calls_by_object(calls);
    let since = |start: u128, at: u128| {
        let nanos = at.saturating_sub(start);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    };
    let mut latencies = Latencies::default();
    for update in updates {
        let Some(at) = first_call_seeing(by_object.get(update.name.as_str()), update.generation)
        else {
            continue;
        };
        if at < update.answered {
            latencies.before_answer += 1;
        }
        latencies.from_answer.push(since(update.answered, at));
        latencies.from_send.push(since(update.sent, at));
    }
    latencies
}

/// What [`latencies`] found.
#[derive(Debug, Default, PartialEq)]
struct Latencies {
    from_answer: Vec<Duration>,
    from_send: Vec<Duration>,
    before_answer: usize,
}

/// The Markdown table of latency runs, one row per run.
pub fn table(results: &[LatencyResult]) -> String {
    let mut out = String::from(
        "| contender | updates | updates/s | calls | before answer | p50 ms | p99 ms | max ms | \
         from send: p50 ms | p99 ms | max ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            r.contender,
            r.updates,
            r.rate,
            r.calls,
            r.before_answer,
            r.latency.p50_ms,
            r.latency.p99_ms,
            r.latency.max_ms,
            r.from_send.p50_ms,
            r.from_send.p99_ms,
            r.from_send.max_ms
        ));
    }
    let medians = medians(results);
    for (name, values) in &medians {
        let cells: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        out.push_str(&format!(
            "| {name}, median of runs | | | | | {} |\n",
            cells.join(" | ")
        ));
    }
    if let [(first, a), (second, b)] = medians.as_slice() {
        let cells: Vec<String> = a
            .iter()
            .zip(b)
            .map(|(a, b)| format!("{:.2}x", a / b))
            .collect();
        out.push_str(&format!(
            "| {first} / {second} | | | | | {} |\n",
            cells.join(" | ")
        ));
    }
    out
}

/// Per contender (in first-seen order), the median over its runs of p50, p99 and max from the
/// answer, then the same from the send, in ms.
pub fn medians(results: &[LatencyResult]) -> Vec<(String, [f64; 6])> {
    let mut names: Vec<&str> = Vec::new();
    for r in results {
        if !names.contains(&r.contender.as_str()) {
            names.push(&r.contender);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let of = |pick: fn(&LatencyResult) -> f64| {
                let mut values: Vec<f64> = results
                    .iter()
                    .filter(|r| r.contender == name)
                    .map(pick)
                    .collect();
                values.sort_by(f64::total_cmp);
                values[(values.len() - 1) / 2]
            };
            (
                name.to_string(),
                [
                    of(|r| r.latency.p50_ms),
                    of(|r| r.latency.p99_ms),
                    of(|r| r.latency.max_ms),
                    of(|r| r.from_send.p50_ms),
                    of(|r| r.from_send.p99_ms),
                    of(|r| r.from_send.max_ms),
                ],
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, generation: i64, at: u128) -> Call {
        Call {
            name: name.into(),
            generation,
            at,
        }
    }

    /// An update sent 1 ms before its answer.
    fn update(name: &str, generation: i64, answered: u128) -> Update {
        Update {
            name: name.into(),
            generation,
            sent: answered - 1_000_000,
            answered,
        }
    }

    #[test]
    fn an_update_is_matched_with_the_first_call_that_saw_its_generation_or_a_newer_one() {
        const MS: u128 = 1_000_000;
        let calls = [
            call("a", 1, 0),
            call("a", 2, 13 * MS),
            // b's generations 2 and 3 coalesced into one call that saw 3.
            call("b", 3, 40 * MS),
            // a call that raced the answer: the watch event came before the response.
            call("c", 2, 99 * MS),
        ];
        let updates = [
            update("a", 2, 10 * MS),
            update("b", 2, 20 * MS),
            update("b", 3, 30 * MS),
            update("c", 2, 100 * MS),
        ];
        assert_eq!(unmatched(&updates, &calls), 0);
        let found = latencies(&updates, &calls);
        assert_eq!(
            found.from_answer,
            [3, 20, 10, 0].map(Duration::from_millis).to_vec()
        );
        assert_eq!(
            found.from_send,
            [4, 21, 11, 0].map(Duration::from_millis).to_vec()
        );
        assert_eq!(found.before_answer, 1);
    }

    #[test]
    fn medians_are_per_contender_over_runs() {
        let result = |contender: &str, p50_ms| LatencyResult {
            contender: contender.into(),
            updates: 1,
            rate: 1.0,
            calls: 1,
            before_answer: 0,
            latency: Percentiles {
                count: 1,
                p50_ms,
                p99_ms: p50_ms * 2.0,
                max_ms: p50_ms * 3.0,
            },
            from_send: Percentiles {
                count: 1,
                p50_ms: p50_ms * 10.0,
                p99_ms: p50_ms * 20.0,
                max_ms: p50_ms * 30.0,
            },
        };
        let results = [
            result("kubeapp", 3.0),
            result("kube-runtime", 4.0),
            result("kubeapp", 1.0),
            result("kube-runtime", 8.0),
            result("kubeapp", 2.0),
        ];
        let medians = medians(&results);
        assert_eq!(
            medians,
            [
                ("kubeapp".to_string(), [2.0, 4.0, 6.0, 20.0, 40.0, 60.0]),
                (
                    "kube-runtime".to_string(),
                    [4.0, 8.0, 12.0, 40.0, 80.0, 120.0]
                )
            ]
        );
        assert!(
            table(&results)
                .contains("| kubeapp / kube-runtime | | | | | 0.50x | 0.50x | 0.50x | 0.50x |"),
            "{}",
            table(&results)
        );
    }

    #[test]
    fn an_update_no_call_saw_yet_is_unmatched() {
        let calls = [call("a", 1, 5)];
        let (a, z) = (update("a", 2, 2_000_000), update("z", 1, 2_000_000));
        assert_eq!(unmatched(&[a, z], &calls), 2);
    }
}
