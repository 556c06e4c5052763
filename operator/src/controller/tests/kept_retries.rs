//! Contract section 4: a retry the dequeue policy keeps is never overwritten by the retry of a
//! newer event that fails too. Watchers run both, in event order; reconcilers run one request
//! with the newest object; a handler's retries per object are bounded.

use super::*;

fn never_dequeue() -> RetryDequeuePolicy {
    RetryDequeuePolicy::new(|_, _, _, _, _| false)
}

#[tokio::test(start_paused = true)]
async fn a_kept_watcher_retry_and_the_newer_events_retry_both_run_in_event_order() {
    let log = Log::new();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 3));
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            logging_watcher("w", &log, |_, _, attempt| {
                if attempt == 0 {
                    Err(fail("first call fails"))
                } else {
                    Ok(())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    // Opinionated rule: a different action keeps the Add's retry; the Update fails too.
    h.send(update("a", 1, 2, 1));
    let entries = log.wait_len(4).await;
    assert_eq!(
        entries,
        [
            "w add a rv1",
            "w update a rv2",
            "w add a rv1",
            "w update a rv2"
        ]
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(log.entries().len(), 4, "each retry ran once");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_newer_watcher_retry_waits_for_the_kept_older_one_even_when_due_first() {
    let log = Log::new();
    let config = ControllerConfig::default()
        .dequeue_policy(Some(never_dequeue()))
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 3));
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            logging_watcher("w", &log, |_, cm, attempt| {
                // rv1 fails twice (retried after 10 s, then 20 s), rv2 once (after 10 s).
                let failures = if rv(cm) == "1" { 2 } else { 1 };
                if attempt < failures {
                    Err(fail("fails"))
                } else {
                    Ok(())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    h.send(update("a", 1, 2, 2));
    let entries = log.wait_len(5).await;
    assert_eq!(
        entries,
        [
            "w add a rv1",
            "w update a rv2",
            "w add a rv1",
            "w add a rv1",
            "w update a rv2"
        ],
        "rv2's retry (due at 10 s) waits until rv1's retries (10 s, 30 s) are done"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_kept_reconcile_retry_survives_a_newer_failure_as_one_request_with_the_newest_object() {
    let log = Log::new();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 3));
    let h = Harness::start(config, |c| {
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r", &log, |_, attempt| {
                if attempt == 0 {
                    Err(ReconcileError::new(fail("first call fails")))
                } else {
                    Ok(ReconcileResult::done())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    // Same generation, different action: the opinionated rule keeps the Created retry.
    h.send(update("a", 1, 2, 1));
    let entries = log.wait_len(3).await;
    assert_eq!(
        entries,
        [
            "r Created a rv1 a0",
            "r Updated a rv2 a0",
            "r Created a rv2 a1"
        ]
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(log.entries().len(), 3, "one pending request, run once");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_kept_reconcile_retry_runs_with_the_newest_object_after_a_newer_event_succeeded() {
    let log = Log::new();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 3));
    let h = Harness::start(config, |c| {
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r", &log, |request, attempt| {
                if rv(&request.object) == "1" && attempt == 0 {
                    Err(ReconcileError::new(fail("first call fails")))
                } else {
                    Ok(ReconcileResult::done())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    h.send(update("a", 1, 2, 1));
    let entries = log.wait_len(3).await;
    assert_eq!(
        entries,
        [
            "r Created a rv1 a0",
            "r Updated a rv2 a0",
            "r Created a rv2 a1"
        ],
        "the kept retry does not re-run the older snapshot"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handlers_retries_per_object_are_bounded_and_the_excess_is_counted_as_given_up() {
    let log = Log::new();
    let metrics = metrics();
    let config = ControllerConfig::default()
        .dequeue_policy(Some(never_dequeue()))
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(3600), 5))
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            logging_watcher("w", &log, |_, _, _| Err(fail("always fails"))),
        );
    });
    let events = MAX_EVENTS;
    h.send(add("a", 1));
    for n in 2..=events {
        h.send(update("a", n - 1, n, i64::from(n)));
    }
    log.wait_len(usize::try_from(events).expect("small")).await;
    let kind = metrics.for_kind(KIND);
    let excess =
        i64::from(events) - i64::try_from(pending::MAX_RETRIES_PER_HANDLER).expect("small");
    eventually("the excess retries are given up", || {
        u64::try_from(excess).is_ok_and(|excess| kind.retries_given_up.get() == excess)
    })
    .await;
    assert_eq!(
        kind.retries_pending.get(),
        i64::try_from(pending::MAX_RETRIES_PER_HANDLER).expect("small")
    );
    h.stop().await;
}

/// Events of one object in the bound test: more than a handler may keep retries for.
const MAX_EVENTS: u32 = 20;
