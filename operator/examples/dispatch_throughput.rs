//! Dispatch throughput of the `InformerController` on a synthetic event stream with no-op
//! handlers: how many informer events per second go through per-object lanes, one watcher and one
//! reconciler.
//!
//! ```sh
//! cargo run --release -p kubeapp-operator --example dispatch_throughput -- [objects] [events-per-object] [workers]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp_operator::{
    CancellationToken, ControllerConfig, Informer, InformerController, InformerEvent, KindInfo,
    ReconcileResult, ReconcilerFn, WatcherFns, share,
};

fn object(name: &str, rv: usize) -> kubeapp_operator::SharedObject {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.metadata.namespace = Some("bench".into());
    cm.metadata.resource_version = Some(rv.to_string());
    share(cm)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let objects = args.next().flatten().unwrap_or(10_000);
    let per_object = args.next().flatten().unwrap_or(20);
    let workers = args.next().flatten().unwrap_or(10);
    let total = objects * per_object;

    // Events interleaved across objects, as a busy informer produces them.
    let names: Vec<String> = (0..objects).map(|i| format!("o{i}")).collect();
    let mut events = Vec::with_capacity(total);
    let mut last: Vec<_> = names.iter().map(|n| object(n, 0)).collect();
    for step in 0..per_object {
        for (i, name) in names.iter().enumerate() {
            let new = object(name, step + 1);
            events.push(if step == 0 {
                InformerEvent::Add(new.clone())
            } else {
                InformerEvent::Update {
                    old: last[i].clone(),
                    new: new.clone(),
                }
            });
            last[i] = new;
        }
    }

    let watched = Arc::new(AtomicUsize::new(0));
    let reconciled = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = Arc::new(std::sync::Mutex::new(Some(done_tx)));
    let controller =
        InformerController::new(ControllerConfig::default().max_concurrent_workers(workers));
    controller.add_informer(
        "configmaps",
        Informer::from_stream(KindInfo::default(), futures::stream::iter(events)),
    );
    let counter = watched.clone();
    let bump = move || {
        if counter.fetch_add(1, Ordering::Relaxed) + 1 == total
            && let Some(tx) = done_tx.lock().ok().and_then(|mut tx| tx.take())
        {
            let _ = tx.send(());
        }
    };
    let (on_add, on_update) = (bump.clone(), bump);
    controller.add_watcher(
        "configmaps",
        WatcherFns::<ConfigMap>::new()
            .on_add(move |_, _| {
                on_add();
                async { Ok(()) }
            })
            .on_update(move |_, _, _| {
                on_update();
                async { Ok(()) }
            }),
    );
    let counter = reconciled.clone();
    controller.add_reconciler(
        "configmaps",
        ReconcilerFn::<ConfigMap, _>::new(move |_, _| {
            counter.fetch_add(1, Ordering::Relaxed);
            async { Ok(ReconcileResult::done()) }
        }),
    );

    let stop = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let _ = done_rx.await;
    let elapsed = started.elapsed();
    stop.cancel();
    let _ = running.await;
    #[allow(clippy::cast_precision_loss)]
    let rate = total as f64 / elapsed.as_secs_f64();
    println!(
        "{total} events ({objects} objects x {per_object}), {workers} workers: {:.3} s, {rate:.0} events/s; \
         watcher calls {}, reconciler calls {} (waiting requests merge)",
        elapsed.as_secs_f64(),
        watched.load(Ordering::Relaxed),
        reconciled.load(Ordering::Relaxed),
    );
}
