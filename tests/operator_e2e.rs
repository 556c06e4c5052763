//! End-to-end tests of the operator core (`kubeapp::operator`) against a real kube-apiserver +
//! etcd: informers, the `InformerController`, watchers, reconcilers, requeues, an apiserver
//! restart, objects that do not deserialize, and the metrics registry.

use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{CustomResource, CustomResourceExt};
use kubeapp::operator::erased::{DynReconciler, DynReconcilerFn, DynWatcherFns};
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::object::as_undecodable;
use kubeapp::operator::{
    CancellationToken, ControllerConfig, DynContext, Informer, InformerController, ReconcileError,
    ReconcileRequest, ReconcileResult,
};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A custom kind for these tests.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "e2e.kubeapp.dev", version = "v1", kind = "Gadget", namespaced)]
struct GadgetSpec {
    size: i32,
}

const TIMEOUT: Duration = Duration::from_secs(60);
const KIND: &str = "gadgets";

fn logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "kubeapp_operator=info".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

fn gadget(name: &str, size: i32) -> Gadget {
    Gadget::new(name, GadgetSpec { size })
}

fn name_of(g: &Gadget) -> &str {
    g.metadata.name.as_deref().unwrap_or("")
}

/// An append-only log that tests await conditions on.
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
        match tokio::time::timeout(TIMEOUT, rx.wait_for(|log| done(log))).await {
            Ok(Ok(log)) => log.clone(),
            _ => panic!(
                "{what}: not reached within {TIMEOUT:?}; log: {:#?}",
                self.entries()
            ),
        }
    }

    async fn wait_contains(&self, entry: &str) -> Vec<String> {
        self.wait_for(entry, |log| log.iter().any(|e| e == entry))
            .await
    }
}

/// An untyped reconciler that logs the undecodable objects it is given as `u <action> <name>`.
struct LogsUndecodable(Log);

#[async_trait::async_trait]
impl DynReconciler for LogsUndecodable {
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        _: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError> {
        if let Some(object) = as_undecodable(&request.object) {
            let name = object.raw().metadata.name.clone().unwrap_or_default();
            self.0.push(format!("u {} {name}", request.action));
        }
        Ok(ReconcileResult::done())
    }
}

/// Registers a watcher and a reconciler that log into `log` as `w ...` and `r ...`.
fn add_logging_handlers(controller: &InformerController, log: &Log) {
    let (add, update, delete, sync) = (log.clone(), log.clone(), log.clone(), log.clone());
    controller.erased().add_watcher(
        KIND,
        DynWatcherFns::<Gadget>::new()
            .on_add(move |g, _| {
                add.push(format!("w add {} {}", name_of(&g), g.spec.size));
                async { Ok(()) }
            })
            .on_update(move |old, new, _| {
                update.push(format!(
                    "w update {} {}->{}",
                    name_of(&new),
                    old.spec.size,
                    new.spec.size
                ));
                async { Ok(()) }
            })
            .on_delete(move |g, _| {
                delete.push(format!("w delete {} {}", name_of(&g), g.spec.size));
                async { Ok(()) }
            })
            .on_sync(move |g, _| {
                sync.push(format!("w sync {} {}", name_of(&g), g.spec.size));
                async { Ok(()) }
            }),
    );
    let log = log.clone();
    controller.erased().add_reconciler(
        KIND,
        DynReconcilerFn::<Gadget, _>::new(move |request, _| {
            log.push(format!(
                "r {} {} {}",
                request.action,
                name_of(&request.object),
                request.object.spec.size
            ));
            async { Ok(ReconcileResult::done()) }
        }),
    );
}

fn spawn_run(controller: &InformerController) -> (CancellationToken, JoinHandle<()>) {
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await.expect("controller runs once") }
    });
    (stop, running)
}

async fn stop(stop: CancellationToken, running: JoinHandle<()>) {
    stop.cancel();
    tokio::time::timeout(TIMEOUT, running)
        .await
        .expect("the controller stops in time")
        .expect("the controller task does not panic");
}

async fn wait_synced(controller: &InformerController) {
    for (kind, flag) in controller.synced_flags() {
        tokio::time::timeout(TIMEOUT, flag.wait())
            .await
            .unwrap_or_else(|_| panic!("informer {kind} never synced"));
    }
}

/// The value of the sample `name{labels}` in the text exposition, if present.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn lifecycle_reaches_watchers_and_reconcilers_in_order_requeues_and_is_counted() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Gadget>().await.expect("CRD");
    let ns = env.create_namespace("lifecycle").await.expect("namespace");
    let api: Api<Gadget> = Api::namespaced(env.client(), &ns);

    let served = kubeapp::operator::MetricsRegistry::new(Some("e2e_lifecycle")).expect("metrics");
    let registry = served.registry().clone();
    let metrics = served.controller();
    // Registering the set again (an app handing its collectors to the runner) is harmless.
    for collector in metrics.collectors() {
        assert!(matches!(
            registry.register(collector),
            Err(prometheus::Error::AlreadyReg)
        ));
    }
    let controller = InformerController::new(ControllerConfig::default().metrics(metrics));
    controller.erased().add_informer(
        KIND,
        Informer::new::<Gadget>(env.client(), ListWatchOptions::default().namespace(&ns)),
    );
    let log = Log::new();
    add_logging_handlers(&controller, &log);
    // A second reconciler that asks to run "requeue-me" once more after a second.
    let requeues = Log::new();
    let requeue_log = requeues.clone();
    let first_call = Arc::new(Mutex::new(None::<Instant>));
    controller.erased().add_reconciler(
        KIND,
        DynReconcilerFn::<Gadget, _>::new(move |request, _| {
            let mut result = ReconcileResult::done();
            if name_of(&request.object) == "requeue-me" {
                let mut first = first_call.lock().expect("lock");
                match *first {
                    None => {
                        *first = Some(Instant::now());
                        result = ReconcileResult::requeue_after(Duration::from_secs(1));
                        requeue_log.push(format!("{} first", request.action));
                    }
                    Some(at) => requeue_log.push(format!(
                        "{} again after {}s",
                        request.action,
                        at.elapsed().as_secs()
                    )),
                }
            }
            async move { Ok(result) }
        }),
    );
    let (stop_token, running) = spawn_run(&controller);
    wait_synced(&controller).await;

    api.create(&PostParams::default(), &gadget("g1", 1))
        .await
        .expect("create");
    log.wait_contains("r Created g1 1").await;
    let patch = serde_json::json!({ "spec": { "size": 2 } });
    api.patch("g1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    log.wait_contains("r Updated g1 2").await;
    api.delete("g1", &DeleteParams::default())
        .await
        .expect("delete");
    let entries = log.wait_contains("r Deleted g1 2").await;
    assert_eq!(
        entries,
        [
            "w add g1 1",
            "r Created g1 1",
            "w update g1 1->2",
            "r Updated g1 2",
            "w delete g1 2",
            "r Deleted g1 2"
        ]
    );

    api.create(&PostParams::default(), &gadget("requeue-me", 5))
        .await
        .expect("create");
    let runs = requeues.wait_for("the requeue", |log| log.len() >= 2).await;
    assert_eq!(runs, ["Created first", "Created again after 1s"]);

    // The known sequence: 2 creates, 1 update, 1 delete; 1 requeue run that succeeded.
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    let event = |event_type: &str| format!("event_type=\"{event_type}\",kind=\"{KIND}\"");
    let count = |name: &str, labels: &str| sample(&text, &format!("e2e_lifecycle_{name}"), labels);
    assert_eq!(
        count("informer_events_total", &event("CREATE")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        count("informer_events_total", &event("UPDATE")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("informer_events_total", &event("DELETE")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("informer_events_total", &event("RESYNC")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        count("watcher_process_duration_seconds_count", &event("CREATE")),
        Some(2.0)
    );
    // Two reconcilers for each of 2 creates, plus the requeued run of the second.
    assert_eq!(
        count(
            "reconciler_process_duration_seconds_count",
            &event("CREATE")
        ),
        Some(5.0)
    );
    assert_eq!(
        count(
            "informer_reconcile_duration_seconds_count",
            &event("DELETE")
        ),
        Some(1.0)
    );
    assert_eq!(count("watcher_errors_total", &event("CREATE")), Some(0.0));
    assert_eq!(
        count("reconciler_errors_total", &event("CREATE")),
        Some(0.0)
    );
    assert_eq!(
        count("ongoing_reconcile_events", &event("CREATE")),
        Some(0.0)
    );
    assert_eq!(
        count("ongoing_reconcile_processes", &event("UPDATE")),
        Some(0.0)
    );
    let kind = format!("kind=\"{KIND}\"");
    assert_eq!(count("informer_synced", &kind), Some(1.0));
    assert_eq!(count("informer_queue_depth", &kind), Some(0.0));
    assert_eq!(count("controller_retries_pending", &kind), Some(0.0));
    assert_eq!(
        count(
            "controller_retries_total",
            &format!("{kind},result=\"success\"")
        ),
        Some(1.0)
    );
    assert_eq!(count("controller_retries_given_up_total", &kind), Some(0.0));
    assert_eq!(count("informer_decode_errors_total", &kind), Some(0.0));
    assert!(count("kubernetes_watch_events_total", &kind).is_some_and(|n| n >= 5.0));
    for family in [
        "informer_events_total",
        "informer_reconcile_duration_seconds",
        "watcher_process_duration_seconds",
        "reconciler_process_duration_seconds",
        "watcher_errors_total",
        "reconciler_errors_total",
        "ongoing_reconcile_events",
        "ongoing_reconcile_processes",
    ] {
        assert!(
            text.contains(&format!("# TYPE e2e_lifecycle_{family} ")),
            "{family} missing:\n{text}"
        );
    }
    assert!(text.contains(
        "e2e_lifecycle_informer_reconcile_duration_seconds_bucket{event_type=\"CREATE\",kind=\"gadgets\",le=\"0.005\"}"
    ));
    stop(stop_token, running).await;
}

#[tokio::test]
async fn apiserver_restart_midstream_delivers_final_states_and_missed_deletes() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Gadget>().await.expect("CRD");
    let ns = env.create_namespace("restart").await.expect("namespace");
    let api: Api<Gadget> = Api::namespaced(env.client(), &ns);
    for (name, size) in [("keep", 1), ("change", 1), ("gone", 1)] {
        api.create(&PostParams::default(), &gadget(name, size))
            .await
            .expect("create");
    }

    let controller = InformerController::new(ControllerConfig::default());
    controller.erased().add_informer(
        KIND,
        Informer::new::<Gadget>(env.client(), ListWatchOptions::default().namespace(&ns)),
    );
    let log = Log::new();
    add_logging_handlers(&controller, &log);
    let (stop_token, running) = spawn_run(&controller);
    wait_synced(&controller).await;
    log.wait_for("the initial list", |log| {
        ["keep", "change", "gone"]
            .iter()
            .all(|n| log.contains(&format!("r Created {n} 1")))
    })
    .await;

    env.stop_apiserver();
    env.start_apiserver().await.expect("restart");
    // The informer is still reconnecting (its backoff grew while the apiserver was down), so
    // these changes happen while it does not watch.
    let patch = serde_json::json!({ "spec": { "size": 5 } });
    api.patch("change", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    api.delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    api.create(&PostParams::default(), &gadget("new", 7))
        .await
        .expect("create");

    let entries = log
        .wait_for("every final state", |log| {
            [
                "w update change 1->5",
                "r Updated change 5",
                "w delete gone 1",
                "r Deleted gone 1",
                "w add new 7",
                "r Created new 7",
            ]
            .iter()
            .all(|e| log.iter().any(|l| l == e))
        })
        .await;
    let keep: Vec<&String> = entries.iter().filter(|e| e.contains(" keep ")).collect();
    assert_eq!(
        keep,
        ["w add keep 1", "r Created keep 1"],
        "the unchanged object is neither updated nor deleted"
    );
    // Per object, the order still holds: watcher before reconciler.
    let position = |entry: &str| entries.iter().position(|e| e == entry);
    assert!(position("w delete gone 1") < position("r Deleted gone 1"));
    stop(stop_token, running).await;
}

/// The CRD of `Gadget` with a schema that accepts anything in `spec`, so objects can hold values
/// the Rust type cannot read.
fn permissive_gadget_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = Gadget::crd();
    for version in &mut crd.spec.versions {
        let schema = serde_json::json!({
            "openAPIV3Schema": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
            }
        });
        version.schema = Some(serde_json::from_value(schema).expect("schema"));
    }
    crd
}

#[tokio::test]
async fn an_object_that_fails_to_deserialize_does_not_stop_the_others() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds([permissive_gadget_crd()])
        .await
        .expect("CRD");
    let ns = env.create_namespace("decode").await.expect("namespace");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("e2e.kubeapp.dev", "v1", "Gadget"),
        "gadgets",
    );
    let raw: Api<DynamicObject> = Api::namespaced_with(env.client(), &ns, &resource);
    let create_raw = |name: &str, size: serde_json::Value| {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "e2e.kubeapp.dev/v1",
            "kind": "Gadget",
            "metadata": { "name": name },
            "spec": { "size": size },
        }))
        .expect("object");
        let raw = raw.clone();
        async move {
            raw.create(&PostParams::default(), &object)
                .await
                .expect("create")
        }
    };
    // In the initial list: one good, one unreadable.
    create_raw("good-1", 1.into()).await;
    create_raw("bad-1", "not a number".into()).await;

    let served = kubeapp::operator::MetricsRegistry::new(Some("e2e_decode")).expect("metrics");
    let registry = served.registry().clone();
    let metrics = served.controller();
    let controller = InformerController::new(ControllerConfig::default().metrics(metrics));
    controller.erased().add_informer(
        KIND,
        Informer::new::<Gadget>(env.client(), ListWatchOptions::default().namespace(&ns)),
    );
    let log = Log::new();
    add_logging_handlers(&controller, &log);
    // The same objects untyped: every one of them is readable as a DynamicObject.
    let untyped = Log::new();
    let untyped_log = untyped.clone();
    controller.erased().add_informer(
        "gadgets-untyped",
        Informer::dynamic(
            env.client(),
            resource.clone(),
            ListWatchOptions::default().namespace(&ns),
        ),
    );
    controller.erased().add_watcher(
        "gadgets-untyped",
        DynWatcherFns::<DynamicObject>::new().on_add(move |object, _| {
            untyped_log.push(format!(
                "add {}",
                object.metadata.name.as_deref().unwrap_or("")
            ));
            async { Ok(()) }
        }),
    );
    // An untyped reconciler after the typed one: it gets the undecodable objects the typed one
    // skips, which tells the test when bad-2's add has been through the typed reconciler too.
    let unreadable = Log::new();
    controller
        .erased()
        .add_reconciler(KIND, LogsUndecodable(unreadable.clone()));
    let (stop_token, running) = spawn_run(&controller);
    wait_synced(&controller).await;

    // While watching: another unreadable one, then a good one, then the bad one changes.
    create_raw("bad-2", serde_json::json!({ "nested": true })).await;
    create_raw("good-2", 2.into()).await;
    let patch = serde_json::json!({ "spec": { "size": "still not a number" } });
    raw.patch("bad-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    // Without this wait the fix below can reach bad-2's lane while its add still waits there;
    // the two reconcile requests then merge (Created followed by Updated stays Created, the
    // documented merge rule) and the typed reconciler rightly sees a Created.
    unreadable.wait_contains("u Created bad-2").await;
    let fixed = serde_json::json!({ "spec": { "size": 3 } });
    raw.patch("bad-2", &PatchParams::default(), &Patch::Merge(&fixed))
        .await
        .expect("patch");

    // bad-2 becomes readable: its first decodable state, so it appears to typed handlers as an
    // `add` and a `Created` (issue #32; it used to arrive as `sync` / `Updated`).
    let entries = log.wait_contains("r Created bad-2 3").await;
    // Across objects the order is free; per object, the watcher runs before the reconciler.
    let mut sorted = entries.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "r Created bad-2 3",
            "r Created good-1 1",
            "r Created good-2 2",
            "w add bad-2 3",
            "w add good-1 1",
            "w add good-2 2",
        ]
    );
    for (name, watched, reconciled) in [
        ("good-1", "w add", "r Created"),
        ("good-2", "w add", "r Created"),
        ("bad-2", "w add", "r Created"),
    ] {
        let position = |prefix: &str| {
            entries
                .iter()
                .position(|e| e.starts_with(&format!("{prefix} {name} ")))
        };
        assert!(position(watched) < position(reconciled), "{entries:#?}");
    }
    untyped
        .wait_for("all four untyped", |log| log.len() == 4)
        .await;
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    // bad-1 in the list, bad-2 when created, bad-1 when patched.
    assert_eq!(
        sample(
            &text,
            "e2e_decode_informer_decode_errors_total",
            "kind=\"gadgets\""
        ),
        Some(3.0),
        "{text}"
    );
    stop(stop_token, running).await;
}
