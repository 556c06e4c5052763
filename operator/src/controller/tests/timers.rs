//! Retry and requeue timers: one timer queue per kind, so a replaced or dropped retry leaves no
//! task sleeping until its due time.

use super::*;

#[tokio::test(start_paused = true)]
async fn frequent_updates_with_long_requeues_leave_no_sleeping_tasks_behind() {
    const UPDATES: u32 = 200;
    let log = Log::new();
    let h = Harness::start(ControllerConfig::default(), |c| {
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r", &log, |_, _| {
                Ok(ReconcileResult::requeue_after(Duration::from_secs(3600)))
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    for n in 2..=UPDATES {
        // A newer generation each time: the opinionated rule drops the pending requeue.
        h.send(update("a", n - 1, n, i64::from(n)));
        log.wait_len(usize::try_from(n).expect("small")).await;
    }
    let after = tasks();
    assert!(
        after <= before + 2,
        "{UPDATES} requeues replaced one after another left {} tasks behind",
        after - before
    );
    h.stop().await;
}
