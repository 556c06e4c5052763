//! Typed kinds over synthetic streams ([`InformerController::kind_from_stream`]): what the typed
//! handlers get, in which order, and that a stream is read only once the controller listens.

use kube::core::GroupVersionKind;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::handler::BoxError;
use crate::list_watch::Informer;
use crate::object::share;
use crate::store::InformerEvent;
use crate::{ControllerConfig, InformerController, ReconcileRequest, ReconcileResult, Watcher};

pub(super) const WAIT: Duration = Duration::from_secs(30);

pub(super) fn cm(name: &str, rv: u32) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.uid = Some(format!("uid-{name}"));
    cm.metadata.resource_version = Some(rv.to_string());
    cm
}

pub(super) fn offline_client() -> kube::Client {
    let url = "http://127.0.0.1:9".parse().expect("url");
    kube::Client::try_from(kube::Config::new(url)).expect("client")
}

/// An append-only log the test awaits conditions on.
#[derive(Clone)]
pub(super) struct Log(Arc<watch::Sender<Vec<String>>>);

impl Log {
    pub(super) fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Vec::new())))
    }

    pub(super) fn push(&self, entry: String) {
        self.0.send_modify(|log| log.push(entry));
    }

    pub(super) fn entries(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    pub(super) async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let mut rx = self.0.subscribe();
        match tokio::time::timeout(WAIT, rx.wait_for(|log| done(log))).await {
            Ok(Ok(log)) => log.clone(),
            _ => panic!("{what}: not reached; log: {:#?}", self.entries()),
        }
    }
}

pub(super) fn label(cm: &ConfigMap) -> String {
    format!(
        "{}@{}",
        cm.metadata.name.as_deref().unwrap_or(""),
        cm.metadata.resource_version.as_deref().unwrap_or("")
    )
}

pub(super) struct Logging(pub(super) Log);

impl Watcher<ConfigMap> for Logging {
    async fn add(&self, object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        self.0.push(format!("add {}", label(&object)));
        Ok(())
    }
    async fn update(
        &self,
        old: Arc<ConfigMap>,
        new: Arc<ConfigMap>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        self.0
            .push(format!("update {} -> {}", label(&old), label(&new)));
        Ok(())
    }
    async fn delete(&self, object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        self.0.push(format!("delete {}", label(&object)));
        Ok(())
    }
}

#[tokio::test]
async fn a_kind_over_a_stream_gives_typed_handlers_every_event_in_order_and_skips_other_types() {
    let controller = InformerController::new(ControllerConfig::default());
    let mut secret = Secret::default();
    secret.metadata.name = Some("not-a-configmap".into());
    secret.metadata.namespace = Some("ns".into());
    let events = vec![
        InformerEvent::Add(share(cm("a", 1))),
        InformerEvent::Add(share(secret)),
        InformerEvent::Update {
            old: share(cm("a", 1)),
            new: share(cm("a", 2)),
        },
        InformerEvent::Add(share(cm("b", 3))),
        InformerEvent::Delete(share(cm("a", 2))),
    ];
    let informer = Informer::from_stream(
        GroupVersionKind::gvk("", "v1", "Test"),
        futures::stream::iter(events),
    );
    // Registered before the controller runs: a stream read at once would leave only the final
    // cache (b) for the handlers, as one Add.
    let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
    let log = Log::new();
    let _watcher = config_maps.watch(Logging(log.clone()));
    let reconciled = log.clone();
    let _reconciler =
        config_maps.reconcile_fn(move |request: ReconcileRequest<ConfigMap>, _ctx: Context| {
            reconciled.push(format!(
                "reconcile {} {}",
                request.action,
                label(&request.object)
            ));
            async { Ok(ReconcileResult::done()) }
        });
    tokio::task::yield_now().await;
    assert!(
        log.entries().is_empty(),
        "nothing runs before the controller"
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let watcher_entries = |entries: &[String]| -> Vec<String> {
        entries
            .iter()
            .filter(|e| !e.starts_with("reconcile"))
            .cloned()
            .collect()
    };
    let entries = log
        .wait_for("four watcher calls and the reconcile of b", |entries| {
            watcher_entries(entries).len() >= 4
                && entries
                    .iter()
                    .any(|e| e.starts_with("reconcile") && e.contains("b@3"))
        })
        .await;
    let of = |name: &str| -> Vec<String> {
        watcher_entries(&entries)
            .into_iter()
            .filter(|e| e.contains(&format!(" {name}@")))
            .collect()
    };
    // In order per object (objects run concurrently); the Secret reached no typed handler.
    assert_eq!(of("a"), ["add a@1", "update a@1 -> a@2", "delete a@2"]);
    assert_eq!(of("b"), ["add b@3"]);
    assert_eq!(watcher_entries(&entries).len(), 4, "{entries:?}");
    assert!(
        entries.iter().all(|e| !e.contains("not-a-configmap")),
        "{entries:?}"
    );
    let cached: Vec<String> = config_maps
        .store()
        .list(None)
        .iter()
        .map(|cm| label(cm))
        .collect();
    assert_eq!(
        cached,
        ["b@3"],
        "b is cached, a is gone, the Secret is no ConfigMap"
    );
    stop.cancel();
    running.await.expect("joined").expect("ran");
}

/// Records, per call, the object, the context's attempt and data; fails each object's first
/// call once.
struct AttemptLogging {
    log: Log,
    failed: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Watcher<ConfigMap, String> for AttemptLogging {
    async fn add(&self, object: Arc<ConfigMap>, ctx: &Context<String>) -> Result<(), BoxError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        self.log.push(format!(
            "{name} attempt {} data {}",
            ctx.attempt(),
            ctx.data()
        ));
        let first = self
            .failed
            .lock()
            .map_err(|_| "poisoned")?
            .insert(name.clone());
        if first {
            return Err(format!("{name}: failing the first call").into());
        }
        Ok(())
    }
    async fn update(
        &self,
        _old: Arc<ConfigMap>,
        _new: Arc<ConfigMap>,
        _ctx: &Context<String>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
    async fn delete(
        &self,
        _object: Arc<ConfigMap>,
        _ctx: &Context<String>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
}

/// The typed handlers' context is made once per run and lent to every first-attempt call (see
/// `kind::traits::Erased`); a retry must still see its own attempt number, on any worker, and
/// every call the user data.
#[tokio::test]
async fn a_lent_context_carries_each_calls_attempt_and_the_user_data() {
    let controller = InformerController::new(
        ControllerConfig::default()
            .max_concurrent_workers(4)
            .retry_policy(crate::RetryPolicy::exponential(
                Duration::from_millis(10),
                3,
            )),
    );
    let names: Vec<String> = (0..20).map(|i| format!("o{i}")).collect();
    let events: Vec<InformerEvent> = names
        .iter()
        .enumerate()
        .map(|(i, name)| InformerEvent::Add(share(cm(name, u32::try_from(i).unwrap_or(0) + 1))))
        .collect();
    let informer = Informer::from_stream(
        GroupVersionKind::gvk("", "v1", "Test"),
        futures::stream::iter(events),
    );
    let config_maps = controller
        .kind_from_stream::<ConfigMap>(informer, offline_client())
        .with_context(Arc::new(String::from("user-data")));
    let log = Log::new();
    let _watcher = config_maps.watch(AttemptLogging {
        log: log.clone(),
        failed: std::sync::Mutex::default(),
    });
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let entries = log
        .wait_for("every object's first call and its retry", |entries| {
            entries.len() >= 2 * names.len()
        })
        .await;
    for name in &names {
        let calls: Vec<&String> = entries
            .iter()
            .filter(|e| e.split(' ').next() == Some(name.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                &format!("{name} attempt 0 data user-data"),
                &format!("{name} attempt 1 data user-data"),
            ],
            "{entries:#?}"
        );
    }
    stop.cancel();
    running.await.expect("joined").expect("ran");
}

/// Records, at its first call, how many events the stream had yielded by then.
struct PulledAtFirstCall {
    pulled: Arc<std::sync::atomic::AtomicUsize>,
    seen: Arc<std::sync::OnceLock<usize>>,
}

impl Watcher<ConfigMap> for PulledAtFirstCall {
    async fn add(&self, _object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        let pulled = self.pulled.load(std::sync::atomic::Ordering::SeqCst);
        let _ = self.seen.set(pulled);
        Ok(())
    }
    async fn update(
        &self,
        _old: Arc<ConfigMap>,
        _new: Arc<ConfigMap>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        Ok(())
    }
    async fn delete(&self, _object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A kind with watchers makes the shared informer wait only when its backlog is full, so an
/// always-ready stream fills the backlog before the workers run (one thread), as a private
/// informer's intake does; it used to yield every 128 events, which let the workers drain each
/// small batch and park, then woke one per event of the next batch.
#[tokio::test]
async fn a_kind_with_watchers_gets_a_full_backlog_from_an_always_ready_shared_informer() {
    const BACKLOG: usize = 1_000;
    let controller =
        InformerController::new(ControllerConfig::default().max_pending_events(BACKLOG));
    let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let events = (0..2 * BACKLOG).map(|i| {
        InformerEvent::Add(share(cm(
            &format!("o{i}"),
            u32::try_from(i).unwrap_or(0) + 1,
        )))
    });
    let counted = Arc::clone(&pulled);
    let stream = futures::StreamExt::inspect(futures::stream::iter(events), move |_| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    let informer = Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream);
    let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
    let seen = Arc::new(std::sync::OnceLock::new());
    let _watcher = config_maps.watch(PulledAtFirstCall {
        pulled: Arc::clone(&pulled),
        seen: Arc::clone(&seen),
    });
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let waited = tokio::time::timeout(WAIT, async {
        while seen.get().is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the watcher was never called");
    let at_first_call = seen.get().copied().unwrap_or_default();
    assert!(
        at_first_call >= BACKLOG,
        "the stream had yielded {at_first_call} events when the first watcher call ran; \
         the informer should have filled the backlog of {BACKLOG} first"
    );
    stop.cancel();
    running.await.expect("joined").expect("ran");
}

/// A shared informer feeding only a kind without watchers never waits for it, so it must give
/// the thread up on its own: with an endless, always-ready stream, a task spawned from the
/// reconciler still runs. (It spends task budget per event then, and its delivery lock spends
/// some every 64 events; the test fails when neither does, checked by disabling both.) A
/// thread that never came back would hang the test, so the runtime runs on a thread of its own
/// and a watchdog fails the test instead.
#[test]
fn a_shared_informer_feeding_only_a_kind_without_watchers_still_lets_other_tasks_run() {
    let (ran, other_task_ran) = std::sync::mpsc::channel::<()>();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let controller = InformerController::new(ControllerConfig::default());
            let endless = futures::StreamExt::map(futures::stream::iter(1u32..), |rv| {
                InformerEvent::Update {
                    old: share(cm("a", rv)),
                    new: share(cm("a", rv + 1)),
                }
            });
            let informer = Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), endless);
            let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
            let once = Arc::new(std::sync::Once::new());
            let _reconciler = config_maps.reconcile_fn(
                move |_request: ReconcileRequest<ConfigMap>, _ctx: Context| {
                    let ran = ran.clone();
                    once.call_once(|| {
                        tokio::spawn(async move {
                            let _ = ran.send(());
                        });
                    });
                    async { Ok(ReconcileResult::done()) }
                },
            );
            let _ = controller.run(stopped).await;
        });
    });
    let result = other_task_ran.recv_timeout(WAIT);
    // Ends the endless run when it gives the thread up (it never does if the test failed).
    stop.cancel();
    assert!(
        result.is_ok(),
        "a task spawned beside the shared informer never ran within {WAIT:?}"
    );
}

/// Records every update's object name and resourceVersion, yielding once per call so that the
/// backlog fills while it runs.
struct UpdateLog {
    seen: Arc<std::sync::Mutex<Vec<(String, u32)>>>,
}

impl Watcher<ConfigMap> for UpdateLog {
    async fn add(&self, _object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        Ok(())
    }
    async fn update(
        &self,
        _old: Arc<ConfigMap>,
        new: Arc<ConfigMap>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        tokio::task::yield_now().await;
        let name = new.metadata.name.clone().unwrap_or_default();
        let rv = new
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or_default();
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name, rv));
        Ok(())
    }
    async fn delete(&self, _object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A shared informer offers each event without waiting and only waits when the kind's backlog
/// is full (then finishes that event's delivery before the next): with a backlog of 4 and 2,000
/// updates of 50 objects, every update reaches the watcher, each object's in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backlog_makes_the_shared_informer_wait_and_loses_no_update() {
    const OBJECTS: u32 = 50;
    const UPDATES: u32 = 40;
    let controller = InformerController::new(
        ControllerConfig::default()
            .max_pending_events(4)
            .max_concurrent_workers(4),
    );
    let events = (1..=UPDATES).flat_map(|rv| {
        (0..OBJECTS).map(move |object| {
            let name = format!("o{object}");
            InformerEvent::Update {
                old: share(cm(&name, rv)),
                new: share(cm(&name, rv + 1)),
            }
        })
    });
    let informer = Informer::from_stream(
        GroupVersionKind::gvk("", "v1", "Test"),
        futures::stream::iter(events),
    );
    let config_maps = controller.kind_from_stream::<ConfigMap>(informer, offline_client());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let _watcher = config_maps.watch(UpdateLog {
        seen: Arc::clone(&seen),
    });
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let total = usize::try_from(OBJECTS * UPDATES).unwrap_or(usize::MAX);
    let all = tokio::time::timeout(WAIT, async {
        while seen.lock().map(|seen| seen.len()).unwrap_or_default() < total {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(all.is_ok(), "{} of {total} updates arrived", seen.len());
    for object in 0..OBJECTS {
        let name = format!("o{object}");
        let versions: Vec<u32> = seen
            .iter()
            .filter(|(seen, _)| *seen == name)
            .map(|(_, rv)| *rv)
            .collect();
        let expected: Vec<u32> = (2..=UPDATES + 1).collect();
        assert_eq!(versions, expected, "{name}'s updates, in order");
    }
    stop.cancel();
    running.await.expect("joined").expect("ran");
}
