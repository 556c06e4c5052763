//! The reconciler example (`examples/reconciler`, a child process) through `kubeapp::testing`'s
//! fault proxy, against a real kube-apiserver + etcd: whatever the proxy injects (withheld,
//! lagging and cut watches; conflicts, server errors and lost answers on its writes; a crash
//! right after one of its writes, with deletes while it is down), the operator ends where a
//! fault-free run ends: every Template's ConfigMap holds the Template's last data, every
//! status is Ready for the last generation, and every deleted Template's cleanup ran (its
//! ConfigMap gone, its finalizer removed).
//!
//! Each plan also asserts that its faults were injected (events dropped or held, writes
//! faulted, the halt reached), so a proxy that let everything through fails the test.
//!
//! Each phase ends when the operator is quiescent (`kubeapp::testing::Quiescence`: its caches
//! are what the apiserver lists and its queues are empty, read from its `/debug/kubeapp`), and
//! the end state is asserted then, once: no polling until it happens to match.
//!
//! Build the binary first (`cargo build --workspace --all-features --bins`; `scripts/test`
//! does). Every wait is a condition polled against a deadline.

mod example_support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::testing::{
    BoxError, Budget, FaultHarness, FaultPlan, FaultProxy, OperatorUnderTest, Quiescence,
    ResourceKey, RunContext, RunningOperator, Scenario, Workload, WriteFault, WriteOutcome,
};

use example_support::{Operator, eventually, reconciled, template, templates};

/// Templates per plan: enough that faults land in the middle of work on many objects.
const TEMPLATES: usize = 40;

/// What a fault-free run ends with: per Template, the round its data is from, or `None` once
/// deleted.
type Expected = BTreeMap<String, Option<u32>>;

fn name(index: usize) -> String {
    format!("t{index:03}")
}

fn data(name: &str, round: u32) -> BTreeMap<String, String> {
    BTreeMap::from([("value".to_owned(), format!("{name}-round-{round}"))])
}

/// One control plane, the fault proxy in front of it, and the operator behind the proxy.
struct Plan {
    env: TestEnv,
    ns: String,
    proxy: FaultProxy,
    kubeconfig: PathBuf,
    operator: Option<Operator>,
    processes: usize,
    templates: Api<DynamicObject>,
    config_maps: Api<ConfigMap>,
    expected: Expected,
}

impl Plan {
    /// Starts everything and creates the Templates; returns once the operator converged.
    async fn start(prefix: &str) -> Self {
        let env = TestEnv::start().await.expect("control plane");
        let ns = env.create_namespace(prefix).await.expect("namespace");
        let proxy = FaultProxy::start(env.client()).await.expect("fault proxy");
        let kubeconfig = env.dir().join("kubeconfig-through-the-fault-proxy");
        proxy.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let client = env.client();
        let mut plan = Self {
            templates: templates(&client, &ns, "v1"),
            config_maps: Api::namespaced(client, &ns),
            env,
            ns,
            proxy,
            kubeconfig,
            operator: None,
            processes: 0,
            expected: Expected::new(),
        };
        plan.start_operator();
        plan.operator
            .as_ref()
            .expect("started")
            .install_crd(&plan.env)
            .await;
        for index in 0..TEMPLATES {
            let name = name(index);
            let object = template("v1", &name, serde_json::json!({ "data": data(&name, 0) }));
            plan.templates
                .create(&PostParams::default(), &object)
                .await
                .expect("create a Template");
            plan.expected.insert(name, Some(0));
        }
        plan.converged("the first run").await;
        plan
    }

    /// Starts an operator process through the proxy.
    fn start_operator(&mut self) {
        self.processes += 1;
        let certs = self.env.dir().join(format!("certs-{}", self.processes));
        self.operator = Some(Operator::start_through(
            &self.env,
            &self.kubeconfig,
            &self.ns,
            &[],
            &certs,
            &format!("-{}", self.processes),
        ));
    }

    fn logs(&self) -> String {
        let writes: Vec<String> = self
            .proxy
            .writes()
            .iter()
            .map(ToString::to_string)
            .collect();
        let tail = writes.len().saturating_sub(30);
        format!(
            "{}\nthe operator's last writes through the proxy:\n{}",
            self.operator
                .as_ref()
                .map(Operator::logs)
                .unwrap_or_default(),
            writes[tail..].join("\n")
        )
    }

    /// Sets every remaining Template's data to `round` (a merge patch, straight to the
    /// apiserver: the workload is not the operator's).
    async fn update_all(&mut self, round: u32) {
        for (name, expected) in &mut self.expected {
            if expected.is_none() {
                continue;
            }
            let patch = serde_json::json!({ "spec": { "data": data(name, round) } });
            self.templates
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("update a Template");
            *expected = Some(round);
        }
    }

    /// Deletes `count` remaining Templates (their finalizer keeps them until the operator's
    /// cleanup).
    async fn delete_some(&mut self, count: usize) {
        let names: Vec<String> = self
            .expected
            .iter()
            .filter(|(_, round)| round.is_some())
            .map(|(name, _)| name.clone())
            .take(count)
            .collect();
        for name in names {
            self.templates
                .delete(&name, &DeleteParams::default())
                .await
                .expect("delete a Template");
            self.expected.insert(name, None);
        }
    }

    /// What still differs from the expected end state, or nothing.
    async fn differences(&self) -> Vec<String> {
        let (Ok(templates), Ok(config_maps)) = (
            self.templates.list(&Default::default()).await,
            self.config_maps.list(&Default::default()).await,
        ) else {
            return vec!["a list failed".to_owned()];
        };
        let templates: BTreeMap<String, DynamicObject> = templates
            .items
            .into_iter()
            .map(|object| (object.name_any(), object))
            .collect();
        let config_maps: BTreeMap<String, ConfigMap> = config_maps
            .items
            .into_iter()
            .map(|object| (object.name_any(), object))
            .collect();
        let mut differences = Vec::new();
        for (name, round) in &self.expected {
            match round {
                Some(round) => {
                    match config_maps.get(name).and_then(|cm| cm.data.clone()) {
                        Some(found) if found == data(name, *round) => {}
                        found => differences.push(format!(
                            "{name}: ConfigMap {found:?}, expected round {round}"
                        )),
                    }
                    if !templates.get(name).is_some_and(reconciled) {
                        differences.push(format!("{name}: not Ready for its last generation"));
                    }
                }
                None => {
                    if templates.contains_key(name) {
                        differences.push(format!("{name}: deleted, still there (finalizer)"));
                    }
                    if config_maps.contains_key(name) {
                        differences.push(format!("{name}: deleted, its ConfigMap remains"));
                    }
                }
            }
        }
        differences
    }

    /// Waits until the operator is quiescent (its caches are what the apiserver lists, its
    /// queues are empty), then asserts the expected end state: a quiescent operator has
    /// nothing left to do, so what differs then stays.
    async fn converged(&self, after: &str) {
        let operator = self.operator.as_ref().expect("an operator");
        let quiescence = Quiescence::new(self.env.client(), operator.metrics_addr);
        if let Err(error) = quiescence.wait(example_support::TIMEOUT).await {
            panic!("after {after}: {error}\n{}", self.logs());
        }
        let differences = self.differences().await;
        assert!(
            differences.is_empty(),
            "after {after}, quiescent but not in the end state:\n{}\n{}",
            differences.join("\n"),
            self.logs()
        );
    }
}

#[tokio::test]
async fn the_reconciler_converges_through_withheld_lagging_and_cut_watches() {
    let mut plan = Plan::start("fault-watches").await;
    let template_key = ResourceKey::new(example_support::GROUP, "templates");
    let config_map_key = ResourceKey::of::<ConfigMap>();

    // Unobserved states: two rounds of updates the operator never sees as they happen.
    let dropped_before = plan.proxy.dropped_events(&template_key);
    plan.proxy.withhold(template_key.clone());
    plan.update_all(1).await;
    plan.update_all(2).await;
    let withheld = 2 * TEMPLATES as u64;
    eventually(
        "both rounds withheld",
        || plan.logs(),
        || async {
            (plan.proxy.dropped_events(&template_key) >= dropped_before + withheld).then_some(())
        },
    )
    .await;
    // The operator is idle but its Template cache is stale: not quiescent.
    let quiescence = Quiescence::new(
        plan.env.client(),
        plan.operator.as_ref().expect("an operator").metrics_addr,
    );
    let unsettled = quiescence.unsettled().await;
    assert!(
        unsettled.iter().any(|reason| reason.contains("Template")),
        "a cache missing two rounds of updates counts as unsettled: {unsettled:?}"
    );
    plan.proxy.release(template_key.clone());
    plan.converged("withheld Template events and a re-list")
        .await;

    // A lagging owned kind: drift of the ConfigMaps and the operator's own writes to them are
    // held back while the Templates' events flow.
    plan.proxy.lag(config_map_key.clone());
    for index in 0..10 {
        let patch = serde_json::json!({ "data": { "value": "drift" } });
        plan.config_maps
            .patch(&name(index), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("drift a ConfigMap");
    }
    plan.update_all(3).await;
    eventually(
        "the drift held back",
        || plan.logs(),
        || async { (plan.proxy.held_events(&config_map_key) >= 10).then_some(()) },
    )
    .await;
    plan.proxy.catch_up(config_map_key.clone());
    plan.converged("a lagging ConfigMap watch").await;

    // Watches cut while updates go on.
    for round in 4..7 {
        plan.update_all(round).await;
        plan.proxy.cut_watches();
    }
    plan.converged("cut watches").await;
}

#[tokio::test]
async fn the_reconciler_converges_through_conflicts_server_errors_and_lost_answers() {
    let mut plan = Plan::start("fault-writes").await;
    let faults = [
        WriteFault::Conflict,
        WriteFault::InternalError,
        WriteFault::ResponseLost,
    ];
    for fault in faults {
        plan.proxy.fail_writes(None, fault, 15);
    }
    let before = plan.proxy.writes().len();
    plan.update_all(1).await;
    plan.delete_some(5).await;
    plan.converged("faulted writes").await;
    let faulted = plan.proxy.writes()[before..]
        .iter()
        .filter(|write| {
            matches!(
                write.outcome,
                WriteOutcome::Faulted(_) | WriteOutcome::Lost(_)
            )
        })
        .count();
    assert_eq!(
        faulted,
        45,
        "every rule was used up: the faults were injected\n{}",
        plan.logs()
    );
}

/// Where among a round's writes a crash lands.
enum Place {
    Early,
    Middle,
    Late,
}

#[tokio::test]
async fn the_reconciler_converges_after_a_crash_right_after_any_of_several_writes() {
    let mut plan = Plan::start("fault-crash").await;
    // Where the crashes land: early, in the middle and late among the writes of one round of
    // updates (two writes per Template: its ConfigMap and its status).
    for (round, place) in [(1, Place::Early), (2, Place::Middle), (3, Place::Late)] {
        let remaining = plan
            .expected
            .values()
            .filter(|round| round.is_some())
            .count() as u64;
        let per_round = 2 * remaining;
        let offset = match place {
            Place::Early => 1,
            Place::Middle => per_round / 2,
            Place::Late => per_round - 5,
        };
        let first = plan.proxy.writes().len() as u64;
        let crash_after = first + offset;
        plan.proxy.halt_after_write(crash_after);
        plan.update_all(round).await;
        if tokio::time::timeout(example_support::TIMEOUT, plan.proxy.halted())
            .await
            .is_err()
        {
            panic!("no halt after write {crash_after}\n{}", plan.logs());
        }
        // The operator is down: deletes and updates happen meanwhile.
        plan.delete_some(2).await;
        let mut operator = plan.operator.take().expect("an operator");
        operator.child.kill().await.expect("SIGKILL the operator");
        plan.proxy.resume();
        plan.start_operator();
        plan.converged(&format!("a crash after write {crash_after}"))
            .await;
        let halted = plan
            .proxy
            .writes()
            .into_iter()
            .find(|write| write.seq == crash_after)
            .expect("the halting write is logged");
        assert!(
            matches!(halted.outcome, WriteOutcome::Halted(_)),
            "{halted}"
        );
    }
}

/// The reconciler example as the harness starts it: a child process per run and per crash.
struct ReconcilerUnderTest<'a> {
    env: &'a TestEnv,
}

#[async_trait::async_trait]
impl OperatorUnderTest for ReconcilerUnderTest<'_> {
    async fn start(&self, run: &RunContext) -> Result<Box<dyn RunningOperator>, BoxError> {
        let certs = run.dir.join(format!("certs-{}", run.process));
        Ok(Box::new(ReconcilerProcess(Operator::start_through(
            self.env,
            &run.kubeconfig,
            &run.namespace,
            &[],
            &certs,
            &format!("-{}", run.process),
        ))))
    }
}

struct ReconcilerProcess(Operator);

#[async_trait::async_trait]
impl RunningOperator for ReconcilerProcess {
    fn metrics_addr(&self) -> std::net::SocketAddr {
        self.0.metrics_addr
    }

    fn logs(&self) -> String {
        self.0.logs()
    }

    async fn kill(mut self: Box<Self>) {
        let _ = self.0.child.kill().await;
    }
}

/// Creates, updates and deletes Templates in three steps; the oracle compares the Templates
/// and the ConfigMaps rendered from them.
fn template_scenario() -> Scenario {
    let templates = |workload: &Workload| templates(&workload.client, &workload.namespace, "v1");
    Scenario::new("reconciler")
        .step("create six", move |workload| async move {
            let api = templates(&workload);
            for index in 0..6 {
                let name = name(index);
                let object = template("v1", &name, serde_json::json!({ "data": data(&name, 0) }));
                api.create(&PostParams::default(), &object).await?;
            }
            Ok(())
        })
        .step("update three", move |workload| async move {
            let api = templates(&workload);
            for index in 0..3 {
                let name = name(index);
                let patch = serde_json::json!({ "spec": { "data": data(&name, 1) } });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            Ok(())
        })
        .step("delete two", move |workload| async move {
            let api = templates(&workload);
            for index in 4..6 {
                api.delete(&name(index), &DeleteParams::default()).await?;
            }
            Ok(())
        })
        .observe_resource(example_support::template_resource("v1"), None)
        .observe::<ConfigMap>(Some(TEMPLATE_LABEL))
}

/// The label the example puts on the ConfigMaps it renders.
const TEMPLATE_LABEL: &str = "reconciler.example.kubeapp.dev/template";

#[tokio::test]
async fn the_reconciler_passes_the_fault_plans_its_fault_free_run_suggests() {
    let env = TestEnv::start().await.expect("control plane");
    // The CRD, from the binary (its conversion webhook is never called: everything is v1).
    let installer = Operator::start(&env, "default", &[]);
    installer.install_crd(&env).await;
    drop(installer);
    let harness = FaultHarness::new(env.client(), env.dir().join("fault-plans"));
    let report = harness
        .run(&template_scenario(), &ReconcilerUnderTest { env: &env })
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    assert!(
        report.available > 30,
        "the fault-free run suggests plans: {report}"
    );
    assert_eq!(
        report.run,
        Budget::default().plans.min(report.available),
        "{report}"
    );
    report.assert_passed();
}

/// The apiserver restarted right after each step's writes, while the reconciler reacts to them
/// (its requests refused, its watches ended, a write under way perhaps landed unanswered): each
/// run ends as the fault-free one did. The plans are named (one per step), not budgeted.
#[tokio::test]
async fn the_reconciler_passes_apiserver_restarts_after_each_step() {
    let env = Arc::new(TestEnv::start().await.expect("control plane"));
    let installer = Operator::start(&env, "default", &[]);
    installer.install_crd(&env).await;
    drop(installer);
    let before = env.apiserver_pid().expect("kube-apiserver runs");
    let harness =
        FaultHarness::new(env.client(), env.dir().join("restarts")).restarts(Arc::clone(&env));
    let plans: Vec<FaultPlan> = (0..3)
        .map(|step| FaultPlan::RestartApiserver { step })
        .collect();
    let report = harness
        .run_plans(
            &template_scenario(),
            &ReconcilerUnderTest { env: &env },
            plans,
        )
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    assert_eq!(report.run, 3, "{report}");
    report.assert_passed();
    let after = env.apiserver_pid().expect("kube-apiserver runs again");
    assert_ne!(before, after, "the plans restarted kube-apiserver");
}
