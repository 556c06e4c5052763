//! Unit tests of the opinionated watcher's decisions and calls.

use super::*;
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

#[test]
fn a_deletion_is_seen_before_the_generation_filter() {
    let n = names();
    // Deleting changes no generation of objects with finalizers.
    assert_eq!(
        decide_update(&meta(3, &["ours"], false), &meta(3, &["ours"], true), &n),
        UpdateDecision::Delete
    );
    assert_eq!(
        decide_update(&meta(3, &["wip"], false), &meta(3, &["wip"], true), &n),
        UpdateDecision::Delete
    );
    assert_eq!(
        decide_update(&meta(3, &["x"], false), &meta(3, &["x"], true), &n),
        UpdateDecision::IgnoreDeleting
    );
}

#[test]
fn our_own_finalizer_patches_are_ignored() {
    let n = names();
    assert_eq!(
        decide_update(&meta(1, &["wip"], false), &meta(1, &["ours"], false), &n),
        UpdateDecision::IgnoreOwnPatch
    );
    assert_eq!(
        decide_update(&meta(1, &[], false), &meta(1, &["wip"], false), &n),
        UpdateDecision::IgnoreOwnPatch
    );
    // A re-list that folds our swap and a spec change into one update: the change counts.
    assert_eq!(
        decide_update(&meta(1, &["wip"], false), &meta(2, &["ours"], false), &n),
        UpdateDecision::Update
    );
}

#[test]
fn a_removed_finalizer_is_restored_without_calling_anything() {
    let n = names();
    assert_eq!(
        decide_update(&meta(1, &["x", "ours"], false), &meta(1, &["x"], false), &n),
        UpdateDecision::Restore
    );
    // Even when the spec changed in the same step: restore, not update.
    assert_eq!(
        decide_update(&meta(1, &["ours"], false), &meta(2, &[], false), &n),
        UpdateDecision::Restore
    );
}

#[test]
fn an_update_before_the_add_completed_goes_the_add_path_never_both() {
    let n = names();
    assert_eq!(
        decide_update(&meta(1, &["wip"], false), &meta(2, &["wip"], false), &n),
        UpdateDecision::CompleteAdd
    );
    assert_eq!(
        decide_update(&meta(1, &["wip"], false), &meta(1, &["wip"], false), &n),
        UpdateDecision::CompleteAdd
    );
    assert_eq!(
        decide_update(&meta(1, &[], false), &meta(2, &[], false), &n),
        UpdateDecision::CompleteAdd
    );
}

#[test]
fn same_generation_is_ignored_and_a_spec_change_is_an_update() {
    let n = names();
    assert_eq!(
        decide_update(&meta(4, &["ours"], false), &meta(4, &["ours"], false), &n),
        UpdateDecision::IgnoreSameGeneration
    );
    assert_eq!(
        decide_update(&meta(4, &["ours"], false), &meta(5, &["ours"], false), &n),
        UpdateDecision::Update
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
        decide_update(&meta(1, &["old"], false), &meta(1, &["ours"], false), &n),
        UpdateDecision::IgnoreSameGeneration
    );
    assert_eq!(
        decide_update(&meta(1, &["old"], false), &meta(1, &[], false), &n),
        UpdateDecision::Restore
    );
}
