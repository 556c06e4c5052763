//! End-to-end tests of the finalizer names (kubeapp issue #12, defect 2) against a real
//! kube-apiserver + etcd: the default names are qualified (core kinds accept them), objects
//! carrying the unqualified names of earlier releases are recognised, handled and upgraded, and
//! invalid names are refused when a wrapper is built.

mod call_log;

use call_log::{CallLog, WAIT, logs, wait_finalizers};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, Resource, ResourceExt};
use kubeapp::operator::erased::DynReconcilerFn;
use kubeapp::operator::erased::DynWatcherFns;
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::opinionated::{FinalizerNameError, OpinionatedOptions};
use kubeapp::operator::{
    CancellationToken, ControllerConfig, Informer, InformerController, OpinionatedReconciler,
    OpinionatedWatcher, ReconcileResult, RetryPolicy,
};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

/// A custom kind, for the legacy names (kube-apiserver refuses them on core kinds).
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "names.kubeapp.dev",
    version = "v1",
    kind = "Gizmo",
    namespaced
)]
struct GizmoSpec {
    size: i32,
}

const GIZMO_OURS: &str = "names.kubeapp.dev/operator-gizmos-v1";
const GIZMO_LEGACY: &str = "operator.v1.Gizmo.names.kubeapp.dev";
const GIZMO_LEGACY_WIP: &str = "wip.v1.Gizmo.names.kubeapp.dev";
const CM_OURS: &str = "core.kubeapp.dev/operator-configmaps-v1";

/// A watcher of `K` that logs `add|update|delete|sync {name}`.
fn logging_watcher<K: Resource + serde::Serialize + Send + Sync + std::fmt::Debug + 'static>(
    log: &CallLog,
) -> DynWatcherFns<K> {
    let (add, update, delete, sync) = (log.clone(), log.clone(), log.clone(), log.clone());
    DynWatcherFns::new()
        .on_add(move |o: Arc<K>, _| {
            add.push(format!("add {}", o.meta().name.clone().unwrap_or_default()));
            async { Ok(()) }
        })
        .on_update(move |_, o: Arc<K>, _| {
            update.push(format!(
                "update {}",
                o.meta().name.clone().unwrap_or_default()
            ));
            async { Ok(()) }
        })
        .on_delete(move |o: Arc<K>, _| {
            delete.push(format!(
                "delete {}",
                o.meta().name.clone().unwrap_or_default()
            ));
            async { Ok(()) }
        })
        .on_sync(move |o: Arc<K>, _| {
            sync.push(format!(
                "sync {}",
                o.meta().name.clone().unwrap_or_default()
            ));
            async { Ok(()) }
        })
}

/// A reconciler of `K` that logs `{action} {name}`.
fn logging_reconciler<K>(log: &CallLog) -> impl kubeapp::operator::erased::DynReconciler
where
    K: Resource + serde::Serialize + Send + Sync + std::fmt::Debug + 'static,
{
    let log = log.clone();
    DynReconcilerFn::<K, _>::new(move |request, _ctx| {
        let name = request.object.meta().name.clone().unwrap_or_default();
        log.push(format!("{} {name}", request.action));
        async { Ok(ReconcileResult::done()) }
    })
}

/// A running controller, stopped by [`Operator::stop`].
struct Operator {
    stop: CancellationToken,
    running: JoinHandle<()>,
}

impl Operator {
    async fn start(controller: InformerController) -> Self {
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move {
                controller
                    .run(stop)
                    .await
                    .expect("the controller runs once")
            }
        });
        for (kind, flag) in controller.synced_flags() {
            tokio::time::timeout(WAIT, flag.wait())
                .await
                .unwrap_or_else(|_| panic!("informer {kind} never synced"));
        }
        Self { stop, running }
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.running)
            .await
            .expect("the controller stops in time")
            .expect("the controller task does not panic");
    }
}

fn config() -> ControllerConfig {
    ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_millis(100), 30))
        .shutdown_grace(Duration::from_secs(5))
}

async fn delete_and_wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let uid = api.get(name).await.expect("exists").meta().uid.clone();
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(api, name, uid.as_deref().unwrap_or_default()).await;
}

async fn wait_gone<K>(api: &Api<K>, name: &str, uid: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let gone = tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, conditions::is_deleted(uid)),
    )
    .await;
    if !matches!(gone, Ok(Ok(_))) {
        let now = api.get_opt(name).await.ok().flatten();
        panic!(
            "{name} still exists after {WAIT:?}; finalizers: {:?}",
            now.map(|o| o.meta().finalizers.clone())
        );
    }
}

fn configmap(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm
}

#[tokio::test]
async fn default_names_let_an_opinionated_watcher_and_reconciler_add_and_delete_a_configmap() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    let watched = env.create_namespace("watched").await.expect("namespace");
    let reconciled = env.create_namespace("reconciled").await.expect("namespace");
    let client = env.client();
    let (watch_log, reconcile_log) = (CallLog::new(), CallLog::new());

    let controller = InformerController::new(config());
    for (key, ns) in [("watched", &watched), ("reconciled", &reconciled)] {
        let options = ListWatchOptions::default().namespace(ns);
        controller
            .erased()
            .add_informer(key, Informer::new::<ConfigMap>(client.clone(), options));
    }
    let watcher = OpinionatedWatcher::for_kind::<ConfigMap>(
        client.clone(),
        logging_watcher::<ConfigMap>(&watch_log),
        OpinionatedOptions::default(),
    )
    .expect("the default names are valid");
    assert_eq!(watcher.finalizers().finalizer(), CM_OURS);
    controller.erased().add_watcher("watched", watcher);
    let reconciler = OpinionatedReconciler::for_kind::<ConfigMap>(
        client.clone(),
        logging_reconciler::<ConfigMap>(&reconcile_log),
        OpinionatedOptions::default(),
    )
    .expect("the default names are valid");
    assert_eq!(reconciler.finalizer(), CM_OURS);
    controller.erased().add_reconciler("reconciled", reconciler);
    let operator = Operator::start(controller).await;

    for (ns, log) in [(&watched, &watch_log), (&reconciled, &reconcile_log)] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.create(&PostParams::default(), &configmap("cm"))
            .await
            .expect("create");
        // kube-apiserver answers an unqualified finalizer on a ConfigMap with 422: the add
        // would never complete and the finalizer never appear.
        wait_finalizers(&api, "cm", &[CM_OURS]).await;
        delete_and_wait_gone(&api, "cm").await;
        let (added, deleted) = if ns == &watched {
            ("add cm", "delete cm")
        } else {
            ("Created cm", "Deleted cm")
        };
        log.wait_contains(added).await;
        log.wait_contains(deleted).await;
    }
    operator.stop().await;
}

fn gizmo(name: &str, finalizers: &[&str]) -> Gizmo {
    let mut g = Gizmo::new(name, GizmoSpec { size: 1 });
    g.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_string()).collect());
    g
}

#[tokio::test]
async fn objects_with_the_old_default_names_are_synced_upgraded_and_their_deletes_handled() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Gizmo>().await.expect("CRD");
    let watched = env.create_namespace("watched").await.expect("namespace");
    let reconciled = env.create_namespace("reconciled").await.expect("namespace");
    let client = env.client();
    let (watch_log, reconcile_log) = (CallLog::new(), CallLog::new());
    let watched_api: Api<Gizmo> = Api::namespaced(client.clone(), &watched);
    let reconciled_api: Api<Gizmo> = Api::namespaced(client.clone(), &reconciled);

    // What an earlier release left behind: objects it handled (its finalizer), one whose add was
    // in progress (its in-progress finalizer), and deletions it did not get to before it stopped.
    for api in [&watched_api, &reconciled_api] {
        for (name, finalizer) in [("kept", GIZMO_LEGACY), ("deleted", GIZMO_LEGACY)] {
            api.create(&PostParams::default(), &gizmo(name, &[finalizer]))
                .await
                .expect("create with the old finalizer");
        }
        api.delete("deleted", &DeleteParams::default())
            .await
            .expect("delete while the operator is down");
    }
    watched_api
        .create(
            &PostParams::default(),
            &gizmo("wip-deleted", &[GIZMO_LEGACY_WIP]),
        )
        .await
        .expect("create with the old in-progress finalizer");
    watched_api
        .delete("wip-deleted", &DeleteParams::default())
        .await
        .expect("delete while the operator is down");

    let uid = |api: &Api<Gizmo>, name: &'static str| {
        let api = api.clone();
        async move { api.get(name).await.expect("held").uid().expect("a UID") }
    };
    let held = [
        (
            &watched_api,
            &watch_log,
            "delete deleted",
            uid(&watched_api, "deleted").await,
        ),
        (
            &watched_api,
            &watch_log,
            "delete wip-deleted",
            uid(&watched_api, "wip-deleted").await,
        ),
        (
            &reconciled_api,
            &reconcile_log,
            "Deleted deleted",
            uid(&reconciled_api, "deleted").await,
        ),
    ];

    // The upgraded operator, with the new (default) names.
    let controller = InformerController::new(config());
    for (key, ns) in [("watched", &watched), ("reconciled", &reconciled)] {
        let options = ListWatchOptions::default().namespace(ns);
        controller
            .erased()
            .add_informer(key, Informer::new::<Gizmo>(client.clone(), options));
    }
    let watcher = OpinionatedWatcher::for_kind::<Gizmo>(
        client.clone(),
        logging_watcher::<Gizmo>(&watch_log),
        OpinionatedOptions::default(),
    )
    .expect("valid names");
    controller.erased().add_watcher("watched", watcher);
    let reconciler = OpinionatedReconciler::for_kind::<Gizmo>(
        client.clone(),
        logging_reconciler::<Gizmo>(&reconcile_log),
        OpinionatedOptions::default(),
    )
    .expect("valid names");
    controller.erased().add_reconciler("reconciled", reconciler);
    let operator = Operator::start(controller).await;

    // Deletions held by the old names are handled and released.
    for (api, log, entry, uid) in held {
        log.wait_contains(entry).await;
        let name = entry.split_once(' ').map(|(_, n)| n).unwrap_or_default();
        wait_gone(api, name, &uid).await;
    }
    // Handled objects are synced (not added again) and their old name is replaced by the new.
    watch_log.wait_contains("sync kept").await;
    reconcile_log.wait_contains("Resynced kept").await;
    for api in [&watched_api, &reconciled_api] {
        wait_finalizers(api, "kept", &[GIZMO_OURS]).await;
    }
    assert_eq!(watch_log.count("add kept"), 0, "handled before: not added");
    assert_eq!(reconcile_log.count("Created kept"), 0, "handled before");

    // And their deletion after the upgrade reaches the handlers.
    for (api, log, entry) in [
        (&watched_api, &watch_log, "delete kept"),
        (&reconciled_api, &reconcile_log, "Deleted kept"),
    ] {
        delete_and_wait_gone(api, "kept").await;
        log.wait_contains(entry).await;
    }
    operator.stop().await;
}

#[tokio::test]
async fn invalid_finalizer_names_are_refused_when_a_wrapper_is_built_naming_them() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
    let client = kube::Client::try_from(config).expect("a client (never used)");
    let err = OpinionatedWatcher::for_kind::<ConfigMap>(
        client.clone(),
        DynWatcherFns::<ConfigMap>::new(),
        OpinionatedOptions::default().finalizer("my-finalizer"),
    )
    .expect_err("an unqualified name");
    assert!(
        matches!(err, FinalizerNameError::MissingPrefix { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("`my-finalizer`"), "{err}");

    let long = format!("example.dev/{}", "x".repeat(64));
    let err = OpinionatedWatcher::for_kind::<ConfigMap>(
        client.clone(),
        DynWatcherFns::<ConfigMap>::new(),
        OpinionatedOptions::default().in_progress_finalizer(long.clone()),
    )
    .expect_err("a name part of 64 characters");
    assert!(err.to_string().contains(&long), "{err}");
    assert!(err.to_string().contains("64"), "{err}");

    let err = OpinionatedReconciler::for_kind::<ConfigMap>(
        client,
        logging_reconciler::<ConfigMap>(&CallLog::new()),
        OpinionatedOptions::default().finalizer("Example.dev/finalizer"),
    )
    .expect_err("an uppercase prefix");
    assert!(
        matches!(err, FinalizerNameError::InvalidPrefix { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("Example.dev/finalizer"), "{err}");
}
