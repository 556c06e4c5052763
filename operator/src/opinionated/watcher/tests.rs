//! Unit tests of the opinionated watcher's decisions and calls.

use super::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn names() -> FinalizerNames {
    FinalizerNames::unchecked("ours", "wip")
}

fn meta(generation: i64, finalizers: &[&str], deleting: bool) -> ObjectMeta {
    ObjectMeta {
        generation: Some(generation),
        finalizers: Some(finalizers.iter().map(|s| (*s).to_string()).collect()),
        deletion_timestamp: deleting.then(|| Time(Default::default())),
        ..ObjectMeta::default()
    }
}

#[test]
fn add_decisions_follow_the_contract_order() {
    let n = names();
    assert_eq!(
        decide_add(&meta(1, &["ours"], true), &n),
        AddDecision::Delete
    );
    assert_eq!(
        decide_add(&meta(1, &["wip"], true), &n),
        AddDecision::Delete
    );
    assert_eq!(
        decide_add(&meta(1, &["other"], true), &n),
        AddDecision::IgnoreDeleting
    );
    assert_eq!(
        decide_add(&meta(1, &["other", "ours"], false), &n),
        AddDecision::Sync {
            drop_in_progress: false
        }
    );
    assert_eq!(
        decide_add(&meta(1, &["ours", "wip"], false), &n),
        AddDecision::Sync {
            drop_in_progress: true
        }
    );
    assert_eq!(decide_add(&meta(1, &["wip"], false), &n), AddDecision::Add);
    assert_eq!(decide_add(&meta(1, &[], false), &n), AddDecision::Add);
}

/// An object of a kind with a generation (the kind does not matter to the decisions).
fn obj(generation: i64, finalizers: &[&str], deleting: bool) -> ConfigMap {
    ConfigMap {
        metadata: meta(generation, finalizers, deleting),
        ..ConfigMap::default()
    }
}

fn decide(old: &ConfigMap, new: &ConfigMap) -> UpdateDecision {
    decide_update(old, new, &names(), None)
}

#[test]
fn a_deletion_is_seen_before_the_generation_filter() {
    // Deleting changes no generation of objects with finalizers.
    assert_eq!(
        decide(&obj(3, &["ours"], false), &obj(3, &["ours"], true)),
        UpdateDecision::Delete
    );
    assert_eq!(
        decide(&obj(3, &["wip"], false), &obj(3, &["wip"], true)),
        UpdateDecision::Delete
    );
    assert_eq!(
        decide(&obj(3, &["x"], false), &obj(3, &["x"], true)),
        UpdateDecision::IgnoreDeleting
    );
}

#[test]
fn our_own_finalizer_patches_are_ignored() {
    assert_eq!(
        decide(&obj(1, &["wip"], false), &obj(1, &["ours"], false)),
        UpdateDecision::IgnoreOwnPatch
    );
    assert_eq!(
        decide(&obj(1, &[], false), &obj(1, &["wip"], false)),
        UpdateDecision::IgnoreOwnPatch
    );
    // A re-list that folds our swap and a spec change into one update: the change counts.
    assert_eq!(
        decide(&obj(1, &["wip"], false), &obj(2, &["ours"], false)),
        UpdateDecision::Update
    );
}

#[test]
fn a_removed_finalizer_is_restored_without_calling_anything() {
    assert_eq!(
        decide(&obj(1, &["x", "ours"], false), &obj(1, &["x"], false)),
        UpdateDecision::Restore
    );
    // Even when the spec changed in the same step: restore, not update.
    assert_eq!(
        decide(&obj(1, &["ours"], false), &obj(2, &[], false)),
        UpdateDecision::Restore
    );
}

#[test]
fn an_update_before_the_add_completed_goes_the_add_path_never_both() {
    assert_eq!(
        decide(&obj(1, &["wip"], false), &obj(2, &["wip"], false)),
        UpdateDecision::CompleteAdd
    );
    assert_eq!(
        decide(&obj(1, &["wip"], false), &obj(1, &["wip"], false)),
        UpdateDecision::CompleteAdd
    );
    assert_eq!(
        decide(&obj(1, &[], false), &obj(2, &[], false)),
        UpdateDecision::CompleteAdd
    );
}

#[test]
fn same_generation_is_ignored_and_a_spec_change_is_an_update() {
    assert_eq!(
        decide(&obj(4, &["ours"], false), &obj(4, &["ours"], false)),
        UpdateDecision::IgnoreUnchanged
    );
    assert_eq!(
        decide(&obj(4, &["ours"], false), &obj(5, &["ours"], false)),
        UpdateDecision::Update
    );
}

/// Defect 0: the event of a spec change made while `add` ran is compared with what the add saw;
/// before, `gen1+wip -> gen2+wip` was folded into the add that had read gen1.
#[test]
fn a_spec_change_made_while_add_ran_is_an_update_from_what_the_add_saw() {
    let n = names();
    let saw = obj(1, &[], false);
    let after = |old: &ConfigMap, new: &ConfigMap| decide_update(old, new, &n, Some(&saw));
    // The change landed after the in-progress finalizer, before our swap.
    assert_eq!(
        after(&obj(1, &["wip"], false), &obj(2, &["wip"], false)),
        UpdateDecision::ChangedSinceAdd
    );
    // The change landed before the in-progress patch (which then met a 409 and re-read).
    assert_eq!(
        after(&obj(1, &[], false), &obj(2, &[], false)),
        UpdateDecision::ChangedSinceAdd
    );
    // Our swap landed on the new generation: the swap's event looks like our own patch.
    assert_eq!(
        after(&obj(2, &["wip"], false), &obj(2, &["ours"], false)),
        UpdateDecision::ChangedSinceAdd
    );
    // Nothing changed since the add: the swap's event confirms it; earlier events wait for it.
    assert_eq!(
        after(&obj(1, &["wip"], false), &obj(1, &["ours"], false)),
        UpdateDecision::AddConfirmed
    );
    assert_eq!(
        after(&obj(1, &[], false), &obj(1, &["wip"], false)),
        UpdateDecision::CompleteAdd
    );
    // A deletion still comes first.
    assert_eq!(
        after(&obj(1, &["wip"], false), &obj(2, &["wip"], true)),
        UpdateDecision::Delete
    );
}

/// A ConfigMap as the API server sends it: no generation.
fn config_map(rv: &str, finalizers: &[&str], value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            resource_version: Some(rv.into()),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_string()).collect()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// Defect 1: without a generation, every change but our own finalizer patch is an update.
#[test]
fn without_a_generation_every_change_but_our_own_patch_is_an_update() {
    let handled = config_map("5", &["ours"], "a");
    assert_eq!(
        decide(&handled, &config_map("6", &["ours"], "b")),
        UpdateDecision::Update
    );
    let mut labelled = config_map("6", &["ours"], "a");
    labelled.metadata.labels = Some([("l".to_string(), "v".to_string())].into());
    assert_eq!(decide(&handled, &labelled), UpdateDecision::Update);
    // Another controller's finalizer is a change too; a resync of the same version is not.
    assert_eq!(
        decide(&handled, &config_map("6", &["ours", "other"], "a")),
        UpdateDecision::Update
    );
    assert_eq!(decide(&handled, &handled), UpdateDecision::IgnoreUnchanged);
    // Our own patches change nothing else.
    assert_eq!(
        decide(&config_map("1", &[], "a"), &config_map("2", &["wip"], "a")),
        UpdateDecision::IgnoreOwnPatch
    );
    assert_eq!(
        decide(
            &config_map("2", &["wip"], "a"),
            &config_map("3", &["ours"], "a")
        ),
        UpdateDecision::IgnoreOwnPatch
    );
    // Folded with a data change (a re-list), the change counts.
    assert_eq!(
        decide(
            &config_map("2", &["wip"], "a"),
            &config_map("4", &["ours"], "b")
        ),
        UpdateDecision::Update
    );
    // And a data change while the add ran is an update from what the add saw.
    let saw = config_map("1", &[], "a");
    assert_eq!(
        decide_update(
            &config_map("2", &["wip"], "a"),
            &config_map("3", &["wip"], "b"),
            &names(),
            Some(&saw)
        ),
        UpdateDecision::ChangedSinceAdd
    );
    assert_eq!(
        decide_update(
            &config_map("2", &["wip"], "a"),
            &config_map("3", &["ours"], "a"),
            &names(),
            Some(&saw)
        ),
        UpdateDecision::AddConfirmed
    );
}

#[test]
fn legacy_names_count_as_ours_and_a_sync_upgrades_them() {
    let n = FinalizerNames::unchecked("ours", "wip")
        .with_legacy(["old".to_string()], ["old-wip".to_string()]);
    assert_eq!(
        decide_add(&meta(1, &["old"], false), &n),
        AddDecision::Sync {
            drop_in_progress: true
        }
    );
    assert_eq!(
        decide_add(&meta(1, &["old-wip"], true), &n),
        AddDecision::Delete
    );
    assert_eq!(
        decide_add(&meta(1, &["old-wip"], false), &n),
        AddDecision::Add
    );
    // The upgrade patch (legacy out, ours in) is no event of note; a removal of it is.
    assert_eq!(
        decide_update(
            &obj(1, &["old"], false),
            &obj(1, &["ours"], false),
            &n,
            None
        ),
        UpdateDecision::IgnoreUnchanged
    );
    assert_eq!(
        decide_update(&obj(1, &["old"], false), &obj(1, &[], false), &n, None),
        UpdateDecision::Restore
    );
}
