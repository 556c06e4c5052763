//! Workers: a lane that becomes ready is handed to one idle worker explicitly, so a burst after a
//! quiet period runs on as many workers as the limit allows.

use super::*;
use tokio::sync::Barrier;

#[tokio::test(start_paused = true)]
async fn a_burst_after_an_idle_period_runs_on_as_many_workers_as_allowed() {
    const WORKERS: usize = 4;
    let log = Log::new();
    // Passes only when WORKERS calls wait at once: with fewer workers the burst never passes.
    let barrier = Arc::new(Barrier::new(WORKERS));
    let config = ControllerConfig::default().max_concurrent_workers(WORKERS);
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new().on_add(move |obj, _ctx| {
                let (log, barrier) = (log.clone(), barrier.clone());
                async move {
                    let name = name(&obj).to_string();
                    if name != "warm-up" {
                        barrier.wait().await;
                    }
                    log.push(format!("passed {name}"));
                    Ok(())
                }
            }),
        );
    });
    h.send(add("warm-up", 1));
    log.wait_len(1).await;
    // Time is paused: this returns once every task is parked, so the worker is idle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in 0..WORKERS {
        h.send(add(&format!("burst-{n}"), 2));
    }
    let entries = log.wait_len(1 + WORKERS).await;
    assert_eq!(entries.len(), 1 + WORKERS);
    h.stop().await;
}
