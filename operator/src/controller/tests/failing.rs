//! Issue #32, defect 3: reconcilers are retried without giving up by default (capped at 5
//! minutes), watchers keep a finite default, and failing objects are counted with the age of the
//! oldest failure. (The Warning Events need an apiserver: `tests/handler_failures.rs`.)

use std::sync::atomic::AtomicBool;

use super::*;

/// A reconciler that logs the virtual time of each call and fails while `healthy` is false.
fn dependent_reconciler(
    log: &Log,
    started: Instant,
    healthy: &Arc<AtomicBool>,
) -> impl DynReconciler {
    let (log, healthy) = (log.clone(), Arc::clone(healthy));
    DynReconcilerFn::<ConfigMap, _>::new(move |_, _| {
        log.push(format!("{}s", started.elapsed().as_secs()));
        let ok = healthy.load(Ordering::SeqCst);
        async move {
            if ok {
                Ok(ReconcileResult::done())
            } else {
                Err(ReconcileError::new(fail("the dependency is down")))
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn by_default_a_failing_reconciler_is_retried_every_5_minutes_and_never_given_up() {
    let log = Log::new();
    let started = Instant::now();
    let healthy = Arc::new(AtomicBool::new(false));
    let metrics = metrics();
    let config = ControllerConfig::default().metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        c.erased()
            .add_reconciler(KIND, dependent_reconciler(&log, started, &healthy));
    });
    h.send(add("a", 1));
    // Retries after 5, 10, 20, 40, 80, 160 s, then every 300 s: far past the Go SDK's last
    // attempt (at 315 s), for more than an hour.
    let mut expected: Vec<String> = [0, 5, 15, 35, 75, 155, 315]
        .iter()
        .map(|s| format!("{s}s"))
        .collect();
    for n in 1..=12 {
        expected.push(format!("{}s", 315 + 300 * n));
    }
    for len in 7..=expected.len() {
        log.wait_len(len).await;
    }
    assert_eq!(log.entries(), expected);
    let kind = metrics.for_kind(KIND);
    assert_eq!(kind.retries_given_up.get(), 0, "never given up");
    assert_eq!(
        metrics.failing(KIND),
        (1, Some(started)),
        "failing since its first failure, not its latest retry"
    );
    // The dependency comes back: the next retry succeeds and the object no longer fails.
    healthy.store(true, Ordering::SeqCst);
    log.wait_len(expected.len() + 1).await;
    assert_eq!(
        log.entries().last().map(String::as_str),
        Some(format!("{}s", 315 + 300 * 13).as_str())
    );
    eventually("the object no longer fails", || {
        metrics.failing(KIND) == (0, None)
    })
    .await;
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn by_default_a_failing_watcher_gives_up_on_the_go_sdk_schedule() {
    let log = Log::new();
    let started = Instant::now();
    let metrics = metrics();
    let config = ControllerConfig::default().metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new().on_add(move |_, _| {
                log.push(format!("{}s", started.elapsed().as_secs()));
                async { Err(fail("no")) }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(7).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        log.entries(),
        ["0s", "5s", "15s", "35s", "75s", "155s", "315s"]
    );
    assert_eq!(metrics.for_kind(KIND).retries_given_up.get(), 1);
    assert_eq!(metrics.failing(KIND), (0, None), "given up: not waiting");
    h.stop().await;
}

/// Two objects: `a` fails three times then succeeds, `b` keeps failing. The count and the oldest
/// failure follow each object from its first failure (kept across its retries and across a newer
/// event's failure) to its recovery, and a stop clears them.
#[tokio::test(start_paused = true)]
async fn the_failing_gauges_follow_each_object_from_its_first_failure_to_its_recovery() {
    let log = Log::new();
    let metrics = metrics();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 10))
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r", &log, |request, attempt| {
                if name(&request.object) == "a" && attempt >= 3 {
                    Ok(ReconcileResult::done())
                } else {
                    Err(ReconcileError::new(fail("no")))
                }
            }),
        );
    });
    let a_failed = Instant::now();
    h.send(add("a", 1));
    log.wait_len(1).await;
    eventually("a fails", || metrics.failing(KIND) == (1, Some(a_failed))).await;

    tokio::time::sleep(Duration::from_secs(5)).await;
    let b_failed = Instant::now();
    h.send(add("b", 1));
    log.wait_len(2).await;
    eventually("a and b fail", || {
        metrics.failing(KIND) == (2, Some(a_failed))
    })
    .await;

    // A newer event of `a` fails too (its retry merges into the kept request, which then runs
    // with the newest object): still failing since its first failure.
    h.send(update("a", 1, 2, 2));
    log.wait_for("a's update", |log| log.iter().any(|e| e.contains("rv2")))
        .await;
    // a's retry after 10 s fails: still since its first failure.
    log.wait_for("a's first retry", |log| {
        log.iter().any(|e| e.ends_with(" a rv2 a1"))
    })
    .await;
    assert_eq!(metrics.failing(KIND), (2, Some(a_failed)));

    // a succeeds at its third retry: only b fails, since b's first failure.
    log.wait_for("a succeeds", |log| {
        log.iter().any(|e| e.ends_with(" a rv2 a3"))
    })
    .await;
    eventually("only b fails", || {
        metrics.failing(KIND) == (1, Some(b_failed))
    })
    .await;
    h.stop().await;
    assert_eq!(metrics.failing(KIND), (0, None), "a stop drops every retry");
}
