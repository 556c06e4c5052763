//! Typed kinds over synthetic streams ([`InformerController::kind_from_stream`]): what the typed
//! handlers get, in which order, and that a stream is read only once the controller listens.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::handler::BoxError;
use crate::informer::{Informer, InformerEvent, KindInfo};
use crate::object::share;
use crate::{ControllerConfig, InformerController, ReconcileRequest, ReconcileResult, Watcher};

const WAIT: Duration = Duration::from_secs(30);

fn cm(name: &str, rv: u32) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.uid = Some(format!("uid-{name}"));
    cm.metadata.resource_version = Some(rv.to_string());
    cm
}

fn offline_client() -> kube::Client {
    let url = "http://127.0.0.1:9".parse().expect("url");
    kube::Client::try_from(kube::Config::new(url)).expect("client")
}

/// An append-only log the test awaits conditions on.
#[derive(Clone)]
struct Log(Arc<watch::Sender<Vec<String>>>);

impl Log {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Vec::new())))
    }

    fn push(&self, entry: String) {
        self.0.send_modify(|log| log.push(entry));
    }

    fn entries(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let mut rx = self.0.subscribe();
        match tokio::time::timeout(WAIT, rx.wait_for(|log| done(log))).await {
            Ok(Ok(log)) => log.clone(),
            _ => panic!("{what}: not reached; log: {:#?}", self.entries()),
        }
    }
}

fn label(cm: &ConfigMap) -> String {
    format!(
        "{}@{}",
        cm.metadata.name.as_deref().unwrap_or(""),
        cm.metadata.resource_version.as_deref().unwrap_or("")
    )
}

struct Logging(Log);

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
    let informer = Informer::from_stream(KindInfo::default(), futures::stream::iter(events));
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
        self.log
            .push(format!("{name} attempt {} data {}", ctx.attempt(), **ctx));
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
    let informer = Informer::from_stream(KindInfo::default(), futures::stream::iter(events));
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
