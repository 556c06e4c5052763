//! Unit tests of the apply helpers' pure parts (the requests are tested end to end in
//! `tests/apply_helpers.rs`).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::CustomResourceExt;
use serde_json::json;
use std::future::IntoFuture;

use super::conditions::{self, ConditionStatus, NewCondition};
use super::error::ApplyError;
use super::owner::set_controller;
use super::owner_reference;
use super::scope::KindScope;
use super::server_side::Target;
use super::status::same_ignoring_timestamps;

#[derive(
    kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[kube(
    group = "apply.kubeapp.dev",
    version = "v1",
    kind = "Gizmo",
    namespaced,
    status = "GizmoStatus"
)]
struct GizmoSpec {
    size: i32,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct GizmoStatus {
    #[serde(default)]
    #[schemars(schema_with = "super::conditions::schema")]
    conditions: Vec<Condition>,
}

fn meta(ns: Option<&str>, name: &str, uid: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(Into::into),
        uid: uid.map(Into::into),
        ..Default::default()
    }
}

fn config_map(ns: Option<&str>) -> ConfigMap {
    ConfigMap {
        metadata: meta(ns, "child", None),
        ..Default::default()
    }
}

fn gizmo(ns: &str, uid: Option<&str>) -> Gizmo {
    let mut g = Gizmo::new("owner", GizmoSpec { size: 1 });
    g.metadata = meta(Some(ns), "owner", uid);
    g
}

#[test]
fn set_adds_then_keeps_the_transition_time_while_the_status_is_unchanged() {
    let mut list = Vec::new();
    assert!(conditions::set(
        &mut list,
        conditions::ready(false, "Pending", "waiting"),
        Some(1)
    ));
    assert_ne!(list[0].last_transition_time, Time(Timestamp::UNIX_EPOCH));
    // Make the stored time distinguishable from "now".
    list[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
    assert!(!conditions::set(
        &mut list,
        conditions::ready(false, "Pending", "waiting"),
        Some(1)
    ));
    assert_eq!(list[0].last_transition_time, Time(Timestamp::UNIX_EPOCH));
    // New message and generation, same status: changed, time kept.
    assert!(conditions::set(
        &mut list,
        conditions::ready(false, "Pending", "still waiting"),
        Some(2)
    ));
    assert_eq!(list[0].last_transition_time, Time(Timestamp::UNIX_EPOCH));
    assert_eq!(list[0].observed_generation, Some(2));
    assert_eq!(list[0].message, "still waiting");
    // Status flips: a new transition time.
    assert!(conditions::set(
        &mut list,
        conditions::ready(true, "Done", "ok"),
        Some(2)
    ));
    assert_ne!(list[0].last_transition_time, Time(Timestamp::UNIX_EPOCH));
    assert_eq!(
        (list[0].status.as_str(), list[0].reason.as_str()),
        ("True", "Done")
    );
    assert_eq!(list.len(), 1);
    // Another type is a second entry.
    let synced = NewCondition::new("Synced", ConditionStatus::Unknown, "Starting", "");
    assert!(conditions::set(&mut list, synced, None));
    assert_eq!(list.len(), 2);
    assert!(conditions::is_true(&list, conditions::READY));
    assert!(!conditions::is_true(&list, "Synced"));
    assert!(conditions::remove(&mut list, "Synced"));
    assert!(conditions::find(&list, "Synced").is_none());
}

#[test]
fn status_comparison_ignores_only_condition_transition_times() {
    let a = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}], "n": 1});
    let b = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}], "n": 1});
    assert!(same_ignoring_timestamps(&a, &b));
    let c = json!({"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}], "n": 1});
    assert!(!same_ignoring_timestamps(&a, &c));
    let d = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}], "n": 2});
    assert!(!same_ignoring_timestamps(&a, &d));
    // Nested condition lists count too; an absent status differs from an empty one.
    let e = json!({"parts": [{"conditions": [{"type": "A", "lastTransitionTime": "x"}]}]});
    let f = json!({"parts": [{"conditions": [{"type": "A", "lastTransitionTime": "y"}]}]});
    assert!(same_ignoring_timestamps(&e, &f));
    assert!(!same_ignoring_timestamps(
        &json!(null),
        &json!({"conditions": []})
    ));
}

#[test]
fn a_projection_owns_as_its_kind_does() {
    #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
    struct Nothing {}
    impl crate::projection::Projection for Nothing {
        type Of = ConfigMap;
    }
    let meta = ObjectMeta {
        name: Some("settings".into()),
        namespace: Some("ns".into()),
        uid: Some("u-9".into()),
        ..ObjectMeta::default()
    };
    let owner = crate::projection::Projected::new(meta, Nothing {});
    let reference = owner_reference(&owner).expect("a reference");
    assert_eq!(
        (reference.api_version.as_str(), reference.kind.as_str()),
        ("v1", "ConfigMap")
    );
    assert_eq!(
        (reference.name.as_str(), reference.uid.as_str()),
        ("settings", "u-9")
    );

    let mut child = ConfigMap::default();
    child.metadata.name = Some("child".into());
    child.metadata.namespace = Some("other".into());
    let err = set_controller(&mut child, "ConfigMap", Some(true), &owner).expect_err("cross");
    assert!(
        matches!(err, ApplyError::CrossNamespaceOwner { .. }),
        "{err}"
    );
    child.metadata.namespace = Some("ns".into());
    set_controller(&mut child, "ConfigMap", Some(true), &owner).expect("same namespace");
    assert_eq!(child.metadata.owner_references, Some(vec![reference]));
}

#[test]
fn owner_reference_needs_a_uid_and_sets_controller_and_block_owner_deletion() {
    assert!(owner_reference(&gizmo("a", None)).is_none());
    let reference = owner_reference(&gizmo("a", Some("u-1"))).expect("a reference");
    assert_eq!(reference.api_version, "apply.kubeapp.dev/v1");
    assert_eq!(reference.kind, "Gizmo");
    assert_eq!(
        (reference.name.as_str(), reference.uid.as_str()),
        ("owner", "u-1")
    );
    assert_eq!(reference.controller, Some(true));
    assert_eq!(reference.block_owner_deletion, Some(true));
}

#[test]
fn owned_by_refuses_missing_uids_cross_namespace_and_cluster_scoped_children() {
    let ns = <<ConfigMap as kube::Resource>::Scope as KindScope>::namespaced();
    let mut cm = config_map(Some("a"));
    let err = set_controller(&mut cm, "ConfigMap", ns, &gizmo("a", None)).expect_err("no uid");
    assert!(matches!(err, ApplyError::OwnerWithoutUid { .. }), "{err}");
    assert!(err.to_string().contains("Gizmo a/owner"), "{err}");

    let err = set_controller(&mut cm, "ConfigMap", ns, &gizmo("b", Some("u"))).expect_err("cross");
    assert!(
        matches!(err, ApplyError::CrossNamespaceOwner { .. }),
        "{err}"
    );

    let mut namespace = Namespace {
        metadata: meta(None, "child-ns", None),
        ..Default::default()
    };
    let cluster = <<Namespace as kube::Resource>::Scope as KindScope>::namespaced();
    let err = set_controller(&mut namespace, "Namespace", cluster, &gizmo("a", Some("u")))
        .expect_err("namespaced owner of a cluster-scoped object");
    assert!(
        matches!(err, ApplyError::CrossNamespaceOwner { .. }),
        "{err}"
    );

    let mut no_ns = config_map(None);
    let err =
        set_controller(&mut no_ns, "ConfigMap", ns, &gizmo("a", Some("u"))).expect_err("no ns");
    assert!(matches!(err, ApplyError::MissingNamespace { .. }), "{err}");

    // Same namespace: one reference, set twice without duplicates.
    set_controller(&mut cm, "ConfigMap", ns, &gizmo("a", Some("u"))).expect("same namespace");
    set_controller(&mut cm, "ConfigMap", ns, &gizmo("a", Some("u"))).expect("again");
    assert_eq!(cm.metadata.owner_references.as_ref().map(Vec::len), Some(1));
    // Another controller is refused.
    let err = set_controller(&mut cm, "ConfigMap", ns, &gizmo("a", Some("v"))).expect_err("two");
    assert!(matches!(err, ApplyError::OtherController { .. }), "{err}");
}

#[test]
fn targets_need_a_name_and_a_namespace_for_namespaced_kinds() {
    let err = Target::of::<ConfigMap>(&config_map(None), &())
        .err()
        .expect("no namespace");
    assert!(matches!(err, ApplyError::MissingNamespace { .. }), "{err}");
    let mut unnamed = config_map(Some("a"));
    unnamed.metadata.name = None;
    let err = Target::of::<ConfigMap>(&unnamed, &())
        .err()
        .expect("no name");
    assert!(matches!(err, ApplyError::MissingName { .. }), "{err}");
    let target = Target::of::<Namespace>(
        &Namespace {
            metadata: meta(Some("ignored"), "n", None),
            ..Default::default()
        },
        &(),
    )
    .expect("cluster-scoped");
    assert_eq!(target.namespace, None);
}

#[test]
fn generated_crd_marks_conditions_a_list_map_keyed_by_type() {
    let crd = serde_json::to_value(Gizmo::crd()).expect("crd json");
    let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"];
    assert_eq!(conditions["type"], "array", "{conditions:#}");
    assert_eq!(
        conditions["x-kubernetes-list-type"], "map",
        "{conditions:#}"
    );
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        json!(["type"]),
        "{conditions:#}"
    );
    assert_eq!(
        conditions["items"]["properties"]["status"]["enum"],
        json!(["True", "False", "Unknown"])
    );
    let required = conditions["items"]["required"]
        .as_array()
        .expect("required");
    assert!(required.contains(&json!("type")));
}

/// Compile-time: the request futures can be spawned (handlers run on a multi-threaded runtime).
#[allow(dead_code)]
fn request_futures_are_send(
    applier: &super::Applier,
    recorder: &crate::events::EventRecorder,
    owner: &Gizmo,
) {
    fn send<T: Send>(_: T) {}
    send(applier.apply(config_map(Some("a"))).send());
    send(applier.apply(config_map(Some("a"))).into_future());
    send(applier.status(owner).write(GizmoStatus::default()));
    send(recorder.normal(owner, "Reason", "note"));
}
