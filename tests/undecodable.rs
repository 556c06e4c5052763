//! End-to-end tests of objects without a decodable state (kubeapp issue #12, defect 4, as amended
//! by issue #32) against a real kube-apiserver + etcd: a custom object that carries the
//! opinionated watcher's and reconciler's finalizers (handled by an earlier run of the operator)
//! but does not deserialize into the Rust type in this run is deleted. No typed handler can be
//! given it, so: with a raw hook the hook gets it and it disappears; without one it stays held,
//! with a Warning Event and a metric; with the explicit opt-in it is released without a handler
//! call. (An object this run saw decodable reaches the wrapped handler's `delete` with its last
//! decodable state instead: `tests/undecodable_transitions.rs`.)

mod call_log;

use call_log::{CallLog, WAIT, logs};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::erased::DynReconcilerFn;
use kubeapp::operator::erased::DynWatcherFns;
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::opinionated::{FinalizerMetrics, OpinionatedOptions};
use kubeapp::operator::{
    CancellationToken, ControllerConfig, Informer, InformerController, OpinionatedReconciler,
    OpinionatedWatcher, ReconcileResult, RetryPolicy,
};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const WATCHER_FINALIZER: &str = "undecodable.kubeapp.dev/operator-things-v1";
const RECONCILER_FINALIZER: &str = "undecodable.kubeapp.dev/reconciler";

/// The Rust type wants an integer; the stored schema accepts anything in `spec`
/// (`TestEnv::install_crd_with_open_spec`).
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "undecodable.kubeapp.dev",
    version = "v1",
    kind = "Thing",
    namespaced
)]
struct ThingSpec {
    count: i64,
}

/// The three ways an undecodable deletion can be configured.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    Hook,
    Held,
    Release,
}

fn options(
    setup: Setup,
    log: &CallLog,
    who: &'static str,
    metrics: &FinalizerMetrics,
) -> OpinionatedOptions {
    let options = OpinionatedOptions::default().metrics(metrics.clone());
    match setup {
        Setup::Hook => {
            let log = log.clone();
            options.on_undecodable_delete(move |_ctx, object| {
                let wants_integer = object.error().contains("expected i64");
                log.push(format!(
                    "{who}-hook {} {wants_integer}",
                    object.raw().name_any()
                ));
                async { Ok(()) }
            })
        }
        Setup::Held => options,
        Setup::Release => options.release_undecodable_without_handler(),
    }
}

fn add_handlers(
    controller: &InformerController,
    client: &kube::Client,
    key: &str,
    setup: Setup,
    log: &CallLog,
    metrics: &FinalizerMetrics,
) {
    let (add, update, delete, sync) = (log.clone(), log.clone(), log.clone(), log.clone());
    let typed = DynWatcherFns::<Thing>::new()
        .on_add(move |t, _| {
            add.push(format!("add {}", t.name_any()));
            async { Ok(()) }
        })
        .on_update(move |_, t, _| {
            update.push(format!("update {}", t.name_any()));
            async { Ok(()) }
        })
        .on_delete(move |t, _| {
            delete.push(format!("delete {}", t.name_any()));
            async { Ok(()) }
        })
        .on_sync(move |t, _| {
            sync.push(format!("sync {}", t.name_any()));
            async { Ok(()) }
        });
    let watcher = OpinionatedWatcher::for_kind::<Thing>(
        client.clone(),
        typed,
        options(setup, log, "watcher", metrics),
    )
    .expect("valid names");
    assert_eq!(watcher.finalizers().finalizer(), WATCHER_FINALIZER);
    controller.erased().add_watcher(key, watcher);
    let reconcile_log = log.clone();
    let reconciler = DynReconcilerFn::<Thing, _>::new(move |request, _ctx| {
        reconcile_log.push(format!("{} {}", request.action, request.object.name_any()));
        async { Ok(ReconcileResult::done()) }
    });
    let reconciler = OpinionatedReconciler::for_kind::<Thing>(
        client.clone(),
        reconciler,
        options(setup, log, "reconciler", metrics).finalizer(RECONCILER_FINALIZER),
    )
    .expect("valid names");
    controller.erased().add_reconciler(key, reconciler);
}

/// Polls `check` (events and counters cannot be subscribed to here) until it holds.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let polled = tokio::time::timeout(WAIT, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "{what}: not within {WAIT:?}");
}

async fn warning_reasons(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    list.items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test]
async fn an_object_that_never_decoded_is_handed_to_the_hook_held_with_a_warning_or_released_on_opt_in()
 {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd_with_open_spec::<Thing>()
        .await
        .expect("CRD");
    let client = env.client();
    let controller = InformerController::new(
        ControllerConfig::default()
            .retry_policy(RetryPolicy::exponential(Duration::from_millis(100), 30))
            .shutdown_grace(Duration::from_secs(5)),
    );
    let mut scenarios = Vec::new();
    for setup in [Setup::Hook, Setup::Held, Setup::Release] {
        let ns = env
            .create_namespace(&format!("{setup:?}").to_lowercase())
            .await
            .expect("namespace");
        let (log, metrics) = (
            CallLog::new(),
            FinalizerMetrics::unregistered(None).expect("metrics"),
        );
        let informer =
            Informer::new::<Thing>(client.clone(), ListWatchOptions::default().namespace(&ns));
        controller.erased().add_informer(&ns, informer);
        add_handlers(&controller, &client, &ns, setup, &log, &metrics);
        scenarios.push((setup, ns, log, metrics));
    }
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

    // Handled by an earlier run (both finalizers), but `count` is a string in this one: the
    // process never sees a decodable state of it. Then deleted.
    for (_, ns, _, metrics) in &scenarios {
        let raw: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Thing>(&()));
        let undecodable: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "undecodable.kubeapp.dev/v1",
            "kind": "Thing",
            "metadata": {
                "name": "t",
                "finalizers": [WATCHER_FINALIZER, RECONCILER_FINALIZER],
            },
            "spec": { "count": "many" },
        }))
        .expect("a Thing that does not read as one");
        raw.create(&PostParams::default(), &undecodable)
            .await
            .expect("a string where the Rust type wants an integer");
        // Both wrappers met it undecodable (and called no handler) before it is deleted.
        eventually("both wrappers to report the undecodable object", || async {
            metrics.undecodable("Thing", "ignored") >= 2
        })
        .await;
        raw.delete("t", &DeleteParams::default())
            .await
            .expect("delete");
    }

    for (setup, ns, log, metrics) in &scenarios {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Thing>(&()));
        match setup {
            Setup::Hook => {
                log.wait_contains("watcher-hook t true").await;
                log.wait_contains("reconciler-hook t true").await;
                eventually("the handled object to disappear", || async {
                    api.get_opt("t").await.expect("get").is_none()
                })
                .await;
            }
            Setup::Held => {
                eventually(
                    "a Warning Event UndecodableObject on the held object",
                    || async {
                        warning_reasons(&client, ns, "t")
                            .await
                            .iter()
                            .any(|r| r == "UndecodableObject")
                    },
                )
                .await;
                eventually("the held metric", || async {
                    metrics.undecodable("Thing", "held") >= 1
                })
                .await;
                let held = api.get("t").await.expect("still there: held");
                assert!(held.metadata.deletion_timestamp.is_some());
                assert!(held.finalizers().iter().any(|f| f == WATCHER_FINALIZER));
                assert!(held.finalizers().iter().any(|f| f == RECONCILER_FINALIZER));
            }
            Setup::Release => {
                eventually("the released object to disappear", || async {
                    api.get_opt("t").await.expect("get").is_none()
                })
                .await;
                eventually("a Warning Event UndecodableObjectReleased", || async {
                    warning_reasons(&client, ns, "t")
                        .await
                        .iter()
                        .any(|r| r == "UndecodableObjectReleased")
                })
                .await;
                assert!(
                    metrics.undecodable("Thing", "released") >= 2,
                    "watcher and reconciler"
                );
            }
        }
        // No typed handler was called for the object, and no handler was told of the delete
        // except the raw hook.
        let entries = log.entries();
        for forbidden in ["add t", "Created t", "delete t", "Deleted t", "sync t"] {
            assert!(
                !entries.iter().any(|e| e == forbidden),
                "{setup:?}: {entries:#?}"
            );
        }
        if *setup != Setup::Hook {
            assert!(
                !entries.iter().any(|e| e.contains("-hook")),
                "{setup:?}: {entries:#?}"
            );
        }
    }
    stop.cancel();
    tokio::time::timeout(WAIT, running)
        .await
        .expect("the controller stops in time")
        .expect("the controller task does not panic");
}
