//! Tests of the informer's event stream: decoding, skipping, resync, raw watch streams.

use super::*;
use crate::list_scope::ListedObject;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use std::time::Duration;

fn raw_cm(name: &str, rv: &str, data: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": format!("uid-{name}"),
            "resourceVersion": rv,
            "managedFields": [{ "manager": "kubectl", "operation": "Apply" }],
        },
        "data": data,
    }))
    .expect("a ConfigMap")
}

fn describe(event: &InformerEvent) -> String {
    if let Some(undecodable) = crate::object::as_undecodable(event.object()) {
        let meta = &undecodable.raw().metadata;
        return format!(
            "{} {} rv{} undecodable",
            event.action(),
            meta.name.as_deref().unwrap_or(""),
            meta.resource_version.as_deref().unwrap_or("")
        );
    }
    let cm = crate::object::downcast_shared::<ConfigMap>(event.object()).expect("ConfigMap");
    format!(
        "{} {} rv{} managedFields={}",
        event.action(),
        cm.metadata.name.as_deref().unwrap_or(""),
        cm.metadata.resource_version.as_deref().unwrap_or(""),
        cm.metadata.managed_fields.is_some()
    )
}

/// Raw events, then a watch that stays open.
fn raw_stream(events: Vec<Event<DynamicObject>>) -> RawEvents {
    futures::stream::iter(
        events
            .into_iter()
            .map(|event| Ok(crate::list_scope::map_event(event, ListedObject::from))),
    )
    .chain(futures::stream::pending())
    .boxed()
}

fn metrics() -> (ControllerMetrics, KindMetrics) {
    let metrics = ControllerMetrics::unregistered(Some("informer_test")).expect("metrics");
    let kind = metrics.for_kind("configmaps");
    (metrics, kind)
}

#[tokio::test(start_paused = true)]
async fn undecodable_objects_are_reported_delivered_raw_and_the_list_still_syncs() {
    let (_, kind_metrics) = metrics();
    let synced = SyncedFlag::new(false);
    let raw = raw_stream(vec![
        Event::Init,
        Event::InitApply(raw_cm("good", "1", serde_json::json!({ "k": "v" }))),
        // ConfigMap data values must be strings.
        Event::InitApply(raw_cm("bad", "2", serde_json::json!({ "k": 1 }))),
        Event::InitDone,
        Event::Apply(raw_cm("later", "3", serde_json::json!({}))),
        // It decodes again, then stops decoding, then is deleted.
        Event::Apply(raw_cm("bad", "4", serde_json::json!({ "k": "1" }))),
        Event::Apply(raw_cm("bad", "5", serde_json::json!({ "k": 2 }))),
        Event::Delete(raw_cm("bad", "6", serde_json::json!({ "k": 2 }))),
    ]);
    let mut events = informer_events(
        raw,
        ListWatchOptions::default(),
        typed_decoder::<ConfigMap>(),
        "ConfigMap".into(),
        synced.clone(),
        kind_metrics.clone(),
        None,
        None,
    );
    let seen: Vec<String> = events
        .by_ref()
        .take(6)
        .map(|e| describe(&e))
        .collect()
        .await;
    assert_eq!(
        seen,
        [
            "Created good rv1 managedFields=false",
            "Created bad rv2 undecodable",
            "Created later rv3 managedFields=false",
            // Its first decodable state: an Add (see crate::view).
            "Created bad rv4 managedFields=false",
            "Updated bad rv5 undecodable",
            "Deleted bad rv6 undecodable",
        ]
    );
    let error = crate::object::as_undecodable(&share(Undecodable::new(
        raw_cm("x", "1", serde_json::json!({})),
        &serde_json::from_str::<u8>("\"x\"").expect_err("a serde error"),
        "u8",
    )))
    .map(|u| u.to_string());
    assert_eq!(
        error.as_deref(),
        Some(
            "ns/x does not deserialize into u8: invalid type: string \"x\", expected u8 at line 1 column 3"
        )
    );
    assert!(synced.is_synced());
    // Once per undecodable state (rv2, rv5); its deletion is no new state.
    assert_eq!(kind_metrics.decode_errors.get(), 2);
    assert_eq!(kind_metrics.informer_synced.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn resync_reemits_every_cached_object_on_each_tick() {
    let (_, kind_metrics) = metrics();
    let raw = raw_stream(vec![
        Event::Init,
        Event::InitApply(raw_cm("a", "1", serde_json::json!({}))),
        Event::InitApply(raw_cm("b", "2", serde_json::json!({}))),
        Event::InitDone,
    ]);
    let options = ListWatchOptions::default()
        .resync_interval(Duration::from_secs(30))
        .keep_managed_fields()
        .transform(|object| {
            object.data["data"] = serde_json::json!({ "transformed": "yes" });
        });
    let started = tokio::time::Instant::now();
    let events = informer_events(
        raw,
        options,
        typed_decoder::<ConfigMap>(),
        "ConfigMap".into(),
        SyncedFlag::new(false),
        kind_metrics,
        None,
        None,
    );
    let seen: Vec<(String, u64)> = events
        .take(6)
        .map(|event| {
            let cm =
                crate::object::downcast_shared::<ConfigMap>(event.object()).expect("ConfigMap");
            let transformed = cm
                .data
                .as_ref()
                .and_then(|d| d.get("transformed"))
                .is_some();
            assert!(transformed, "the transform ran before caching");
            (describe(&event), started.elapsed().as_secs())
        })
        .collect()
        .await;
    let text: Vec<String> = seen.iter().map(|(e, at)| format!("{e} at {at}s")).collect();
    assert_eq!(
        text,
        [
            "Created a rv1 managedFields=true at 0s",
            "Created b rv2 managedFields=true at 0s",
            "Resynced a rv1 managedFields=true at 30s",
            "Resynced b rv2 managedFields=true at 30s",
            "Resynced a rv1 managedFields=true at 60s",
            "Resynced b rv2 managedFields=true at 60s",
        ]
    );
}

#[tokio::test]
async fn a_raw_watch_stream_goes_through_the_cache_and_syncs_after_its_first_list() {
    let raw = futures::stream::iter(
        [
            Event::Init,
            Event::InitApply(raw_cm("a", "1", serde_json::json!({}))),
            Event::InitDone,
            Event::Apply(raw_cm("a", "2", serde_json::json!({}))),
            // Unchanged resourceVersion: nothing to report.
            Event::Apply(raw_cm("a", "2", serde_json::json!({}))),
            Event::Delete(raw_cm("a", "2", serde_json::json!({}))),
        ]
        .into_iter()
        .map(Ok),
    );
    let informer = Informer::from_watch_stream::<ConfigMap>(
        GroupVersionKind::gvk("", "v1", "Test"),
        raw,
        ListWatchOptions::default(),
    );
    let synced = informer.synced();
    assert!(!synced.is_synced(), "not before the first list");
    let events: Vec<String> = informer
        .into_stream()
        .expect("metrics")
        .map(|event| describe(&event))
        .collect()
        .await;
    assert_eq!(
        events,
        [
            "Created a rv1 managedFields=false",
            "Updated a rv2 managedFields=false",
            "Deleted a rv2 managedFields=false",
        ]
    );
    assert!(synced.is_synced());
}
