//! The projection decoder: only the projected fields are read and kept, the metadata comes whole,
//! and projected fields of the wrong type make the object undecodable as with a full type.

use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::projection_decoder;
use crate::object::{as_undecodable, downcast_shared};
use crate::projection::{Projected, Projection};

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
struct Placement {
    spec: PlacementSpec,
    status: PlacementStatus,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct PlacementSpec {
    node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
struct PlacementStatus {
    phase: Option<String>,
}

impl Projection for Placement {
    type Of = Pod;
}

fn pod(node_name: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
            "labels": {"app": "x"}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "app", "image": "registry.example/app:1",
                "args": ["--serve"], "env": [{"name": "A", "value": "1"}]}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }))
    .expect("a DynamicObject")
}

#[test]
fn only_the_projected_fields_are_kept_and_the_metadata_is_whole() {
    let decode = projection_decoder::<Placement>(None);
    let shared = decode.convert(pod(json!("node-1"))).expect("decodes");
    let projected = downcast_shared::<Projected<Placement>>(&shared).expect("a projection");
    assert_eq!(projected.spec.node_name.as_deref(), Some("node-1"));
    assert_eq!(projected.status.phase.as_deref(), Some("Running"));
    assert_eq!(projected.meta().resource_version.as_deref(), Some("7"));
    assert_eq!(projected.meta().uid.as_deref(), Some("u-1"));
    let json = shared.to_json().expect("serializable");
    assert_eq!(
        json,
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "labels": {"app": "x"}},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running"},
        }),
        "containers and podIP are not cached"
    );
}

#[test]
fn a_projected_field_of_the_wrong_type_is_undecodable_and_other_fields_never_are() {
    let decode = projection_decoder::<Placement>(None);
    let undecodable = decode
        .convert(pod(json!(42)))
        .expect_err("nodeName is not a string");
    assert!(
        undecodable.error().contains("invalid type"),
        "{undecodable}"
    );
    assert_eq!(undecodable.raw().metadata.name.as_deref(), Some("p"));

    // A field outside the projection may hold anything: it is never read.
    let mut odd = pod(json!("node-1"));
    odd.data["spec"]["containers"] = json!("not a list");
    let shared = decode
        .convert(odd)
        .expect("the projection ignores containers");
    assert!(as_undecodable(&shared).is_none());
}

#[test]
fn the_transform_runs_on_the_projection() {
    let decode = projection_decoder::<Placement>(Some(std::sync::Arc::new(
        |projected: &mut Projected<Placement>| {
            *projected = Projected::new(projected.meta().clone(), Placement::default());
        },
    )));
    let shared = decode.convert(pod(json!("node-1"))).expect("decodes");
    let projected = downcast_shared::<Projected<Placement>>(&shared).expect("a projection");
    assert_eq!(projected.spec.node_name, None);
}
