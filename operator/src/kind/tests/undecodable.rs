//! Typed kinds over raw watch streams with undecodable states: the handlers of a `KindHandle`
//! (a shared informer's cache, the typed traits) see each object as the sequence of its
//! decodable states (see [`view`](crate::view)).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::GroupVersionKind;
use tokio_util::sync::CancellationToken;

use super::tests::{Log, Logging, label, offline_client};
use crate::context::Context;
use crate::list_watch::Informer;
use crate::{ControllerConfig, InformerController, ReconcileRequest, ReconcileResult};

/// A raw ConfigMap at `rv` whose data decodes, or not (a number where a string belongs).
fn raw_cm(name: &str, rv: u32, decodes: bool) -> kube::api::DynamicObject {
    let value = if decodes {
        serde_json::Value::from(rv.to_string())
    } else {
        serde_json::Value::from(rv)
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string(),
        },
        "data": { "rev": value },
    }))
    .expect("a ConfigMap")
}

/// The handlers of a `KindHandle` (a shared informer's cache, the typed traits) see each object
/// as the sequence of its decodable states: the delete of an object deleted while undecodable
/// comes with its last decodable state, an object's first decodable state is an add.
#[tokio::test]
async fn kind_handlers_get_the_last_decodable_state_of_an_undecodable_object_and_its_delete() {
    use kube::runtime::watcher::Event;
    let controller = InformerController::new(ControllerConfig::default());
    let raw = [
        Event::Init,
        Event::InitDone,
        // a: decodable, undecodable, decodable, undecodable, deleted.
        Event::Apply(raw_cm("a", 1, true)),
        Event::Apply(raw_cm("a", 2, false)),
        Event::Apply(raw_cm("a", 3, true)),
        Event::Apply(raw_cm("a", 4, false)),
        Event::Delete(raw_cm("a", 5, false)),
        // b: created undecodable, fixed, undecodable again.
        Event::Apply(raw_cm("b", 6, false)),
        Event::Apply(raw_cm("b", 7, false)),
        Event::Apply(raw_cm("b", 8, true)),
        Event::Apply(raw_cm("b", 9, false)),
        // c: never decodable, deleted.
        Event::Apply(raw_cm("c", 10, false)),
        Event::Delete(raw_cm("c", 11, false)),
    ];
    let stream = futures::StreamExt::chain(
        futures::stream::iter(raw.into_iter().map(Ok)),
        futures::stream::pending(),
    );
    let informer = Informer::from_watch_stream::<ConfigMap>(
        GroupVersionKind::gvk("", "v1", "Test"),
        stream,
        crate::list_watch::ListWatchOptions::default(),
    );
    let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
    let log = Log::new();
    let _watcher = config_maps.watch(Logging(log.clone()));
    let reconciled = log.clone();
    let _reconciler =
        config_maps.reconcile_fn(move |request: ReconcileRequest<ConfigMap>, _ctx: Context| {
            reconciled.push(format!(
                "reconcile {} {}",
                request.action,
                label(&request.object)
            ));
            async { Ok(ReconcileResult::done()) }
        });
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let entries = log
        .wait_for(
            "a's delete and b's add, to the watcher and the reconciler",
            |e| {
                ["delete a@3", "add b@8", "reconcile Deleted a@3"]
                    .iter()
                    .all(|wanted| e.iter().any(|entry| entry == wanted))
                    && e.iter()
                        .any(|entry| entry.starts_with("reconcile Created b@8"))
            },
        )
        .await;
    let watched = |name: &str| -> Vec<String> {
        entries
            .iter()
            .filter(|e| !e.starts_with("reconcile") && e.contains(&format!(" {name}@")))
            .cloned()
            .collect()
    };
    assert_eq!(watched("a"), ["add a@1", "update a@1 -> a@3", "delete a@3"]);
    assert_eq!(watched("b"), ["add b@8"]);
    assert!(watched("c").is_empty(), "{entries:#?}");
    // The reconciler saw only decodable states (b's last undecodable one as b@8).
    let reconciles: Vec<&String> = entries
        .iter()
        .filter(|e| e.starts_with("reconcile"))
        .collect();
    assert!(
        reconciles
            .iter()
            .all(|e| ["a@1", "a@3", "b@8"].iter().any(|state| e.ends_with(state))),
        "{reconciles:#?}"
    );
    stop.cancel();
    running.await.expect("joined").expect("ran");
}
