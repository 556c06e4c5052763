//! Unit tests of the opinionated reconciler's decisions.

use super::Delivery::{Creating, Nothing};
use super::ReconcileAction::{Created, Deleted, Resynced, Updated};
use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn meta(finalizers: &[&str], deleting: bool) -> ObjectMeta {
    ObjectMeta {
        finalizers: Some(finalizers.iter().map(|s| (*s).to_string()).collect()),
        deletion_timestamp: deleting.then(|| Time(Default::default())),
        ..ObjectMeta::default()
    }
}

fn ours() -> FinalizerNames {
    FinalizerNames::unchecked("ours", "wip")
}

fn none() -> ReconcileState {
    ReconcileState::new()
}

#[test]
fn deletion_with_our_finalizer_delivers_deleted_and_without_it_waits_for_the_delete_event() {
    assert_eq!(
        decide(
            Updated,
            &meta(&["ours"], true),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::Delete
    );
    assert_eq!(
        decide(
            Created,
            &meta(&["ours"], true),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::Delete
    );
    assert_eq!(
        decide(
            Updated,
            &meta(&["x"], true),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::IgnoreDeleting
    );
    assert_eq!(
        decide(
            Deleted,
            &meta(&["ours"], true),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::DeleteEvent
    );
}

#[test]
fn created_with_our_finalizer_is_a_resync_and_without_it_a_create() {
    assert_eq!(
        decide(
            Created,
            &meta(&["x", "ours"], false),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::Resync
    );
    assert_eq!(
        decide(
            Created,
            &meta(&["x"], false),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::Create
    );
}

/// Since issue #18 the echo of our own finalizer patch reconciles nothing, so an update seen
/// before it (a change someone made while `Created` ran) must go downstream itself.
#[test]
fn an_update_without_our_finalizer_after_created_adds_it_and_goes_downstream() {
    assert_eq!(
        decide(
            Updated,
            &meta(&[], false),
            &none(),
            &ours(),
            Delivery::Created,
            false
        ),
        ReconcileDecision::AddFinalizerAndPass
    );
    assert_eq!(
        decide(
            Resynced,
            &meta(&[], false),
            &none(),
            &ours(),
            Delivery::Created,
            false
        ),
        ReconcileDecision::AddFinalizerAndPass
    );
    assert_eq!(
        decide(
            Updated,
            &meta(&["ours"], false),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::Pass
    );
}

#[test]
fn a_noted_patch_is_retried_without_calling_downstream_again() {
    let removal = noted(none(), Some(PENDING_REMOVAL));
    assert_eq!(
        decide(
            Updated,
            &meta(&["ours"], true),
            &removal,
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::RetryPatch { removal: true }
    );
    let add = noted(none(), Some(PENDING_ADD));
    assert_eq!(
        decide(Created, &meta(&[], false), &add, &ours(), Nothing, false),
        ReconcileDecision::RetryPatch { removal: false }
    );
    assert_eq!(noted(add, None).note(STATE_KEY), None);
}

/// Defect 0 for the reconciler: before any `Created` succeeded (it failed and waits for its
/// retry), an update without our finalizer is the object's creation with its newest spec;
/// the older `Created` retry that follows only makes sure of the finalizer.
#[test]
fn an_update_before_created_was_delivered_is_delivered_as_created_and_the_stale_retry_is_not() {
    assert_eq!(
        decide(Updated, &meta(&[], false), &none(), &ours(), Nothing, false),
        ReconcileDecision::Create
    );
    assert_eq!(
        decide(
            Resynced,
            &meta(&[], false),
            &none(),
            &ours(),
            Nothing,
            false
        ),
        ReconcileDecision::Create
    );
    assert_eq!(
        decide(
            Created,
            &meta(&[], false),
            &none(),
            &ours(),
            Delivery::Created,
            false
        ),
        ReconcileDecision::AddFinalizer
    );
    assert_eq!(
        decide(
            Updated,
            &meta(&[], false),
            &none(),
            &ours(),
            Delivery::Created,
            false
        ),
        ReconcileDecision::AddFinalizerAndPass
    );
}

/// Issue #32, defect 4: our finalizer goes on before the first `Created`. Until `Created`
/// succeeds, every request of the incarnation (its retry, a newer event with the newest object)
/// is still the creation, though the object carries our finalizer; a retry that a newer event's
/// `Created` made stale delivers nothing; a deletion still comes first.
#[test]
fn with_our_finalizer_added_before_created_every_request_is_the_creation_until_it_succeeds() {
    let with_ours = meta(&["x", "ours"], false);
    for (action, retry) in [(Created, true), (Updated, false), (Resynced, false)] {
        assert_eq!(
            decide(action, &with_ours, &none(), &ours(), Creating, retry),
            ReconcileDecision::Create,
            "{action:?}"
        );
    }
    assert_eq!(
        decide(
            Created,
            &with_ours,
            &none(),
            &ours(),
            Delivery::Created,
            true
        ),
        ReconcileDecision::StaleRetry
    );
    // The retry of a requeue of `Created` whose `Resync` failed downstream (the components'
    // wait for a rollout, failing once): not stale, it runs again. Found by the fault harness
    // (tests/fault_plans_examples.rs, the components example, seed 7): dropped as stale, it
    // left the failure in the status for good.
    assert_eq!(
        decide(
            Created,
            &with_ours,
            &noted(none(), Some(RESYNC_FAILED)),
            &ours(),
            Delivery::Created,
            true
        ),
        ReconcileDecision::Resync
    );
    // A new leader's Add of an object it delivered in an earlier term, or a requeue: Resynced.
    assert_eq!(
        decide(
            Created,
            &with_ours,
            &none(),
            &ours(),
            Delivery::Created,
            false
        ),
        ReconcileDecision::Resync
    );
    assert_eq!(
        decide(
            Updated,
            &meta(&["ours"], true),
            &none(),
            &ours(),
            Creating,
            false
        ),
        ReconcileDecision::Delete
    );
    // Our finalizer removed by someone before `Created` succeeded: add it again, then create.
    assert_eq!(
        decide(
            Updated,
            &meta(&[], false),
            &none(),
            &ours(),
            Creating,
            false
        ),
        ReconcileDecision::Create
    );
}

#[test]
fn a_legacy_finalizer_counts_as_ours() {
    let names = ours().with_legacy(["old".to_string()], []);
    assert_eq!(
        decide(
            Created,
            &meta(&["old"], false),
            &none(),
            &names,
            Nothing,
            false
        ),
        ReconcileDecision::Resync
    );
    assert_eq!(
        decide(
            Updated,
            &meta(&["old"], true),
            &none(),
            &names,
            Delivery::Created,
            false
        ),
        ReconcileDecision::Delete
    );
    assert_eq!(
        decide(
            Updated,
            &meta(&["old"], false),
            &none(),
            &names,
            Delivery::Created,
            false
        ),
        ReconcileDecision::Pass
    );
}
