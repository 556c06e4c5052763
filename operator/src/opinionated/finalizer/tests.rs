//! Unit tests of names, list arithmetic, backoff, metrics and the patch body.

use std::time::Duration;

use kube::api::ApiResource;
use prometheus::Registry;

use crate::handler::DynContext;

use super::*;
use tokio_util::sync::CancellationToken;

#[tokio::test(start_paused = true)]
async fn the_conflict_backoff_ends_early_when_the_context_is_cancelled() {
    let stop = CancellationToken::new();
    let ctx = DynContext::new("widgets", stop.clone());
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

fn configmaps() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

#[test]
fn default_names_are_qualified_by_the_group_or_the_core_stand_in() {
    let names = FinalizerNames::defaults(&widgets()).expect("valid");
    assert_eq!(names.finalizer(), "example.dev/operator-widgets-v1");
    assert_eq!(names.in_progress(), "example.dev/operator-widgets-v1-wip");
    assert_eq!(
        default_finalizer(&configmaps()),
        "core.kubeapp.dev/operator-configmaps-v1"
    );
    assert_eq!(
        app_in_progress_finalizer("shop", &configmaps()),
        "core.kubeapp.dev/shop-configmaps-v1-wip"
    );
    for name in [
        default_finalizer(&widgets()),
        default_in_progress_finalizer(&configmaps()),
    ] {
        assert_eq!(validate_finalizer(&name), Ok(()), "{name}");
    }
}

#[test]
fn a_default_name_part_past_63_characters_is_shortened_with_a_hash_deterministically() {
    let long = ApiResource {
        plural: format!("{}s", "averyverylongkindname".repeat(3)),
        ..widgets()
    };
    let names = FinalizerNames::defaults(&long).expect("shortened, still valid");
    let (prefix, name) = names.finalizer().split_once('/').expect("qualified");
    assert_eq!(prefix, "example.dev");
    assert_eq!(name.len(), MAX_FINALIZER_LENGTH);
    assert!(name.starts_with("operator-averyverylong"), "{name}");
    let (_, wip) = names.in_progress().split_once('/').expect("qualified");
    assert!(
        wip.len() <= MAX_FINALIZER_LENGTH && wip.ends_with("-wip"),
        "{wip}"
    );
    // Deterministic, and another long kind gets another name.
    assert_eq!(FinalizerNames::defaults(&long), Ok(names.clone()));
    let other = ApiResource {
        plural: format!("{}x", long.plural),
        ..widgets()
    };
    let other = FinalizerNames::defaults(&other).expect("valid");
    assert_ne!(other.finalizer(), names.finalizer());
}

#[test]
fn every_rule_of_a_qualified_name_is_checked_and_named() {
    assert_eq!(validate_finalizer(""), Err(FinalizerNameError::Empty));
    assert_eq!(
        validate_finalizer("my-finalizer"),
        Err(FinalizerNameError::MissingPrefix {
            finalizer: "my-finalizer".into()
        })
    );
    let err = validate_finalizer("Example.dev/x").expect_err("uppercase prefix");
    assert!(
        matches!(&err, FinalizerNameError::InvalidPrefix { prefix, .. } if prefix == "Example.dev"),
        "{err}"
    );
    assert!(err.to_string().contains("Example.dev/x"), "{err}");
    assert!(matches!(
        validate_finalizer("example..dev/x"),
        Err(FinalizerNameError::InvalidPrefix { .. })
    ));
    assert!(matches!(
        validate_finalizer("/x"),
        Err(FinalizerNameError::InvalidPrefix { .. })
    ));
    let long = format!("example.dev/{}", "a".repeat(64));
    assert_eq!(
        validate_finalizer(&long),
        Err(FinalizerNameError::TooLong {
            finalizer: long.clone(),
            length: 64
        })
    );
    // The limit is on the part after the slash: a long prefix is fine.
    let long_prefix = format!("{}.example.dev/{}", "a".repeat(60), "x".repeat(63));
    assert_eq!(validate_finalizer(&long_prefix), Ok(()));
    for bad in [
        "example.dev/",
        "example.dev/-x",
        "example.dev/a/b",
        "example.dev/a b",
    ] {
        let err = validate_finalizer(bad).expect_err(bad);
        assert!(
            matches!(err, FinalizerNameError::InvalidName { .. }),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains(bad), "{err}");
    }
    assert_eq!(validate_finalizer("example.dev/My_name.v1"), Ok(()));
    assert_eq!(
        FinalizerNames::new("example.dev/same", "example.dev/same"),
        Err(FinalizerNameError::Same("example.dev/same".into()))
    );
}

#[test]
fn legacy_defaults_count_as_ours_and_are_superseded() {
    let names = FinalizerNames::defaults(&widgets()).expect("valid");
    assert_eq!(
        names.legacy_finalizers(),
        ["operator.v1.Widget.example.dev"]
    );
    assert_eq!(names.legacy_in_progress(), ["wip.v1.Widget.example.dev"]);
    let meta = |finalizers: &[&str]| k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        finalizers: Some(list(finalizers)),
        ..Default::default()
    };
    let old = meta(&["theirs", "operator.v1.Widget.example.dev"]);
    assert!(names.is_handled(&old) && names.carries_legacy(&old));
    assert!(names.is_in_progress(&meta(&["wip.v1.Widget.example.dev"])));
    assert!(!names.is_handled(&meta(&["theirs"])));
    let swap = FinalizerChange {
        add: Some(names.finalizer()),
        remove: &names.superseded_by_finalizer(),
    };
    assert_eq!(
        plan_finalizers(old.finalizers.as_deref().unwrap_or_default(), swap, false),
        ListPlan::Set(list(&["theirs", "example.dev/operator-widgets-v1"]))
    );
    let (app, app_wip) = legacy_finalizers(Some("shop"), &widgets());
    assert_eq!(
        (app.as_str(), app_wip.as_str()),
        ("shop-widgets-finalizer", "shop-wip")
    );
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
    let first = FinalizerMetrics::unregistered(Some("fin_twice")).expect("metrics");
    crate::metric_registration::register_all(
        &registry,
        crate::metric_registration::MetricSet::collectors(&first)
            .into_iter()
            .map(|c| ("test", c)),
    )
    .expect("first");
    let second = first.clone();
    crate::metric_registration::register_all(
        &registry,
        crate::metric_registration::MetricSet::collectors(&second)
            .into_iter()
            .map(|c| ("test", c)),
    )
    .expect("second");
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
fn the_patch_sets_the_list_on_condition_of_the_incarnation_and_the_list_it_was_computed_from() {
    let current = ["theirs".to_string()];
    let patch = finalizer_patch(
        Some("u-1"),
        &current,
        &["theirs".to_string(), "ours".to_string()],
    );
    assert_eq!(
        serde_json::to_value(&patch).expect("json"),
        serde_json::json!([
            { "op": "test", "path": "/metadata/uid", "value": "u-1" },
            { "op": "test", "path": "/metadata/finalizers", "value": ["theirs"] },
            { "op": "add", "path": "/metadata/finalizers", "value": ["theirs", "ours"] },
        ])
    );
    // No list yet: the test is for `null` (an absent member), never for `[]`.
    let first = finalizer_patch(None, &[], &["ours".to_string()]);
    assert_eq!(
        serde_json::to_value(&first).expect("json"),
        serde_json::json!([
            { "op": "test", "path": "/metadata/finalizers", "value": null },
            { "op": "add", "path": "/metadata/finalizers", "value": ["ours"] },
        ])
    );
}
