//! End-to-end tests of the simple SimpleApp's typed kinds against a real kube-apiserver + etcd:
//!
//! - two apps in one Runner, built with the Runner's `Informers`, watching the same kind open
//!   one list and one watch (counted client requests) and both see every object;
//! - a managed kind with a user context, an apply/cleanup handler and `owns`: the child is
//!   created from the context, put back when deleted or edited (no requeue anywhere), and
//!   `cleanup` runs before the owner is gone.
//!
//! Each test runs its own control plane; at most [`MAX_PARALLEL_ENVS`] run at once.

mod call_log;
mod crd_env;

use crd_env::CrdEnv;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use call_log::{CallLog, logs, wait_object};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::{CancellationToken, Context, ReconcileError, ReconcileResult, WatcherFns};
use kubeapp::runner::{Runner, RunnerConfig};
use kubeapp::simple::{AppConfig, ManagedKind, SimpleApp, UnmanagedKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "simplekinds.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced
)]
struct WidgetSpec {
    greeting: String,
}

const MAX_PARALLEL_ENVS: usize = 2;
/// The label the operator puts on its ConfigMaps; `owns` caches only those.
const OWNED_LABEL: &str = "simplekinds.kubeapp.dev/widget";

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
}

/// Runs `runner` until the returned token is cancelled.
fn run(runner: Runner) -> CancellationToken {
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move { runner.run_until(stop.cancelled_owned()).await }
    });
    stop
}

fn local_runner() -> Runner {
    Runner::new(RunnerConfig::default().metrics_addr(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))))
        .expect("runner")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apps_in_one_runner_open_one_watch_of_a_kind() {
    let env = Env::start("two-apps").await;
    let (client, requests) = call_log::counted_client(env.env.kubeconfig(), "simple_two").await;
    let mut runner = local_runner();
    let log = CallLog::new();

    let reconciled = log.clone();
    let reconciling = AppConfig::new("reconciling")
        .informers(runner.informers().clone())
        .managed_kind(
            ManagedKind::<Widget>::new()
                .namespace(&env.ns)
                .reconcile_fn(move |request, _ctx| {
                    reconciled.push(format!("reconciled {}", request.object.name_any()));
                    async { Ok(ReconcileResult::done()) }
                })
                .plain(),
        );
    let watched = log.clone();
    let watching = AppConfig::new("watching")
        .informers(runner.informers().clone())
        .unmanaged_kind(UnmanagedKind::<Widget>::new().namespace(&env.ns).watcher(
            WatcherFns::<Widget>::new().on_add(move |widget, _ctx| {
                watched.push(format!("watched {}", widget.name_any()));
                async { Ok(()) }
            }),
        ));
    for config in [reconciling, watching] {
        let app = SimpleApp::new(config, client.clone()).expect("a valid app");
        runner.add_app(Arc::new(app));
    }
    let informers = runner.informers().clone();
    let stop = run(runner);

    for i in 0..5 {
        env.create_widget(&format!("w{i}")).await;
    }
    log.wait_for("both apps saw every widget", |l| {
        (0..5).all(|i| {
            l.contains(&format!("reconciled w{i}")) && l.contains(&format!("watched w{i}"))
        })
    })
    .await;
    assert_eq!(informers.open_watches(), 1, "one shared informer");
    assert_eq!(
        requests.requests("200", "list", "widgets", ""),
        1,
        "one list of widgets for both apps"
    );
    assert_eq!(
        requests.requests("200", "watch", "widgets", ""),
        1,
        "one watch of widgets for both apps"
    );
    stop.cancel();
}

/// The user data of the owner test's handlers.
struct Settings {
    suffix: String,
    cleaned: CallLog,
}

/// The ConfigMap a Widget renders to: its greeting with the context's suffix.
fn rendered(widget: &Widget, settings: &Settings) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(widget.name_any()),
            namespace: widget.namespace(),
            labels: Some([(OWNED_LABEL.to_string(), widget.name_any())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                "greeting".to_string(),
                format!("{}{}", widget.spec.greeting, settings.suffix),
            )]
            .into(),
        ),
        ..ConfigMap::default()
    }
}

async fn apply(
    widget: Arc<Widget>,
    ctx: Context<Settings>,
) -> Result<ReconcileResult, ReconcileError> {
    ctx.apply(rendered(&widget, ctx.data()))
        .owned_by(widget.as_ref())
        .map_err(ReconcileError::new)?
        .send()
        .await
        .map_err(ReconcileError::new)?;
    Ok(ReconcileResult::done())
}

async fn cleanup(
    widget: Arc<Widget>,
    ctx: Context<Settings>,
) -> Result<ReconcileResult, ReconcileError> {
    ctx.data()
        .cleaned
        .push(format!("cleanup {}", widget.name_any()));
    Ok(ReconcileResult::done())
}

fn greeting_of(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("greeting").map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_kind_with_context_apply_cleanup_and_owns_keeps_its_child_and_cleans_up() {
    let env = Env::start("owns").await;
    let cleaned = CallLog::new();
    let settings = Arc::new(Settings {
        suffix: ", world".into(),
        cleaned: cleaned.clone(),
    });
    let widgets = ManagedKind::<Widget>::new()
        .namespace(&env.ns)
        .context(settings)
        .apply_cleanup_fn(apply, cleanup)
        .owns::<ConfigMap>(watcher::Config::default().labels(OWNED_LABEL));
    // No requeue-after anywhere: the app's reconciles come from Widget events and owned
    // ConfigMaps only.
    let app = SimpleApp::new(
        AppConfig::new("owner").managed_kind(widgets),
        env.env.client(),
    )
    .expect("a valid app");
    let mut runner = local_runner();
    runner.add_app(Arc::new(app));
    let stop = run(runner);

    env.create_widget("w").await;
    let config_maps = env.config_maps();
    wait_object(
        &config_maps,
        "w",
        "the child is created from the context",
        |cm| {
            greeting_of(cm) == Some("hello, world")
                && cm
                    .owner_references()
                    .iter()
                    .any(|o| o.kind == "Widget" && o.controller == Some(true))
        },
    )
    .await;

    // Someone edits the child: the owner is reconciled and the child put back.
    let edit = serde_json::json!({ "data": { "greeting": "tampered" } });
    config_maps
        .patch("w", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit the child");
    wait_object(&config_maps, "w", "the edited child is restored", |cm| {
        greeting_of(cm) == Some("hello, world")
    })
    .await;

    // Someone deletes the child: the owner is reconciled and the child re-created.
    let old_uid = config_maps.get("w").await.expect("child").uid();
    config_maps
        .delete("w", &DeleteParams::default())
        .await
        .expect("delete the child");
    wait_object(
        &config_maps,
        "w",
        "the deleted child is re-created",
        move |cm| cm.uid() != old_uid && greeting_of(cm) == Some("hello, world"),
    )
    .await;

    // Deleting the owner runs cleanup before the object is gone (the finalizer holds it).
    let widget = env.widgets().get("w").await.expect("widget");
    assert!(
        !widget.finalizers().is_empty(),
        "the managed kind is opinionated: {:?}",
        widget.finalizers()
    );
    let uid = widget.uid().expect("uid");
    env.widgets()
        .delete("w", &DeleteParams::default())
        .await
        .expect("delete the widget");
    tokio::time::timeout(
        call_log::WAIT,
        await_condition(env.widgets(), "w", conditions::is_deleted(&uid)),
    )
    .await
    .expect("the widget is gone in time")
    .expect("watch");
    assert_eq!(
        cleaned.entries(),
        ["cleanup w"],
        "cleanup ran once, before the delete"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_namespace_scopes_its_kinds_watches_to_that_namespace() {
    let env = Env::start("scoped").await;
    let other = env
        .env
        .create_namespace("elsewhere")
        .await
        .expect("namespace");
    // Every request path the app's client sends, recorded.
    let paths = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let inner = env.env.client();
    let recorded = Arc::clone(&paths);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        recorded
            .lock()
            .expect("paths")
            .push(request.uri().path().to_string());
        let inner = inner.clone();
        async move { inner.send(request).await }
    });
    let client = kube::Client::new(service, "default");
    let seen = CallLog::new();
    let log = seen.clone();
    let widgets = UnmanagedKind::<Widget>::new().watcher(WatcherFns::<Widget>::new().on_add(
        move |widget, _ctx| {
            log.push(format!(
                "{}/{}",
                widget.namespace().unwrap_or_default(),
                widget.name_any()
            ));
            async { Ok(()) }
        },
    ));
    let app = SimpleApp::new(
        AppConfig::new("scoped")
            .namespace(Some(env.ns.clone()))
            .unmanaged_kind(widgets),
        client,
    )
    .expect("a valid app");
    let mut runner = local_runner();
    runner.add_app(Arc::new(app));
    let stop = run(runner);

    let outside = Widget::new(
        "outside",
        WidgetSpec {
            greeting: "hello".into(),
        },
    );
    Api::<Widget>::namespaced(env.env.client(), &other)
        .create(&PostParams::default(), &outside)
        .await
        .expect("a widget in another namespace");
    env.create_widget("inside").await;
    let inside = format!("{}/inside", env.ns);
    seen.wait_for("the widget in the app's namespace", |l| l.contains(&inside))
        .await;
    let widget_paths: Vec<String> = paths
        .lock()
        .expect("paths")
        .iter()
        .filter(|p| p.ends_with("/widgets"))
        .cloned()
        .collect();
    assert!(
        !widget_paths.is_empty(),
        "the app listed and watched widgets"
    );
    let scoped = format!("/namespaces/{}/widgets", env.ns);
    assert!(
        widget_paths.iter().all(|p| p.ends_with(&scoped)),
        "every list and watch of widgets is in {}: {widget_paths:?}",
        env.ns
    );
    assert!(
        !seen.entries().iter().any(|e| e.contains("outside")),
        "the other namespace's widget is not delivered"
    );
    stop.cancel();
}
