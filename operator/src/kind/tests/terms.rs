//! Terms of a controller ([`InformerController::run_term`]) as an outside crate runs them
//! (`kubeapp-ha`): the term's [`CallGate`] is asked before every handler call, its
//! [`EventFilter`] decides which objects reach the handlers, [`deliver_cached`] hands the running
//! term the cached objects its filter admits now, and a second term starts again from the cache
//! and still skips the echoes of its own writes.
//!
//! [`deliver_cached`]: InformerController::deliver_cached

use kube::core::GroupVersionKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::tests::{Log, Logging, WAIT, cm, offline_client};
use crate::controller::Term;
use crate::gate::{CallGate, EventFilter};
use crate::list_watch::Informer;
use crate::object::{SharedObject, share};
use crate::store::InformerEvent;
use crate::{ControllerConfig, InformerController};

/// Open while `open`; counts how often it was asked.
struct Gate {
    open: AtomicBool,
    asked: watch::Sender<usize>,
}

impl Gate {
    fn asked(&self) -> usize {
        *self.asked.borrow()
    }
}

impl CallGate for Gate {
    fn may_call(&self) -> bool {
        // A test double: the production gates only read (no lock, no wake-ups).
        self.asked.send_modify(|asked| *asked += 1);
        self.open.load(Ordering::Acquire)
    }
}

/// Admits the objects whose name starts with `a`, and from when `b_too` is set those starting
/// with `b` (as a sharded term's filter grows when slots are handed over).
#[derive(Default)]
struct Names {
    b_too: AtomicBool,
}

impl EventFilter for Names {
    fn admits(&self, object: &SharedObject) -> bool {
        let b_too = self.b_too.load(Ordering::Acquire);
        name_of(object)
            .is_some_and(|name| name.starts_with('a') || (b_too && name.starts_with('b')))
    }
}

fn name_of(object: &SharedObject) -> Option<&str> {
    object.metadata().name.as_deref()
}

#[tokio::test]
async fn a_term_asks_its_gate_before_each_call_admits_only_what_its_filter_does_and_can_run_again()
{
    let controller = InformerController::new(ControllerConfig::default());
    let (events, stream) = futures::channel::mpsc::unbounded();
    let informer = Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream);
    let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
    let log = Log::new();
    let _watcher = config_maps.watch(Logging(log.clone()));
    controller
        .check_restartable()
        .expect("every kind on a shared informer");
    for object in [cm("a1", 1), cm("b1", 2), cm("a2", 3)] {
        events
            .unbounded_send(InformerEvent::Add(share(object)))
            .expect("stream open");
    }

    // Term 1: only a* objects reach the handlers; each call asks the gate first.
    let gate = Arc::new(Gate {
        open: AtomicBool::new(true),
        asked: watch::Sender::new(0),
    });
    let filter = Arc::new(Names::default());
    let stop = CancellationToken::new();
    let term = Term::new()
        .call_gate(Arc::clone(&gate) as _)
        .event_filter(Arc::clone(&filter) as _)
        .grace(|configured| configured);
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run_term(stop, term).await }
    });
    log.wait_for("a1 and a2 added", |log| log.len() == 2).await;
    let mut added = log.entries();
    added.sort();
    assert_eq!(added, ["add a1@1", "add a2@3"], "b1 is not this term's");
    assert!(gate.asked() >= 2, "asked per call: {}", gate.asked());
    let cached: usize = controller
        .shared_kinds()
        .iter()
        .map(|kind| kind.cache.count(|object| name_of(object) == Some("b1")))
        .sum();
    assert_eq!(cached, 1, "b1 is cached, only not handled");

    // The filter grows to b*, and the running term is handed b1 from the cache.
    filter.b_too.store(true, Ordering::Release);
    controller
        .deliver_cached(&|object| name_of(object) == Some("b1"))
        .await;
    log.wait_for("b1 delivered", |log| log.len() == 3).await;
    assert_eq!(log.entries()[2], "add b1@2");

    // Closed: the next event's call does not start; an event after reopening does.
    gate.open.store(false, Ordering::Release);
    let asked = gate.asked();
    let mut asks = gate.asked.subscribe();
    events
        .unbounded_send(InformerEvent::Update {
            old: share(cm("a1", 1)),
            new: share(cm("a1", 4)),
        })
        .expect("stream open");
    tokio::time::timeout(WAIT, asks.wait_for(|now| *now > asked))
        .await
        .expect("the closed gate is asked within the wait")
        .expect("the gate lives");
    stop.cancel();
    running.await.expect("joined").expect("term ran");
    assert_eq!(log.entries().len(), 3, "no call past the closed gate");

    // Term 2 (no gates): it starts from the cache, every object as an Add.
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run_term(stop, Term::new()).await }
    });
    log.wait_for("the cache again", |log| log.len() == 6).await;
    let mut second: Vec<String> = log.entries()[3..].to_vec();
    second.sort();
    assert_eq!(second, ["add a1@4", "add a2@3", "add b1@2"]);
    stop.cancel();
    running.await.expect("joined").expect("term ran");
}

/// `cm(name, rv)` with `finalizers`: what a handler's finalizer write gets back.
fn with_finalizers(name: &str, rv: u32, finalizers: &[&str]) -> ConfigMap {
    let mut object = cm(name, rv);
    object.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    object
}

#[tokio::test]
async fn a_second_term_still_skips_the_echoes_of_its_own_writes() {
    let metrics = crate::ControllerMetrics::unregistered(None).expect("metrics");
    let controller = InformerController::new(ControllerConfig::default().metrics(metrics.clone()));
    let (events, stream) = futures::channel::mpsc::unbounded();
    let informer = Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream);
    let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
    let log = Log::new();
    // Each reconcile "writes" one more finalizer and notes the version it got back.
    let _reconciler = config_maps.reconcile_fn({
        let log = log.clone();
        move |request, ctx| {
            let log = log.clone();
            async move {
                let object = &request.object;
                log.push(format!("reconcile {}", super::tests::label(object)));
                let rv: u32 = object
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                let mut written = object.as_ref().clone();
                written.metadata.resource_version = Some((rv + 1).to_string());
                written
                    .metadata
                    .finalizers
                    .get_or_insert_with(Vec::new)
                    .push(format!("f{rv}"));
                ctx.note_own_write(&written, crate::WrittenPart::Finalizers);
                Ok(crate::ReconcileResult::done())
            }
        }
    });
    let echoes = metrics.for_kind("configmaps").own_write_echoes;
    let send = |event| events.unbounded_send(event).expect("stream open");
    let run = || {
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move { controller.run_term(stop, Term::new()).await }
        });
        (stop, running)
    };

    // Term 1: the echo of its write reconciles nothing.
    let (stop, running) = run();
    send(InformerEvent::Add(share(cm("a", 1))));
    log.wait_for("a@1 reconciled", |log| log.len() == 1).await;
    send(InformerEvent::Update {
        old: share(cm("a", 1)),
        new: share(with_finalizers("a", 2, &["f1"])),
    });
    tokio::time::timeout(WAIT, async {
        while echoes.get() < 1 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("term 1 skips its echo");
    stop.cancel();
    running.await.expect("joined").expect("term ran");

    // Term 2 starts from the cache (a@2 as an Add) and must skip its own echo too.
    let (stop, running) = run();
    log.wait_for("a@2 reconciled", |log| log.len() == 2).await;
    send(InformerEvent::Update {
        old: share(with_finalizers("a", 2, &["f1"])),
        new: share(with_finalizers("a", 3, &["f1", "f2"])),
    });
    tokio::time::timeout(WAIT, async {
        while echoes.get() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("term 2 skips its echo: {:?}", log.entries()));
    // A foreign change after it still reconciles.
    let mut foreign = with_finalizers("a", 4, &["f1", "f2"]);
    foreign.data = Some([("k".to_string(), "v".to_string())].into());
    send(InformerEvent::Update {
        old: share(with_finalizers("a", 3, &["f1", "f2"])),
        new: share(foreign),
    });
    log.wait_for("a@4 reconciled", |log| log.len() == 3).await;
    assert_eq!(
        log.entries(),
        ["reconcile a@1", "reconcile a@2", "reconcile a@4"],
        "no echo was reconciled"
    );
    stop.cancel();
    running.await.expect("joined").expect("term ran");
}
