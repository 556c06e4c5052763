//! Drift detection end to end (issue #36), against a real kube-apiserver + etcd:
//!
//! - **a watch that stops delivering without closing**: the informer's client goes through a
//!   layer that, once switched on, drops every data frame of watch responses (the connection and
//!   the stream stay open, nothing errors: what a proxy that swallows events does). Objects are
//!   then created, changed and deleted behind its back. The next check finds the drift (counted
//!   in `informer_cache_drift_total`), and the re-list it triggers brings the cache back to the
//!   apiserver's state: the test waits for exactly that state, with the watch still swallowed;
//! - **a healthy informer under churn never reports drift**: 2,000 ConfigMaps created, updated
//!   and a quarter deleted by 16 concurrent writers while the informer checks every second; the
//!   checks run (`informer_cache_drift_checks_total` grows) and `informer_cache_drift_total`
//!   stays 0. `KUBEAPP_DRIFT_OBJECTS=20000` runs the same test at 20,000 objects (by hand: it
//!   takes minutes, see `docs/performance/drift.md`).

use std::collections::BTreeMap;
use std::error::Error;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kubeapp::operator::{ControllerMetrics, DriftCheck, InformerOptions, Informers, Store};
use kubeapp::sdk::testenv::TestEnv;

type BoxError = Box<dyn Error + Send + Sync>;

/// A response body that drops its data frames while `swallow` is set.
struct Swallowing {
    inner: kube::client::Body,
    swallow: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
}

impl http_body::Body for Swallowing {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, BoxError>>> {
        loop {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame)))
                    if frame.is_data() && self.swallow.load(Ordering::SeqCst) =>
                {
                    self.dropped.fetch_add(1, Ordering::SeqCst);
                }
                Poll::Ready(other) => return Poll::Ready(other.map(|r| r.map_err(Into::into))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A client over `inner` whose watch responses go silent (not closed) once the switch is set.
fn swallowing_client(inner: kube::Client) -> (kube::Client, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let swallow = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (switch, counter) = (Arc::clone(&swallow), Arc::clone(&dropped));
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let (swallow, dropped) = (Arc::clone(&switch), Arc::clone(&counter));
        async move {
            let response = inner.send(request).await?;
            Ok::<_, BoxError>(response.map(|body| Swallowing {
                inner: body,
                // Only watch streams go silent; lists (the drift check's, the re-list) answer.
                swallow: if watch {
                    swallow
                } else {
                    Arc::new(AtomicBool::new(false))
                },
                dropped,
            }))
        }
    });
    (kube::Client::new(service, "default"), swallow, dropped)
}

/// The value of counter `name` for the `configmaps` kind in `registry`.
fn counter(registry: &prometheus::Registry, name: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|l| l.name() == "kind" && l.value() == "configmaps")
        })
        .map(|metric| metric.get_counter().get_value())
        .sum()
}

/// The informer's store of ConfigMaps in `ns` through `client`, checking every `period`.
fn store(
    client: kube::Client,
    ns: &str,
    check: DriftCheck,
) -> (Store<ConfigMap>, prometheus::Registry, Informers) {
    let metrics = ControllerMetrics::unregistered(None).expect("metrics");
    let registry = prometheus::Registry::new();
    for collector in metrics.collectors() {
        registry.register(collector).expect("register");
    }
    let informers = Informers::with_metrics(metrics);
    let store = informers.store(
        Api::<ConfigMap>::namespaced(client, ns),
        watcher::Config::default(),
        InformerOptions::default().drift_check(Some(check)),
    );
    (store, registry, informers)
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// Name -> value of every ConfigMap in `objects` (the kube-root-ca.crt one left out).
fn contents<'a>(objects: impl Iterator<Item = &'a ConfigMap>) -> BTreeMap<String, String> {
    objects
        .filter_map(|cm| {
            let value = cm.data.as_ref()?.get("value")?.clone();
            Some((cm.metadata.name.clone()?, value))
        })
        .collect()
}

async fn server_contents(api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    let list = api.list(&Default::default()).await.expect("list");
    contents(list.items.iter())
}

fn cached_contents(store: &Store<ConfigMap>) -> BTreeMap<String, String> {
    let state = store.state();
    contents(state.iter().map(AsRef::as_ref))
}

/// Polls `pick` every 50 ms until it is true; fails naming `what` after `within`.
async fn until(what: &str, within: Duration, mut pick: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !pick().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_stops_delivering_is_detected_by_the_next_check_and_the_relist_recovers() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("drift").await.expect("namespace");
    let direct: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
    let (client, swallow, dropped) = swallowing_client(env.client());
    let check = DriftCheck {
        period: Duration::from_secs(1),
        grace: Duration::from_secs(1),
    };
    let (store, registry, _informers) = store(client, &ns, check);
    for i in 0..50 {
        direct
            .create(
                &PostParams::default(),
                &config_map(&format!("cm-{i}"), "first"),
            )
            .await
            .expect("create");
    }
    let server = server_contents(&direct).await;
    until(
        "the cache holds the 50 objects",
        Duration::from_secs(30),
        async || cached_contents(&store) == server,
    )
    .await;
    until(
        "a check ran on the healthy watch",
        Duration::from_secs(30),
        async || counter(&registry, "informer_cache_drift_checks_total") >= 1.0,
    )
    .await;
    assert_eq!(
        counter(&registry, "informer_cache_drift_total"),
        0.0,
        "a healthy watch is no drift"
    );

    // The watch goes silent; objects are created, changed and deleted behind its back.
    swallow.store(true, Ordering::SeqCst);
    let silenced = Instant::now();
    for i in 50..70 {
        direct
            .create(
                &PostParams::default(),
                &config_map(&format!("cm-{i}"), "first"),
            )
            .await
            .expect("create");
    }
    for i in 0..10 {
        let patch = serde_json::json!({"data": {"value": "changed"}});
        direct
            .patch(
                &format!("cm-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .expect("update");
    }
    for i in 10..20 {
        direct
            .delete(&format!("cm-{i}"), &DeleteParams::default())
            .await
            .expect("delete");
    }
    let server = server_contents(&direct).await;
    assert_eq!(server.len(), 60);
    until(
        "the drift is detected",
        Duration::from_secs(30),
        async || counter(&registry, "informer_cache_drift_total") >= 1.0,
    )
    .await;
    let detected = silenced.elapsed();
    until(
        "the re-list brings the cache to the apiserver's state",
        Duration::from_secs(30),
        async || cached_contents(&store) == server,
    )
    .await;
    assert!(
        dropped.load(Ordering::SeqCst) > 0,
        "the watch's frames were really swallowed"
    );
    eprintln!(
        "figure: drift detected {detected:?} after the watch went silent (check period 1 s, grace 1 s); \
         the cache recovered by the re-list with the watch still silent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_informer_under_churn_never_reports_drift() {
    // A reported drift logs what differed: shown with the failure.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_test_writer()
        .try_init();
    let objects: usize = std::env::var("KUBEAPP_DRIFT_OBJECTS")
        .ok()
        .map_or(2_000, |n| {
            n.parse().expect("KUBEAPP_DRIFT_OBJECTS is a number")
        });
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("healthy").await.expect("namespace");
    let direct: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
    let check = DriftCheck {
        period: Duration::from_secs(1),
        grace: Duration::from_secs(10),
    };
    let (store, registry, _informers) = store(env.client(), &ns, check);
    store.wait_until_synced().await;
    let started = Instant::now();
    futures::stream::iter(0..objects)
        .for_each_concurrent(16, |i| {
            let direct = direct.clone();
            async move {
                let name = format!("cm-{i}");
                direct
                    .create(&PostParams::default(), &config_map(&name, "first"))
                    .await
                    .expect("create");
                if i % 2 == 0 {
                    let patch = serde_json::json!({"data": {"value": format!("final {i}")}});
                    direct
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .expect("update");
                }
                if i % 4 == 3 {
                    direct
                        .delete(&name, &DeleteParams::default())
                        .await
                        .expect("delete");
                }
            }
        })
        .await;
    let churn = started.elapsed();
    let server = server_contents(&direct).await;
    until(
        "the cache reaches the final state",
        Duration::from_secs(120),
        async || cached_contents(&store) == server,
    )
    .await;
    // Checks that straddle the end of the churn complete too.
    let checks_now = counter(&registry, "informer_cache_drift_checks_total");
    until(
        "two more checks complete",
        Duration::from_secs(60),
        async || counter(&registry, "informer_cache_drift_checks_total") >= checks_now + 2.0,
    )
    .await;
    // Each check lists only after the previous one compared: every check but the last counted
    // has been compared by now.
    let checks = counter(&registry, "informer_cache_drift_checks_total");
    assert!(checks >= 3.0, "checks ran during the test: {checks}");
    assert_eq!(
        counter(&registry, "informer_cache_drift_total"),
        0.0,
        "a healthy informer reported drift"
    );
    // What one check costs: the same metadata list, paged by 500, timed and sized (its JSON
    // re-serialized: within a few percent of the bytes on the wire).
    let cpu = |pid: Option<u32>| pid.map_or(0, cpu_ticks);
    let cpu_before = cpu(env.apiserver_pid()) + cpu(Some(env.etcd_pid()));
    let list_started = Instant::now();
    let mut params = kube::api::ListParams::default().limit(500);
    let (mut bytes, mut items) = (0, 0);
    loop {
        let page = direct
            .list_metadata(&params)
            .await
            .expect("a metadata list");
        bytes += serde_json::to_vec(&page).expect("json").len();
        items += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    eprintln!(
        "figure: {objects} ConfigMaps churned in {churn:?}; {checks} drift checks, no drift; \
         one check's list: {items} objects, {} KiB of JSON, {:?}, {} ms of apiserver + etcd CPU",
        bytes / 1024,
        list_started.elapsed(),
        (cpu(env.apiserver_pid()) + cpu(Some(env.etcd_pid())) - cpu_before) * 1000
            / ticks_per_second()
    );
}

/// User + system CPU of process `pid` so far, in clock ticks (`/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The fields after the command name (which may hold spaces) start after its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    field(11) + field(12)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}
