//! The fault harness finds what it claims to find: a small operator (each `Parent` renders two
//! ConfigMaps, `<name>-a` and `<name>-b`) run in the test process behind the harness's fault
//! proxy, in a sound variant and in a variant with a classic bug. The sound one passes every
//! plan the harness runs; the buggy one is caught, with the plan that catches it named, in a
//! test that fails if the harness stops catching it.
//!
//! The bug: two creates that are not idempotent together. The handler creates `-a`, then `-b`,
//! and takes an `-a` that already exists for "done before". A crash right after the write of
//! `-a`, or an answer to it that is lost (the client retries, gets 409 AlreadyExists), leaves
//! `-b` missing for good, while every fault-free run and every happy-path test passes.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubeapp::prelude::*;
use kubeapp::runner::RunnerConfig;
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::testing::{
    BoxError, Budget, FaultHarness, FaultPlan, OperatorUnderTest, RunContext, RunningOperator,
    Scenario, WriteFault,
};

/// A parent of two ConfigMaps.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "faults.kubeapp.dev",
    version = "v1",
    kind = "Parent",
    namespaced
)]
pub struct ParentSpec {
    /// What both children hold.
    pub value: String,
}

const PARENT_LABEL: &str = "faults.kubeapp.dev/parent";

#[derive(Clone, Copy, Debug)]
enum Variant {
    /// Server-side apply of both children: idempotent.
    Sound,
    /// Create `-a`; if it exists, stop ("done before"); else create `-b`.
    TwoCreates,
}

fn child(parent: &Parent, suffix: &str) -> ConfigMap {
    let mut child = ConfigMap::default();
    child.metadata.name = Some(format!("{}-{suffix}", parent.name_any()));
    child.metadata.namespace = parent.namespace();
    child.metadata.labels = Some([(PARENT_LABEL.to_owned(), parent.name_any())].into());
    child.data = Some([("value".to_owned(), parent.spec.value.clone())].into());
    child
}

async fn reconcile(
    variant: Variant,
    request: ReconcileRequest<Parent>,
    client: kube::Client,
) -> Result<ReconcileResult, ReconcileError> {
    let parent = &request.object;
    let children: Api<ConfigMap> = Api::namespaced(client, &parent.namespace().unwrap_or_default());
    if request.action == ReconcileAction::Deleted {
        for suffix in ["a", "b"] {
            let name = format!("{}-{suffix}", parent.name_any());
            match children.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        return Ok(ReconcileResult::done());
    }
    match variant {
        Variant::Sound => {
            let params = PatchParams::apply("fault-harness-test").force();
            for suffix in ["a", "b"] {
                let child = child(parent, suffix);
                let name = child.name_any();
                children
                    .patch(&name, &params, &Patch::Apply(&child))
                    .await?;
            }
        }
        Variant::TwoCreates => {
            match children
                .create(&PostParams::default(), &child(parent, "a"))
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    return Ok(ReconcileResult::done());
                }
                other => {
                    other?;
                }
            }
            children
                .create(&PostParams::default(), &child(parent, "b"))
                .await?;
        }
    }
    Ok(ReconcileResult::done())
}

/// The operator, in the test process: a simple App under a Runner serving `/debug/kubeapp`.
struct InProcess(Variant);

struct Running {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

#[async_trait::async_trait]
impl OperatorUnderTest for InProcess {
    async fn start(&self, run: &RunContext) -> Result<Box<dyn RunningOperator>, BoxError> {
        let variant = self.0;
        let client = run.client.clone();
        let parents = ManagedKind::<Parent>::new()
            .reconcile_fn(move |request, _ctx| reconcile(variant, request, client.clone()));
        let runner = Runner::new(
            RunnerConfig::default().metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0))),
        )?;
        // The Runner's informers and metrics, so that its /debug/kubeapp reports the app's.
        let config = AppConfig::new("fault-harness-test")
            .namespace(Some(run.namespace.clone()))
            .informers(runner.informers().clone())
            .metrics(runner.metrics().clone())
            .managed_kind(parents);
        let app = SimpleApp::new(config, run.client.clone())?;
        let mut runner = runner.app(app);
        let addr = runner.bind().await?;
        let task = tokio::spawn(async move {
            let _ = runner.run_until(std::future::pending::<()>()).await;
        });
        Ok(Box::new(Running { addr, task }))
    }
}

#[async_trait::async_trait]
impl RunningOperator for Running {
    fn metrics_addr(&self) -> SocketAddr {
        self.addr
    }

    async fn kill(self: Box<Self>) {
        // As SIGKILL: no graceful stop, every connection dropped with the task.
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Three parents created, one updated, one deleted.
fn scenario() -> Scenario {
    Scenario::new("two-children")
        .step("create three", |workload| async move {
            let api: Api<Parent> = Api::namespaced(workload.client, &workload.namespace);
            for name in ["p1", "p2", "p3"] {
                let parent = Parent::new(name, ParentSpec { value: "v1".into() });
                api.create(&PostParams::default(), &parent).await?;
            }
            Ok(())
        })
        .step("delete one", |workload| async move {
            let api: Api<Parent> = Api::namespaced(workload.client, &workload.namespace);
            api.delete("p3", &DeleteParams::default()).await?;
            Ok(())
        })
        .observe::<Parent>(None)
        .observe::<ConfigMap>(Some(PARENT_LABEL))
}

async fn harness(env: &TestEnv, dir: &str) -> FaultHarness {
    FaultHarness::new(env.client(), env.dir().join(dir)).quiescence_timeout(Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sound_operator_passes_its_plans() {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Parent>().await.expect("CRD");
    let report = harness(&env, "sound")
        .await
        .run(&scenario(), &InProcess(Variant::Sound))
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    assert_eq!(report.run, Budget::default().plans, "{report}");
    report.assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_non_idempotent_creates_are_caught_with_a_reproducible_plan() {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Parent>().await.expect("CRD");
    let harness = harness(&env, "buggy").await;
    let buggy = InProcess(Variant::TwoCreates);
    // A crash right after a create of `-a` and a lost answer to it: the plans that catch the
    // bug. Which write that is depends on the order the parents are handled in, so both
    // kinds of plan are tried on each of the first writes; at least one must be caught.
    let plans = (1..=4)
        .flat_map(|write| {
            [
                FaultPlan::CrashAfterWrite(write),
                FaultPlan::FailWrite {
                    write,
                    fault: WriteFault::ResponseLost,
                },
            ]
        })
        .collect();
    let report = harness
        .run_plans(&scenario(), &buggy, plans)
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    let caught = report.failures;
    let shown: Vec<String> = caught
        .iter()
        .map(|failure| format!("{}: {}", failure.plan, failure.differences.join("; ")))
        .collect();
    assert!(
        caught.iter().any(|failure| failure
            .differences
            .iter()
            .any(|d| d.contains("-b: missing"))),
        "the harness did not catch the missing second child: {shown:?}"
    );
}

/// The harness's own choice of plans (seeded, 24 plans) catches the bug: the test above names
/// the plans; this one proves the budget's ordering reaches one. (At the default budget of 12
/// plans it caught the bug with seeds 1 to 10, docs/fault-injection.md "Measured"; but which
/// write creates `-a` depends on how the three parents' calls interleave, so the suite gives it
/// 24 plans, where a miss is out of reach. `FAULT_CATCH_SEED` and `FAULT_CATCH_PLANS` measure
/// it again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_choice_of_plans_catches_the_two_creates() {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Parent>().await.expect("CRD");
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let budget = Budget {
        plans: usize::try_from(number("FAULT_CATCH_PLANS", 24)).unwrap_or(24),
        time: Duration::from_secs(600),
    };
    let report = harness(&env, "budget")
        .await
        .seed(number("FAULT_CATCH_SEED", 1))
        .budget(budget)
        .run(&scenario(), &InProcess(Variant::TwoCreates))
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    assert!(
        !report.failures.is_empty(),
        "the harness's plans did not catch the two creates: {report}"
    );
}
