use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use super::cache::SharedCache;
use super::{Store, StoreError, label_index, label_indexer};
use crate::object::{Undecodable, share};
use crate::store::{InformerEvent, SyncedFlag};

fn cm(name: &str, rv: &str, app: &str, owner: Option<&str>) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.resource_version = Some(rv.into());
    cm.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    cm.metadata.owner_references = owner.map(|uid| {
        vec![OwnerReference {
            uid: uid.into(),
            ..OwnerReference::default()
        }]
    });
    cm
}

fn cache() -> Arc<SharedCache> {
    let cache = Arc::new(SharedCache::new(SyncedFlag::new_synced()));
    cache.add_index(Arc::from(label_index("app")), label_indexer("app"));
    cache
}

fn names(objects: Vec<Arc<ConfigMap>>) -> Vec<String> {
    let mut names: Vec<String> = objects
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

#[test]
fn reads_follow_adds_updates_and_deletes_and_indexes_follow_changes() {
    let cache = cache();
    let store = Store::<ConfigMap>::new(Arc::clone(&cache), None);
    cache.apply(&InformerEvent::Add(share(cm("a", "1", "web", Some("u1")))));
    cache.apply(&InformerEvent::Add(share(cm("b", "2", "web", None))));
    cache.apply(&InformerEvent::Add(share(cm("c", "3", "db", Some("u1")))));
    assert_eq!(names(store.by_label("app", "web").unwrap()), ["a", "b"]);
    assert_eq!(names(store.by_owner("u1")), ["a", "c"]);

    // `a` moves from web to db and loses its owner; `b` is deleted.
    cache.apply(&InformerEvent::Update {
        old: share(cm("a", "1", "web", Some("u1"))),
        new: share(cm("a", "4", "db", None)),
    });
    cache.apply(&InformerEvent::Delete(share(cm("b", "5", "web", None))));
    assert!(store.by_label("app", "web").unwrap().is_empty());
    assert_eq!(names(store.by_label("app", "db").unwrap()), ["a", "c"]);
    assert_eq!(names(store.by_owner("u1")), ["c"]);
    assert_eq!(names(store.state()), ["a", "c"]);
    assert_eq!(names(store.list(Some("ns"))), ["a", "c"]);
    assert!(store.list(Some("other")).is_empty());
    let a = store
        .get(&ObjectRef::new("a").within("ns"))
        .expect("a is cached");
    assert_eq!(a.metadata.resource_version.as_deref(), Some("4"));
    assert!(store.get(&ObjectRef::new("b").within("ns")).is_none());
    assert!(matches!(
        store.by_label("tier", "x"),
        Err(StoreError::NotIndexed { .. })
    ));
}

#[test]
fn an_index_added_later_covers_what_is_cached_already() {
    let cache = Arc::new(SharedCache::new(SyncedFlag::new_synced()));
    cache.apply(&InformerEvent::Add(share(cm("a", "1", "web", None))));
    let store = Store::<ConfigMap>::new(Arc::clone(&cache), None);
    assert!(store.by_label("app", "web").is_err());
    cache.add_index(Arc::from(label_index("app")), label_indexer("app"));
    assert_eq!(names(store.by_label("app", "web").unwrap()), ["a"]);
}

#[test]
fn a_typed_store_skips_undecodable_objects_and_objects_of_other_types() {
    let cache = cache();
    let raw: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "9"},
        "data": 5
    }))
    .unwrap();
    let error = serde_json::from_value::<ConfigMap>(serde_json::json!({"data": 5})).unwrap_err();
    cache.apply(&InformerEvent::Add(share(Undecodable::new(
        raw,
        &error,
        "ConfigMap",
    ))));
    cache.apply(&InformerEvent::Add(share(cm("good", "10", "web", None))));
    let store = Store::<ConfigMap>::new(Arc::clone(&cache), None);
    assert_eq!(names(store.state()), ["good"]);
    assert_eq!(store.len(), 2, "the undecodable object is cached");
    assert!(Store::<Secret>::new(cache, None).state().is_empty());
}

#[tokio::test]
async fn wait_for_version_returns_once_the_version_is_seen() {
    let cache = cache();
    let store = Store::<ConfigMap>::new(Arc::clone(&cache), None);
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.wait_for_version("7", Duration::from_secs(30)).await }
    });
    cache.apply(&InformerEvent::Add(share(cm("a", "5", "web", None))));
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "version 5 is below 7");
    cache.apply(&InformerEvent::Add(share(cm("b", "8", "web", None))));
    waiting.await.unwrap().expect("8 >= 7");
    assert!(matches!(
        store.wait_for_version("abc", Duration::from_secs(1)).await,
        Err(StoreError::OpaqueVersion { .. })
    ));
    assert!(matches!(
        store
            .wait_for_version("100", Duration::from_millis(50))
            .await,
        Err(StoreError::Timeout { .. })
    ));
}

#[test]
fn objects_are_found_by_namespace_and_name_and_owner_changes_move_them_in_the_owner_index() {
    let cache = cache();
    let store = Store::<ConfigMap>::new(Arc::clone(&cache), None);
    let mut other_ns = cm("a", "2", "web", Some("u2"));
    other_ns.metadata.namespace = Some("other".into());
    let mut cluster = cm("a", "3", "web", None);
    cluster.metadata.namespace = None;
    cache.apply(&InformerEvent::Add(share(cm("a", "1", "web", Some("u1")))));
    cache.apply(&InformerEvent::Add(share(other_ns)));
    cache.apply(&InformerEvent::Add(share(cluster)));
    assert_eq!(
        store.len(),
        3,
        "same name, other namespace or none: three objects"
    );

    // Updated in place: same owner (the index is kept), then another owner (the index moves).
    cache.apply(&InformerEvent::Update {
        old: share(cm("a", "1", "web", Some("u1"))),
        new: share(cm("a", "4", "web", Some("u1"))),
    });
    assert_eq!(store.len(), 3);
    assert_eq!(names(store.by_owner("u1")), ["a"]);
    cache.apply(&InformerEvent::Update {
        old: share(cm("a", "4", "web", Some("u1"))),
        new: share(cm("a", "5", "web", Some("u3"))),
    });
    assert!(store.by_owner("u1").is_empty());
    assert_eq!(names(store.by_owner("u3")), ["a"]);
    let version = |namespace: Option<&str>| {
        let key = match namespace {
            Some(ns) => ObjectRef::new("a").within(ns),
            None => ObjectRef::new("a"),
        };
        store
            .get(&key)
            .and_then(|cm| cm.metadata.resource_version.clone())
    };
    assert_eq!(version(Some("ns")).as_deref(), Some("5"));
    assert_eq!(version(Some("other")).as_deref(), Some("2"));
    assert_eq!(version(None).as_deref(), Some("3"));

    cache.apply(&InformerEvent::Delete(share(cm(
        "a",
        "6",
        "web",
        Some("u3"),
    ))));
    assert!(store.by_owner("u3").is_empty());
    assert_eq!(names(store.by_owner("u2")), ["a"]);
    assert_eq!(store.len(), 2);
}
