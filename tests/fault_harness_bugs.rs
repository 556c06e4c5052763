//! The fault harness finds what it claims to find: a small operator (`fault_bugs`: each
//! `Parent` renders ConfigMap children) run in the test process behind the harness's fault
//! proxy, in a sound variant and in four variants with one classic bug each (a second create
//! that is not idempotent with the first, a child re-created from a stale cache, a status
//! written from a stale copy, a cleanup dropped when the marked state is not observed).
//!
//! For each bug: the sound operator passes the plans the harness picks for the bug's scenario,
//! the buggy one is caught by them at the default budget (with the plan that catches it
//! named), and the bug is shown real by hand: a plain end-to-end check of the operator's
//! promise passes for the buggy variant without a fault, and with the fault that triggers it
//! injected directly it passes for the sound variant and fails for the buggy one (kubeapp's own
//! echo skipping and caches do not hide it).

mod fault_bugs;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kubeapp::prelude::*;
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::testing::{
    Budget, FaultHarness, FaultPlan, FaultProxy, OperatorUnderTest, Quiescence, ResourceKey,
    RunContext, RunningOperator, Scenario, Workload, WriteFault,
};

use fault_bugs::{InProcess, PARENT_LABEL, Parent, Variant};

async fn harness(env: &TestEnv, dir: &str) -> FaultHarness {
    FaultHarness::new(env.client(), env.dir().join(dir)).quiescence_timeout(Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sound_operator_passes_its_plans() {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Parent>().await.expect("CRD");
    let report = harness(&env, "sound")
        .await
        .run(&fault_bugs::two_children(), &InProcess(Variant::Sound))
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
        .run_plans(&fault_bugs::two_children(), &buggy, plans)
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
    let budget = Budget {
        plans: usize::try_from(number("FAULT_CATCH_PLANS", 24)).unwrap_or(24),
        time: Duration::from_secs(600),
    };
    let report = harness(&env, "budget")
        .await
        .seed(catch_seed())
        .budget(budget)
        .run(&fault_bugs::two_children(), &InProcess(Variant::TwoCreates))
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    assert!(
        !report.failures.is_empty(),
        "the harness's plans did not catch the two creates: {report}"
    );
}

/// `name`'s value as a number, else `default`.
fn number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The seed of the catch tests: `FAULT_CATCH_SEED`, else 1 (docs/fault-injection.md reports
/// the catch rate over seeds 1 to 10, measured with it).
fn catch_seed() -> u64 {
    number("FAULT_CATCH_SEED", 1)
}

/// Runs `scenario` at the default budget with the sound operator (which must pass) and with
/// `buggy` (which must be caught, by a difference that names `expected`).
async fn sound_passes_and_buggy_is_caught(scenario: Scenario, buggy: Variant, expected: &str) {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Parent>().await.expect("CRD");
    let harness = harness(&env, &format!("{buggy:?}"))
        .await
        .seed(catch_seed());
    let sound = harness
        .run(&scenario, &InProcess(Variant::Sound))
        .await
        .expect("the sound operator's fault-free run");
    eprintln!("{sound}");
    assert_eq!(
        sound.run,
        Budget::default().plans.min(sound.available),
        "{sound}"
    );
    sound.assert_passed();
    let report = harness
        .run(&scenario, &InProcess(buggy))
        .await
        .expect("the buggy operator's fault-free run");
    eprintln!("{report}");
    assert!(
        report.failures.iter().any(|failure| failure
            .differences
            .iter()
            .any(|difference| difference.contains(expected))),
        "the harness did not catch {buggy:?} at the default budget (no difference names \
         {expected:?}): {report}plans run: {:#?}",
        report.plans
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_created_again_from_a_stale_cache_is_caught() {
    sound_passes_and_buggy_is_caught(
        fault_bugs::create_then_change(),
        Variant::ChildFromStaleCache,
        "<generated>#2: present",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_written_from_a_stale_copy_is_caught() {
    sound_passes_and_buggy_is_caught(
        fault_bugs::note_then_drift(),
        Variant::StatusFromStaleCopy,
        "Parent/p1.status.note",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_dropped_when_the_marked_state_is_not_seen_is_caught() {
    sound_passes_and_buggy_is_caught(
        fault_bugs::marked_then_gone(),
        Variant::CleanupOnlyWhenMarked,
        "ConfigMap/p3-a: present",
    )
    .await;
}

/// An operator started behind a fault proxy of its own, in a namespace of its own, for a
/// check by hand.
struct ByHand {
    proxy: FaultProxy,
    running: Option<Box<dyn RunningOperator>>,
    quiescence: Quiescence,
    workload: Workload,
}

const BY_HAND_TIMEOUT: Duration = Duration::from_secs(30);

impl ByHand {
    /// Starts `variant` in a namespace named for the check (`prefix`), the variant and whether
    /// the fault is injected.
    async fn start(env: &TestEnv, variant: Variant, prefix: &str, fault: bool) -> Self {
        let name = format!("{prefix}-{variant:?}-{fault}").to_lowercase();
        eprintln!("by hand: {name}");
        let namespace = format!("by-hand-{name}");
        let mut object = k8s_openapi::api::core::v1::Namespace::default();
        object.metadata.name = Some(namespace.clone());
        Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client())
            .create(&PostParams::default(), &object)
            .await
            .expect("the namespace");
        let proxy = FaultProxy::start(env.client()).await.expect("the proxy");
        let dir = env.dir().join(&namespace);
        std::fs::create_dir_all(&dir).expect("the directory");
        let context = RunContext {
            kubeconfig: dir.join("kubeconfig"),
            client: proxy.client().expect("the proxied client"),
            namespace: namespace.clone(),
            process: 1,
            dir,
        };
        let running = InProcess(variant)
            .start(&context)
            .await
            .expect("the operator");
        let quiescence = Quiescence::new(env.client(), running.metrics_addr());
        let hand = Self {
            proxy,
            running: Some(running),
            quiescence,
            workload: Workload {
                client: env.client(),
                namespace,
            },
        };
        hand.settle_except(&[]).await;
        hand
    }

    /// Waits until the operator is quiescent on all but `stale`.
    async fn settle_except(&self, stale: &[ResourceKey]) {
        self.quiescence
            .wait_except(BY_HAND_TIMEOUT, stale)
            .await
            .unwrap_or_else(|error| panic!("{}: {error:?}", self.workload.namespace));
    }

    /// The plain check "parent `name` has its two children" (`-a` and `-b`), against the
    /// apiserver.
    async fn has_two_children(&self, name: &str) -> Result<(), String> {
        match self.children(name).await.len() {
            2 => Ok(()),
            n => Err(format!("{name} has {n} children, not two (-a and -b)")),
        }
    }

    /// The children of parent `name`, by name, as the apiserver holds them.
    async fn children(&self, name: &str) -> Vec<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.workload.client.clone(), &self.workload.namespace)
            .list(&ListParams::default().labels(&format!("{PARENT_LABEL}={name}")))
            .await
            .expect("the children")
            .items
    }

    async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.kill().await;
        }
    }
}

/// The plain check "a parent has its two children" after the answer to the operator's first
/// ConfigMap write (its first child's create, which landed) was lost.
async fn two_children_after_a_lost_answer(
    env: &TestEnv,
    variant: Variant,
    fault: bool,
) -> Result<(), String> {
    let hand = ByHand::start(env, variant, "lost", fault).await;
    if fault {
        let children = ResourceKey::of::<ConfigMap>();
        hand.proxy
            .fail_writes(Some(children), WriteFault::ResponseLost, 1);
    }
    fault_bugs::create_parents(&hand.workload, &["p1"], "v1", false)
        .await
        .expect("create");
    hand.settle_except(&[]).await;
    let checked = hand.has_two_children("p1").await;
    hand.stop().await;
    checked
}

/// The plain check "a parent has its two children" after the child kind's watch lagged while the
/// parent was created and changed.
async fn two_children_after_a_lagging_watch(
    env: &TestEnv,
    variant: Variant,
    fault: bool,
) -> Result<(), String> {
    let hand = ByHand::start(env, variant, "child", fault).await;
    let children = ResourceKey::of::<ConfigMap>();
    if fault {
        hand.proxy.lag(children.clone());
    }
    let w = &hand.workload;
    fault_bugs::create_parents(w, &["p1"], "v1", false)
        .await
        .expect("create");
    hand.settle_except(std::slice::from_ref(&children)).await;
    fault_bugs::set_value(w, &["p1"], "v2")
        .await
        .expect("change");
    hand.settle_except(std::slice::from_ref(&children)).await;
    if fault {
        hand.proxy.catch_up(children);
    }
    hand.settle_except(&[]).await;
    let checked = hand.has_two_children("p1").await;
    hand.stop().await;
    checked
}

/// The plain check "another writer's status field is kept" after the parent kind's watch was
/// withheld while the note was written and the child edited, then re-listed. (With a lagging
/// watch instead, the delivered note event may reconcile from a copy that has the note and
/// write it back: whether the clobber stays depends on timing. A re-list shows only the
/// latest state.)
async fn note_kept_after_a_withheld_watch(
    env: &TestEnv,
    variant: Variant,
    fault: bool,
) -> Result<(), String> {
    let hand = ByHand::start(env, variant, "note", fault).await;
    let w = &hand.workload;
    fault_bugs::create_parents(w, &["p1"], "v1", false)
        .await
        .expect("create");
    hand.settle_except(&[]).await;
    let parents = ResourceKey::of::<Parent>();
    if fault {
        hand.proxy.withhold(parents.clone());
    }
    fault_bugs::note(w, "p1").await.expect("note");
    hand.settle_except(std::slice::from_ref(&parents)).await;
    fault_bugs::edit_child(w, "p1-a").await.expect("edit");
    hand.settle_except(std::slice::from_ref(&parents)).await;
    if fault {
        hand.proxy.release(parents);
    }
    hand.settle_except(&[]).await;
    let p1 = Api::<Parent>::namespaced(w.client.clone(), &w.namespace)
        .get("p1")
        .await
        .expect("p1");
    hand.stop().await;
    match p1.status.and_then(|status| status.note) {
        Some(_) => Ok(()),
        None => Err("p1's status.note, set by another writer, is gone".to_owned()),
    }
}

/// The plain check "a deleted parent's children are gone" after the parent kind's watch was
/// withheld from its deletion (held by another finalizer) until it was gone, then re-listed.
async fn children_gone_after_an_unobserved_marked_state(
    env: &TestEnv,
    variant: Variant,
    fault: bool,
) -> Result<(), String> {
    let hand = ByHand::start(env, variant, "gone", fault).await;
    let w = &hand.workload;
    fault_bugs::create_parents(w, &["p1"], "v1", true)
        .await
        .expect("create");
    hand.settle_except(&[]).await;
    let parents = ResourceKey::of::<Parent>();
    if fault {
        hand.proxy.withhold(parents.clone());
    }
    Api::<Parent>::namespaced(w.client.clone(), &w.namespace)
        .delete("p1", &Default::default())
        .await
        .expect("delete");
    fault_bugs::release_hold(w, "p1").await.expect("let go");
    hand.settle_except(std::slice::from_ref(&parents)).await;
    if fault {
        hand.proxy.release(parents);
    }
    hand.settle_except(&[]).await;
    let left = hand.children("p1").await.len();
    hand.stop().await;
    match left {
        0 => Ok(()),
        n => Err(format!("{n} children of the deleted p1 are left")),
    }
}

/// The by-hand proof of `buggy`'s bug with `check`, a plain end-to-end check run as
/// `check(&env, variant, fault)`: the sound variant passes it with the fault, the buggy one
/// without it, and the buggy one fails it with the fault.
macro_rules! shown_by_hand {
    ($check:ident, $buggy:expr) => {{
        let env = TestEnv::start().await.expect("control plane");
        env.install_crd::<Parent>().await.expect("CRD");
        $check(&env, Variant::Sound, true)
            .await
            .expect("the sound operator passes the check with the fault");
        $check(&env, $buggy, false)
            .await
            .expect("without the fault, the buggy operator passes too");
        let buggy = $check(&env, $buggy, true).await;
        assert!(buggy.is_err(), "the bug did not show: {buggy:?}");
        eprintln!("{:?} by hand: {buggy:?}", $buggy);
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_hand_a_lost_answer_makes_the_two_creates_variant_leave_out_its_second_child() {
    shown_by_hand!(two_children_after_a_lost_answer, Variant::TwoCreates);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_hand_a_lagging_child_watch_makes_the_stale_cache_variant_create_a_second_child() {
    shown_by_hand!(
        two_children_after_a_lagging_watch,
        Variant::ChildFromStaleCache
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_hand_a_withheld_parent_watch_makes_the_stale_copy_variant_clobber_a_status_field() {
    shown_by_hand!(
        note_kept_after_a_withheld_watch,
        Variant::StatusFromStaleCopy
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_hand_an_unobserved_marked_state_makes_the_marked_only_variant_leave_children() {
    shown_by_hand!(
        children_gone_after_an_unobserved_marked_state,
        Variant::CleanupOnlyWhenMarked
    );
}
