//! The informer's events as typed handlers see them: every object as the sequence of its
//! decodable states (see [`view`](crate::view)), through the informer's decoding, cache, re-list
//! diff and resync, for each typed handler: a [`KindHandle`](crate::KindHandle)'s `Watcher` and
//! `Reconciler` (as erased for the controller) and the erased layer's closure forms.

use crate::list_scope::ListedObject;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::context::{Context, HandlerEnv};
use crate::handler::{BoxError, DynContext};
use crate::kind::{Erased, ErasedReconciler, Reconciler, Watcher};
use crate::reconciler::{
    DynReconciler, DynReconcilerFn, ReconcileError, ReconcileRequest, ReconcileResult,
};
use crate::watcher::{DynWatcher, DynWatcherFns};

/// A ConfigMap whose one data value is `rv`: a string decodes, a number does not (ConfigMap
/// data values are strings).
fn raw(name: &str, rv: u32, decodes: bool) -> DynamicObject {
    let value = if decodes {
        serde_json::Value::from(rv.to_string())
    } else {
        serde_json::Value::from(rv)
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string(),
        },
        "data": { "rev": value },
    }))
    .expect("a ConfigMap")
}

fn good(name: &str, rv: u32) -> DynamicObject {
    raw(name, rv, true)
}

fn bad(name: &str, rv: u32) -> DynamicObject {
    raw(name, rv, false)
}

fn label(cm: &ConfigMap) -> String {
    format!(
        "{}@{}",
        cm.metadata.name.as_deref().unwrap_or(""),
        cm.metadata.resource_version.as_deref().unwrap_or("")
    )
}

type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, entry: String) {
    log.lock().expect("lock").push(entry);
}

/// What a kind's typed handlers write with, on a client that reaches nothing (these handlers
/// write nothing).
fn env() -> Arc<HandlerEnv> {
    let url = "http://127.0.0.1:9".parse().expect("url");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    Arc::new(HandlerEnv::detached(client, "view-tests"))
}

struct Watching(Log);

impl Watcher<ConfigMap> for Watching {
    async fn add(&self, o: Arc<ConfigMap>, _: &Context) -> Result<(), BoxError> {
        push(&self.0, format!("add {}", label(&o)));
        Ok(())
    }
    async fn update(
        &self,
        old: Arc<ConfigMap>,
        new: Arc<ConfigMap>,
        _: &Context,
    ) -> Result<(), BoxError> {
        push(
            &self.0,
            format!("update {} -> {}", label(&old), label(&new)),
        );
        Ok(())
    }
    async fn delete(&self, o: Arc<ConfigMap>, _: &Context) -> Result<(), BoxError> {
        push(&self.0, format!("delete {}", label(&o)));
        Ok(())
    }
    async fn sync(&self, o: Arc<ConfigMap>, _: &Context) -> Result<(), BoxError> {
        push(&self.0, format!("sync {}", label(&o)));
        Ok(())
    }
}

/// The same calls through closures.
fn closures(log: &Log) -> DynWatcherFns<ConfigMap> {
    let (add, update, delete, sync) = (log.clone(), log.clone(), log.clone(), log.clone());
    DynWatcherFns::new()
        .on_add(move |o, _| {
            push(&add, format!("add {}", label(&o)));
            async { Ok(()) }
        })
        .on_update(move |old, new, _| {
            push(
                &update,
                format!("update {} -> {}", label(&old), label(&new)),
            );
            async { Ok(()) }
        })
        .on_delete(move |o, _| {
            push(&delete, format!("delete {}", label(&o)));
            async { Ok(()) }
        })
        .on_sync(move |o, _| {
            push(&sync, format!("sync {}", label(&o)));
            async { Ok(()) }
        })
}

struct Reconciling(Log);

impl Reconciler<ConfigMap> for Reconciling {
    async fn reconcile(
        &self,
        request: ReconcileRequest<ConfigMap>,
        _: &Context,
    ) -> Result<ReconcileResult, ReconcileError> {
        push(
            &self.0,
            format!("{} {}", request.action, label(&request.object)),
        );
        Ok(ReconcileResult::done())
    }
}

/// What the informer makes of this traffic, one event per watcher call, as the controller
/// dispatches them (a resync is `update(object, object)`).
async fn informer_events_of(
    raw: Vec<Event<DynamicObject>>,
    expected: usize,
) -> (Vec<InformerEvent>, KindMetrics) {
    let metrics = ControllerMetrics::unregistered(Some("view_test"))
        .expect("metrics")
        .for_kind("configmaps");
    let raw = futures::stream::iter(
        raw.into_iter()
            .map(|event| Ok(crate::list_scope::map_event(event, ListedObject::from))),
    )
    .chain(futures::stream::pending())
    .boxed();
    let events = informer_events(
        raw,
        ListWatchOptions::default().resync_interval(Duration::from_secs(30)),
        typed_decoder::<ConfigMap>(),
        "ConfigMap".into(),
        SyncedFlag::new(false),
        metrics.clone(),
        None,
        None,
    )
    .take(expected)
    .collect()
    .await;
    (events, metrics)
}

async fn dispatch(watcher: &dyn DynWatcher, ctx: &DynContext, event: &InformerEvent) {
    let result = match event {
        InformerEvent::Add(object) => watcher.add(object.clone(), ctx).await,
        InformerEvent::Update { old, new } => watcher.update(old.clone(), new.clone(), ctx).await,
        InformerEvent::Delete(object) => watcher.delete(object.clone(), ctx).await,
        InformerEvent::Resync(object) => watcher.update(object.clone(), object.clone(), ctx).await,
    };
    result.expect("a typed watcher call");
}

/// a: decodable, undecodable twice, decodable, undecodable, deleted. b: undecodable, fixed,
/// undecodable, fixed (seen by a re-list). c: decodable, undecodable, gone from a re-list. d:
/// undecodable, fixed during a disconnect. e: undecodable, deleted. g: undecodable, unchanged
/// through the re-list. h: decodable, then undecodable for good. Then a resync.
fn traffic() -> Vec<Event<DynamicObject>> {
    vec![
        Event::Init,
        Event::InitApply(good("a", 1)),
        Event::InitApply(bad("b", 2)),
        Event::InitApply(good("c", 3)),
        Event::InitApply(bad("d", 4)),
        Event::InitApply(bad("e", 5)),
        Event::InitApply(bad("g", 6)),
        Event::InitApply(good("h", 7)),
        Event::InitDone,
        Event::Apply(bad("a", 8)),
        Event::Apply(bad("a", 9)),
        Event::Apply(good("a", 10)),
        Event::Apply(good("b", 11)),
        Event::Apply(bad("b", 12)),
        Event::Apply(bad("c", 13)),
        Event::Apply(bad("a", 14)),
        Event::Delete(bad("a", 15)),
        Event::Delete(bad("e", 16)),
        Event::Apply(bad("h", 17)),
        // The watch expired: a re-list.
        Event::Init,
        Event::InitApply(good("b", 18)),
        Event::InitApply(good("d", 19)),
        Event::InitApply(bad("g", 6)),
        Event::InitApply(bad("h", 17)),
        Event::InitDone,
    ]
}

#[tokio::test(start_paused = true)]
async fn typed_handlers_see_every_transition_between_decodable_states_and_nothing_else() {
    // 7 listed, 10 watched, 3 from the re-list (b, d, c's Delete), 4 resynced.
    let (events, metrics) = informer_events_of(traffic(), 24).await;
    let ctx = DynContext::new("configmaps", CancellationToken::new());
    let watched = [
        "add a@1",
        "add c@3",
        "add h@7",
        "update a@1 -> a@10",
        "add b@11",
        "delete a@10",
        "update b@11 -> b@18",
        "add d@19",
        "delete c@3",
        "update b@18 -> b@18",
        "update d@19 -> d@19",
        "update h@7 -> h@7",
    ];
    for (name, log) in [
        ("Watcher", Log::default()),
        ("DynWatcherFns", Log::default()),
    ] {
        let watcher: Box<dyn DynWatcher> = if name == "Watcher" {
            Box::new(Erased::new(Watching(log.clone()), Arc::new(()), env()))
        } else {
            Box::new(closures(&log))
        };
        for event in &events {
            dispatch(watcher.as_ref(), &ctx, event).await;
        }
        assert_eq!(*log.lock().expect("lock"), watched, "{name}");
    }

    // A request runs with the last decodable state; objects that never decoded are skipped.
    let reconciled = [
        "Created a@1",
        "Created c@3",
        "Created h@7",
        "Updated a@1",
        "Updated a@1",
        "Updated a@10",
        "Created b@11",
        "Updated b@11",
        "Updated c@3",
        "Updated a@10",
        "Deleted a@10",
        "Updated h@7",
        "Updated b@18",
        "Created d@19",
        "Deleted c@3",
        "Resynced b@18",
        "Resynced d@19",
        "Resynced h@7",
    ];
    for (name, log) in [
        ("Reconciler", Log::default()),
        ("DynReconcilerFn", Log::default()),
    ] {
        let reconciler: Box<dyn DynReconciler> = if name == "Reconciler" {
            Box::new(ErasedReconciler(Erased::new(
                Reconciling(log.clone()),
                Arc::new(()),
                env(),
            )))
        } else {
            let log = log.clone();
            Box::new(DynReconcilerFn::<ConfigMap, _>::new(move |request, _| {
                push(
                    &log,
                    format!("{} {}", request.action, label(&request.object)),
                );
                async { Ok(ReconcileResult::done()) }
            }))
        };
        for event in &events {
            let request = ReconcileRequest {
                action: event.action(),
                object: event.object().clone(),
                state: Default::default(),
                cause: None,
            };
            assert!(reconciler.reconcile(request, &ctx).await.is_ok(), "{name}");
        }
        assert_eq!(*log.lock().expect("lock"), reconciled, "{name}");
    }

    // Each undecodable state logged and counted once: b2, d4, e5, g6 listed; a8, a9, b12, c13,
    // a14, h17 watched. Not the deletes of a and e, nor g6 and h17 again in the re-list.
    assert_eq!(metrics.decode_errors.get(), 10);
}
