//! Unit tests of the lanes: holding, order, merging, slot reuse, and retries with their timers.

use super::*;
use std::sync::Arc;

use crate::object::share;
use k8s_openapi::api::core::v1::ConfigMap;

fn cm(name: &str, rv: u32) -> SharedObject {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.resource_version = Some(rv.to_string());
    share(cm)
}

fn rv(work: &Work) -> String {
    match work {
        Work::Event(queued) => queued
            .object()
            .expect("a queued event has an object")
            .metadata()
            .resource_version
            .clone()
            .unwrap_or_default(),
        Work::Retry(..) => "retry".into(),
    }
}

#[test]
fn a_lane_is_held_by_one_taker_and_keeps_its_order() {
    let mut lanes = Lanes::default();
    assert!(
        lanes
            .push(InformerEvent::Add(cm("a", 1)), true)
            .became_ready
    );
    assert!(
        !lanes
            .push(InformerEvent::Add(cm("a", 2)), true)
            .became_ready
    );
    assert!(
        lanes
            .push(InformerEvent::Add(cm("b", 3)), true)
            .became_ready
    );
    let first = lanes.take().expect("a");
    assert_eq!(
        (first.key.to_string(), rv(&first.work)),
        ("ns/a".into(), "1".into())
    );
    // `a` is held: the next taker gets `b`, not `a`'s second event.
    let second = lanes.take().expect("b");
    assert_eq!(rv(&second.work), "3");
    assert!(lanes.take().is_none());
    lanes.finish(first.slot, true, first.retries);
    let third = lanes.take().expect("a again");
    assert_eq!(rv(&third.work), "2");
    assert_eq!(lanes.backlog, 2, "events for watchers count until handled");
    lanes.finish(third.slot, true, third.retries);
    lanes.finish(second.slot, true, second.retries);
    assert_eq!((lanes.backlog, lanes.queued(), lanes.in_use()), (0, 0, 0));
}

#[test]
fn released_slots_are_reused_for_other_objects() {
    let mut lanes = Lanes::default();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        lanes.push(InformerEvent::Add(cm(name, 1)), false);
        let taken = lanes.take().expect("work");
        assert_eq!(taken.slot, 0, "object {i} reuses slot 0");
        lanes.finish(taken.slot, false, taken.retries);
    }
    assert_eq!(lanes.slots.len(), 1);
}

#[test]
fn waiting_reconcile_only_events_merge_and_stay_out_of_the_backlog() {
    let mut lanes = Lanes::default();
    lanes.push(InformerEvent::Add(cm("a", 1)), false);
    let pushed = lanes.push(
        InformerEvent::Update {
            old: cm("a", 1),
            new: cm("a", 2),
        },
        false,
    );
    assert_eq!(pushed.merged_away, 1);
    assert_eq!((lanes.backlog, lanes.queued()), (0, 1));
    let taken = lanes.take().expect("the merged request");
    let Work::Event(queued) = &taken.work else {
        panic!("an event")
    };
    let (action, object) = queued.reconcile.as_ref().expect("a reconcile");
    assert_eq!(*action, ReconcileAction::Created);
    assert_eq!(object.metadata().resource_version.as_deref(), Some("2"));
}

#[tokio::test(start_paused = true)]
async fn retries_travel_with_the_taken_item_and_wait_in_the_timer_queue_when_handed_back() {
    use super::super::pending::{Added, RetryEntry, RetryWork};
    use std::time::Duration;

    let mut lanes = Lanes::default();
    lanes.push(InformerEvent::Add(cm("a", 1)), true);
    let mut taken = lanes.take().expect("the event");
    // Dispatch adds a retry to the taken item, without the lanes.
    let due = Instant::now() + Duration::from_secs(5);
    let entry = RetryEntry {
        due,
        attempt: 1,
        work: RetryWork::Watch(InformerEvent::Add(cm("a", 1))),
        error: None,
        failing_since: None,
    };
    assert_eq!(
        taken.retries.add_new(HandlerId::Watcher(0), entry),
        Added::Stored
    );
    lanes.finish(taken.slot, true, taken.retries);
    assert!(lanes.take().is_none(), "the retry is not due yet");
    assert_eq!(lanes.in_use(), 1, "the lane waits for its retry");

    let fired = std::future::poll_fn(|cx| lanes.poll_timers(cx));
    assert_eq!(fired.await, 1, "the lane's timer fires and makes it ready");
    assert!(Instant::now() >= due);
    let retry = lanes.take().expect("the due retry");
    assert!(matches!(retry.work, Work::Retry(_)));
    assert!(retry.retries.is_empty());
    lanes.finish(retry.slot, false, retry.retries);
    assert_eq!(lanes.in_use(), 0, "released once no retry waits");
}

#[test]
fn a_lane_with_one_event_reserves_room_for_one_and_grows_for_more() {
    let mut lanes = Lanes::default();
    lanes.push(InformerEvent::Add(cm("a", 1)), true);
    assert_eq!(lanes.slots[0].queue.capacity(), 1);
    lanes.push(InformerEvent::Add(cm("a", 2)), true);
    assert_eq!(lanes.slots[0].queue.len(), 2);
}

#[test]
fn a_reconcile_only_update_keeps_no_old_object_and_echoes_found_at_push_merge_as_counts() {
    let mut lanes = Lanes::tracking_echoes(true);
    let (v1, v2, v3) = (cm("a", 1), cm("a", 2), cm("a", 3));
    let update = |old: &SharedObject, new: &SharedObject| InformerEvent::Update {
        old: SharedObject::clone(old),
        new: SharedObject::clone(new),
    };
    let found = |echo_found| PushExtra {
        echo_found,
        ..PushExtra::default()
    };
    lanes.push_with(update(&v1, &v2), false, found(Some(true)));
    assert_eq!(Arc::strong_count(&v1), 1, "the old object is not kept");
    lanes.push_with(update(&v2, &v3), false, found(None));
    assert_eq!(Arc::strong_count(&v1), 1);
    let Some(Taken {
        slot,
        work: Work::Event(queued),
        retries,
        ..
    }) = lanes.take()
    else {
        panic!("one merged request");
    };
    assert!(queued.event.is_none() && queued.action == ReconcileAction::Updated);
    assert!(queued.echo.possible());
    assert_eq!(
        queued.echo.confirmed(),
        1,
        "the first update, checked at push"
    );
    assert_eq!(
        queued.echo.unchecked().len(),
        1,
        "the second, left to dispatch"
    );
    lanes.finish(slot, false, retries);
    assert!(lanes.take().is_none());

    // An update whose recorded write showed more makes the request a plain reconcile.
    lanes.push_with(update(&v2, &v3), false, found(Some(false)));
    let Some(Taken {
        work: Work::Event(queued),
        ..
    }) = lanes.take()
    else {
        panic!("one request");
    };
    assert!(!queued.echo.possible());
}

#[tokio::test(start_paused = true)]
async fn the_oldest_ready_lane_is_published_as_it_waits_and_cleared_when_taken() {
    let waits = crate::queue_wait::QueueWaits::new("t").expect("gauge");
    let waiting = waits.track("configmaps");
    let mut lanes = Lanes::default().reporting_waits(Arc::clone(&waiting));
    assert_eq!(waiting.get(), None, "nothing waits yet");
    let first_ready = Instant::now();
    lanes.push(InformerEvent::Add(cm("a", 1)), true);
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    let second_ready = Instant::now();
    lanes.push(InformerEvent::Add(cm("b", 2)), true);
    // A second event for a waiting lane (for watchers: it does not merge) does not make it
    // younger.
    lanes.push(InformerEvent::Add(cm("a", 3)), true);
    assert_eq!(
        waiting.get(),
        Some(first_ready),
        "the head is the first lane"
    );
    let a = lanes.take().expect("a");
    assert_eq!(waiting.get(), Some(second_ready), "then the next one");
    let b = lanes.take().expect("b");
    assert_eq!(waiting.get(), None, "both held: nothing waits for a worker");
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    lanes.finish(b.slot, true, b.retries);
    assert_eq!(waiting.get(), None, "b had no more work");
    lanes.finish(a.slot, true, a.retries);
    assert_eq!(
        waiting.get(),
        Some(Instant::now()),
        "a handed back with work waits from then"
    );
    lanes.clear();
    assert_eq!(
        waiting.get(),
        None,
        "a stopped controller has nothing waiting"
    );
}

#[test]
fn clearing_keeps_the_own_writes_setting() {
    let mut lanes = Lanes::tracking_echoes(true);
    lanes.clear();
    assert!(
        lanes.track_echoes,
        "a restarted term still checks own writes"
    );
}
