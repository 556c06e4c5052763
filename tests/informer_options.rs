//! The informer's options against kube-apiserver: namespace, label and field selectors, page size,
//! streaming lists, the default transform that drops `managedFields`, and the periodic resync.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::{Informer, InformerEvent};
use kubeapp::sdk::testenv::TestEnv;
use tokio::sync::mpsc;

const TIMEOUT: Duration = Duration::from_secs(30);

async fn create(env: &TestEnv, ns: &str, name: &str, app: &str) {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.labels = Some(BTreeMap::from([("app".to_string(), app.to_string())]));
    Api::<ConfigMap>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
}

/// Runs `informer` and forwards its events, with their object names, to a channel.
fn run(informer: Informer) -> mpsc::UnboundedReceiver<(String, InformerEvent)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut events = informer.into_stream().expect("metrics");
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let name = event.object().metadata().name.clone().unwrap_or_default();
            if tx.send((name, event)).is_err() {
                break;
            }
        }
    });
    rx
}

/// Receives events until one for `name` arrives; returns the names seen (in order) and that event.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<(String, InformerEvent)>,
    name: &str,
) -> (Vec<String>, InformerEvent) {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(TIMEOUT, async {
        while let Some((seen_name, event)) = rx.recv().await {
            if seen_name == name {
                return event;
            }
            seen.push(seen_name);
        }
        panic!("informer stream ended before {name}");
    })
    .await
    .unwrap_or_else(|_| panic!("no event for {name} within {TIMEOUT:?}; saw {seen:?}"));
    (seen, found)
}

#[tokio::test]
async fn namespace_label_and_field_selectors_paging_streaming_transform_and_resync() {
    let env = TestEnv::start().await.expect("start control plane");
    let ns_a = env.create_namespace("inf-a").await.expect("namespace");
    let ns_b = env.create_namespace("inf-b").await.expect("namespace");
    for name in ["m1", "m2", "m3"] {
        create(&env, &ns_a, name, "x").await;
    }
    create(&env, &ns_a, "other-label", "y").await;
    create(&env, &ns_b, "other-namespace", "x").await;

    // Namespace + label selector, listed one object per page: exactly m1..m3, then a marker
    // created afterwards proves nothing else was (or will be) delivered before it.
    let paged = ListWatchOptions::default()
        .namespace(ns_a.clone())
        .labels("app=x")
        .page_size(1);
    let mut rx = run(Informer::new::<ConfigMap>(env.client(), paged));
    let (mut listed, _) = until(&mut rx, "m3").await;
    create(&env, &ns_a, "marker", "x").await;
    let (after, _) = until(&mut rx, "marker").await;
    listed.extend(after);
    listed.sort();
    // Without the namespace or label filter, `other-label` or `other-namespace` would have come
    // between m3 and the marker.
    assert_eq!(listed, ["m1", "m2"], "objects besides m3 and the marker");

    // Field selector: only the named object.
    let by_name = ListWatchOptions::default()
        .namespace(ns_a.clone())
        .fields("metadata.name=m2");
    let mut rx = run(Informer::new::<ConfigMap>(env.client(), by_name));
    let (before, event) = until(&mut rx, "m2").await;
    assert!(
        before.is_empty(),
        "m1 sorts first and must be filtered out: {before:?}"
    );
    assert!(matches!(event, InformerEvent::Add(_)));
    // managedFields are dropped before caching by default.
    assert!(event.object().metadata().managed_fields.is_none());
    // keep_managed_fields keeps them; streaming lists deliver the same objects.
    let streaming = ListWatchOptions::default()
        .namespace(ns_a.clone())
        .labels("app=x")
        .streaming_list()
        .keep_managed_fields();
    let mut rx = run(Informer::new::<ConfigMap>(env.client(), streaming));
    let (_, event) = until(&mut rx, "m1").await;
    assert!(
        event.object().metadata().managed_fields.is_some(),
        "managedFields kept on request"
    );

    // A resync re-delivers cached objects as Resync events.
    let resyncing = ListWatchOptions::default()
        .namespace(ns_b.clone())
        .resync_interval(Duration::from_secs(1));
    let mut rx = run(Informer::new::<ConfigMap>(env.client(), resyncing));
    let (_, first) = until(&mut rx, "other-namespace").await;
    assert!(matches!(first, InformerEvent::Add(_)));
    let (_, again) = until(&mut rx, "other-namespace").await;
    assert!(matches!(again, InformerEvent::Resync(_)), "{again:?}");
}
