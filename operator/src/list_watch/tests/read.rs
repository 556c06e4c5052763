//! The lister that reads each object from the response's bytes (`read.rs`), over a fake
//! apiserver that answers one list page and one watch line.

use std::sync::Arc;

use futures::StreamExt;
use http::{Request, Response};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::read::{ProjectionOf, Typed, lister};
use crate::list_scope::{Listed, ListedObject};
use crate::object::{SharedObject, as_undecodable, downcast_shared};
use crate::projection::{Projected, Projection};

fn config_map(name: &str, rv: &str, data: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {
            "name": name, "namespace": "ns", "uid": format!("{name}-uid"), "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "data": data,
    })
}

/// An apiserver whose list holds `items` (as a built-in kind's list does: no `kind` per item)
/// and whose watch sends `watched` once.
fn fake_apiserver(items: Vec<serde_json::Value>, watched: serde_json::Value) -> kube::Client {
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let uri = request.uri().to_string();
        let body = if uri.contains("watch=true") {
            // The apiserver writes `type` first (`json!` would sort the keys).
            format!("{{\"type\":\"MODIFIED\",\"object\":{watched}}}\n")
        } else {
            json!({
                "apiVersion": "v1", "kind": "List",
                "metadata": {"resourceVersion": "20"},
                "items": items,
            })
            .to_string()
        };
        async move {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .body(kube::client::Body::from(body.into_bytes()))
                    .expect("a response"),
            )
        }
    });
    kube::Client::new(service, "ns")
}

/// The events of the list and the first watch event, each object as the lister handed it.
async fn first_events(
    client: kube::Client,
    lister: crate::list_scope::Lister,
    resource: &ApiResource,
) -> Vec<Result<Event<SharedObject>, String>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client, "ns", resource);
    let mut raw = lister.watch(api, watcher::Config::default());
    let mut seen = Vec::new();
    while let Some(item) = raw.next().await {
        let done = matches!(item, Ok(Event::Apply(_)));
        seen.push(
            item.map(|event| crate::list_scope::map_event(event, read_object))
                .map_err(|error| error.to_string()),
        );
        if done || seen.len() > 10 {
            break;
        }
    }
    seen
}

fn read_object(object: ListedObject) -> SharedObject {
    match object.0 {
        Listed::Read { key, object } => {
            assert_eq!(key.name, object.metadata().name.clone().unwrap_or_default());
            object
        }
        Listed::Dynamic(object) => panic!("expected an object read from its bytes: {object:?}"),
    }
}

fn applied(events: &[Result<Event<SharedObject>, String>]) -> Vec<SharedObject> {
    events
        .iter()
        .filter_map(|event| match event {
            Ok(Event::InitApply(object) | Event::Apply(object)) => Some(Arc::clone(object)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn objects_are_read_into_the_type_and_one_that_does_not_fit_fails_alone() {
    let client = fake_apiserver(
        vec![
            config_map("a", "11", json!({"k": "v"})),
            config_map("bad", "12", json!({"k": 42})),
            config_map("c", "13", json!({})),
        ],
        config_map("bad", "21", json!({"k": "fixed"})),
    );
    let resource = ApiResource::erase::<ConfigMap>(&());
    let transform: super::TypedTransform<ConfigMap> = Arc::new(|cm: &mut ConfigMap| {
        cm.metadata
            .labels
            .get_or_insert_default()
            .insert("transformed".into(), "yes".into());
    });
    let lister = lister::<Typed<ConfigMap>>(resource.clone(), false, Some(transform));
    let events = first_events(client, lister, &resource).await;
    assert!(
        matches!(events.first(), Some(Ok(Event::Init))),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|event| matches!(event, Ok(Event::InitDone))),
        "{events:?}"
    );
    let objects = applied(&events);
    assert_eq!(objects.len(), 4, "three listed, one watched: {events:?}");

    let a = downcast_shared::<ConfigMap>(&objects[0]).expect("a is a ConfigMap");
    assert_eq!(
        a.data.as_ref().and_then(|d| d.get("k")).map(String::as_str),
        Some("v")
    );
    assert_eq!(a.metadata.managed_fields, None, "managedFields are dropped");
    assert_eq!(
        a.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("transformed"))
            .map(String::as_str),
        Some("yes"),
        "the typed transform ran"
    );

    let bad = as_undecodable(&objects[1]).expect("bad does not fit ConfigMap");
    assert_eq!(bad.raw().metadata.name.as_deref(), Some("bad"));
    assert_eq!(bad.raw().metadata.resource_version.as_deref(), Some("12"));
    assert_eq!(bad.raw().metadata.managed_fields, None);
    assert!(bad.error().contains("invalid type"), "{}", bad.error());
    assert!(bad.to_string().contains("ConfigMap"), "{bad}");

    assert!(
        downcast_shared::<ConfigMap>(&objects[2]).is_some(),
        "c after the bad one"
    );
    let fixed = downcast_shared::<ConfigMap>(&objects[3]).expect("the watched fix decodes");
    assert_eq!(fixed.metadata.resource_version.as_deref(), Some("21"));
}

#[tokio::test]
async fn managed_fields_stay_when_the_informer_keeps_them() {
    let client = fake_apiserver(
        vec![config_map("a", "11", json!({}))],
        config_map("a", "21", json!({})),
    );
    let resource = ApiResource::erase::<ConfigMap>(&());
    let lister = lister::<Typed<ConfigMap>>(resource.clone(), true, None);
    let objects = applied(&first_events(client, lister, &resource).await);
    let a = downcast_shared::<ConfigMap>(&objects[0]).expect("a ConfigMap");
    assert_eq!(a.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
}

#[derive(Clone, Debug, Deserialize, Serialize)]
struct Placement {
    spec: PlacementSpec,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct PlacementSpec {
    node_name: Option<String>,
}

impl Projection for Placement {
    type Of = Pod;
}

fn pod(name: &str, rv: &str, node: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                     "managedFields": [{"manager": "kubelet"}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"podIP": "10.0.0.1"},
    })
}

#[tokio::test]
async fn a_projection_is_read_with_its_metadata_and_a_bad_projected_field_fails_alone() {
    let client = fake_apiserver(
        vec![pod("a", "11", json!("node-1")), pod("bad", "12", json!(7))],
        pod("b", "21", json!("node-2")),
    );
    let resource = ApiResource::erase::<Pod>(&());
    let lister = lister::<ProjectionOf<Placement>>(resource.clone(), false, None);
    let objects = applied(&first_events(client, lister, &resource).await);
    assert_eq!(objects.len(), 3);
    let a = downcast_shared::<Projected<Placement>>(&objects[0]).expect("a projection");
    assert_eq!(a.spec.node_name.as_deref(), Some("node-1"));
    assert_eq!(a.meta().resource_version.as_deref(), Some("11"));
    assert_eq!(a.meta().managed_fields, None);
    let bad = as_undecodable(&objects[1]).expect("nodeName 7 does not fit");
    assert!(bad.to_string().contains("Placement"), "{bad}");
    let b = downcast_shared::<Projected<Placement>>(&objects[2]).expect("b");
    assert_eq!(b.spec.node_name.as_deref(), Some("node-2"));
}

#[tokio::test]
async fn an_item_that_is_not_an_object_fails_the_list() {
    let client = fake_apiserver(
        vec![config_map("a", "11", json!({})), json!(42)],
        config_map("a", "21", json!({})),
    );
    let resource = ApiResource::erase::<ConfigMap>(&());
    let lister = lister::<Typed<ConfigMap>>(resource.clone(), false, None);
    let api: Api<DynamicObject> = Api::namespaced_with(client, "ns", &resource);
    let mut raw = lister.watch(api, watcher::Config::default());
    let mut saw_error = None;
    while let Some(item) = raw.next().await {
        if let Err(error) = item {
            saw_error = Some(error.to_string());
            break;
        }
    }
    let error = saw_error.expect("the list fails");
    assert!(
        error.contains("42") || error.contains("invalid type"),
        "{error}"
    );
}
