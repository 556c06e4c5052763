//! The view rules on hand-made objects: downcasts without copies, wrong types, and what an
//! update is between decodable and undecodable states.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::*;
use crate::object::{Undecodable, share};

fn cm(name: &str, rv: &str) -> SharedObject {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.uid = Some(format!("uid-{name}"));
    cm.metadata.resource_version = Some(rv.into());
    share(cm)
}

fn undecodable(name: &str, rv: &str, last: Option<&SharedObject>) -> SharedObject {
    let raw: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "uid": format!("uid-{name}"), "resourceVersion": rv },
        "data": { "k": 1 },
    }))
    .expect("raw");
    let error = serde_json::from_str::<u8>("-1").expect_err("a serde error");
    let state = Undecodable::new(raw, &error, "ConfigMap");
    share(match last {
        Some(last) => state.with_last_decodable(Arc::clone(last)),
        None => state,
    })
}

fn rv(object: &ConfigMap) -> &str {
    object.metadata.resource_version.as_deref().unwrap_or("")
}

fn describe(change: &ViewChange<ConfigMap>) -> String {
    match change {
        ViewChange::Update(old, new) => format!("update {} -> {}", rv(old), rv(new)),
        ViewChange::Add(new) => format!("add {}", rv(new)),
        ViewChange::Unchanged => "unchanged".into(),
    }
}

/// The owned downcast the typed path uses: the same allocation for the expected type, the last
/// decodable state (or nothing) for an undecodable object, an error naming both types for any
/// other.
#[test]
fn an_owned_view_keeps_the_allocation_resolves_undecodable_states_and_names_a_wrong_type() {
    let shared = cm("a", "1");
    let address = Arc::as_ptr(&shared).cast::<()>();
    let typed = view_owned::<ConfigMap>(shared)
        .expect("a ConfigMap")
        .expect("decoded");
    assert_eq!(Arc::as_ptr(&typed).cast::<()>(), address, "no copy");
    assert_eq!(Arc::strong_count(&typed), 1, "no reference left behind");

    assert!(
        view_owned::<ConfigMap>(undecodable("b", "2", None))
            .expect("skipped, not an error")
            .is_none()
    );
    let last = cm("b", "1");
    let seen = view_owned::<ConfigMap>(undecodable("b", "2", Some(&last)))
        .expect("a ConfigMap")
        .expect("the last decodable state");
    assert!(std::ptr::addr_eq(Arc::as_ptr(&seen), Arc::as_ptr(&last)));

    let error = view_owned::<ConfigMap>(share(Secret::default()))
        .expect_err("a Secret is no ConfigMap")
        .to_string();
    assert!(
        error.contains("ConfigMap") && error.contains("Secret"),
        "{error}"
    );
    match view_change_owned::<ConfigMap>(share(Secret::default()), cm("c", "1")) {
        Err(error) => assert!(error.to_string().contains("Secret"), "{error}"),
        Ok(_) => panic!("an update from a Secret is an error"),
    }
}

#[test]
fn an_update_is_a_change_of_the_view_or_nothing() {
    let one = cm("a", "1");
    let into = undecodable("a", "2", Some(&one));
    let within = undecodable("a", "3", Some(&one));
    let back = cm("a", "4");
    let never = undecodable("a", "5", None);
    // Another copy of state 1 (a re-list's), not the cached allocation.
    let copy_of_one = cm("a", "1");
    let cases = [
        ("decodable", &one, &back, "update 1 -> 4"),
        ("into undecodable", &one, &into, "unchanged"),
        ("between undecodable", &into, &within, "unchanged"),
        ("back to decodable", &within, &back, "update 1 -> 4"),
        ("first decodable", &never, &back, "add 4"),
        ("never decodable", &never, &never, "unchanged"),
        (
            "resync of an undecodable",
            &within,
            &within,
            "update 1 -> 1",
        ),
        ("resync", &one, &one, "update 1 -> 1"),
        (
            "into undecodable, other copy",
            &copy_of_one,
            &into,
            "unchanged",
        ),
    ];
    for (what, old, new, expected) in cases {
        let by_ref = view_change::<ConfigMap>(old, new).expect("ConfigMaps");
        let owned =
            view_change_owned::<ConfigMap>(Arc::clone(old), Arc::clone(new)).expect("ConfigMaps");
        assert_eq!(describe(&by_ref), expected, "{what}");
        assert_eq!(describe(&owned), expected, "{what} (owned)");
    }
}
