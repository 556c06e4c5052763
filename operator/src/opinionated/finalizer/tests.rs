//! Unit tests of names, list arithmetic, backoff, metrics and the patch body.

use std::time::Duration;

use kube::api::ApiResource;
use prometheus::Registry;

use crate::handler::HandlerContext;

use super::*;
use tokio_util::sync::CancellationToken;

#[tokio::test(start_paused = true)]
async fn the_conflict_backoff_ends_early_when_the_context_is_cancelled() {
    let stop = CancellationToken::new();
    let ctx = HandlerContext::new("widgets", stop.clone());
    let started = tokio::time::Instant::now();
    assert!(backoff(&ctx, Duration::from_millis(50)).await, "waited");
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.cancel();
    });
    assert!(!backoff(&ctx, Duration::from_secs(3600)).await, "cancelled");
    assert!(started.elapsed() < Duration::from_secs(2));
    cancel.await.expect("cancel task");
}

fn list(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_string()).collect()
}

fn widgets() -> ApiResource {
    ApiResource {
        group: "example.dev".into(),
        version: "v1".into(),
        api_version: "example.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

#[test]
fn default_names_follow_the_go_sdk_pattern_and_drop_an_empty_group() {
    let names = FinalizerNames::defaults(&widgets()).expect("short enough");
    assert_eq!(names.finalizer(), "operator.v1.Widget.example.dev");
    assert_eq!(names.in_progress(), "wip.v1.Widget.example.dev");
    let configmaps = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    };
    assert_eq!(default_finalizer(&configmaps), "operator.v1.ConfigMap");
}

#[test]
fn a_name_longer_than_63_characters_is_rejected_with_its_length() {
    let long = format!("operator.v1.Widget.{}", "a".repeat(50));
    let err = FinalizerNames::new(long.clone(), "wip").expect_err("too long");
    assert_eq!(
        err,
        FinalizerNameError::TooLong {
            finalizer: long.clone(),
            length: 69
        }
    );
    assert!(err.to_string().contains(&long), "{err}");
    assert!(err.to_string().contains("69"), "{err}");
    assert!(validate_finalizer(&"x".repeat(63)).is_ok());
    assert_eq!(validate_finalizer(""), Err(FinalizerNameError::Empty));
    assert_eq!(
        FinalizerNames::new("same", "same"),
        Err(FinalizerNameError::Same("same".into()))
    );
    let long_group = ApiResource {
        group: "a-very-long-group-name.of-an-example.kubeapp.dev".into(),
        ..widgets()
    };
    assert!(matches!(
        FinalizerNames::defaults(&long_group),
        Err(FinalizerNameError::TooLong { .. })
    ));
}

#[test]
fn adding_appends_and_keeps_other_finalizers_in_order() {
    let change = FinalizerChange {
        add: Some("ours"),
        remove: &[],
    };
    assert_eq!(
        plan_finalizers(&list(&["b", "a"]), change, false),
        ListPlan::Set(list(&["b", "a", "ours"]))
    );
    assert_eq!(
        plan_finalizers(&list(&["b", "ours", "a"]), change, false),
        ListPlan::Unchanged
    );
}

#[test]
fn replacing_the_in_progress_finalizer_keeps_the_others_in_order() {
    let change = FinalizerChange {
        add: Some("ours"),
        remove: &["wip"],
    };
    assert_eq!(
        plan_finalizers(&list(&["x", "wip", "y"]), change, false),
        ListPlan::Set(list(&["x", "y", "ours"]))
    );
}

#[test]
fn removing_keeps_the_others_in_order_and_is_a_no_op_when_absent() {
    let change = FinalizerChange {
        add: None,
        remove: &["ours", "wip"],
    };
    assert_eq!(
        plan_finalizers(&list(&["x", "ours", "y", "wip"]), change, true),
        ListPlan::Set(list(&["x", "y"]))
    );
    assert_eq!(
        plan_finalizers(&list(&["x", "y"]), change, true),
        ListPlan::Unchanged
    );
    assert_eq!(plan_finalizers(&[], change, false), ListPlan::Unchanged);
}

#[test]
fn nothing_is_added_or_swapped_on_an_object_being_deleted() {
    let swap = FinalizerChange {
        add: Some("ours"),
        remove: &["wip"],
    };
    assert_eq!(
        plan_finalizers(&list(&["wip"]), swap, true),
        ListPlan::BlockedByDeletion
    );
    // Already there: removing the in-progress one is fine.
    assert_eq!(
        plan_finalizers(&list(&["ours", "wip"]), swap, true),
        ListPlan::Set(list(&["ours"]))
    );
}

#[test]
fn conflict_backoff_doubles_up_to_the_maximum() {
    let retry = ConflictRetry::default();
    let delays: Vec<u128> = (0..6).map(|n| retry.delay(n).as_millis()).collect();
    assert_eq!(delays, [50, 100, 200, 400, 800, 1000]);
}

#[test]
fn registering_the_finalizer_metrics_twice_is_harmless() {
    let registry = Registry::new();
    let first = FinalizerMetrics::register(&registry, Some("fin_twice")).expect("first");
    let second = FinalizerMetrics::register(&registry, Some("fin_twice")).expect("second");
    first.conflicts.with_label_values(&["k"]).inc();
    second.conflicts.with_label_values(&["k"]).inc();
    assert_eq!(first.conflicts("k"), 2);
    let names: Vec<String> = registry
        .gather()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    assert!(
        names.contains(&"fin_twice_opinionated_finalizer_conflicts_total".to_string()),
        "{names:?}"
    );
}

#[test]
fn the_patch_sets_the_list_with_the_resource_version_as_precondition() {
    let patch = finalizer_patch(Some("42"), &["theirs".to_string(), "ours".to_string()]);
    assert_eq!(
        serde_json::to_value(&patch).expect("json"),
        serde_json::json!([
            { "op": "replace", "path": "/metadata/resourceVersion", "value": "42" },
            { "op": "add", "path": "/metadata/finalizers", "value": ["theirs", "ours"] },
        ])
    );
}
