//! The scheduler over a fake apiserver (a tower service that stores one object, answers status
//! patches by merging them into it, accepts Events and records every request): dispatch by
//! phase, empty phase = initial, final phases rest, unknown phases reported, status written only
//! on change, requeue intervals per phase, errors retried without a phase change, a stale cached
//! object not re-running a finished phase. The end-to-end behaviour against a real apiserver is
//! `tests/example_canary.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use kube::CustomResource;
use kubeapp_operator::handler::DynContext;
use kubeapp_operator::{CancellationToken, ReconcileRequest, ReconcileState};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::*;
use crate::worker::Transition;

mod analysis;
use crate::{InputKey, PhaseError, PhaseMachine};

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "test.kubeapp.dev",
    version = "v1",
    kind = "Job",
    namespaced,
    status = "JobStatus"
)]
struct JobSpec {
    fail_running: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct JobStatus {
    phase: Option<String>,
    observed_generation: Option<i64>,
    details: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    Pending,
    Running,
    Done,
}

impl Phase for Step {
    const ALL: &'static [Self] = &[Step::Pending, Step::Running, Step::Done];
    const INITIAL: Self = Step::Pending;
    fn name(&self) -> &'static str {
        match self {
            Step::Pending => "Pending",
            Step::Running => "Running",
            Step::Done => "Done",
        }
    }
    fn is_final(&self) -> bool {
        matches!(self, Step::Done)
    }
}

/// What the fake apiserver saw and stores.
#[derive(Default)]
struct Server {
    requests: Mutex<Vec<(String, String)>>,
    object: Mutex<Value>,
}

impl Server {
    fn status_writes(&self) -> usize {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|(method, path)| method == "PATCH" && path.ends_with("/status"))
            .count()
    }

    fn events(&self) -> usize {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|(method, path)| method == "POST" && path.contains("events"))
            .count()
    }
}

fn client(server: Arc<Server>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let server = Arc::clone(&server);
        async move {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let body = request.into_body().collect().await?.to_bytes();
            server
                .requests
                .lock()
                .expect("requests")
                .push((method.clone(), path.clone()));
            let answer = if method == "PATCH" && path.ends_with("/status") {
                let patch: Value = serde_json::from_slice(&body).expect("a JSON patch");
                let mut object = server.object.lock().expect("object");
                let version: u64 = object["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                object["metadata"]["resourceVersion"] = (version + 1).to_string().into();
                if !object["status"].is_object() {
                    object["status"] = json!({});
                }
                for (key, value) in patch["status"].as_object().expect("status") {
                    object["status"][key] = value.clone();
                }
                object.clone()
            } else if method == "PATCH" {
                // A JSON patch of the object itself (a gate's acknowledgement).
                let patch: json_patch::Patch = serde_json::from_slice(&body).expect("a JSON patch");
                let mut object = server.object.lock().expect("object");
                json_patch::patch(&mut object, &patch).expect("the patch applies");
                object.clone()
            } else {
                serde_json::from_slice(&body).unwrap_or(Value::Null)
            };
            let response = http::Response::builder()
                .status(if method == "POST" { 201 } else { 200 })
                .header("content-type", "application/json")
                .body(kube::client::Body::from(answer.to_string().into_bytes()))
                .expect("a response");
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
        }
    });
    kube::Client::new(service, "default")
}

fn job(phase: Option<&str>, fail_running: bool) -> Value {
    json!({
        "apiVersion": "test.kubeapp.dev/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "default", "uid": "u1",
                     "resourceVersion": "1", "generation": 1},
        "spec": {"fail_running": fail_running},
        "status": phase.map(|p| json!({"phase": p, "observedGeneration": 1})),
    })
}

/// A machine whose workers log their phase: Pending -> Running; Running stays (or fails).
fn machine(log: Arc<Mutex<Vec<&'static str>>>) -> PhaseScheduler<Job, Step> {
    let (first, second) = (Arc::clone(&log), log);
    PhaseMachine::<Job, Step>::new()
        .worker(Step::Pending, move |_work, _ctx| {
            first.lock().expect("log").push("Pending");
            async { Ok(Transition::to(Step::Running)) }
        })
        .worker(Step::Running, move |work: Work<Job, Step>, _ctx| {
            second.lock().expect("log").push("Running");
            let fail = work.object.spec.fail_running;
            async move {
                if fail {
                    Err(ReconcileError::new("the job's pod is not there yet"))
                } else {
                    Ok(Transition::to(Step::Running))
                }
            }
        })
        .interval(Step::Running, Duration::from_secs(7))
        .build()
        .expect("a valid machine")
}

async fn reconcile(
    scheduler: &PhaseScheduler<Job, Step>,
    server: &Arc<Server>,
    object: Value,
) -> Result<ReconcileResult, ReconcileError> {
    *server.object.lock().expect("object") = object.clone();
    let ctx = Context::detached(
        Arc::new(()),
        client(Arc::clone(server)),
        "phases-test",
        DynContext::new("jobs", CancellationToken::new()),
    );
    let request = ReconcileRequest {
        action: ReconcileAction::Updated,
        object: Arc::new(serde_json::from_value::<Job>(object).expect("a Job")),
        state: ReconcileState::new(),
        cause: None,
    };
    scheduler.reconcile(request, &ctx).await
}

#[tokio::test]
async fn an_empty_phase_is_the_initial_one_and_a_transition_runs_the_next_phase_at_once() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduler = machine(Arc::clone(&log));
    let server = Arc::new(Server::default());
    let result = reconcile(&scheduler, &server, job(None, false))
        .await
        .expect("works");
    assert_eq!(*log.lock().expect("log"), ["Pending", "Running"]);
    assert_eq!(
        result.requeue_after,
        Some(Duration::from_secs(7)),
        "Running did not move: worked again after its own interval"
    );
    assert_eq!(
        server.status_writes(),
        1,
        "one transition, one status write"
    );
    assert_eq!(server.events(), 1, "one PhaseChanged Event");
    let stored = server.object.lock().expect("object").clone();
    assert_eq!(stored["status"]["phase"], "Running");
    assert_eq!(stored["status"]["observedGeneration"], 1);
}

#[tokio::test]
async fn a_stale_cached_object_does_not_rerun_a_finished_phase() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduler = machine(Arc::clone(&log));
    let server = Arc::new(Server::default());
    reconcile(&scheduler, &server, job(None, false))
        .await
        .expect("works");
    log.lock().expect("log").clear();
    // The cache still has the object from before our status write (no phase yet).
    reconcile(&scheduler, &server, job(None, false))
        .await
        .expect("works");
    assert_eq!(*log.lock().expect("log"), ["Running"], "Pending ran once");
}

#[tokio::test]
async fn a_final_phase_rests_and_an_unchanged_status_is_not_written() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduler = machine(Arc::clone(&log));
    let server = Arc::new(Server::default());
    let result = reconcile(&scheduler, &server, job(Some("Done"), false))
        .await
        .expect("rests");
    assert_eq!(result.requeue_after, None);
    assert!(log.lock().expect("log").is_empty());
    assert!(server.requests.lock().expect("requests").is_empty());

    // This Job's status type has no `conditions`: the machine writes no Ready condition, which
    // the apiserver would drop and the next reconcile would write again.
    let result = reconcile(&scheduler, &server, job(Some("Running"), false))
        .await
        .expect("works");
    assert_eq!(*log.lock().expect("log"), ["Running"]);
    assert_eq!(result.requeue_after, Some(Duration::from_secs(7)));
    assert_eq!(
        server.status_writes(),
        0,
        "same phase and generation: no write"
    );
}

#[tokio::test]
async fn a_worker_error_is_retried_by_the_controller_without_a_phase_change() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduler = machine(Arc::clone(&log));
    let server = Arc::new(Server::default());
    let error = reconcile(&scheduler, &server, job(Some("Running"), true))
        .await
        .expect_err("the worker failed");
    assert!(!error.terminal, "retried by the controller's policy");
    assert_eq!(server.status_writes(), 0);
}

#[tokio::test]
async fn an_unknown_phase_is_a_condition_and_a_terminal_error() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduler = machine(Arc::clone(&log));
    let server = Arc::new(Server::default());
    let error = reconcile(&scheduler, &server, job(Some("Dancing"), false))
        .await
        .expect_err("unknown phase");
    assert!(error.terminal, "not retried: a retry cannot fix it");
    assert!(error.to_string().contains("\"Dancing\""), "{error}");
    assert!(log.lock().expect("log").is_empty(), "no worker ran");
    let stored = server.object.lock().expect("object").clone();
    assert_eq!(stored["status"]["conditions"][0]["type"], "PhaseKnown");
    assert_eq!(stored["status"]["conditions"][0]["status"], "False");
}

#[test]
fn a_machine_without_a_worker_for_every_non_final_phase_is_refused() {
    let missing = PhaseMachine::<Job, Step>::new()
        .worker(Step::Pending, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .build()
        .err();
    assert_eq!(missing, Some(PhaseError::MissingWorker("Running".into())));
    let on_final = PhaseMachine::<Job, Step>::new()
        .worker(Step::Pending, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .worker(Step::Running, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .worker(Step::Done, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .build()
        .err();
    assert_eq!(on_final, Some(PhaseError::WorkerOnFinal("Done".into())));
}

/// Two inputs of one type on one phase: two keys, two names.
const FIRST: InputKey<u32> = InputKey::new("first");
const SECOND: InputKey<u32> = InputKey::new("second");

#[tokio::test]
async fn two_inputs_of_one_type_on_one_phase_both_reach_the_worker() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let scheduler = PhaseMachine::<Job, Step>::new()
        .input(Step::Pending, FIRST, |_o, _c| async { Ok(1) })
        .input(Step::Pending, SECOND, |_o, _c| async { Ok(2) })
        .worker(Step::Pending, move |work: Work<Job, Step>, _ctx| {
            let values = [FIRST, SECOND].map(|key| work.inputs.get(key).copied());
            record.lock().expect("seen").extend(values);
            async { Ok(Transition::to(Step::Done)) }
        })
        .worker(Step::Running, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .build()
        .expect("a valid machine");
    let server = Arc::new(Server::default());
    reconcile(&scheduler, &server, job(None, false))
        .await
        .expect("reconciled");
    let seen: Vec<u32> = std::mem::take(&mut *seen.lock().expect("seen"))
        .into_iter()
        .map(|value| value.expect("a declared input"))
        .collect();
    assert_eq!(seen, vec![1, 2], "both inputs, each under its own name");
}

#[test]
fn an_input_name_declared_twice_on_one_phase_is_refused_at_build() {
    let again: InputKey<String> = InputKey::new("first");
    let duplicate = PhaseMachine::<Job, Step>::new()
        .input(Step::Running, FIRST, |_o, _c| async { Ok(1) })
        .input(Step::Running, again, |_o, _c| async { Ok(String::new()) })
        .worker(Step::Pending, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .worker(Step::Running, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .build()
        .err()
        .expect("refused");
    assert_eq!(
        duplicate.to_string(),
        "the input \"first\" is declared twice on phase Running"
    );
    // The same name on two phases is two inputs.
    let two_phases = PhaseMachine::<Job, Step>::new()
        .input(Step::Pending, FIRST, |_o, _c| async { Ok(1) })
        .input(Step::Running, FIRST, |_o, _c| async { Ok(1) })
        .worker(Step::Pending, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .worker(Step::Running, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .build();
    assert!(two_phases.is_ok());
}

#[test]
fn metrics_in_counts_into_the_registry_under_its_prefix() {
    let registry = kubeapp_operator::MetricsRegistry::new(Some("canary")).expect("registry");
    let machine = PhaseMachine::<Job, Step>::new()
        .metrics_in(&registry)
        .expect("a fresh registry");
    let metrics = machine.metrics.as_ref().expect("metrics set");
    metrics.moved("Job", None, Some("Running"));
    // The registry's own set: the machine counts into the same series.
    let set = registry
        .set::<crate::PhaseMetrics>()
        .expect("registered once");
    set.moved("Job", None, Some("Running"));
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.registry().gather())
        .expect("encode");
    assert!(
        text.contains("canary_phase_objects{kind=\"Job\",phase=\"Running\"} 2"),
        "{text}"
    );
}
