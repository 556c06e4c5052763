//! Tracing end to end (contract section 8): a simple App, built through its `AppProvider` and run
//! by a `Runner` against a real kube-apiserver + etcd, exports its spans over OTLP/HTTP to a
//! receiver in this test. A known sequence of events (a custom object created, its first
//! reconcile failing and retried, updated, deleted; a ConfigMap created) must arrive as the
//! contract's spans: `informer-event-add|update|delete` with kind, group, version, namespace and
//! name; `controller-event-reconcile` and `controller-event-watch` as their children;
//! `controller-retry` with the retried call inside; the opinionated wrapper's finalizer spans;
//! the failed call's span with status error.
//!
//! One test per file: the OTLP pipeline is installed as the process's global subscriber.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, ResourceExt};
use kubeapp_operator::{
    CancellationToken, ControllerConfig, ReconcileAction, ReconcileResult, RetryPolicy, WatcherFns,
};
use kubeapp_runner::{Runner, RunnerConfig};
use kubeapp_sdk::app::AppProvider as _;
use kubeapp_sdk::manifest::ManifestData;
use kubeapp_sdk::testenv::TestEnv;
use kubeapp_simple::telemetry::{self, Otlp, OtlpProtocol, TelemetryConfig};
use kubeapp_simple::{AppConfig, ManagedKind, Provider, UnmanagedKind};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "trace.kubeapp.dev",
    version = "v1",
    kind = "Gadget",
    namespaced
)]
struct GadgetSpec {
    size: i32,
}

const APP: &str = "tracer";
const GROUP: &str = "trace.kubeapp.dev";
const TIMEOUT: Duration = Duration::from_secs(60);

/// One span as the receiver decoded it.
#[derive(Clone, Debug)]
struct SpanRecord {
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: BTreeMap<String, String>,
    error: bool,
}

impl SpanRecord {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    fn is_child_of(&self, parent: &SpanRecord) -> bool {
        self.trace_id == parent.trace_id && self.parent_span_id == parent.span_id
    }
}

fn records(request: &ExportTraceServiceRequest) -> Vec<SpanRecord> {
    let mut out = Vec::new();
    for spans in request.resource_spans.iter().flat_map(|rs| &rs.scope_spans) {
        for span in &spans.spans {
            let attributes = span
                .attributes
                .iter()
                .filter_map(|kv| {
                    let value = match kv.value.as_ref()?.value.as_ref()? {
                        Value::StringValue(s) => s.clone(),
                        Value::IntValue(i) => i.to_string(),
                        Value::BoolValue(b) => b.to_string(),
                        Value::DoubleValue(d) => d.to_string(),
                        other => format!("{other:?}"),
                    };
                    Some((kv.key.clone(), value))
                })
                .collect();
            out.push(SpanRecord {
                name: span.name.clone(),
                trace_id: span.trace_id.clone(),
                span_id: span.span_id.clone(),
                parent_span_id: span.parent_span_id.clone(),
                attributes,
                error: span
                    .status
                    .as_ref()
                    .is_some_and(|s| s.code == StatusCode::Error as i32),
            });
        }
    }
    out
}

/// A real OTLP/HTTP endpoint (`POST /v1/traces`, protobuf) on loopback.
async fn otlp_receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Vec<SpanRecord>>) {
    use axum::body::Bytes;
    use axum::http::StatusCode as Http;
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let tx = tx.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(request) => {
                        let _ = tx.send(records(&request));
                        (
                            Http::OK,
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                    Err(err) => (Http::BAD_REQUEST, err.to_string().into_bytes()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let addr = listener.local_addr().expect("receiver address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

/// An append-only log of what the handlers did, awaited on.
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

fn manifest() -> ManifestData {
    ManifestData::from_yaml(&format!(
        "appName: {APP}\ngroup: {GROUP}\nversions:\n  - name: v1\n    kinds:\n      - kind: Gadget\n        plural: gadgets\n"
    ))
    .expect("a valid manifest")
}

/// The app: a managed Gadget reconciler (opinionated) whose first call fails, and an unmanaged
/// ConfigMap watcher (plain).
fn provider(ns: String, log: Log) -> Provider {
    Provider::new(manifest(), move || {
        let calls = Arc::new(AtomicU32::new(0));
        let reconciled = log.clone();
        let gadgets = ManagedKind::<Gadget>::new().reconcile_fn(move |request, _ctx| {
            let call = calls.fetch_add(1, Ordering::SeqCst);
            let entry = format!("{} {}", request.action, request.object.name_any());
            let log = reconciled.clone();
            async move {
                if call == 0 {
                    log.push(format!("failed {entry}"));
                    return Err("the first reconcile fails on purpose".into());
                }
                log.push(entry);
                Ok(ReconcileResult::done())
            }
        });
        let added = log.clone();
        let configmaps = UnmanagedKind::<ConfigMap>::new().namespace(&ns).watcher(
            WatcherFns::<ConfigMap>::new().on_add(move |cm: Arc<ConfigMap>, _ctx| {
                added.push(format!("add cm {}", cm.name_any()));
                async { Ok(()) }
            }),
        );
        AppConfig::new(APP)
            .controller(
                ControllerConfig::default()
                    .retry_policy(RetryPolicy::exponential(Duration::from_millis(200), 5)),
            )
            .managed_kind(gadgets)
            .unmanaged_kind(configmaps)
    })
}

fn one<'a>(
    spans: &'a [SpanRecord],
    what: &str,
    pick: impl Fn(&SpanRecord) -> bool,
) -> &'a SpanRecord {
    spans.iter().find(|s| pick(s)).unwrap_or_else(|| {
        let named: Vec<_> = spans.iter().filter(|s| what.starts_with(&s.name)).collect();
        panic!(
            "no {what} among the exported spans: {}; spans of that name: {named:#?}",
            names(spans)
        )
    })
}

fn names(spans: &[SpanRecord]) -> String {
    let mut names: Vec<_> = spans.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_app_exports_the_contracts_spans_for_a_known_event_sequence() {
    let (receiver, mut exports) = otlp_receiver().await;
    let config = TelemetryConfig::new("kubeapp-tracing-e2e")
        .filter("info")
        .otlp(Otlp::Endpoint {
            url: format!("http://{receiver}"),
            protocol: OtlpProtocol::HttpProtobuf,
        });
    let (subscriber, guard) = telemetry::subscriber(&config).expect("telemetry");
    tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");

    let env = TestEnv::start().await.expect("control plane");
    env.install_crd::<Gadget>().await.expect("CRD");
    let ns = env.create_namespace("tracing").await.expect("namespace");
    let client = env.client();
    let log = Log::new();

    let provider = provider(ns.clone(), log.clone());
    let app = provider
        .new_app(client.clone())
        .expect("the provider builds the app");
    let mut runner = Runner::new(
        RunnerConfig::default()
            .metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
            .shutdown_timeout(TIMEOUT),
    )
    .expect("runner")
    .with_app(app);
    runner.bind().await.expect("bind");
    let stop = CancellationToken::new();
    let running = tokio::spawn(runner.run_until(stop.clone().cancelled_owned()));

    // The known sequence.
    let gadgets: Api<Gadget> = Api::namespaced(client.clone(), &ns);
    gadgets
        .create(
            &PostParams::default(),
            &Gadget::new("g1", GadgetSpec { size: 1 }),
        )
        .await
        .expect("create g1");
    log.wait_contains(&format!("failed {} g1", ReconcileAction::Created))
        .await;
    log.wait_contains(&format!("{} g1", ReconcileAction::Created))
        .await;
    gadgets
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 2}})),
        )
        .await
        .expect("update g1");
    log.wait_contains(&format!("{} g1", ReconcileAction::Updated))
        .await;
    let uid = gadgets.get("g1").await.expect("g1").uid().expect("uid");
    gadgets
        .delete("g1", &DeleteParams::default())
        .await
        .expect("delete g1");
    tokio::time::timeout(
        TIMEOUT,
        await_condition(gadgets.clone(), "g1", conditions::is_deleted(&uid)),
    )
    .await
    .expect("g1 gone (the wrapper removed its finalizer) in time")
    .expect("watch g1");
    log.wait_contains(&format!("{} g1", ReconcileAction::Deleted))
        .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("c1".into());
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create c1");
    log.wait_contains("add cm c1").await;

    stop.cancel();
    tokio::time::timeout(TIMEOUT, running)
        .await
        .expect("runner stops in time")
        .expect("runner task")
        .expect("runner result");
    guard.shutdown().await.expect("spans flushed on shutdown");

    let mut spans = Vec::new();
    while let Ok(batch) = exports.try_recv() {
        spans.extend(batch);
    }
    assert!(!spans.is_empty(), "the receiver got no spans");

    // One span per informer event, with the object's identity.
    let ns = ns.as_str();
    let of_g1 = |name: &'static str| {
        move |s: &SpanRecord| {
            s.name == name
                && s.attr("kind") == Some("Gadget")
                && s.attr("name") == Some("g1")
                && s.attr("namespace") == Some(ns)
        }
    };
    let add = one(
        &spans,
        "informer-event-add of g1",
        of_g1("informer-event-add"),
    );
    assert_eq!(add.attr("group"), Some(GROUP), "{add:?}");
    assert_eq!(add.attr("version"), Some("v1"), "{add:?}");
    // The spec change's update. The finalizer patch's echo is an update too: skipped (no
    // reconcile under it) when it is dispatched on its own, or merged into the spec change's
    // request when that arrives while the echo still waits; either can happen.
    let is_update = of_g1("informer-event-update");
    let updates: Vec<&SpanRecord> = spans.iter().filter(|s| is_update(s)).collect();
    one(&spans, "informer-event-update of g1", is_update);
    let delete = one(
        &spans,
        "informer-event-delete of g1",
        of_g1("informer-event-delete"),
    );

    // A child per handler call; the first call failed: its span has status error.
    let reconciles: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "controller-event-reconcile")
        .collect();
    let failed = reconciles
        .iter()
        .find(|s| s.is_child_of(add))
        .unwrap_or_else(|| panic!("no controller-event-reconcile under the add: {spans:#?}"));
    assert!(
        failed.error,
        "the failed call's span has status error: {failed:?}"
    );
    assert!(
        reconciles
            .iter()
            .any(|s| !s.error && updates.iter().any(|update| s.is_child_of(update))),
        "a successful reconcile under an update: {updates:#?}"
    );
    assert!(
        reconciles.iter().any(|s| s.is_child_of(delete) && !s.error),
        "a successful reconcile under the delete"
    );

    // The retry: its own span, with the retried (successful) call inside.
    let retry = one(&spans, "controller-retry of g1", |s| {
        s.name == "controller-retry"
            && s.attr("kind") == Some("Gadget")
            && s.attr("name") == Some("g1")
    });
    assert!(
        reconciles.iter().any(|s| s.is_child_of(retry) && !s.error),
        "the retried call under controller-retry: {retry:?}"
    );

    // The opinionated wrapper's finalizer work: added on create, removed on delete.
    let patches: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "opinionated-finalizer-patch" && s.attr("name") == Some("g1"))
        .collect();
    assert!(
        patches.len() >= 2,
        "finalizer added and removed: {patches:#?} among {}",
        names(&spans)
    );
    one(&spans, "opinionated-reconcile of g1", |s| {
        s.name == "opinionated-reconcile" && s.attr("name") == Some("g1")
    });

    // The plain ConfigMap watcher: controller-event-watch under the ConfigMap's add.
    let cm_add = one(&spans, "informer-event-add of c1", |s| {
        s.name == "informer-event-add"
            && s.attr("kind") == Some("ConfigMap")
            && s.attr("name") == Some("c1")
    });
    assert!(
        spans
            .iter()
            .any(|s| s.name == "controller-event-watch" && s.is_child_of(cm_add)),
        "controller-event-watch under the ConfigMap's add: {}",
        names(&spans)
    );
}
