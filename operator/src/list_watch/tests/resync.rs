//! The periodic resync under backpressure: missed ticks are not replayed back to back.

use super::*;
use crate::action::ReconcileAction;
use crate::list_scope::ListedObject;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use std::time::Duration;

fn raw_cm(name: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "ns", "uid": name, "resourceVersion": "1" },
    }))
    .expect("a ConfigMap")
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_paused_for_several_periods_gets_one_resync_then_one_per_period() {
    let kind_metrics = ControllerMetrics::unregistered(Some("resync_test"))
        .expect("metrics")
        .for_kind("configmaps");
    let raw = futures::stream::iter(
        [Event::Init, Event::InitApply(raw_cm("a")), Event::InitDone]
            .map(|event| Ok(crate::list_scope::map_event(event, ListedObject::from))),
    )
    .chain(futures::stream::pending())
    .boxed();
    let period = Duration::from_secs(10);
    let mut events = informer_events(
        raw,
        ListWatchOptions::default().resync_interval(period),
        typed_decoder::<ConfigMap>(),
        "ConfigMap".into(),
        SyncedFlag::new(false),
        kind_metrics,
        None,
        None,
    );
    let created = events.next().await.expect("the listed object");
    assert_eq!(created.action(), ReconcileAction::Created);

    // The consumer does not pull for five and a half periods (backpressure).
    tokio::time::sleep(period * 11 / 2).await;
    let resumed = tokio::time::Instant::now();
    let mut resyncs = Vec::new();
    while resyncs.len() < 3 {
        let event = events.next().await.expect("resyncs");
        assert_eq!(event.action(), ReconcileAction::Resynced);
        resyncs.push((tokio::time::Instant::now() - resumed).as_secs());
    }
    assert_eq!(
        resyncs,
        [0, 10, 20],
        "one resync when the consumer pulls again, then one per period"
    );
}
