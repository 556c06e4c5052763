//! End-to-end tests of the typed kind handles (`KindHandle<K>`), the shared informers and their
//! stores, related-object triggers, run-time handler changes and terminal errors, against a real
//! kube-apiserver + etcd.
//!
//! - `owns`: editing or deleting a child ConfigMap reconciles its owner (no requeue-after
//!   anywhere);
//! - `watches` with a mapper;
//! - a store read after waiting for the `resourceVersion` a create returned;
//! - two controllers sharing one `Informers` open one list+watch (counted client requests);
//! - a handler removed at run time stops receiving events, and the informer stops when nothing
//!   uses it;
//! - a handler added at run time gets the cached objects as Adds;
//! - a terminal error is not retried and is counted.
//!
//! Each test runs its own control plane; at most [`MAX_PARALLEL_ENVS`] run at once.

mod call_log;
mod crd_env;

use crd_env::CrdEnv;
use std::sync::Arc;
use std::time::Duration;

use call_log::{CallLog, WAIT, eventually, logs, wait_object};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::{
    BoxError, CancellationToken, Context, ControllerConfig, ControllerMetrics, InformerController,
    InformerOptions, Informers, ReconcileError, ReconcileRequest, ReconcileResult, RetryPolicy,
    TriggerCause, Watcher, reconciler_fn,
};
use kubeapp::runner::client_metrics::ClientMetrics;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "typed.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced
)]
struct WidgetSpec {
    greeting: String,
}

const MAX_PARALLEL_ENVS: usize = 2;

struct Env(CrdEnv);

impl std::ops::Deref for Env {
    type Target = CrdEnv;
    fn deref(&self) -> &CrdEnv {
        &self.0
    }
}

impl Env {
    async fn start(prefix: &str) -> Self {
        static SLOTS: Semaphore = Semaphore::const_new(MAX_PARALLEL_ENVS);
        logs();
        Self(CrdEnv::start::<Widget>(&SLOTS, prefix).await)
    }

    fn widgets(&self) -> Api<Widget> {
        Api::namespaced(self.env.client(), &self.ns)
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.env.client(), &self.ns)
    }

    async fn create_widget(&self, name: &str) -> Widget {
        let widget = Widget::new(
            name,
            WidgetSpec {
                greeting: "hello".into(),
            },
        );
        self.widgets()
            .create(&PostParams::default(), &widget)
            .await
            .expect("create widget")
    }

    /// A client whose requests are counted under the metrics prefix `prefix`.
    async fn counted_client(&self, prefix: &str) -> (kube::Client, ClientMetrics) {
        call_log::counted_client(self.env.kubeconfig(), prefix).await
    }
}

/// Runs `controller` until the returned token is cancelled.
fn run(controller: &InformerController) -> CancellationToken {
    let stop = CancellationToken::new();
    tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    stop
}

fn cause_of(request: &ReconcileRequest<Widget>) -> String {
    match &request.cause {
        None => "event".into(),
        Some(TriggerCause::Owned { child }) => format!("owned:{}", child.name),
        Some(TriggerCause::Mapped { source }) => format!("mapped:{}", source.name),
        Some(TriggerCause::Requested) => "requested".into(),
    }
}

/// A reconciler that applies a ConfigMap owned by each widget (same name) and logs
/// `reconcile <name> <cause>`.
fn owning_reconciler(log: CallLog) -> impl kubeapp::operator::Reconciler<Widget> {
    reconciler_fn(move |request: ReconcileRequest<Widget>, ctx: Context| {
        let log = log.clone();
        async move {
            log.push(format!(
                "reconcile {} {}",
                request.object.name_any(),
                cause_of(&request)
            ));
            let widget = request.object.as_ref();
            // The owned ConfigMaps' cache, read through the context (`owns` made it readable).
            if let Some(cached) = ctx.related_store::<ConfigMap>().and_then(|store| {
                store.get_named(widget.namespace().as_deref(), &widget.name_any())
            }) {
                let greeting = cached
                    .data
                    .as_ref()
                    .and_then(|d| d.get("greeting"))
                    .cloned();
                log.push(format!(
                    "cached {} {}",
                    widget.name_any(),
                    greeting.unwrap_or_default()
                ));
            }
            let child = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(widget.name_any()),
                    namespace: widget.namespace(),
                    labels: Some(
                        [("app.kubernetes.io/managed-by".into(), "typed-test".into())].into(),
                    ),
                    ..ObjectMeta::default()
                },
                data: Some([("greeting".into(), widget.spec.greeting.clone())].into()),
                ..ConfigMap::default()
            };
            ctx.apply(child).owned_by(widget)?.await?;
            log.push(format!("applied {}", widget.name_any()));
            Ok(ReconcileResult::done())
        }
    })
}

#[tokio::test]
async fn owns_reconciles_the_owner_when_a_child_changes_or_is_deleted() {
    let env = Env::start("owns").await;
    let controller = InformerController::new(ControllerConfig::default().name("typed-test"));
    let widgets = controller.kind(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let log = CallLog::new();
    let _reconciler = widgets.reconcile(owning_reconciler(log.clone()));
    let owns = widgets.owns(
        env.config_maps(),
        watcher::Config::default().labels("app.kubernetes.io/managed-by=typed-test"),
    );
    // The trigger's handle gives the children's cache, typed: no run-time lookup by type.
    let children = owns.store().clone();
    let stop = run(&controller);

    env.create_widget("w").await;
    log.wait_for("the widget's first reconcile", |l| {
        l.iter().any(|e| e == "reconcile w event")
    })
    .await;
    wait_object(
        &env.config_maps(),
        "w",
        "the reconciler applied the child",
        |_| true,
    )
    .await;
    // The child's creation is the echo of the reconciler's own apply and triggers nothing
    // (issue #35; `own_writes::a_child_the_reconcile_created_…` counts it): wait until the first
    // reconcile has applied, so the edit below cannot land inside it (its apply would overwrite
    // the edit before any reconcile read the edited child from the cache).
    log.wait_for("the first reconcile has applied", |l| {
        l.iter()
            .skip_while(|e| *e != "reconcile w event")
            .any(|e| e == "applied w")
    })
    .await;
    let greeting_in = |children: &kubeapp::operator::Store<ConfigMap>| {
        children
            .get_named(Some(&env.ns), "w")
            .and_then(|cm| cm.data.as_ref()?.get("greeting").cloned())
    };
    eventually("the owns handle's store holds the applied child", || {
        greeting_in(&children).as_deref() == Some("hello")
    })
    .await;
    let before = log.count("reconcile w owned:w");

    // Someone edits the child: the owner is reconciled (and puts the greeting back).
    env.config_maps()
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"greeting": "tampered"}})),
        )
        .await
        .expect("edit the child");
    // The wait is for a triggered reconcile that read the edited child from the related cache,
    // not for any triggered reconcile after `before`.
    log.wait_for(
        "a reconcile caused by the edited child, reading it from the related cache",
        |l| {
            l.iter().filter(|e| *e == "reconcile w owned:w").count() > before
                && l.iter().any(|e| e == "cached w tampered")
        },
    )
    .await;
    wait_object(
        &env.config_maps(),
        "w",
        "the owner's reconcile restored the greeting",
        |cm: &ConfigMap| {
            cm.data
                .as_ref()
                .and_then(|d| d.get("greeting"))
                .map(String::as_str)
                == Some("hello")
        },
    )
    .await;

    // Someone deletes the child: the owner is reconciled and recreates it.
    let before = log.count("reconcile w owned:w");
    env.config_maps()
        .delete("w", &DeleteParams::default())
        .await
        .expect("delete the child");
    log.wait_for("a reconcile caused by the deleted child", |l| {
        l.iter().filter(|e| *e == "reconcile w owned:w").count() > before
    })
    .await;
    stop.cancel();
}

#[tokio::test]
async fn watches_reconciles_what_the_mapper_returns() {
    let env = Env::start("watches").await;
    let controller = InformerController::new(ControllerConfig::default());
    let widgets = controller.kind(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let log = CallLog::new();
    let _reconciler = widgets.reconcile(reconciler_fn({
        let log = log.clone();
        move |request: ReconcileRequest<Widget>, _ctx: Context| {
            log.push(format!(
                "reconcile {} {}",
                request.object.name_any(),
                cause_of(&request)
            ));
            async { Ok(ReconcileResult::done()) }
        }
    }));
    // A ConfigMap `settings-<widget>` configures the widget `<widget>`.
    let _watches = widgets.watches(
        env.config_maps(),
        watcher::Config::default(),
        |cm: &ConfigMap| {
            cm.name_any()
                .strip_prefix("settings-")
                .map(|widget| ObjectRef::new(widget).within(&cm.namespace().unwrap_or_default()))
                .into_iter()
                .collect()
        },
    );
    let stop = run(&controller);
    env.create_widget("a").await;
    env.create_widget("b").await;
    log.wait_for("both widgets reconciled", |l| {
        l.iter().any(|e| e == "reconcile a event") && l.iter().any(|e| e == "reconcile b event")
    })
    .await;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings-b".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    env.config_maps()
        .create(&PostParams::default(), &cm)
        .await
        .expect("create settings-b");
    log.wait_for("b reconciled for its settings", |l| {
        l.iter().any(|e| e == "reconcile b mapped:settings-b")
    })
    .await;
    assert_eq!(
        log.count("reconcile a mapped:settings-b"),
        0,
        "a is not mapped"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_store_read_after_waiting_for_a_created_version_sees_the_object() {
    let env = Env::start("store-rv").await;
    let informers = Informers::new();
    let store = informers.store(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    store.wait_until_synced().await;
    for i in 0..20 {
        let created = env.create_widget(&format!("w{i}")).await;
        let rv = created
            .resource_version()
            .expect("a created object has a version");
        store
            .wait_for_version(&rv, WAIT)
            .await
            .expect("the cache reaches the created version");
        let cached = store
            .get(&ObjectRef::from_obj(&created))
            .expect("read after write sees the object");
        assert_eq!(cached.resource_version(), Some(rv));
    }
    assert_eq!(informers.open_watches(), 1);
}

#[tokio::test]
async fn two_controllers_sharing_informers_open_one_watch_of_a_kind() {
    let env = Env::start("shared").await;
    let (client, requests) = env.counted_client("typed_shared").await;
    let informers = Informers::with_metrics(
        ControllerMetrics::unregistered(Some("typed_shared_ctl")).expect("metrics"),
    );
    let api = || Api::<Widget>::namespaced(client.clone(), &env.ns);
    let log = CallLog::new();
    let mut stops = Vec::new();
    let mut handles = Vec::new();
    for app in ["one", "two"] {
        let controller =
            InformerController::new(ControllerConfig::default().informers(informers.clone()));
        let widgets = controller.kind(
            api(),
            watcher::Config::default(),
            InformerOptions::default(),
        );
        let log = log.clone();
        handles.push(widgets.reconcile(reconciler_fn(
            move |request: ReconcileRequest<Widget>, _ctx: Context| {
                log.push(format!("{app} {}", request.object.name_any()));
                async { Ok(ReconcileResult::done()) }
            },
        )));
        stops.push(run(&controller));
    }
    for i in 0..5 {
        env.create_widget(&format!("w{i}")).await;
    }
    log.wait_for("both controllers reconciled every widget", |l| {
        (0..5).all(|i| l.contains(&format!("one w{i}")) && l.contains(&format!("two w{i}")))
    })
    .await;
    assert_eq!(informers.open_watches(), 1, "one shared informer");
    assert_eq!(
        requests.requests("200", "list", "widgets", ""),
        1,
        "one list of widgets for both controllers"
    );
    assert_eq!(
        requests.requests("200", "watch", "widgets", ""),
        1,
        "one watch of widgets"
    );
    for stop in stops {
        stop.cancel();
    }
}

/// Logs `<tag> add|update|delete <name>`.
struct Logging {
    tag: &'static str,
    log: CallLog,
}

impl Watcher<Widget> for Logging {
    async fn add(&self, object: Arc<Widget>, _ctx: &Context) -> Result<(), BoxError> {
        self.log
            .push(format!("{} add {}", self.tag, object.name_any()));
        Ok(())
    }
    async fn update(
        &self,
        _old: Arc<Widget>,
        new: Arc<Widget>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        self.log
            .push(format!("{} update {}", self.tag, new.name_any()));
        Ok(())
    }
    async fn delete(&self, object: Arc<Widget>, _ctx: &Context) -> Result<(), BoxError> {
        self.log
            .push(format!("{} delete {}", self.tag, object.name_any()));
        Ok(())
    }
}

#[tokio::test]
async fn handlers_added_at_run_time_get_the_cache_and_removed_ones_stop_with_their_informer() {
    let env = Env::start("runtime").await;
    let controller = InformerController::new(ControllerConfig::default());
    let widgets = controller.kind(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let log = CallLog::new();
    let first = widgets.watch(Logging {
        tag: "first",
        log: log.clone(),
    });
    let stop = run(&controller);
    env.create_widget("a").await;
    env.create_widget("b").await;
    log.wait_for("the first watcher saw a and b", |l| {
        l.contains(&"first add a".to_string()) && l.contains(&"first add b".to_string())
    })
    .await;

    // Added while running: the cached objects arrive as Adds, for this watcher only.
    let second = widgets.watch(Logging {
        tag: "second",
        log: log.clone(),
    });
    log.wait_for("the second watcher got the cache as Adds", |l| {
        l.contains(&"second add a".to_string()) && l.contains(&"second add b".to_string())
    })
    .await;
    assert_eq!(
        log.count("first add a"),
        1,
        "the replay is for the new watcher only"
    );

    // Removed: the first watcher (which runs before the second) sees nothing more.
    first.remove();
    env.create_widget("c").await;
    log.wait_for("the second watcher saw c", |l| {
        l.contains(&"second add c".to_string())
    })
    .await;
    assert_eq!(
        log.count("first add c"),
        0,
        "a removed watcher gets no events"
    );

    // Nothing uses the informer any more: its watch stops.
    let informers = controller.informers().clone();
    assert_eq!(informers.open_watches(), 1);
    second.remove();
    drop(widgets);
    eventually("the informer stops when its last user is removed", || {
        informers.open_watches() == 0
    })
    .await;
    stop.cancel();
}

/// A kind registered while the controller runs, over an informer whose cache is already full,
/// with a watcher attached at once: the watcher gets each cached object as an Add exactly once
/// (the kind's own delivery of the cache and the watcher's replay must not both reach it).
#[tokio::test]
async fn a_watcher_attached_to_a_kind_registered_at_run_time_gets_the_cache_once() {
    let env = Env::start("late-kind").await;
    let controller = InformerController::new(ControllerConfig::default());
    let widgets = controller.kind(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let log = CallLog::new();
    let _first = widgets.watch(Logging {
        tag: "first",
        log: log.clone(),
    });
    let stop = run(&controller);
    for name in ["a", "b", "c"] {
        env.create_widget(name).await;
    }
    log.wait_for("the controller runs and saw every widget", |l| {
        ["a", "b", "c"]
            .iter()
            .all(|n| l.contains(&format!("first add {n}")))
    })
    .await;

    // Another informer key (page size), cached before the kind is registered.
    let paged = || watcher::Config::default().page_size(7);
    let store = controller
        .informers()
        .store(env.widgets(), paged(), InformerOptions::default());
    store.wait_until_synced().await;
    assert_eq!(store.len(), 3);
    let late = controller.kind(env.widgets(), paged(), InformerOptions::default());
    let _late = late.watch(Logging {
        tag: "late",
        log: log.clone(),
    });

    // An update of each object follows its Adds in its lane: once seen, no Add is still queued.
    for name in ["a", "b", "c"] {
        env.widgets()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"greeting": "again"}})),
            )
            .await
            .expect("patch");
    }
    log.wait_for("the late watcher saw each update", |l| {
        ["a", "b", "c"]
            .iter()
            .all(|n| l.contains(&format!("late update {n}")))
    })
    .await;
    for name in ["a", "b", "c"] {
        assert_eq!(
            log.count(&format!("late add {name}")),
            1,
            "one Add of {name} for the late watcher; log: {:#?}",
            log.entries()
        );
    }
    stop.cancel();
}

#[tokio::test]
async fn a_terminal_error_is_counted_and_not_retried() {
    let env = Env::start("terminal").await;
    let served = kubeapp::operator::MetricsRegistry::new(Some("typed_terminal")).expect("metrics");
    let registry = served.registry().clone();
    let metrics = served.controller();
    let controller = InformerController::new(
        ControllerConfig::default()
            .metrics(metrics)
            .retry_policy(RetryPolicy::exponential(Duration::from_millis(50), 5)),
    );
    let widgets = controller.kind(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let log = CallLog::new();
    let _reconciler = widgets.reconcile(reconciler_fn({
        let log = log.clone();
        move |request: ReconcileRequest<Widget>, ctx: Context| {
            log.push(format!(
                "reconcile {} attempt{}",
                request.object.spec.greeting,
                ctx.attempt()
            ));
            let greeting = request.object.spec.greeting.clone();
            async move {
                match greeting.as_str() {
                    "invalid" => Err(ReconcileError::terminal("the greeting is invalid")),
                    "flaky" => Err(ReconcileError::new("try again")),
                    _ => Ok(ReconcileResult::done()),
                }
            }
        }
    }));
    let stop = run(&controller);
    let value = |name: &str| -> f64 {
        registry
            .gather()
            .iter()
            .find(|family| family.name() == name)
            .map_or(0.0, |family| {
                family
                    .get_metric()
                    .iter()
                    .map(|m| m.get_counter().get_value() + m.get_gauge().get_value())
                    .sum()
            })
    };
    let widget = Widget::new(
        "w",
        WidgetSpec {
            greeting: "invalid".into(),
        },
    );
    env.widgets()
        .create(&PostParams::default(), &widget)
        .await
        .expect("create");
    // Wait until the terminal error is counted and the event is fully handled.
    eventually(
        "the terminal error is counted and its event handled",
        || {
            value("typed_terminal_reconciler_terminal_errors_total") == 1.0
                && value("typed_terminal_ongoing_reconcile_events") == 0.0
        },
    )
    .await;
    assert_eq!(
        value("typed_terminal_controller_retries_pending"),
        0.0,
        "no retry scheduled"
    );
    assert_eq!(log.count("reconcile invalid attempt0"), 1);
    assert_eq!(log.count("reconcile invalid attempt1"), 0);

    // Control: an ordinary error of the same object is retried.
    env.widgets()
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"greeting": "flaky"}})),
        )
        .await
        .expect("patch");
    log.wait_for("an ordinary error is retried", |l| {
        l.iter().any(|e| e == "reconcile flaky attempt1")
    })
    .await;
    assert_eq!(
        value("typed_terminal_reconciler_terminal_errors_total"),
        1.0
    );
    stop.cancel();
}

/// The queue's age against the real apiserver: with its only worker held by a blocked handler,
/// a second Widget waits, and both the Runner's report (`kind_diagnostics`) and the gauge
/// `informer_queue_oldest_age_seconds` show it waiting for at least a second; once the worker is
/// free, nothing waits (report `None`, gauge 0).
#[tokio::test]
async fn an_object_waiting_for_a_busy_worker_shows_its_queue_age_and_its_event_wait() {
    let env = Env::start("queue-age").await;
    let served = kubeapp::operator::MetricsRegistry::new(Some("typed_queue_age")).expect("metrics");
    let registry = served.registry().clone();
    let metrics = served.controller();
    let controller = InformerController::new(
        ControllerConfig::default()
            .metrics(metrics.clone())
            .max_concurrent_workers(1),
    );
    let widgets = controller.kind(
        env.widgets(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let (log, hold) = (CallLog::new(), Arc::new(Semaphore::new(0)));
    let _reconciler = widgets.reconcile(reconciler_fn({
        let (log, hold) = (log.clone(), hold.clone());
        move |request: ReconcileRequest<Widget>, _ctx: Context| {
            let (log, hold) = (log.clone(), hold.clone());
            async move {
                let name = request.object.name_any();
                log.push(format!("reconcile {name}"));
                if name == "blocker" {
                    let _permit = hold.acquire().await.map_err(ReconcileError::new)?;
                }
                Ok(ReconcileResult::done())
            }
        }
    }));
    let stop = run(&controller);
    let reported = || {
        metrics
            .kind_diagnostics()
            .into_iter()
            .find(|kind| kind.kind == "widgets")
            .and_then(|kind| kind.oldest_queued_age_seconds)
    };
    let gauge = || {
        registry
            .gather()
            .iter()
            .find(|family| family.name() == "typed_queue_age_informer_queue_oldest_age_seconds")
            .and_then(|family| {
                family
                    .get_metric()
                    .iter()
                    .find(|m| m.get_label().iter().any(|l| l.value() == "widgets"))
                    .map(|m| m.get_gauge().get_value())
            })
    };
    env.create_widget("blocker").await;
    eventually("the blocker holds the only worker", || {
        log.count("reconcile blocker") == 1
    })
    .await;
    assert_eq!(reported(), None, "nothing waits yet");
    env.create_widget("waiting").await;
    eventually("the waiting Widget has waited a second", || {
        reported().is_some_and(|age| age >= 1.0) && gauge().is_some_and(|age| age >= 1.0)
    })
    .await;
    assert_eq!(log.count("reconcile waiting"), 0, "it is still queued");
    hold.add_permits(1);
    eventually("the waiting Widget is reconciled and nothing waits", || {
        log.count("reconcile waiting") == 1 && reported().is_none() && gauge() == Some(0.0)
    })
    .await;
    // The event-wait histogram: the blocker's Add waited for nothing, the waiting Widget's for
    // the blocker (a second or more); the worker folds its buffer into the histogram as it parks.
    let waits = || {
        registry
            .gather()
            .iter()
            .find(|family| family.name() == "typed_queue_age_informer_event_wait_seconds")
            .and_then(|family| {
                family
                    .get_metric()
                    .iter()
                    .find(|m| {
                        let labels = m.get_label();
                        labels.iter().any(|l| l.value() == "widgets")
                            && labels.iter().any(|l| l.value() == "CREATE")
                    })
                    .map(|m| {
                        let histogram = m.get_histogram();
                        (histogram.get_sample_count(), histogram.get_sample_sum())
                    })
            })
    };
    eventually("both Adds' waits are in the histogram", || {
        waits().is_some_and(|(count, _)| count == 2)
    })
    .await;
    let (_, waited) = waits().expect("the histogram");
    assert!(
        waited >= 1.0,
        "the waiting Widget waited a second or more: {waited} s in all"
    );
    stop.cancel();
}
