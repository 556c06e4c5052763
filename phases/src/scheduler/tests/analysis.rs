//! Analyses and gates on the fake apiserver, with a provider that returns chosen values: one
//! measurement per due interval recorded in `status.analysis`, the outcome deciding the phase,
//! an inconclusive value pausing the object until a gate, gates applied once and acknowledged by
//! removing their annotation. The end-to-end behaviour against a real apiserver and a real
//! Prometheus is `tests/example_canary.rs`.

use std::collections::VecDeque;

use async_trait::async_trait;

use super::*;
use crate::analysis::{Analysis, Comparison};
use crate::gate::GATE_ANNOTATION;
use crate::provider::{MetricError, MetricProvider};
use crate::status::PhaseStatus;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "test.kubeapp.dev",
    version = "v1",
    kind = "Rollout",
    namespaced,
    status = "PhaseStatus"
)]
struct RolloutSpec {
    min: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Stage {
    Preparing,
    Analysing,
    Passed,
    Rejected,
}

impl Phase for Stage {
    const ALL: &'static [Self] = &[
        Stage::Preparing,
        Stage::Analysing,
        Stage::Passed,
        Stage::Rejected,
    ];
    const INITIAL: Self = Stage::Preparing;
    fn name(&self) -> &'static str {
        match self {
            Stage::Preparing => "Preparing",
            Stage::Analysing => "Analysing",
            Stage::Passed => "Passed",
            Stage::Rejected => "Rejected",
        }
    }
    fn is_final(&self) -> bool {
        matches!(self, Stage::Passed | Stage::Rejected)
    }
}

/// Returns the values it was given, in order, and records the queries.
#[derive(Clone, Default)]
struct Values {
    next: Arc<Mutex<VecDeque<Option<f64>>>>,
    queries: Arc<Mutex<Vec<String>>>,
}

impl Values {
    fn of(values: &[Option<f64>]) -> Self {
        let this = Self::default();
        this.next.lock().expect("values").extend(values);
        this
    }

    fn queries(&self) -> usize {
        self.queries.lock().expect("queries").len()
    }
}

#[async_trait]
impl MetricProvider for Values {
    async fn measure(&self, query: &str) -> Result<Option<f64>, MetricError> {
        self.queries
            .lock()
            .expect("queries")
            .push(query.to_string());
        Ok(self.next.lock().expect("values").pop_front().flatten())
    }
}

/// Preparing -> Analysing (three measurements an hour apart, success `>= spec.min`, failure
/// `< 0.5`) -> Passed or Rejected; `abort` elsewhere goes to Rejected.
fn machine(values: &Values) -> PhaseScheduler<Rollout, Stage> {
    PhaseMachine::<Rollout, Stage>::new()
        .worker(Stage::Preparing, |_w, _c| async {
            Ok(Transition::to(Stage::Analysing))
        })
        .analysis(
            Stage::Analysing,
            |rollout: &Rollout| {
                Analysis::new("rate", "rate{app=\"{{metadata.name}}\"}")
                    .success(Comparison::at_least(rollout.spec.min))
                    .failure(Comparison::below(0.5))
                    .interval(Duration::from_secs(3600))
                    .count(3)
            },
            Stage::Passed,
            Stage::Rejected,
        )
        .metric_provider(values.clone())
        .abort_to(Stage::Rejected)
        .build()
        .expect("a valid machine")
}

fn rollout(annotations: Value) -> Value {
    json!({
        "apiVersion": "test.kubeapp.dev/v1", "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                     "resourceVersion": "1", "generation": 1, "annotations": annotations},
        "spec": {"min": 0.9},
    })
}

async fn reconcile(
    scheduler: &PhaseScheduler<Rollout, Stage>,
    server: &Arc<Server>,
) -> Result<ReconcileResult, ReconcileError> {
    let object = server.object.lock().expect("object").clone();
    let ctx = Context::detached(
        Arc::new(()),
        client(Arc::clone(server)),
        "phases-test",
        DynContext::new("rollouts", CancellationToken::new()),
    );
    let request = ReconcileRequest {
        action: ReconcileAction::Updated,
        object: Arc::new(serde_json::from_value::<Rollout>(object).expect("a Rollout")),
        state: ReconcileState::new(),
        cause: None,
    };
    scheduler.reconcile(request, &ctx).await
}

fn stored(server: &Server) -> Value {
    server.object.lock().expect("object").clone()
}

/// Moves the last measurement an hour back: the next one is due.
fn an_hour_passes(server: &Server) {
    let mut object = server.object.lock().expect("object");
    let measurements = object["status"]["analysis"]["measurements"]
        .as_array_mut()
        .expect("measurements");
    let last = measurements.last_mut().expect("one measurement");
    let time: k8s_openapi::jiff::Timestamp = last["time"]
        .as_str()
        .expect("time")
        .parse()
        .expect("a time");
    let earlier = time - k8s_openapi::jiff::SignedDuration::from_secs(3600);
    last["time"] = earlier.to_string().into();
}

fn condition(object: &Value, type_: &str) -> Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

fn gate(server: &Server, value: &str) {
    server.object.lock().expect("object")["metadata"]["annotations"][GATE_ANNOTATION] =
        value.into();
}

#[tokio::test]
async fn one_measurement_per_interval_is_recorded_and_count_successes_take_the_success_transition()
{
    let values = Values::of(&[Some(0.95), Some(0.97), Some(0.99)]);
    let scheduler = machine(&values);
    let server = Arc::new(Server::default());
    *server.object.lock().expect("object") = rollout(json!({}));
    let result = reconcile(&scheduler, &server).await.expect("measures");
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Analysing");
    assert_eq!(object["status"]["analysis"]["measured"], 1);
    assert_eq!(
        object["status"]["analysis"]["measurements"][0]["value"],
        0.95
    );
    assert_eq!(object["status"]["analysis"]["outcome"], "Running");
    assert_eq!(
        result.requeue_after,
        Some(Duration::from_secs(3600)),
        "the next measurement"
    );
    assert_eq!(
        values.queries.lock().expect("queries")[0],
        "rate{app=\"web\"}",
        "the template filled"
    );

    let result = reconcile(&scheduler, &server).await.expect("not due");
    assert_eq!(
        values.queries(),
        1,
        "no measurement before the interval passed"
    );
    assert!(
        result
            .requeue_after
            .is_some_and(|left| left <= Duration::from_secs(3600))
    );

    for measured in [2, 3] {
        an_hour_passes(&server);
        reconcile(&scheduler, &server).await.expect("measures");
        assert_eq!(stored(&server)["status"]["analysis"]["measured"], measured);
    }
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Passed");
    assert_eq!(object["status"]["analysis"]["outcome"], "Successful");
    assert_eq!(object["status"]["analysis"]["phase"], "Analysing");
}

#[tokio::test]
async fn a_failed_measurement_takes_the_failure_transition_and_no_value_is_no_measurement() {
    let values = Values::of(&[None, Some(0.2)]);
    let scheduler = machine(&values);
    let server = Arc::new(Server::default());
    *server.object.lock().expect("object") = rollout(json!({}));
    let result = reconcile(&scheduler, &server).await.expect("no value");
    assert_eq!(result.requeue_after, Some(Duration::from_secs(3600)));
    assert_eq!(
        stored(&server)["status"]["analysis"]["measured"],
        0,
        "nothing recorded"
    );
    reconcile(&scheduler, &server).await.expect("measures");
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Rejected");
    assert_eq!(object["status"]["analysis"]["outcome"], "Failed");
    assert_eq!(
        object["status"]["analysis"]["measurements"][0]["result"],
        "Failed"
    );
}

#[tokio::test]
async fn an_inconclusive_value_pauses_until_promote_which_takes_the_success_transition_once() {
    let values = Values::of(&[Some(0.7)]);
    let scheduler = machine(&values);
    let server = Arc::new(Server::default());
    *server.object.lock().expect("object") = rollout(json!({}));
    let result = reconcile(&scheduler, &server).await.expect("measures");
    assert_eq!(result.requeue_after, None, "paused: no requeue");
    let object = stored(&server);
    let paused = condition(&object, "Paused");
    assert_eq!(
        (paused["status"].as_str(), paused["reason"].as_str()),
        (Some("True"), Some("Inconclusive"))
    );
    assert!(
        paused["message"]
            .as_str()
            .is_some_and(|m| m.contains("rate = 0.7 is inconclusive")),
        "{paused}"
    );
    assert_eq!(object["status"]["analysis"]["outcome"], "Inconclusive");

    reconcile(&scheduler, &server).await.expect("rests");
    assert_eq!(values.queries(), 1, "a paused object measures nothing");

    gate(&server, "promote");
    let events = server.events();
    reconcile(&scheduler, &server).await.expect("promoted");
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Passed");
    assert_eq!(object["status"]["analysis"]["outcome"], "Promoted");
    assert_eq!(condition(&object, "Paused")["status"], "False");
    assert!(
        object["metadata"]["annotations"]
            .get(GATE_ANNOTATION)
            .is_none(),
        "acknowledged"
    );
    assert_eq!(server.events() - events, 2, "GateApplied and PhaseChanged");
    assert_eq!(values.queries(), 1);
}

#[tokio::test]
async fn pause_stops_an_object_where_it_is_and_resume_lets_it_go_on() {
    let values = Values::of(&[Some(0.99)]);
    let scheduler = machine(&values);
    let server = Arc::new(Server::default());
    *server.object.lock().expect("object") = rollout(json!({GATE_ANNOTATION: "pause"}));
    let result = reconcile(&scheduler, &server).await.expect("paused");
    assert_eq!(result.requeue_after, None);
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Preparing", "no worker ran");
    assert_eq!(condition(&object, "Paused")["reason"], "Gate");
    assert!(
        object["metadata"]["annotations"]
            .get(GATE_ANNOTATION)
            .is_none()
    );
    gate(&server, "resume");
    reconcile(&scheduler, &server).await.expect("resumed");
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Analysing");
    assert_eq!(condition(&object, "Paused")["status"], "False");
    assert_eq!(object["status"]["analysis"]["measured"], 1);
}

#[tokio::test]
async fn abort_takes_the_failure_transition_and_an_unknown_gate_is_ignored_with_a_warning() {
    let values = Values::of(&[Some(0.99)]);
    let scheduler = machine(&values);
    let server = Arc::new(Server::default());
    *server.object.lock().expect("object") = rollout(json!({GATE_ANNOTATION: "promot"}));
    reconcile(&scheduler, &server).await.expect("ignored");
    let object = stored(&server);
    assert!(
        object["metadata"]["annotations"]
            .get(GATE_ANNOTATION)
            .is_none(),
        "removed"
    );
    assert_eq!(
        object["status"]["analysis"]["measured"], 1,
        "it went on as if there were none"
    );
    gate(&server, "abort");
    reconcile(&scheduler, &server).await.expect("aborted");
    let object = stored(&server);
    assert_eq!(object["status"]["phase"], "Rejected");
    assert_eq!(object["status"]["analysis"]["outcome"], "Aborted");
    assert_eq!(
        object["status"]["analysis"]["measured"], 1,
        "the measurements stay visible"
    );
    gate(&server, "resume");
    let writes = server.status_writes();
    reconcile(&scheduler, &server).await.expect("ignored");
    assert_eq!(
        server.status_writes(),
        writes,
        "a final phase ignores gates"
    );
    assert!(
        stored(&server)["metadata"]["annotations"]
            .get(GATE_ANNOTATION)
            .is_none()
    );
}

#[test]
fn an_analysis_needs_a_provider_and_a_non_final_phase() {
    let no_provider = PhaseMachine::<Rollout, Stage>::new()
        .worker(Stage::Preparing, |_w, _c| async {
            Ok(Transition::to(Stage::Analysing))
        })
        .analysis(
            Stage::Analysing,
            |_: &Rollout| Analysis::new("m", "q"),
            Stage::Passed,
            Stage::Rejected,
        )
        .build()
        .err();
    assert_eq!(
        no_provider,
        Some(PhaseError::NoMetricProvider("Analysing".into()))
    );
    let on_final = PhaseMachine::<Rollout, Stage>::new()
        .worker(Stage::Preparing, |_w, _c| async {
            Ok(Transition::to(Stage::Analysing))
        })
        .analysis(
            Stage::Analysing,
            |_: &Rollout| Analysis::new("m", "q"),
            Stage::Passed,
            Stage::Rejected,
        )
        .analysis(
            Stage::Passed,
            |_: &Rollout| Analysis::new("m", "q"),
            Stage::Passed,
            Stage::Rejected,
        )
        .metric_provider(Values::default())
        .build()
        .err();
    assert_eq!(on_final, Some(PhaseError::AnalysisOnFinal("Passed".into())));
}
