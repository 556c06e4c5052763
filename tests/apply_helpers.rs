//! End-to-end tests of the apply helpers (`kubeapp::operator::apply`) and the event recorder
//! (`kubeapp::operator::events`) against a real kube-apiserver + etcd: server-side apply creates,
//! updates, forces past a foreign manager's conflicting field and keeps its other fields; owner
//! references; cluster-scoped and dynamic objects; status written only when it changed (counted
//! requests); two field managers' conditions surviving each other's applies; Events published.
//!
//! Each test runs its own control plane; at most [`MAX_PARALLEL_ENVS`] run at once.

mod call_log;
mod crd_env;

use crd_env::CrdEnv;
use std::collections::BTreeMap;
use std::sync::Once;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::apply::{Applier, ApplyError, StatusWrite, conditions};
use kubeapp::operator::events::{EventRecorder, Reporter};
use kubeapp::runner::client_metrics::ClientMetrics;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Semaphore;

/// A custom kind whose status has conditions declared with the helpers' list-map schema.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "apply.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
struct WidgetSpec {
    greeting: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
struct WidgetStatus {
    #[serde(default)]
    #[schemars(schema_with = "kubeapp::operator::apply::conditions::schema")]
    conditions: Vec<Condition>,
    /// Serialized as `null` when `None` (no `skip_serializing_if`), as many status types are:
    /// the helpers must not apply that `null` over another manager's value.
    #[serde(default)]
    observed_generation: Option<i64>,
}

const MAX_PARALLEL_ENVS: usize = 2;
const MANAGER: &str = "kubeapp-apply-test";

fn logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "kubeapp_operator=debug".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

/// A control plane with the Widget CRD and a fresh namespace, holding one of the parallel slots.
struct Env(CrdEnv);

impl std::ops::Deref for Env {
    type Target = CrdEnv;
    fn deref(&self) -> &CrdEnv {
        &self.0
    }
}

impl Env {
    async fn start(prefix: &str) -> Self {
        static SLOTS: Semaphore = Semaphore::const_new(MAX_PARALLEL_ENVS);
        logs();
        Self(CrdEnv::start::<Widget>(&SLOTS, prefix).await)
    }

    /// A client whose requests are counted under the metrics prefix `prefix`.
    async fn counted_client(&self, prefix: &str) -> (kube::Client, ClientMetrics) {
        call_log::counted_client(self.env.kubeconfig(), prefix).await
    }

    async fn create_widget(&self, name: &str) -> Widget {
        let widget = Widget::new(
            name,
            WidgetSpec {
                greeting: "hello".into(),
            },
        );
        Api::<Widget>::namespaced(self.env.client(), &self.ns)
            .create(&PostParams::default(), &widget)
            .await
            .expect("create widget")
    }

    async fn widget(&self, name: &str) -> Widget {
        Api::<Widget>::namespaced(self.env.client(), &self.ns)
            .get(name)
            .await
            .expect("get widget")
    }
}

fn config_map(ns: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The field managers of `object` and the fields each owns (its `fieldsV1` as JSON text).
fn managers(object: &impl kube::Resource) -> Vec<(String, String, String)> {
    object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.subresource.clone().unwrap_or_default(),
                m.fields_v1
                    .as_ref()
                    .map(|f| f.0.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

fn fields_of(object: &impl kube::Resource, manager: &str, subresource: &str) -> String {
    managers(object)
        .into_iter()
        .find(|(m, s, _)| m == manager && s == subresource)
        .map(|(_, _, fields)| fields)
        .unwrap_or_else(|| {
            panic!(
                "no {manager:?} entry for {subresource:?}: {:#?}",
                managers(object)
            )
        })
}

#[tokio::test]
async fn apply_creates_updates_and_keeps_a_foreign_managers_fields() {
    let env = Env::start("apply").await;
    let (client, metrics) = env.counted_client("apply_helpers_apply").await;
    let applier = Applier::new(client, MANAGER);
    let cms: Api<ConfigMap> = Api::namespaced(env.env.client(), &env.ns);

    // Create: one PATCH.
    let created = applier
        .apply(config_map(
            &env.ns,
            "child",
            &[("ours", "1"), ("shared", "ours")],
        ))
        .await
        .expect("create by apply");
    assert_eq!(data(&created), map(&[("ours", "1"), ("shared", "ours")]));
    assert_eq!(metrics.requests("201", "patch", "configmaps", ""), 1);

    // A foreign manager adds its own key and label and takes over `shared`.
    cms.patch(
        "child",
        &PatchParams::apply("foreign").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "child", "labels": {"foreign": "yes"}},
            "data": {"theirs": "x", "shared": "theirs"},
        })),
    )
    .await
    .expect("foreign apply");

    // Update from the object as created (stale resourceVersion and managedFields: both are
    // stripped): our `shared` conflicts with the foreign manager's, the helper forces it.
    let mut update = created.clone();
    update.data = Some(map(&[("ours", "2"), ("shared", "ours")]));
    let updated = applier.apply(update).await.expect("update by apply");
    assert_eq!(
        data(&updated),
        map(&[("ours", "2"), ("shared", "ours"), ("theirs", "x")]),
        "our fields updated, the foreign field kept"
    );
    assert_eq!(
        updated.labels().get("foreign").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        metrics.requests("409", "patch", "configmaps", ""),
        1,
        "the conflict was answered once"
    );
    assert_eq!(
        metrics.requests("200", "patch", "configmaps", ""),
        1,
        "and forced once"
    );
    let ours = fields_of(&updated, MANAGER, "");
    assert!(
        ours.contains("f:shared") && ours.contains("f:ours"),
        "{ours}"
    );
    let theirs = fields_of(&updated, "foreign", "");
    assert!(
        theirs.contains("f:theirs") && !theirs.contains("f:shared"),
        "{theirs}"
    );

    // A key we stop declaring is removed; the foreign one stays.
    let pruned = applier
        .apply(config_map(&env.ns, "child", &[("ours", "3")]))
        .await
        .expect("apply fewer fields");
    assert_eq!(data(&pruned), map(&[("ours", "3"), ("theirs", "x")]));
}

#[tokio::test]
async fn apply_sets_a_controller_owner_reference_and_refuses_invalid_owners() {
    let env = Env::start("owner").await;
    let applier = Applier::new(env.env.client(), MANAGER);
    let widget = env.create_widget("owner").await;

    let child = applier
        .apply(config_map(&env.ns, "owned", &[("a", "b")]))
        .owned_by(&widget)
        .expect("same namespace")
        .await
        .expect("apply owned");
    let references = child.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(references.len(), 1, "{references:#?}");
    assert_eq!(Some(&references[0].uid), widget.metadata.uid.as_ref());
    assert_eq!(
        (references[0].kind.as_str(), references[0].name.as_str()),
        ("Widget", "owner")
    );
    assert_eq!(references[0].controller, Some(true));
    assert_eq!(references[0].block_owner_deletion, Some(true));

    // An owner that was never stored (no uid), and an owner in another namespace.
    let unsaved = Widget::new(
        "unsaved",
        WidgetSpec {
            greeting: "hi".into(),
        },
    );
    let err = applier
        .apply(config_map(&env.ns, "orphan", &[]))
        .owned_by(&unsaved)
        .err()
        .expect("no uid");
    assert!(matches!(err, ApplyError::OwnerWithoutUid { .. }), "{err}");
    let err = applier
        .apply(config_map("elsewhere", "orphan", &[]))
        .owned_by(&widget)
        .err()
        .expect("cross namespace");
    assert!(
        matches!(err, ApplyError::CrossNamespaceOwner { .. }),
        "{err}"
    );

    // A namespaced kind without a namespace never reaches the server.
    let mut no_ns = config_map(&env.ns, "no-ns", &[]);
    no_ns.metadata.namespace = None;
    let err = applier.apply(no_ns).await.expect_err("no namespace");
    assert!(matches!(err, ApplyError::MissingNamespace { .. }), "{err}");
}

#[tokio::test]
async fn apply_handles_cluster_scoped_and_dynamic_objects() {
    let env = Env::start("scopes").await;
    let applier = Applier::new(env.env.client(), MANAGER);

    let name = format!("{}-cluster", env.ns);
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(map(&[("applied", "yes")])),
            ..Default::default()
        },
        ..Default::default()
    };
    let stored = applier
        .apply(namespace)
        .await
        .expect("apply a cluster-scoped object");
    assert_eq!(
        stored.labels().get("applied").map(String::as_str),
        Some("yes")
    );

    let resource = ApiResource::erase::<ConfigMap>(&());
    let mut dynamic = DynamicObject::new("dynamic", &resource).within(&env.ns);
    dynamic.data = json!({"data": {"k": "v"}});
    let stored = applier
        .apply_with(dynamic, resource)
        .await
        .expect("apply a dynamic object");
    assert_eq!(stored.data["data"]["k"], "v");
    let typed = Api::<ConfigMap>::namespaced(env.env.client(), &env.ns)
        .get("dynamic")
        .await
        .expect("the dynamic apply created a ConfigMap");
    assert_eq!(data(&typed), map(&[("k", "v")]));
}

#[tokio::test]
async fn status_is_written_only_when_it_changed() {
    let env = Env::start("status").await;
    let (client, metrics) = env.counted_client("apply_helpers_status").await;
    let applier = Applier::new(client, MANAGER);
    let status_patches = || metrics.requests("200", "patch", "widgets", "status");
    let widget = env.create_widget("w").await;

    let mut status = widget.status.clone().unwrap_or_default();
    conditions::set(
        &mut status.conditions,
        conditions::ready(true, "Applied", "all applied"),
        widget.metadata.generation,
    );
    status.observed_generation = widget.metadata.generation;
    let written = match applier
        .status(&widget)
        .write(status)
        .await
        .expect("first write")
    {
        StatusWrite::Written(w) => w,
        StatusWrite::Unchanged => panic!("a new status must be written"),
    };
    assert_eq!(status_patches(), 1);
    let stored = written.status.clone().expect("status stored");
    assert!(conditions::is_true(&stored.conditions, "Ready"));

    // The same status again, as a reconciler would rebuild it: no request.
    let mut again = stored.clone();
    assert!(!conditions::set(
        &mut again.conditions,
        conditions::ready(true, "Applied", "all applied"),
        written.metadata.generation,
    ));
    let outcome = applier
        .status(&written)
        .write(again)
        .await
        .expect("second write");
    assert!(matches!(outcome, StatusWrite::Unchanged), "{outcome:?}");
    // A condition rebuilt with a fresh transition time is not a change either.
    let mut fresh_time = stored.clone();
    fresh_time.conditions[0].last_transition_time = Time(
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1),
    );
    let outcome = applier
        .status(&written)
        .write(fresh_time)
        .await
        .expect("third write");
    assert!(matches!(outcome, StatusWrite::Unchanged), "{outcome:?}");
    assert_eq!(status_patches(), 1, "unchanged statuses send no request");

    // A new message is a change: written, and the transition time is kept.
    let mut changed = stored.clone();
    conditions::set(
        &mut changed.conditions,
        conditions::ready(true, "Applied", "all applied, twice"),
        written.metadata.generation,
    );
    let outcome = applier
        .status(&written)
        .write(changed)
        .await
        .expect("fourth write");
    assert!(outcome.is_written());
    assert_eq!(status_patches(), 2);
    let now = env.widget("w").await.status.expect("status");
    assert_eq!(now.conditions[0].message, "all applied, twice");
    assert_eq!(
        now.conditions[0].last_transition_time,
        stored.conditions[0].last_transition_time
    );
    assert_eq!(metrics.requests("409", "patch", "widgets", "status"), 0);
}

#[tokio::test]
async fn conditions_of_two_field_managers_survive_each_others_status_applies() {
    let env = Env::start("conditions").await;
    let ours = Applier::new(env.env.client(), "kubeapp-ours");
    let theirs = Applier::new(env.env.client(), "kubeapp-theirs");
    let widget = env.create_widget("w").await;

    let mut status = WidgetStatus {
        observed_generation: Some(1),
        ..Default::default()
    };
    conditions::set(
        &mut status.conditions,
        conditions::ready(true, "Applied", "ok"),
        Some(1),
    );
    assert!(
        ours.status(&widget)
            .write(status)
            .await
            .expect("ours")
            .is_written()
    );

    // The other manager writes only its own condition, from the object as it was before ours.
    let mut status = WidgetStatus::default();
    let synced = conditions::NewCondition::new("Synced", true, "Mirrored", "copied");
    conditions::set(&mut status.conditions, synced, None);
    let both = match theirs.status(&widget).write(status).await.expect("theirs") {
        StatusWrite::Written(w) => w,
        StatusWrite::Unchanged => panic!("a different status must be written"),
    };
    let types = |w: &Widget| -> Vec<String> {
        let mut t: Vec<String> = w
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().map(|c| c.type_.clone()))
            .collect();
        t.sort();
        t
    };
    assert_eq!(types(&both), ["Ready", "Synced"], "both conditions kept");
    assert_eq!(
        both.status.as_ref().and_then(|s| s.observed_generation),
        Some(1),
        "their None observedGeneration left ours alone"
    );
    let their_fields = fields_of(&both, "kubeapp-theirs", "status");
    assert!(
        their_fields.contains(r#"k:{\"type\":\"Synced\"}"#) && !their_fields.contains("Ready"),
        "{their_fields}"
    );
    let their_status: serde_json::Value =
        serde_json::from_str(&their_fields).expect("fieldsV1 is JSON");
    assert!(
        their_status["f:status"]
            .get("f:observedGeneration")
            .is_none(),
        "a None field is not declared: {their_fields}"
    );

    // Ours flips Ready from the newest object: Synced stays, and stays theirs.
    let mut status = both.status.clone().unwrap_or_default();
    conditions::set(
        &mut status.conditions,
        conditions::ready(false, "Broken", "no"),
        Some(1),
    );
    assert!(
        ours.status(&both)
            .write(status)
            .await
            .expect("ours again")
            .is_written()
    );
    let last = env.widget("w").await;
    assert_eq!(types(&last), ["Ready", "Synced"]);
    let conds = &last.status.as_ref().expect("status").conditions;
    assert_eq!(
        conditions::find(conds, "Ready").map(|c| c.status.as_str()),
        Some("False")
    );
    assert!(conditions::is_true(conds, "Synced"));
}

#[tokio::test]
async fn events_are_published_about_the_object() {
    let env = Env::start("events").await;
    let widget = env.create_widget("w").await;
    let recorder = EventRecorder::new(
        env.env.client(),
        Reporter {
            controller: "kubeapp-apply-test".into(),
            instance: Some("test-0".into()),
        },
    );
    recorder
        .normal(&widget, "Applied", "the ConfigMap was applied")
        .await
        .expect("normal event");
    recorder
        .warning(&widget, "ApplyFailed", "x".repeat(5000))
        .await
        .expect("warning event with an over-long note");

    let events: Api<Event> = Api::namespaced(env.env.client(), &env.ns);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    let find = |reason: &str| {
        list.items
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} event in {:#?}", list.items))
    };
    for (reason, type_) in [("Applied", "Normal"), ("ApplyFailed", "Warning")] {
        let event = find(reason);
        assert_eq!(event.type_.as_deref(), Some(type_));
        let regarding = event.regarding.as_ref().expect("regarding");
        assert_eq!(regarding.kind.as_deref(), Some("Widget"));
        assert_eq!(regarding.name.as_deref(), Some("w"));
        assert_eq!(regarding.uid, widget.metadata.uid);
        assert_eq!(
            event.reporting_controller.as_deref(),
            Some("kubeapp-apply-test")
        );
        assert_eq!(event.reporting_instance.as_deref(), Some("test-0"));
    }
    assert_eq!(
        find("ApplyFailed").note.as_ref().map(String::len),
        Some(1024)
    );
}
