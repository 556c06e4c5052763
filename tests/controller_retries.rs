//! Kept retries against kube-apiserver (contract section 4): when the dequeue policy keeps a
//! failed Add's retry and the Update that follows fails too, the watcher retries both, in event
//! order, and the reconciler runs one request with the newest object, still as Created.

mod call_log;

use call_log::{CallLog, WAIT};
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeapp::operator::erased::DynReconcilerFn;
use kubeapp::operator::erased::DynWatcherFns;
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::{
    CancellationToken, ControllerConfig, Informer, InformerController, ReconcileError,
    ReconcileResult, RetryPolicy,
};
use kubeapp::sdk::testenv::TestEnv;

const KIND: &str = "configmaps";

fn value(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|data| data.get("v"))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_kept_retry_and_the_retry_of_the_newer_failed_event_both_run() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("kept-retries")
        .await
        .expect("namespace");
    let api: Api<ConfigMap> = Api::namespaced(env.client(), &ns);

    // The first call for each event fails; retries succeed. The retry waits 5 s, long enough
    // for the Update to arrive while the Add's retry is pending.
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(5), 2));
    let controller = InformerController::new(config);
    controller.erased().add_informer(
        KIND,
        Informer::new::<ConfigMap>(env.client(), ListWatchOptions::default().namespace(&ns)),
    );
    let (watched, reconciled) = (CallLog::new(), CallLog::new());
    let (on_add, on_update) = (watched.clone(), watched.clone());
    controller.erased().add_watcher(
        KIND,
        DynWatcherFns::<ConfigMap>::new()
            .on_add(move |cm, ctx| {
                on_add.push(format!("add v{}", value(&cm)));
                let first = ctx.attempt() == 0;
                async move {
                    if first {
                        Err("add fails once".into())
                    } else {
                        Ok(())
                    }
                }
            })
            .on_update(move |_old, new, ctx| {
                on_update.push(format!("update v{}", value(&new)));
                let first = ctx.attempt() == 0;
                async move {
                    if first {
                        Err("update fails once".into())
                    } else {
                        Ok(())
                    }
                }
            }),
    );
    let log = reconciled.clone();
    controller.erased().add_reconciler(
        KIND,
        DynReconcilerFn::<ConfigMap, _>::new(move |request, ctx| {
            log.push(format!(
                "{} v{} a{}",
                request.action,
                value(&request.object),
                ctx.attempt()
            ));
            let first = ctx.attempt() == 0;
            async move {
                if first {
                    Err(ReconcileError::new("fails once"))
                } else {
                    Ok(ReconcileResult::done())
                }
            }
        }),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    tokio::time::timeout(WAIT, controller.synced_flags()[0].1.wait())
        .await
        .expect("informer synced");

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("kept".into());
    cm.data = Some(BTreeMap::from([("v".to_string(), "1".to_string())]));
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    reconciled.wait_len(1).await;
    // While the Add's retries wait: an Update (a different action, so the default opinionated
    // rule keeps them), which fails too.
    let patch = serde_json::json!({ "data": { "v": "2" } });
    api.patch("kept", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");

    let watcher_calls = watched.wait_len(4).await;
    assert_eq!(
        watcher_calls,
        ["add v1", "update v2", "add v1", "update v2"],
        "the watcher retries both events, in event order"
    );
    let reconciler_calls = reconciled.wait_len(3).await;
    assert_eq!(
        reconciler_calls,
        ["Created v1 a0", "Updated v2 a0", "Created v2 a1"],
        "one pending reconcile request, still Created, with the newest object"
    );

    stop.cancel();
    running
        .await
        .expect("no panic")
        .expect("the controller stops cleanly");
}
