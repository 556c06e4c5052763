//! Unit tests of the controller on synthetic event streams, one per rule of contract sections 3
//! and 4. Time is paused (`start_paused`), so backoff schedules are checked to the millisecond and
//! waits for conditions that never come fail within a virtual timeout.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::action::ReconcileAction;
use crate::object::{SharedObject, share};
use crate::reconciler::{
    DynReconcilerFn, ReconcileError, ReconcileRequest, ReconcileResult, ReconcileState,
};
use crate::store::InformerEvent;
use crate::watcher::DynWatcherFns;
use crate::{BoxError, HandlerError};
use kube::core::GroupVersionKind;

const KIND: &str = "configmaps";
const WAIT: Duration = Duration::from_secs(600);

fn cm(name: &str, rv: u32, generation: i64) -> SharedObject {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.resource_version = Some(rv.to_string());
    cm.metadata.generation = Some(generation);
    share(cm)
}

fn name(cm: &ConfigMap) -> &str {
    cm.metadata.name.as_deref().unwrap_or("")
}

fn rv(cm: &ConfigMap) -> &str {
    cm.metadata.resource_version.as_deref().unwrap_or("")
}

fn add(name: &str, rv: u32) -> InformerEvent {
    InformerEvent::Add(cm(name, rv, 1))
}

fn update(name: &str, old_rv: u32, new_rv: u32, generation: i64) -> InformerEvent {
    InformerEvent::Update {
        old: cm(name, old_rv, generation),
        new: cm(name, new_rv, generation),
    }
}

fn delete(name: &str, rv: u32) -> InformerEvent {
    InformerEvent::Delete(cm(name, rv, 1))
}

/// An append-only log that tests can await conditions on.
#[derive(Clone)]
struct Log(Arc<watch::Sender<Vec<String>>>);

impl Log {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Vec::new())))
    }

    fn push(&self, entry: impl Into<String>) {
        let entry = entry.into();
        self.0.send_modify(|log| log.push(entry));
    }

    fn entries(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    /// Waits until `done` holds for the log; fails after [`WAIT`] (virtual time).
    async fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let mut rx = self.0.subscribe();
        let waited = tokio::time::timeout(WAIT, rx.wait_for(|log| done(log))).await;
        match waited {
            Ok(Ok(log)) => log.clone(),
            _ => panic!("{what}: not reached; log: {:#?}", self.entries()),
        }
    }

    async fn wait_len(&self, len: usize) -> Vec<String> {
        self.wait_for(&format!("{len} log entries"), |log| log.len() >= len)
            .await
    }
}

/// Polls `condition` every virtual millisecond until it holds; fails after [`WAIT`].
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let polled = tokio::time::timeout(WAIT, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "{what}: not reached");
}

/// A controller running on a synthetic stream.
struct Harness {
    controller: InformerController,
    events: mpsc::UnboundedSender<InformerEvent>,
    stop: CancellationToken,
    running: JoinHandle<Result<(), ControllerError>>,
}

impl Harness {
    fn start(config: ControllerConfig, setup: impl FnOnce(&InformerController)) -> Self {
        let controller = InformerController::new(config);
        let (events, stream) = mpsc::unbounded();
        controller.erased().add_informer(
            KIND,
            Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream),
        );
        setup(&controller);
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move { controller.run(stop).await }
        });
        Self {
            controller,
            events,
            stop,
            running,
        }
    }

    fn send(&self, event: InformerEvent) {
        self.events
            .unbounded_send(event)
            .expect("the controller reads events");
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.running)
            .await
            .expect("stops in time")
            .expect("no panic")
            .expect("stops cleanly");
    }
}

fn metrics() -> ControllerMetrics {
    ControllerMetrics::unregistered(Some("test")).expect("metrics")
}

fn fail(message: &str) -> BoxError {
    message.to_string().into()
}

/// A watcher that logs `{tag} {event} {name} rv{rv}` and then behaves as `behave` says.
fn logging_watcher(
    tag: &'static str,
    log: &Log,
    behave: impl Fn(&str, &ConfigMap, u32) -> Result<(), BoxError> + Send + Sync + 'static,
) -> DynWatcherFns<ConfigMap> {
    let behave = Arc::new(behave);
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let (b1, b2, b3) = (behave.clone(), behave.clone(), behave);
    DynWatcherFns::new()
        .on_add(move |obj, ctx| {
            l1.push(format!("{tag} add {} rv{}", name(&obj), rv(&obj)));
            let r = b1("add", &obj, ctx.attempt());
            async move { r }
        })
        .on_update(move |_old, new, ctx| {
            l2.push(format!("{tag} update {} rv{}", name(&new), rv(&new)));
            let r = b2("update", &new, ctx.attempt());
            async move { r }
        })
        .on_delete(move |obj, ctx| {
            l3.push(format!("{tag} delete {} rv{}", name(&obj), rv(&obj)));
            let r = b3("delete", &obj, ctx.attempt());
            async move { r }
        })
}

/// A reconciler that logs `{tag} {action} {name} rv{rv} a{attempt}` and returns what `behave`
/// says.
fn logging_reconciler(
    tag: &'static str,
    log: &Log,
    behave: impl Fn(&ReconcileRequest<ConfigMap>, u32) -> Result<ReconcileResult, ReconcileError>
    + Send
    + Sync
    + 'static,
) -> impl DynReconciler {
    let log = log.clone();
    DynReconcilerFn::<ConfigMap, _>::new(move |request, ctx| {
        log.push(format!(
            "{tag} {} {} rv{} a{}",
            request.action,
            name(&request.object),
            rv(&request.object),
            ctx.attempt()
        ));
        let result = behave(&request, ctx.attempt());
        async move { result }
    })
}

fn ok_watcher(tag: &'static str, log: &Log) -> DynWatcherFns<ConfigMap> {
    logging_watcher(tag, log, |_, _, _| Ok(()))
}

/// A watcher that logs `w add <name> rv<rv>` for each add, and holds the add of the object
/// named "blocker" until `hold` gets a permit: with one worker, every other object waits behind
/// it.
fn blocking_add_watcher(log: &Log, hold: &Arc<Semaphore>) -> DynWatcherFns<ConfigMap> {
    let (log, hold) = (log.clone(), hold.clone());
    DynWatcherFns::<ConfigMap>::new().on_add(move |obj, _| {
        let (log, hold) = (log.clone(), hold.clone());
        async move {
            if name(&obj) == "blocker" {
                let _permit = hold.acquire().await?;
            }
            log.push(format!("w add {} rv{}", name(&obj), rv(&obj)));
            Ok(())
        }
    })
}

fn ok_reconciler(tag: &'static str, log: &Log) -> impl DynReconciler {
    logging_reconciler(tag, log, |_, _| Ok(ReconcileResult::done()))
}

// ---- Section 3: dispatch and ordering ----

#[tokio::test(start_paused = true)]
async fn watchers_run_in_registration_order_then_reconcilers_in_registration_order() {
    let log = Log::new();
    let h = Harness::start(ControllerConfig::default(), |c| {
        c.erased().add_reconciler(KIND, ok_reconciler("r0", &log));
        c.erased().add_watcher(KIND, ok_watcher("w0", &log));
        c.erased().add_reconciler(KIND, ok_reconciler("r1", &log));
        c.erased().add_watcher(KIND, ok_watcher("w1", &log));
    });
    h.send(add("a", 1));
    let entries = h.controller_log_wait(&log, 4).await;
    assert_eq!(
        entries,
        [
            "w0 add a rv1",
            "w1 add a rv1",
            "r0 Created a rv1 a0",
            "r1 Created a rv1 a0"
        ]
    );
    h.stop().await;
}

impl Harness {
    async fn controller_log_wait(&self, log: &Log, len: usize) -> Vec<String> {
        log.wait_len(len).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_handler_does_not_stop_the_handlers_after_it() {
    let log = Log::new();
    let config = ControllerConfig::default().retry_policy(RetryPolicy::never());
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            logging_watcher("w0", &log, |_, _, _| Err(fail("w0 broke"))),
        );
        c.erased().add_watcher(
            KIND,
            logging_watcher("w1", &log, |_, _, _| panic!("w1 panicked")),
        );
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r0", &log, |_, _| {
                Err(ReconcileError::new(fail("r0 broke")))
            }),
        );
        c.erased().add_reconciler(KIND, ok_reconciler("r1", &log));
    });
    h.send(add("a", 1));
    let entries = log.wait_len(4).await;
    assert_eq!(
        entries,
        [
            "w0 add a rv1",
            "w1 add a rv1",
            "r0 Created a rv1 a0",
            "r1 Created a rv1 a0"
        ]
    );
    h.stop().await;
}

/// A tiny deterministic generator for delays.
struct Lcg(u64);

impl Lcg {
    fn next_millis(&mut self, max: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % max
    }
}

/// Tracks which objects have a handler running, and records any overlap.
#[derive(Clone, Default)]
struct InFlight {
    running: Arc<Mutex<HashSet<String>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
}

impl InFlight {
    fn enter(&self, name: &str) {
        if !self.running.lock().expect("lock").insert(name.to_string()) {
            self.overlaps.lock().expect("lock").push(name.to_string());
        }
    }

    fn leave(&self, name: &str) {
        self.running.lock().expect("lock").remove(name);
    }

    fn overlaps(&self) -> Vec<String> {
        self.overlaps.lock().expect("lock").clone()
    }
}

#[tokio::test(start_paused = true)]
async fn per_object_order_holds_for_100_objects_with_random_delays() {
    let log = Log::new();
    let in_flight = InFlight::default();
    let delays = Arc::new(Mutex::new(Lcg(7)));
    let sleepy = |tag: &'static str| {
        let (log, in_flight, delays) = (log.clone(), in_flight.clone(), delays.clone());
        move |event: &'static str, obj: Arc<ConfigMap>| {
            let (log, in_flight) = (log.clone(), in_flight.clone());
            let delay = delays.lock().expect("lock").next_millis(20);
            async move {
                let name = name(&obj).to_string();
                in_flight.enter(&name);
                tokio::time::sleep(Duration::from_millis(delay)).await;
                log.push(format!("{tag} {event} {name} rv{}", rv(&obj)));
                in_flight.leave(&name);
                Ok::<(), BoxError>(())
            }
        }
    };
    let (on_add, on_update, on_delete) = (sleepy("w"), sleepy("w"), sleepy("w"));
    let on_reconcile = sleepy("r");
    // Half as many workers as objects: lanes contend for workers, and several lanes of one object
    // (were there more than one) would get workers at the same time.
    let config = ControllerConfig::default().max_concurrent_workers(50);
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new()
                .on_add(move |obj, _| on_add("add", obj))
                .on_update(move |_, new, _| on_update("update", new))
                .on_delete(move |obj, _| on_delete("delete", obj)),
        );
        c.erased().add_reconciler(
            KIND,
            DynReconcilerFn::<ConfigMap, _>::new(move |request, _| {
                let run = on_reconcile("reconcile", request.object.clone());
                async move {
                    run.await?;
                    Ok(ReconcileResult::done())
                }
            }),
        );
    });
    let names: Vec<String> = (0..100).map(|i| format!("o{i:03}")).collect();
    for step in 0..4 {
        for name in &names {
            h.send(match step {
                0 => add(name, 1),
                1 => update(name, 1, 2, 1),
                2 => update(name, 2, 3, 2),
                _ => delete(name, 3),
            });
        }
    }
    // Every watcher event, and for every object a reconcile of its last state (rv3).
    let done = |log: &[String]| {
        log.iter().filter(|e| e.starts_with("w ")).count() == 400
            && names.iter().all(|n| {
                let last = format!("{n} rv3");
                log.iter()
                    .any(|e| e.starts_with("r ") && e.ends_with(&last))
            })
    };
    let entries = log.wait_for("all events handled", done).await;
    assert_eq!(
        in_flight.overlaps(),
        Vec::<String>::new(),
        "handlers of one object overlapped"
    );
    let mut per_object: HashMap<&str, Vec<&str>> = HashMap::new();
    for entry in &entries {
        let mut parts = entry.split(' ');
        let (tag, _, name, rv) = (parts.next(), parts.next(), parts.next(), parts.next());
        if tag == Some("w") {
            per_object
                .entry(name.unwrap_or(""))
                .or_default()
                .push(rv.unwrap_or(""));
        }
    }
    assert_eq!(per_object.len(), 100);
    for (name, rvs) in per_object {
        assert_eq!(rvs, ["rv1", "rv2", "rv3", "rv3"], "watcher order of {name}");
    }
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_never_overlaps_a_new_event_of_the_same_object() {
    let log = Log::new();
    let in_flight = InFlight::default();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(1), 3));
    let h = Harness::start(config, |c| {
        let (log, in_flight) = (log.clone(), in_flight.clone());
        let (log2, in_flight2) = (log.clone(), in_flight.clone());
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new()
                .on_add(move |_, ctx| {
                    let (log, in_flight) = (log.clone(), in_flight.clone());
                    async move {
                        in_flight.enter("a");
                        log.push(format!("add a{}", ctx.attempt()));
                        in_flight.leave("a");
                        if ctx.attempt() == 0 {
                            Err(fail("first add fails"))
                        } else {
                            Ok(())
                        }
                    }
                })
                .on_update(move |_, _, _| {
                    let (log, in_flight) = (log2.clone(), in_flight2.clone());
                    async move {
                        in_flight.enter("a");
                        log.push("update start");
                        // Runs across the retry's due time (1 s).
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        log.push("update end");
                        in_flight.leave("a");
                        Ok(())
                    }
                }),
        );
    });
    let started = Instant::now();
    h.send(add("a", 1));
    log.wait_len(1).await;
    // A different action: the opinionated dequeue policy keeps the pending retry.
    h.send(update("a", 1, 2, 1));
    let entries = log.wait_len(4).await;
    assert_eq!(entries, ["add a0", "update start", "update end", "add a1"]);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the retry waited"
    );
    assert_eq!(in_flight.overlaps(), Vec::<String>::new());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_object_does_not_delay_others() {
    let log = Log::new();
    let release = Arc::new(Semaphore::new(0));
    let config = ControllerConfig::default().max_concurrent_workers(2);
    let h = Harness::start(config, |c| {
        let (log, release) = (log.clone(), release.clone());
        let log2 = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new()
                .on_add(move |obj, _| {
                    let (log, release) = (log.clone(), release.clone());
                    async move {
                        if name(&obj) == "slow" {
                            let _permit = release.acquire().await?;
                        }
                        log.push(format!("add {}", name(&obj)));
                        Ok(())
                    }
                })
                .on_update(move |_, new, _| {
                    log2.push(format!("update {}", name(&new)));
                    async { Ok(()) }
                }),
        );
    });
    h.send(add("slow", 1));
    h.send(update("slow", 1, 2, 1));
    for i in 0..20 {
        h.send(add(&format!("o{i}"), 1));
    }
    let entries = log.wait_len(20).await;
    assert!(
        entries.iter().all(|e| e.starts_with("add o")),
        "others were handled while the slow object blocked: {entries:?}"
    );
    release.add_permits(1);
    let entries = log.wait_len(22).await;
    assert_eq!(entries[20..], ["add slow", "update slow"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_contained_reported_with_its_message_and_retried() {
    let log = Log::new();
    let errors = Log::new();
    let seen_errors = errors.clone();
    let policy = RetryPolicy::new(move |error, attempt| {
        seen_errors.push(error.to_string());
        (attempt < 3).then_some(Duration::from_secs(1))
    });
    let config = ControllerConfig::default().retry_policy(policy);
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            logging_watcher("w", &log, |_, obj, attempt| {
                if name(obj) == "bad" && attempt == 0 {
                    panic!("boom in {}", name(obj));
                }
                Ok(())
            }),
        );
    });
    h.send(add("bad", 1));
    h.send(add("good", 1));
    let entries = log.wait_len(3).await;
    assert_eq!(
        entries,
        ["w add bad rv1", "w add good rv1", "w add bad rv1"]
    );
    assert_eq!(errors.entries(), ["handler panicked: boom in bad"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn event_timeout_cancels_a_slow_handler_and_counts_an_error() {
    let log = Log::new();
    let errors = Log::new();
    let seen_errors = errors.clone();
    let policy = RetryPolicy::new(move |error, _| {
        seen_errors.push(error.to_string());
        Some(Duration::from_secs(1))
    });
    let metrics = metrics();
    let config = ControllerConfig::default()
        .event_timeout(Duration::from_secs(2))
        .retry_policy(policy)
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new().on_add(move |_, ctx| {
                let log = log.clone();
                async move {
                    log.push(format!("start a{}", ctx.attempt()));
                    if ctx.attempt() == 0 {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        log.push("never: the timeout drops this future");
                    }
                    Ok(())
                }
            }),
        );
    });
    let started = Instant::now();
    h.send(add("a", 1));
    let entries = log.wait_len(2).await;
    assert_eq!(entries, ["start a0", "start a1"]);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "2 s timeout + 1 s retry"
    );
    assert_eq!(errors.entries(), ["handler timed out after 2s"]);
    let kind = metrics.for_kind(KIND);
    assert_eq!(
        kind.action(ReconcileAction::Created).watcher_errors.get(),
        1
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn waiting_reconcile_requests_merge_into_the_newest_while_watchers_see_every_event() {
    let log = Log::new();
    let hold = Arc::new(Semaphore::new(0));
    let metrics = metrics();
    let config = ControllerConfig::default()
        .max_concurrent_workers(1)
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        // Holds the only worker while the other objects collect events.
        c.erased()
            .add_watcher(KIND, blocking_add_watcher(&log, &hold));
        c.erased().add_watcher(KIND, {
            let log = log.clone();
            DynWatcherFns::<ConfigMap>::new().on_update(move |_, new, _| {
                log.push(format!("w update {} rv{}", name(&new), rv(&new)));
                async { Ok(()) }
            })
        });
        c.erased().add_reconciler(KIND, ok_reconciler("r", &log));
    });
    let depth = metrics.for_kind(KIND).queue_depth;
    h.send(add("blocker", 1));
    eventually("the blocker runs", || depth.get() == 0).await;
    h.send(add("a", 1));
    h.send(update("a", 1, 2, 1));
    h.send(update("a", 2, 3, 2));
    eventually("three events of a wait", || depth.get() == 3).await;
    // The diagnostics report how long "a" has waited for the only worker.
    let waited = |metrics: &ControllerMetrics| {
        metrics
            .kind_diagnostics()
            .into_iter()
            .find(|k| k.kind == KIND)
            .and_then(|k| k.oldest_queued_age_seconds)
    };
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(
        waited(&metrics).is_some_and(|age| age >= 5.0),
        "{:?}",
        metrics.kind_diagnostics()
    );
    hold.add_permits(1);
    let entries = log.wait_len(6).await;
    eventually("nothing waits once a ran", || waited(&metrics).is_none()).await;
    assert_eq!(
        entries,
        [
            "w add blocker rv1",
            "r Created blocker rv1 a0",
            "w add a rv1",
            "w update a rv2",
            "w update a rv3",
            "r Created a rv3 a0"
        ]
    );
    h.stop().await;
}

/// Real time, not paused: the wait is read from the dispatch clock (quanta), which tokio's
/// virtual time does not move. The 50 ms sleep is the wait being measured, not a synchronisation;
/// only lower bounds are asserted.
#[tokio::test]
async fn an_events_wait_is_observed_from_its_receipt_and_a_merged_request_keeps_the_oldest() {
    let log = Log::new();
    let hold = Arc::new(Semaphore::new(0));
    let metrics = metrics();
    let config = ControllerConfig::default()
        .max_concurrent_workers(1)
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        // Holds the only worker while the other objects collect events.
        c.erased()
            .add_watcher(KIND, blocking_add_watcher(&log, &hold));
        c.erased().add_reconciler(KIND, ok_reconciler("r", &log));
    });
    let kind = metrics.for_kind(KIND);
    let wait = |action| kind.action(action).event_wait.clone();
    let depth = kind.queue_depth.clone();
    h.send(add("blocker", 1));
    eventually("the blocker runs", || depth.get() == 0).await;
    // "b" is added, then "a" twice: a's update takes over the reconcile request of a's add
    // (the add stays queued for the watcher); the update's item then covers the add's change.
    h.send(add("b", 1));
    h.send(add("a", 1));
    eventually("b and a wait", || depth.get() == 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.send(update("a", 1, 2, 1));
    eventually("a's update waits", || depth.get() == 3).await;
    hold.add_permits(1);
    log.wait_len(6).await;
    eventually("the waits are folded into the histograms", || {
        wait(ReconcileAction::Created).get_sample_count() == 3
            && wait(ReconcileAction::Updated).get_sample_count() == 1
    })
    .await;
    let created = wait(ReconcileAction::Created);
    // The blocker waited for nothing; b and a for the blocker, 50 ms at least each.
    assert!(
        created.get_sample_sum() >= 0.1,
        "b and a waited 50 ms or more each: {}",
        created.get_sample_sum()
    );
    // a's update arrived after the sleep but covers a's add (its merged request): its wait
    // starts at the add's receipt.
    let updated = wait(ReconcileAction::Updated);
    assert!(
        updated.get_sample_sum() >= 0.05,
        "the merged request counts from the oldest event it covers: {}",
        updated.get_sample_sum()
    );
    h.stop().await;
}

/// Real time, as above: an event that waits for room in a full backlog (outside the lanes) counts
/// that wait too, since its receipt is read as the informer offers it, not as it is queued.
#[tokio::test]
async fn an_events_wait_includes_its_wait_for_room_in_the_backlog() {
    let log = Log::new();
    let hold = Arc::new(Semaphore::new(0));
    let metrics = metrics();
    let config = ControllerConfig::default()
        .max_concurrent_workers(1)
        .max_pending_events(1)
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        // Holds the only worker while the other objects collect events.
        c.erased()
            .add_watcher(KIND, blocking_add_watcher(&log, &hold));
    });
    let kind = metrics.for_kind(KIND);
    let created = kind.action(ReconcileAction::Created).event_wait.clone();
    h.send(add("blocker", 1));
    eventually("the blocker runs and fills the backlog of one", || {
        kind.queue_depth.get() == 0
    })
    .await;
    // "a" is offered while the blocker's event holds the only place: it waits in the intake, not
    // in a lane (the queue stays empty), for the 50 ms being measured.
    h.send(add("a", 1));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(kind.queue_depth.get(), 0, "a waits outside the lanes");
    hold.add_permits(1);
    log.wait_len(2).await;
    eventually("both waits are folded into the histogram", || {
        created.get_sample_count() == 2
    })
    .await;
    assert!(
        created.get_sample_sum() >= 0.05,
        "a's wait for room counts: {}",
        created.get_sample_sum()
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_watcher_applies_backpressure_on_intake() {
    let log = Log::new();
    let release = Arc::new(Semaphore::new(0));
    let pulled = Arc::new(AtomicUsize::new(0));
    let metrics = metrics();
    let depth = metrics.for_kind(KIND).queue_depth;
    let controller = InformerController::new(
        ControllerConfig::default()
            .max_pending_events(2)
            .metrics(metrics.clone()),
    );
    let counted = pulled.clone();
    let events =
        futures::stream::iter((1..=6).map(|rv| update("a", rv, rv + 1, 1))).inspect(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
    controller.erased().add_informer(
        KIND,
        Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), events),
    );
    let (l, r) = (log.clone(), release.clone());
    controller.erased().add_watcher(
        KIND,
        DynWatcherFns::<ConfigMap>::new().on_update(move |_, new, _| {
            let (log, release) = (l.clone(), r.clone());
            async move {
                let _permit = release.acquire().await?;
                log.push(format!("update rv{}", rv(&new)));
                Ok(())
            }
        }),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    // Nothing can finish: one event runs, one waits (the bound of 2), and intake pulls one more
    // that it cannot queue.
    eventually("intake fills the bound", || {
        pulled.load(Ordering::SeqCst) == 3 && depth.get() == 1
    })
    .await;
    // And stays there (a window of virtual time to prove nothing more is pulled).
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        pulled.load(Ordering::SeqCst),
        3,
        "intake pauses at the bound"
    );
    release.add_permits(6);
    let entries = log.wait_len(6).await;
    assert_eq!(entries.len(), 6);
    assert_eq!(pulled.load(Ordering::SeqCst), 6);
    stop.cancel();
    running.await.expect("no panic").expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_kind_without_watchers_never_pauses_intake_and_its_waiting_requests_merge() {
    let log = Log::new();
    let release = Arc::new(Semaphore::new(0));
    let pulled = Arc::new(AtomicUsize::new(0));
    let metrics = metrics();
    let depth = metrics.for_kind(KIND).queue_depth;
    let controller = InformerController::new(
        ControllerConfig::default()
            .max_pending_events(2)
            .max_concurrent_workers(1)
            .metrics(metrics.clone()),
    );
    // "blocker" holds the only worker; then 5 objects change 4 times each: 21 events, far more
    // than the bound of 2.
    let mut events = vec![add("blocker", 1)];
    for rv in 1..=4 {
        for object in ["a", "b", "c", "d", "e"] {
            events.push(if rv == 1 {
                add(object, 1)
            } else {
                update(object, rv - 1, rv, 1)
            });
        }
    }
    let counted = pulled.clone();
    let stream = futures::stream::iter(events).inspect(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    controller.erased().add_informer(
        KIND,
        Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream),
    );
    let (l, r) = (log.clone(), release.clone());
    controller.erased().add_reconciler(
        KIND,
        DynReconcilerFn::<ConfigMap, _>::new(move |request, _| {
            let (log, release) = (l.clone(), r.clone());
            async move {
                if name(&request.object) == "blocker" {
                    let _permit = release.acquire().await?;
                }
                log.push(format!(
                    "{} {} rv{}",
                    request.action,
                    name(&request.object),
                    rv(&request.object)
                ));
                Ok(ReconcileResult::done())
            }
        }),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    // Everything is pulled while the blocker runs, and each object's requests merged into one.
    eventually("intake pulls the whole stream", || {
        pulled.load(Ordering::SeqCst) == 21 && depth.get() == 5
    })
    .await;
    release.add_permits(1);
    let entries = log.wait_len(6).await;
    assert_eq!(
        entries,
        [
            "Created blocker rv1",
            "Created a rv4",
            "Created b rv4",
            "Created c rv4",
            "Created d rv4",
            "Created e rv4",
        ]
    );
    stop.cancel();
    running.await.expect("no panic").expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn handlers_and_informers_added_after_start_receive_later_events() {
    let log = Log::new();
    let h = Harness::start(ControllerConfig::default(), |c| {
        c.erased().add_watcher(KIND, ok_watcher("w0", &log));
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    h.controller
        .erased()
        .add_watcher(KIND, ok_watcher("w1", &log));
    h.controller
        .erased()
        .add_reconciler(KIND, ok_reconciler("r0", &log));
    h.send(add("b", 1));
    let entries = log.wait_len(4).await;
    assert_eq!(
        entries,
        [
            "w0 add a rv1",
            "w0 add b rv1",
            "w1 add b rv1",
            "r0 Created b rv1 a0"
        ]
    );
    // A second kind, informer and handler added while running.
    let (more, stream) = mpsc::unbounded();
    h.controller
        .erased()
        .add_watcher("secrets-like", ok_watcher("s0", &log));
    h.controller.erased().add_informer(
        "secrets-like",
        Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream),
    );
    more.unbounded_send(add("x", 1)).expect("send");
    let entries = log.wait_len(5).await;
    assert_eq!(entries[4], "s0 add x rv1");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn graceful_stop_lets_in_flight_handlers_finish_and_cancels_their_context() {
    let log = Log::new();
    let h = Harness::start(ControllerConfig::default(), |c| {
        let log = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new().on_add(move |obj, ctx| {
                let log = log.clone();
                async move {
                    log.push(format!("start {}", name(&obj)));
                    ctx.cancelled().await;
                    // Still allowed to finish its work after the signal.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    log.push(format!("finished {}", name(&obj)));
                    Ok(())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    let Harness {
        events,
        stop,
        running,
        ..
    } = h;
    stop.cancel();
    // Events arriving after the stop are not started.
    let _ = events.unbounded_send(add("late", 1));
    tokio::time::timeout(WAIT, running)
        .await
        .expect("stops")
        .expect("no panic")
        .expect("clean");
    assert_eq!(log.entries(), ["start a", "finished a"]);
}

/// The stop is checked once per event: the event in hand when it comes finishes its handlers
/// (as a call in flight finishes), and no later event starts.
#[tokio::test(start_paused = true)]
async fn a_stop_during_an_event_lets_its_other_handlers_run_and_starts_no_later_event() {
    let log = Log::new();
    let h = Harness::start(ControllerConfig::default().max_concurrent_workers(1), |c| {
        let first = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new().on_add(move |obj, ctx| {
                let log = first.clone();
                async move {
                    log.push(format!("first {}", name(&obj)));
                    ctx.cancelled().await;
                    Ok(())
                }
            }),
        );
        c.erased().add_watcher(KIND, ok_watcher("second", &log));
        c.erased()
            .add_reconciler(KIND, ok_reconciler("reconciler", &log));
    });
    h.send(add("a", 1));
    h.send(add("b", 2));
    log.wait_len(1).await;
    h.stop().await;
    assert_eq!(
        log.entries(),
        ["first a", "second add a rv1", "reconciler Created a rv1 a0"],
        "the event under way finished; b, queued behind it on the one worker, never started"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_outliving_the_grace_period_is_cancelled() {
    let log = Log::new();
    let config = ControllerConfig::default().shutdown_grace(Duration::from_secs(5));
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new().on_add(move |_, _| {
                let log = log.clone();
                async move {
                    log.push("start");
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    log.push("never");
                    Ok(())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(1).await;
    let started = Instant::now();
    h.stop().await;
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(log.entries(), ["start"]);
}

#[tokio::test(start_paused = true)]
async fn run_twice_is_an_error() {
    let h = Harness::start(ControllerConfig::default(), |_| {});
    tokio::task::yield_now().await;
    let again = h.controller.run(CancellationToken::new()).await;
    assert!(
        matches!(again, Err(ControllerError::AlreadyRan)),
        "{again:?}"
    );
    h.stop().await;
}

// ---- Section 4: retries ----

/// Records the virtual time of every call and fails until `succeed_at` (never when `None`).
fn timed_reconciler(log: &Log, started: Instant, succeed_at: Option<u32>) -> impl DynReconciler {
    logging_reconciler("r", log, |_, _| Ok(ReconcileResult::done()));
    let log = log.clone();
    DynReconcilerFn::<ConfigMap, _>::new(move |_, ctx| {
        log.push(format!("{}ms", started.elapsed().as_millis()));
        let ok = succeed_at.is_some_and(|n| ctx.attempt() >= n);
        async move {
            if ok {
                Ok(ReconcileResult::done())
            } else {
                Err(ReconcileError::new(fail("no")))
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn retries_follow_the_backoff_schedule_of_a_short_policy() {
    let log = Log::new();
    let started = Instant::now();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_millis(100), 3));
    let h = Harness::start(config, |c| {
        c.erased()
            .add_reconciler(KIND, timed_reconciler(&log, started, Some(4)));
    });
    h.send(add("a", 1));
    let entries = log.wait_len(5).await;
    // 100, 200, 400, 800 ms apart.
    assert_eq!(entries, ["0ms", "100ms", "300ms", "700ms", "1500ms"]);
    h.stop().await;
}

/// The Go SDK's policy, every handler's default before issue #32 (now the watchers'): it gives
/// up, and that is logged and counted.
#[tokio::test(start_paused = true)]
async fn gives_up_after_the_last_attempt_of_the_go_sdk_policy_and_counts_it() {
    let log = Log::new();
    let started = Instant::now();
    let metrics = metrics();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::go_sdk())
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        c.erased()
            .add_reconciler(KIND, timed_reconciler(&log, started, None));
    });
    h.send(add("a", 1));
    let entries = log.wait_len(7).await;
    // Retries after 5, 10, 20, 40, 80 and 160 s.
    assert_eq!(
        entries,
        [
            "0ms", "5000ms", "15000ms", "35000ms", "75000ms", "155000ms", "315000ms"
        ]
    );
    // Nothing after the last attempt.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(log.entries().len(), 7);
    let kind = metrics.for_kind(KIND);
    assert_eq!(kind.retries_given_up.get(), 1);
    assert_eq!(kind.retry_retry.get(), 5);
    assert_eq!(kind.retry_failed.get(), 1);
    assert_eq!(kind.retries_pending.get(), 0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn retries_of_different_objects_run_in_parallel() {
    let log = Log::new();
    let started = Instant::now();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(1), 0));
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_reconciler(
            KIND,
            DynReconcilerFn::<ConfigMap, _>::new(move |request, ctx| {
                let log = log.clone();
                async move {
                    if ctx.attempt() == 0 {
                        return Err(ReconcileError::new(fail("first fails")));
                    }
                    log.push(format!(
                        "{} at {}ms",
                        name(&request.object),
                        started.elapsed().as_millis()
                    ));
                    // A slow retry: were retries serialized, the next would start 10 s later.
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Ok(ReconcileResult::done())
                }
            }),
        );
    });
    for i in 0..5 {
        h.send(add(&format!("o{i}"), 1));
    }
    let mut entries = log.wait_len(5).await;
    entries.sort();
    assert_eq!(
        entries,
        [
            "o0 at 1000ms",
            "o1 at 1000ms",
            "o2 at 1000ms",
            "o3 at 1000ms",
            "o4 at 1000ms"
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn retries_rerun_the_failed_events_snapshot() {
    let log = Log::new();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 0));
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(
            KIND,
            logging_watcher("w", &log, |_, cm, attempt| {
                if rv(cm) == "2" && attempt == 0 {
                    Err(fail("no"))
                } else {
                    Ok(())
                }
            }),
        );
    });
    h.send(update("a", 1, 2, 1));
    log.wait_len(1).await;
    // A different action: the opinionated policy keeps the retry of rv2, which re-runs the
    // failed event's object, not the newer one (watchers are edge-triggered; a kept reconcile
    // request runs with the newest object instead, see `kept_retries`).
    h.send(InformerEvent::Resync(cm("a", 3, 1)));
    let entries = log.wait_len(3).await;
    assert_eq!(
        entries,
        ["w update a rv2", "w update a rv3", "w update a rv2"]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn requeue_after_runs_the_same_request_again() {
    let log = Log::new();
    let started = Instant::now();
    let h = Harness::start(ControllerConfig::default(), |c| {
        let log = log.clone();
        c.erased().add_reconciler(
            KIND,
            DynReconcilerFn::<ConfigMap, _>::new(move |request, ctx| {
                log.push(format!(
                    "{} {} a{} at {}ms",
                    request.action,
                    rv(&request.object),
                    ctx.attempt(),
                    started.elapsed().as_millis()
                ));
                let count = log.entries().len();
                async move {
                    Ok(if count < 3 {
                        ReconcileResult::requeue_after(Duration::from_secs(7))
                    } else {
                        ReconcileResult::done()
                    })
                }
            }),
        );
    });
    h.send(add("a", 1));
    let entries = log.wait_len(3).await;
    assert_eq!(
        entries,
        [
            "Created 1 a0 at 0ms",
            "Created 1 a0 at 7000ms",
            "Created 1 a0 at 14000ms"
        ]
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(log.entries().len(), 3, "no requeue after a plain success");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn requeue_with_an_error_keeps_the_requeue_timing_and_counts_the_error() {
    let log = Log::new();
    let started = Instant::now();
    let metrics = metrics();
    let config = ControllerConfig::default()
        .metrics(metrics.clone())
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(100), 5));
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_reconciler(
            KIND,
            DynReconcilerFn::<ConfigMap, _>::new(move |_, ctx| {
                log.push(format!(
                    "a{} at {}ms",
                    ctx.attempt(),
                    started.elapsed().as_millis()
                ));
                async move {
                    if ctx.attempt() == 0 {
                        Err(ReconcileError::new(fail("half done"))
                            .requeue_after(Duration::from_secs(3)))
                    } else {
                        Ok(ReconcileResult::done())
                    }
                }
            }),
        );
    });
    h.send(add("a", 1));
    let entries = log.wait_len(2).await;
    assert_eq!(
        entries,
        ["a0 at 0ms", "a1 at 3000ms"],
        "the requeue decides, not the policy"
    );
    let kind = metrics.for_kind(KIND);
    assert_eq!(
        kind.action(ReconcileAction::Created)
            .reconciler_errors
            .get(),
        1
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_state_of_the_latest_attempt_is_carried_into_the_next() {
    let log = Log::new();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(1), 5));
    let h = Harness::start(config, |c| {
        let log = log.clone();
        c.erased().add_reconciler(
            KIND,
            DynReconcilerFn::<ConfigMap, _>::new(move |request, ctx| {
                let seen = request
                    .state
                    .get::<u32>()
                    .expect("the state is a u32")
                    .map_or_else(|| "none".to_string(), |attempt| attempt.to_string());
                log.push(format!("a{} saw {seen}", ctx.attempt()));
                let state = ReconcileState::of(&ctx.attempt()).expect("a u32 serializes");
                async move {
                    match ctx.attempt() {
                        0 | 1 => Err(ReconcileError::new(fail("again")).with_state(state)),
                        // A plain error keeps the state of the attempt before.
                        2 => Err(ReconcileError::new(fail("again"))),
                        3 => Ok(ReconcileResult::requeue_after(Duration::from_secs(1))
                            .with_state(state)),
                        _ => Ok(ReconcileResult::done()),
                    }
                }
            }),
        );
    });
    h.send(add("a", 1));
    let entries = log.wait_len(5).await;
    assert_eq!(
        entries,
        [
            "a0 saw none",
            "a1 saw 0",
            "a2 saw 1",
            "a3 saw 1",
            "a0 saw 3"
        ]
    );
    h.stop().await;
}

// ---- Section 4: dequeue rules, as the controller applies them ----

/// The log of a reconciler that fails the first event once (retry after 10 s), after `second`
/// arrived once the first attempt failed, and a minute passed.
async fn dequeue_scenario(
    policy: Option<RetryDequeuePolicy>,
    first: InformerEvent,
    second: InformerEvent,
) -> Vec<String> {
    let log = Log::new();
    let config = ControllerConfig::default()
        .dequeue_policy(policy)
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(10), 0));
    let h = Harness::start(config, |c| {
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r", &log, |request, attempt| {
                if rv(&request.object) == "1" && attempt == 0 {
                    Err(ReconcileError::new(fail("first fails")))
                } else {
                    Ok(ReconcileResult::done())
                }
            }),
        );
    });
    h.send(first);
    log.wait_len(1).await;
    h.send(second);
    log.wait_len(2).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let entries = log.entries();
    h.stop().await;
    entries
}

#[tokio::test(start_paused = true)]
async fn dequeue_rule_a_new_delete_drops_the_pending_retry() {
    let log = dequeue_scenario(
        Some(RetryDequeuePolicy::opinionated()),
        add("a", 1),
        delete("a", 2),
    )
    .await;
    assert_eq!(log, ["r Created a rv1 a0", "r Deleted a rv2 a0"]);
}

#[tokio::test(start_paused = true)]
async fn dequeue_rule_a_different_action_keeps_the_pending_retry() {
    let log = dequeue_scenario(
        Some(RetryDequeuePolicy::opinionated()),
        add("a", 1),
        update("a", 1, 2, 2),
    )
    .await;
    assert_eq!(
        log,
        [
            "r Created a rv1 a0",
            "r Updated a rv2 a0",
            // The kept request runs with the newest object (level-triggered).
            "r Created a rv2 a1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn dequeue_rule_the_same_generation_keeps_the_pending_retry() {
    let log = dequeue_scenario(
        Some(RetryDequeuePolicy::opinionated()),
        update("a", 0, 1, 1),
        update("a", 1, 2, 1),
    )
    .await;
    assert_eq!(
        log,
        [
            "r Updated a rv1 a0",
            "r Updated a rv2 a0",
            // The kept request runs with the newest object (level-triggered).
            "r Updated a rv2 a1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn dequeue_rule_a_newer_generation_of_the_same_action_drops_the_pending_retry() {
    let log = dequeue_scenario(
        Some(RetryDequeuePolicy::opinionated()),
        update("a", 0, 1, 1),
        update("a", 1, 2, 2),
    )
    .await;
    assert_eq!(log, ["r Updated a rv1 a0", "r Updated a rv2 a0"]);
}

#[tokio::test(start_paused = true)]
async fn dequeue_rule_without_a_policy_every_new_event_drops_the_pending_retry() {
    let log = dequeue_scenario(None, add("a", 1), update("a", 1, 2, 1)).await;
    assert_eq!(log, ["r Created a rv1 a0", "r Updated a rv2 a0"]);
}

#[tokio::test(start_paused = true)]
async fn the_dequeue_policy_sees_both_events_and_the_retry_error() {
    let calls = Log::new();
    let seen = calls.clone();
    let policy =
        RetryDequeuePolicy::new(move |new_action, new_obj, retry_action, retry_obj, err| {
            seen.push(format!(
                "{new_action} {} / {retry_action} {} / {}",
                new_obj.metadata().resource_version.as_deref().unwrap_or(""),
                retry_obj
                    .metadata()
                    .resource_version
                    .as_deref()
                    .unwrap_or(""),
                err.map_or_else(|| "no error".to_string(), HandlerError::to_string)
            ));
            false
        });
    dequeue_scenario(Some(policy), add("a", 1), update("a", 1, 2, 2)).await;
    assert_eq!(calls.entries(), ["Updated 2 / Created 1 / first fails"]);
}

// ---- Section 8: spans ----

/// Records `name < parent` for every new span and `name status=...` when a status is recorded,
/// for the threads that asked for it.
///
/// It is installed once as the global subscriber: a thread-local one (`set_default`) races with
/// other tests registering the same callsites on other threads, which can cache "not interested"
/// for them.
#[derive(Default)]
struct SpanCapture(Mutex<HashMap<std::thread::ThreadId, Vec<String>>>);

impl SpanCapture {
    /// Starts recording the spans of the current thread.
    fn start() -> &'static SpanCapture {
        use tracing_subscriber::layer::SubscriberExt;
        static CAPTURE: std::sync::OnceLock<&'static SpanCapture> = std::sync::OnceLock::new();
        let capture = CAPTURE.get_or_init(|| {
            let capture: &'static SpanCapture = Box::leak(Box::default());
            let subscriber = tracing_subscriber::registry().with(capture);
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber");
            capture
        });
        // Callsites registered before the global subscriber existed learn about it now.
        tracing::callsite::rebuild_interest_cache();
        capture
            .0
            .lock()
            .expect("lock")
            .insert(std::thread::current().id(), Vec::new());
        capture
    }

    fn record(&self, entry: String) {
        if let Some(spans) = self
            .0
            .lock()
            .expect("lock")
            .get_mut(&std::thread::current().id())
        {
            spans.push(entry);
        }
    }

    fn spans(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("lock")
            .get(&std::thread::current().id())
            .cloned()
            .unwrap_or_default()
    }
}

impl<S> tracing_subscriber::Layer<S> for &'static SpanCapture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map_or("-", |parent| parent.name());
        self.record(format!("{} < {parent}", attrs.metadata().name()));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Status(Option<String>);
        impl tracing::field::Visit for Status {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "otel.status_code" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut status = Status(None);
        values.record(&mut status);
        if let (Some(status), Some(span)) = (status.0, ctx.span(id)) {
            self.record(format!("{} status={status}", span.name()));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn spans_are_named_as_the_contract_says_and_failures_mark_them_as_errors() {
    let capture = SpanCapture::start();
    let log = Log::new();
    let config = ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(Duration::from_secs(1), 0));
    let h = Harness::start(config, |c| {
        c.erased().add_watcher(KIND, ok_watcher("w", &log));
        c.erased().add_reconciler(
            KIND,
            logging_reconciler("r", &log, |_, attempt| {
                if attempt == 0 {
                    Err(ReconcileError::new(fail("first fails")))
                } else {
                    Ok(ReconcileResult::done())
                }
            }),
        );
    });
    h.send(add("a", 1));
    log.wait_len(3).await;
    h.send(update("a", 1, 2, 1));
    log.wait_len(5).await;
    h.send(delete("a", 2));
    log.wait_len(7).await;
    h.stop().await;
    // Only this test's thread: the paused runtime runs every task of the controller on it.
    let spans: Vec<String> = capture
        .spans()
        .into_iter()
        .filter(|s| s.starts_with("informer-event") || s.starts_with("controller-"))
        .collect();
    assert_eq!(
        spans,
        [
            "informer-event-add < -",
            "controller-event-watch < informer-event-add",
            "controller-event-reconcile < informer-event-add",
            "controller-event-reconcile status=\"ERROR\"",
            "controller-retry < -",
            "controller-event-reconcile < controller-retry",
            "informer-event-update < -",
            "controller-event-watch < informer-event-update",
            "controller-event-reconcile < informer-event-update",
            "controller-event-reconcile status=\"ERROR\"",
            // The Delete drops the pending retry of the update (opinionated dequeue policy).
            "informer-event-delete < -",
            "controller-event-watch < informer-event-delete",
            "controller-event-reconcile < informer-event-delete",
            "controller-event-reconcile status=\"ERROR\"",
        ],
        "{spans:#?}"
    );
}

mod failing;
mod handoff;
mod kept_retries;
mod timers;

// ---- Own writes (issue #18) ----

/// ConfigMap `a` with a UID, at `rv`, with `finalizers` and `data`.
fn own(rv: u32, finalizers: &[&str], data: &str) -> SharedObject {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("a".into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.uid = Some("uid-a".into());
    cm.metadata.resource_version = Some(rv.to_string());
    cm.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_string()).collect());
    cm.data = Some([("k".to_string(), data.to_string())].into());
    share(cm)
}

fn own_update(old: SharedObject, new: SharedObject) -> InformerEvent {
    InformerEvent::Update { old, new }
}

#[tokio::test(start_paused = true)]
async fn the_echo_of_an_own_write_reaches_watchers_but_no_reconciler_unless_merged_with_a_foreign_change()
 {
    let log = Log::new();
    let hold = Arc::new(Semaphore::new(0));
    let metrics = metrics();
    let config = ControllerConfig::default()
        .max_concurrent_workers(1)
        .metrics(metrics.clone());
    let h = Harness::start(config, |c| {
        let (watch_log, hold) = (log.clone(), hold.clone());
        c.erased().add_watcher(
            KIND,
            DynWatcherFns::<ConfigMap>::new()
                .on_add(move |obj, _| {
                    let hold = hold.clone();
                    async move {
                        if name(&obj) == "blocker" {
                            // Holds the only worker while "a" collects events (each
                            // blocker takes one permit for good).
                            hold.acquire().await?.forget();
                        }
                        Ok(())
                    }
                })
                .on_update(move |_, new, _| {
                    watch_log.push(format!("w update {} rv{}", name(&new), rv(&new)));
                    async { Ok(()) }
                }),
        );
        let log = log.clone();
        c.erased().add_reconciler(
            KIND,
            DynReconcilerFn::<ConfigMap, _>::new(move |request, ctx| {
                log.push(format!(
                    "r {} {} rv{}",
                    request.action,
                    name(&request.object),
                    rv(&request.object)
                ));
                // Each call "writes" the finalizer list and notes the version it got back: the
                // next one, or (at rv5) the next two.
                let next: &[u32] = match (name(&request.object), rv(&request.object)) {
                    ("a", "1") => &[2],
                    ("a", "3") => &[4],
                    ("a", "5") => &[6, 7],
                    _ => &[],
                };
                for version in next {
                    let mut meta = request.object.metadata.clone();
                    meta.resource_version = Some(version.to_string());
                    ctx.note_own_write(&meta, crate::WrittenPart::Finalizers);
                }
                async { Ok(ReconcileResult::done()) }
            }),
        );
    });
    let kind = metrics.for_kind(KIND);
    h.send(InformerEvent::Add(own(1, &[], "x")));
    log.wait_len(1).await;
    // Our own write: watchers see it, the reconciler does not.
    h.send(own_update(own(1, &[], "x"), own(2, &["f"], "x")));
    log.wait_len(2).await;
    // Someone else's data change reconciles.
    h.send(own_update(own(2, &["f"], "x"), own(3, &["f"], "y")));
    log.wait_len(4).await;
    // Our echo and a foreign change merged into one waiting request: reconciled, newest object.
    h.send(InformerEvent::Add(cm("blocker", 1, 1)));
    eventually("the blocker runs", || kind.queue_depth.get() == 0).await;
    h.send(own_update(own(3, &["f"], "y"), own(4, &[], "y")));
    h.send(own_update(own(4, &[], "y"), own(5, &[], "z")));
    // Merged: the first stays for the watchers, the request moved to the second.
    eventually("a's two events wait", || kind.queue_depth.get() == 2).await;
    hold.add_permits(1);
    log.wait_len(8).await;
    // Two echoes merged into one waiting request: skipped.
    h.send(InformerEvent::Add(cm("blocker", 2, 1)));
    eventually("the blocker runs again", || kind.queue_depth.get() == 0).await;
    h.send(own_update(own(5, &[], "z"), own(6, &["f"], "z")));
    h.send(own_update(own(6, &["f"], "z"), own(7, &["f", "g"], "z")));
    eventually("a's two echoes wait", || kind.queue_depth.get() == 2).await;
    hold.add_permits(1);
    eventually("both echoes counted", || kind.own_write_echoes.get() == 3).await;
    // A foreign change after them is still reconciled.
    h.send(own_update(
        own(7, &["f", "g"], "z"),
        own(8, &["f", "g"], "w"),
    ));
    log.wait_len(13).await;
    assert_eq!(
        log.entries(),
        [
            "r Created a rv1",
            "w update a rv2",
            "w update a rv3",
            "r Updated a rv3",
            "r Created blocker rv1",
            "w update a rv4",
            "w update a rv5",
            "r Updated a rv5",
            "r Created blocker rv2",
            "w update a rv6",
            "w update a rv7",
            "w update a rv8",
            "r Updated a rv8",
        ]
    );
    h.stop().await;
}
