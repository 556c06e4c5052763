//! End-to-end test of `kubeapp::simple::SimpleApp` against a real kube-apiserver + etcd: a managed
//! custom kind with a reconciler closure (opinionated: the app's finalizer, deletes handled), an
//! unmanaged ConfigMap watcher (plain: no finalizer), the `informers-synced` health check, and the
//! app's metric collectors, registered directly and through a Runner that serves `/metrics` and
//! `/readyz`.
//!
//! One control plane for the whole file; every wait is a condition with a timeout.

use std::net::SocketAddr;
use std::sync::{Arc, Once};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::{CancellationToken, ReconcileResult, WatcherFns};
use kubeapp::runner::{Runner, RunnerConfig};
use kubeapp::sdk::app::App as _;
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::simple::{AppConfig, INFORMERS_SYNCED_CHECK, ManagedKind, SimpleApp, UnmanagedKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// The managed kind.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "simple.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced
)]
struct WidgetSpec {
    size: i32,
}

const APP: &str = "shop";
const FINALIZER: &str = "simple.kubeapp.dev/shop-widgets-v1";
const TIMEOUT: Duration = Duration::from_secs(60);

fn logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "kubeapp_operator=info,kubeapp_simple=debug".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

/// An append-only log that the test awaits conditions on.
#[derive(Clone)]
struct Log(Arc<watch::Sender<Vec<String>>>);

impl Log {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Vec::new())))
    }

    fn push(&self, entry: String) {
        self.0.send_modify(|log| log.push(entry));
    }

    async fn wait_contains(&self, entry: &str) {
        let mut rx = self.0.subscribe();
        let reached =
            tokio::time::timeout(TIMEOUT, rx.wait_for(|log| log.iter().any(|e| e == entry)));
        if !matches!(reached.await, Ok(Ok(_))) {
            panic!(
                "{entry:?} not logged within {TIMEOUT:?}; log: {:#?}",
                self.0.borrow()
            );
        }
    }
}

/// `GET path` over HTTP/1.0 (the server closes the connection after the response).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .expect("read response");
        response
    };
    let response = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .expect("response in time");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    (status, body.to_string())
}

/// The sum of `informer_events_total` samples of `kind` in a Prometheus text exposition.
fn events_of(exposition: &str, kind: &str) -> f64 {
    let label = format!("kind=\"{kind}\"");
    exposition
        .lines()
        .filter(|line| line.starts_with("informer_events_total{") && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn build_app(client: kube::Client, ns: &str, log: &Log) -> SimpleApp {
    let reconciled = log.clone();
    let widgets = ManagedKind::<Widget>::new().reconcile_fn(move |request, _ctx| {
        reconciled.push(format!(
            "{} {} size={}",
            request.action,
            request.object.name_any(),
            request.object.spec.size
        ));
        async { Ok(ReconcileResult::done()) }
    });
    let (added, updated, deleted) = (log.clone(), log.clone(), log.clone());
    let configmaps = UnmanagedKind::<ConfigMap>::new().namespace(ns).watcher(
        WatcherFns::<ConfigMap>::new()
            .on_add(move |cm: Arc<ConfigMap>, _ctx| {
                added.push(format!("add cm {}", cm.name_any()));
                async { Ok(()) }
            })
            .on_update(move |_old, cm: Arc<ConfigMap>, _ctx| {
                updated.push(format!("update cm {}", cm.name_any()));
                async { Ok(()) }
            })
            .on_delete(move |cm: Arc<ConfigMap>, _ctx| {
                deleted.push(format!("delete cm {}", cm.name_any()));
                async { Ok(()) }
            }),
    );
    let config = AppConfig::new(APP)
        .managed_kind(widgets)
        .unmanaged_kind(configmaps);
    SimpleApp::new(config, client).expect("a valid app")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_app_reconciles_watches_reports_health_and_exports_metrics() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Widget>().await.expect("CRD");
    let ns = env.create_namespace("simple-app").await.expect("namespace");
    let client = env.client();
    let log = Log::new();
    let app = Arc::new(build_app(client.clone(), &ns, &log));

    // Before running, no informer has synced: the check fails and names both kinds.
    let checks = app.health_checks();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].name(), INFORMERS_SYNCED_CHECK);
    let unsynced = checks[0].check().await.expect_err("nothing synced yet");
    assert!(
        unsynced.contains("widgets") && unsynced.contains("configmaps"),
        "{unsynced}"
    );

    // The app's collectors, registered directly, as the Runner does.
    let registry = prometheus::Registry::new();
    for collector in app.metric_collectors() {
        registry.register(collector).expect("register a collector");
    }

    let mut runner = Runner::new(
        RunnerConfig::default()
            .metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
            .shutdown_timeout(TIMEOUT),
    )
    .expect("runner")
    .with_app(app.clone());
    let addr = runner.bind().await.expect("bind");
    let stop = CancellationToken::new();
    let running = tokio::spawn(runner.run_until(stop.clone().cancelled_owned()));

    for (kind, synced) in app.controller().synced_flags() {
        tokio::time::timeout(TIMEOUT, synced.wait())
            .await
            .unwrap_or_else(|_| panic!("informer {kind} not synced within {TIMEOUT:?}"));
    }
    checks[0].check().await.expect("synced after the start");
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("shop/informers-synced: ok"), "{body}");

    // Managed kind: create, update and delete reach the reconciler; the finalizer is the app's.
    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let created = widgets
        .create(
            &PostParams::default(),
            &Widget::new("w1", WidgetSpec { size: 1 }),
        )
        .await
        .expect("create widget");
    log.wait_contains("Created w1 size=1").await;
    let with_finalizer = await_condition(widgets.clone(), "w1", |w: Option<&Widget>| {
        w.is_some_and(|w| w.finalizers().iter().any(|f| f == FINALIZER))
    });
    tokio::time::timeout(TIMEOUT, with_finalizer)
        .await
        .expect("finalizer in time")
        .expect("watching the widget");

    let resize = serde_json::json!({"spec": {"size": 2}});
    widgets
        .patch("w1", &PatchParams::default(), &Patch::Merge(&resize))
        .await
        .expect("update widget");
    log.wait_contains("Updated w1 size=2").await;

    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .expect("delete widget");
    log.wait_contains("Deleted w1 size=2").await;
    let uid = created.uid().expect("a uid");
    let gone = await_condition(widgets.clone(), "w1", conditions::is_deleted(&uid));
    tokio::time::timeout(TIMEOUT, gone)
        .await
        .expect("the widget disappears once handled")
        .expect("watching the widget");

    // Unmanaged kind: plain watcher, every event, no finalizer.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("cm1".into());
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    log.wait_contains("add cm cm1").await;
    let data = serde_json::json!({"data": {"a": "1"}});
    let patched = configmaps
        .patch("cm1", &PatchParams::default(), &Patch::Merge(&data))
        .await
        .expect("update configmap");
    log.wait_contains("update cm cm1").await;
    assert!(
        patched.finalizers().is_empty(),
        "an unmanaged kind is plain: {:?}",
        patched.finalizers()
    );
    configmaps
        .delete("cm1", &DeleteParams::default())
        .await
        .expect("delete configmap");
    log.wait_contains("delete cm cm1").await;

    // Metrics: the directly registered collectors and the Runner's /metrics count the events.
    let mut exposition = String::new();
    prometheus::TextEncoder::new()
        .encode_utf8(&registry.gather(), &mut exposition)
        .expect("encode metrics");
    assert!(events_of(&exposition, "widgets") >= 3.0, "{exposition}");
    assert!(events_of(&exposition, "configmaps") >= 3.0, "{exposition}");
    let (status, scraped) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(events_of(&scraped, "widgets") >= 3.0, "{scraped}");
    assert!(
        scraped.contains("opinionated_finalizer_patches_total{"),
        "finalizer metrics exported: {scraped}"
    );

    stop.cancel();
    tokio::time::timeout(TIMEOUT, running)
        .await
        .expect("the runner stops in time")
        .expect("joined")
        .expect("a clean stop");
    env.stop();
}
