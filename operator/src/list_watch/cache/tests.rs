//! Unit tests of the informer cache: the re-list diff, uid changes, shard ranges, and the
//! last decodable state an undecodable object carries, over its own map and a shared cache.

use super::*;
use crate::object::share;
use k8s_openapi::api::core::v1::ConfigMap;

fn cm(name: &str, uid: &str, rv: &str) -> SharedObject {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.uid = Some(uid.into());
    cm.metadata.resource_version = Some(rv.into());
    share(cm)
}

fn listed(object: SharedObject) -> Observed {
    Observed::Object {
        key: ObjectKey::of(object.as_ref()),
        object: Some(object),
        listed: true,
    }
}

fn describe(events: &[InformerEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let o = e.object().metadata();
            format!(
                "{:?} {} {}",
                e.action(),
                o.name.as_deref().unwrap_or(""),
                o.resource_version.as_deref().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn relist_turns_missing_objects_into_deletes_changed_into_updates_new_into_adds() {
    let mut cache = InformerCache::default();
    let mut out = Vec::new();
    cache.apply(Observed::ListStart { within: None }, &mut out);
    for obj in [cm("a", "1", "10"), cm("b", "2", "11"), cm("c", "3", "12")] {
        cache.apply(listed(obj), &mut out);
    }
    assert!(cache.apply(Observed::ListDone, &mut out), "synced");
    assert_eq!(
        describe(&out),
        ["Created a 10", "Created b 11", "Created c 12"]
    );

    // A disconnect, then a re-list: a unchanged, b changed, c gone, d new, e undecodable.
    out.clear();
    cache.apply(Observed::ListStart { within: None }, &mut out);
    cache.apply(listed(cm("a", "1", "10")), &mut out);
    cache.apply(listed(cm("b", "2", "20")), &mut out);
    cache.apply(listed(cm("d", "4", "21")), &mut out);
    cache.apply(
        Observed::Object {
            key: ObjectKey {
                namespace: Some("ns".into()),
                name: "e".into(),
            },
            object: None,
            listed: true,
        },
        &mut out,
    );
    cache.apply(Observed::ListDone, &mut out);
    assert_eq!(
        describe(&out),
        ["Updated b 20", "Created d 21", "Deleted c 12"]
    );
}

#[test]
fn same_name_with_a_new_uid_is_a_delete_then_an_add() {
    let mut cache = InformerCache::default();
    let mut out = Vec::new();
    cache.apply(listed(cm("a", "1", "10")), &mut out);
    cache.apply(listed(cm("a", "2", "30")), &mut out);
    assert_eq!(
        describe(&out),
        ["Created a 10", "Deleted a 10", "Created a 30"]
    );
}

#[test]
fn watch_delete_of_an_undecodable_object_reports_its_last_known_state() {
    let mut cache = InformerCache::default();
    let mut out = Vec::new();
    let a = cm("a", "1", "10");
    let key = ObjectKey::of(a.as_ref());
    cache.apply(listed(a), &mut out);
    cache.apply(Observed::Deleted { key, object: None }, &mut out);
    assert_eq!(describe(&out), ["Created a 10", "Deleted a 10"]);
    out.clear();
    cache.resync(&mut out);
    assert!(out.is_empty(), "gone from the cache");
}

/// Applies `observed` to an informer cache over a shared cache, publishing what it
/// produces to the shared cache as the shared informer does; returns the events.
fn observe_shared(
    informer: &mut InformerCache,
    shared: &SharedCache,
    observed: Observed,
) -> Vec<InformerEvent> {
    let mut out = Vec::new();
    informer.apply(observed, &mut out);
    for event in &out {
        shared.apply(event);
    }
    out
}

#[test]
fn over_a_shared_cache_relists_and_uid_changes_give_the_same_events_as_its_own_map() {
    let shared = Arc::new(SharedCache::new(crate::store::SyncedFlag::new(false)));
    let mut cache = InformerCache::shared(Arc::clone(&shared));
    let mut events = Vec::new();
    events.extend(observe_shared(
        &mut cache,
        &shared,
        Observed::ListStart { within: None },
    ));
    for obj in [cm("a", "1", "10"), cm("b", "2", "11"), cm("c", "3", "12")] {
        events.extend(observe_shared(&mut cache, &shared, listed(obj)));
    }
    events.extend(observe_shared(&mut cache, &shared, Observed::ListDone));
    assert_eq!(
        describe(&events),
        ["Created a 10", "Created b 11", "Created c 12"]
    );
    assert_eq!(
        shared.read().objects.len(),
        3,
        "one copy, in the shared cache"
    );

    let mut events = Vec::new();
    events.extend(observe_shared(
        &mut cache,
        &shared,
        Observed::ListStart { within: None },
    ));
    events.extend(observe_shared(
        &mut cache,
        &shared,
        listed(cm("a", "1", "10")),
    ));
    events.extend(observe_shared(
        &mut cache,
        &shared,
        listed(cm("b", "2", "20")),
    ));
    events.extend(observe_shared(
        &mut cache,
        &shared,
        listed(cm("d", "4", "21")),
    ));
    events.extend(observe_shared(&mut cache, &shared, Observed::ListDone));
    assert_eq!(
        describe(&events),
        ["Updated b 20", "Created d 21", "Deleted c 12"]
    );

    // Same name, new uid: a delete of the old object, then an add.
    let events = observe_shared(&mut cache, &shared, listed(cm("a", "9", "30")));
    assert_eq!(describe(&events), ["Deleted a 10", "Created a 30"]);
    let keys: Vec<String> = shared
        .snapshot()
        .iter()
        .map(|o| o.metadata().resource_version.clone().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["30", "20", "21"], "a (new), b, d");
}

fn undecodable(name: &str, uid: &str, rv: &str) -> SharedObject {
    let raw: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv },
        "data": { "k": 1 },
    }))
    .expect("raw");
    let error = serde_json::from_str::<u8>("-1").expect_err("a serde error");
    share(Undecodable::new(raw, &error, "ConfigMap"))
}

/// What each event says, with the last decodable state an undecodable object carries.
fn describe_views(events: &[InformerEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let o = e.object();
            let last = as_undecodable(o).map(|u| {
                u.last_decodable()
                    .and_then(|l| l.metadata().resource_version.clone())
                    .unwrap_or_else(|| "none".into())
            });
            format!(
                "{:?} {} {}{}",
                e.action(),
                o.metadata().name.as_deref().unwrap_or(""),
                o.metadata().resource_version.as_deref().unwrap_or(""),
                last.map(|l| format!(" (last decodable {l})"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// a: decodable, undecodable twice, deleted; b: undecodable, then decodable; c: decodable,
/// undecodable, re-created under a new uid while undecodable.
fn through_undecodable_states(
    mut apply: impl FnMut(Observed) -> Vec<InformerEvent>,
) -> Vec<InformerEvent> {
    let key = |name: &str| ObjectKey {
        namespace: Some("ns".into()),
        name: name.into(),
    };
    let mut events = Vec::new();
    for observed in [
        listed(cm("a", "a-uid", "1")),
        listed(undecodable("a", "a-uid", "2")),
        listed(undecodable("a", "a-uid", "3")),
        Observed::Deleted {
            key: key("a"),
            object: Some(undecodable("a", "a-uid", "4")),
        },
        listed(undecodable("b", "b-uid", "5")),
        listed(cm("b", "b-uid", "6")),
        listed(cm("c", "c-uid", "7")),
        listed(undecodable("c", "c-uid", "8")),
        listed(undecodable("c", "c2-uid", "9")),
    ] {
        events.extend(apply(observed));
    }
    events
}

#[test]
fn an_undecodable_state_carries_the_last_decodable_one_and_a_first_decodable_state_is_an_add() {
    let expected = [
        "Created a 1",
        "Updated a 2 (last decodable 1)",
        "Updated a 3 (last decodable 1)",
        "Deleted a 4 (last decodable 1)",
        "Created b 5 (last decodable none)",
        "Created b 6",
        "Created c 7",
        "Updated c 8 (last decodable 7)",
        "Deleted c 8 (last decodable 7)",
        "Created c 9 (last decodable none)",
    ];
    let mut cache = InformerCache::default();
    let events = through_undecodable_states(|observed| {
        let mut out = Vec::new();
        cache.apply(observed, &mut out);
        out
    });
    assert_eq!(describe_views(&events), expected, "own map");
    // The carried state is the cached allocation itself, not a copy.
    let first = events[0].object();
    let carried = as_undecodable(events[1].object()).expect("undecodable");
    assert!(Arc::ptr_eq(first, carried.last_decodable().expect("set")));

    let shared = Arc::new(SharedCache::new(crate::store::SyncedFlag::new(false)));
    let mut cache = InformerCache::shared(Arc::clone(&shared));
    let events =
        through_undecodable_states(|observed| observe_shared(&mut cache, &shared, observed));
    assert_eq!(describe_views(&events), expected, "shared cache");
}

/// Lists a, b, c (uids a-uid, b-uid, c-uid), then re-lists over a range without b-uid (a shard
/// range, say) seeing a and a new d: b left the range (forgotten), c was deleted (inside the range).
fn relist_after_a_range_change(
    mut apply: impl FnMut(Observed) -> Vec<InformerEvent>,
) -> Vec<InformerEvent> {
    // The range of the second list: every uid but b's.
    let within: ListRange =
        Arc::new(|object: &SharedObject| object.metadata().uid.as_deref() != Some("b-uid"));
    apply(Observed::ListStart { within: None });
    for obj in [
        cm("a", "a-uid", "10"),
        cm("b", "b-uid", "11"),
        cm("c", "c-uid", "12"),
    ] {
        apply(listed(obj));
    }
    apply(Observed::ListDone);
    let mut events = apply(Observed::ListStart {
        within: Some(within),
    });
    events.extend(apply(listed(cm("a", "a-uid", "10"))));
    events.extend(apply(listed(cm("d", "d-uid", "13"))));
    events.extend(apply(Observed::ListDone));
    events
}

#[test]
fn a_relist_within_shard_slots_forgets_objects_outside_them_and_deletes_those_inside() {
    let mut cache = InformerCache::default();
    let events = relist_after_a_range_change(|observed| {
        let mut out = Vec::new();
        cache.apply(observed, &mut out);
        out
    });
    assert_eq!(describe(&events), ["Created d 13", "Deleted c 12"]);
    let mut out = Vec::new();
    cache.resync(&mut out);
    assert_eq!(
        describe(&out),
        ["Resynced a 10", "Resynced d 13"],
        "b forgotten"
    );

    let shared = Arc::new(SharedCache::new(crate::store::SyncedFlag::new(false)));
    let mut cache = InformerCache::shared(Arc::clone(&shared));
    let events =
        relist_after_a_range_change(|observed| observe_shared(&mut cache, &shared, observed));
    assert_eq!(describe(&events), ["Created d 13", "Deleted c 12"]);
    let names: Vec<String> = shared
        .snapshot()
        .iter()
        .map(|o| o.metadata().name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["a", "d"], "b forgotten from the shared cache too");
}
