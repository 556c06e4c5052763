//! Issue #32, defect 4, end to end: the opinionated reconciler adds its finalizer before the
//! first `apply` (kube-runtime's order), so an object deleted while its first `apply` runs is
//! held until `cleanup` ran, even when the operator stops before it got to the deletion (a
//! rolling update) and a new one takes over. With and without owner references on the children
//! (testenv runs no garbage collector: a child is only removed by `cleanup`).
//!
//! Each test: operator A's first `apply` of `slow` creates the child and waits; the test deletes
//! `slow` (it must stay, being deleted, held by our finalizer), stops A while the `apply` runs,
//! then lets it finish (the deletion's event is dropped with A's queue). Operator B starts:
//! `cleanup` runs once, the child and the object are gone. Then, in B, the same without a
//! restart: `cleanup` runs once after the `apply`.

mod call_log;
mod crd_env;

use std::sync::Arc;

use call_log::{CallLog, eventually, logs};
use crd_env::CrdEnv;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{CustomResource, Resource, ResourceExt};
use kubeapp::operator::{
    BoxError, CancellationToken, Context, ControllerConfig, ControllerError, InformerController,
    InformerOptions, OpinionatedOptions, ReconcileError, ReconcileResult, apply_cleanup,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "firstapply.kubeapp.dev",
    version = "v1",
    kind = "Parent",
    namespaced
)]
struct ParentSpec {
    size: u32,
}

const OURS: &str = "firstapply.kubeapp.dev/operator-parents-v1";
const MAX_PARALLEL_ENVS: usize = 2;

async fn start_env(prefix: &str) -> CrdEnv {
    static SLOTS: Semaphore = Semaphore::const_new(MAX_PARALLEL_ENVS);
    logs();
    CrdEnv::start::<Parent>(&SLOTS, prefix).await
}

/// The child `apply` keeps for `parent`: a ConfigMap of the same name with `-child`, owned by
/// the parent when `owned`.
fn child_of(parent: &Parent, owned: bool) -> ConfigMap {
    let owner = OwnerReference {
        api_version: Parent::api_version(&()).into_owned(),
        kind: Parent::kind(&()).into_owned(),
        name: parent.name_any(),
        uid: parent.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{}-child", parent.name_any())),
            labels: Some([("role".to_string(), "child".to_string())].into()),
            owner_references: owned.then(|| vec![owner]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// A running operator.
struct Operator {
    stop: CancellationToken,
    running: JoinHandle<Result<(), ControllerError>>,
}

impl Operator {
    /// Reconciles the env's parents with `apply_cleanup` through the opinionated wrapper:
    /// `apply` creates the child (`owns` it when `owned`), and for a parent named `slow*` then
    /// waits for a permit of `release`; `cleanup` deletes the child. Both log `<step> <name>`.
    async fn start(env: &CrdEnv, owned: bool, log: &CallLog, release: &Arc<Semaphore>) -> Self {
        let controller = InformerController::new(ControllerConfig::default());
        let parents = controller.kind(
            env.api::<Parent>(),
            watcher::Config::default(),
            InformerOptions::default(),
        );
        if owned {
            let _ = parents.owns(
                env.api::<ConfigMap>(),
                watcher::Config::default().labels("role=child"),
            );
        }
        let children = env.api::<ConfigMap>();
        let apply = {
            let (log, children, release) = (log.clone(), children.clone(), Arc::clone(release));
            move |parent: Arc<Parent>, _ctx: Context| {
                let (log, children, release) = (log.clone(), children.clone(), release.clone());
                async move {
                    let name = parent.name_any();
                    let child = child_of(&parent, owned);
                    match children.create(&PostParams::default(), &child).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 409 => {}
                        Err(error) => return Err(ReconcileError::new(error)),
                    }
                    log.push(format!("apply {name}"));
                    if name.starts_with("slow") {
                        release
                            .acquire()
                            .await
                            .map_err(|e| ReconcileError::new(Box::new(e) as BoxError))?
                            .forget();
                    }
                    Ok(ReconcileResult::done())
                }
            }
        };
        let cleanup = {
            let (log, children) = (log.clone(), children.clone());
            move |parent: Arc<Parent>, _ctx: Context| {
                let (log, children) = (log.clone(), children.clone());
                async move {
                    let name = parent.name_any();
                    match children
                        .delete(&format!("{name}-child"), &DeleteParams::default())
                        .await
                    {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(error) => return Err(ReconcileError::new(error)),
                    }
                    log.push(format!("cleanup {name}"));
                    Ok(ReconcileResult::done())
                }
            }
        };
        let _ = parents
            .apply_cleanup(apply_cleanup(apply, cleanup), OpinionatedOptions::default())
            .expect("finalizer name");
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move { controller.run(stop).await }
        });
        eventually("the operator synced", || controller.is_synced()).await;
        Self { stop, running }
    }

    /// Asks the operator to stop; `in_flight` runs (lets the handler in flight finish) before
    /// the stop is awaited.
    async fn stop_with(self, in_flight: impl FnOnce()) {
        self.stop.cancel();
        in_flight();
        self.running
            .await
            .expect("joined")
            .expect("stopped cleanly");
    }
}

fn parent(name: &str) -> Parent {
    Parent::new(name, ParentSpec { size: 1 })
}

/// Deletes `name` while its `apply` waits; it must stay, being deleted, held by our finalizer.
async fn delete_during_apply(parents: &Api<Parent>, name: &str) {
    parents
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let held = parents.get_opt(name).await.expect("read");
    assert!(
        held.as_ref().is_some_and(|p| {
            p.metadata.deletion_timestamp.is_some() && p.finalizers().iter().any(|f| f == OURS)
        }),
        "{name}, deleted while its first apply ran, must be held by our finalizer for its \
         cleanup; it is {held:?}"
    );
}

/// Waits until `name` and its child are gone.
async fn wait_gone(env: &CrdEnv, name: &str) {
    let (parents, children) = (env.api::<Parent>(), env.api::<ConfigMap>());
    let child = format!("{name}-child");
    let deadline = tokio::time::Instant::now() + call_log::WAIT;
    loop {
        let parent = parents.get_opt(name).await.expect("read parent");
        let left = children.get_opt(&child).await.expect("read child");
        if parent.is_none() && left.is_none() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not gone within {:?}: {name} {parent:?}, {child} {left:?}",
            call_log::WAIT
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn deletion_during_the_first_apply_gets_its_cleanup(prefix: &str, owned: bool) {
    let env = start_env(prefix).await;
    let parents = env.api::<Parent>();
    let log = CallLog::new();

    // Across a restart: A stops while the first apply of `slow` runs.
    let release_a = Arc::new(Semaphore::new(0));
    let a = Operator::start(&env, owned, &log, &release_a).await;
    parents
        .create(&PostParams::default(), &parent("slow"))
        .await
        .expect("create");
    log.wait_contains("apply slow").await;
    delete_during_apply(&parents, "slow").await;
    a.stop_with(|| release_a.add_permits(1)).await;
    let release_b = Arc::new(Semaphore::new(0));
    let b = Operator::start(&env, owned, &log, &release_b).await;
    log.wait_contains("cleanup slow").await;
    wait_gone(&env, "slow").await;
    assert_eq!(log.count("cleanup slow"), 1, "{:?}", log.entries());

    // Without a restart: the cleanup follows the apply.
    parents
        .create(&PostParams::default(), &parent("slow-inline"))
        .await
        .expect("create");
    log.wait_contains("apply slow-inline").await;
    delete_during_apply(&parents, "slow-inline").await;
    release_b.add_permits(1);
    log.wait_contains("cleanup slow-inline").await;
    wait_gone(&env, "slow-inline").await;
    let calls = log.of("slow-inline");
    assert_eq!(
        calls,
        ["apply slow-inline", "cleanup slow-inline"],
        "{:?}",
        log.entries()
    );
    b.stop_with(|| ()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_during_its_first_apply_an_object_with_owned_children_gets_cleanup() {
    deletion_during_the_first_apply_gets_its_cleanup("first-apply-owned", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_during_its_first_apply_an_object_with_plain_children_gets_cleanup() {
    deletion_during_the_first_apply_gets_its_cleanup("first-apply-plain", false).await;
}
