//! End-to-end test of the Runner's metrics against a real kube-apiserver + etcd: the one metrics
//! prefix of a Runner names every kubeapp metric it serves (controller, client, finalizer), the
//! apps of one Runner count into one series per kind, and two Runners in one process share
//! nothing.
//!
//! Every wait is a condition with a timeout.

use std::net::SocketAddr;
use std::sync::Once;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;
use kubeapp::operator::{CancellationToken, WatcherFns};
use kubeapp::runner::client_metrics::{ClientMetrics, instrumented_client};
use kubeapp::runner::{Runner, RunnerConfig, RunnerError};
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::simple::{AppConfig, SimpleApp, UnmanagedKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

const TIMEOUT: Duration = Duration::from_secs(60);

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

/// The `/metrics` body of the runner at `addr` (HTTP/1.0: the server closes after the response).
async fn scrape(addr: SocketAddr) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
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
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    body.to_string()
}

/// The samples of an exposition: its lines that are neither comments nor empty.
fn samples(exposition: &str) -> impl Iterator<Item = &str> {
    exposition
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

/// The value of the one sample of `name` whose labels include every one of `labels`
/// (`key="value"`), or 0 when there is none; panics when several match.
fn value(exposition: &str, name: &str, labels: &[&str]) -> f64 {
    let matching: Vec<&str> = samples(exposition)
        .filter(|line| {
            line.split_once('{').is_some_and(|(metric, rest)| {
                metric == name && labels.iter().all(|label| rest.contains(label))
            })
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "one series expected for {name} {labels:?}: {matching:#?}"
    );
    matching
        .first()
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls the runner's `/metrics` until `done` holds for it; returns that exposition.
async fn scrape_until(addr: SocketAddr, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let body = scrape(addr).await;
        if done(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not seen within {TIMEOUT:?} on {addr}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An app watching the ConfigMaps of `ns` with the opinionated wrapper (its finalizer on each),
/// given the runner's informers and metrics.
fn app(name: &str, ns: &str, runner: &Runner, client: kube::Client) -> SimpleApp {
    let configmaps = UnmanagedKind::<ConfigMap>::new()
        .namespace(ns)
        .opinionated()
        .watcher(WatcherFns::<ConfigMap>::new().on_add(|_, _| async { Ok(()) }));
    let config = AppConfig::new(name)
        .unmanaged_kind(configmaps)
        .informers(runner.informers().clone())
        .metrics(runner.metrics().clone());
    SimpleApp::new(config, client).expect("a valid app")
}

/// A client for the test environment counting its requests into the runner's client metrics.
async fn runner_client(env: &TestEnv, runner: &Runner) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        env.kubeconfig().clone(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("client config");
    let metrics = runner
        .metrics()
        .set::<ClientMetrics>()
        .expect("client metrics");
    instrumented_client(config, metrics).expect("client")
}

async fn start(
    mut runner: Runner,
) -> (
    SocketAddr,
    CancellationToken,
    JoinHandle<Result<(), RunnerError>>,
) {
    let addr = runner.bind().await.expect("bind");
    let stop = CancellationToken::new();
    let running = tokio::spawn(runner.run_until(stop.clone().cancelled_owned()));
    (addr, stop, running)
}

fn runner_config(prefix: &str) -> RunnerConfig {
    RunnerConfig::default()
        .metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .shutdown_timeout(TIMEOUT)
        .metrics_prefix(prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_runner_serves_its_own_counts_under_its_one_prefix_and_its_apps_share_series() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("runner-metrics")
        .await
        .expect("namespace");

    // Runner "first" runs two apps, runner "second" one; all three watch the same ConfigMaps.
    let first = Runner::new(runner_config("first")).expect("runner");
    let first_client = runner_client(&env, &first).await;
    let (one, two) = (
        app("one", &ns, &first, first_client.clone()),
        app("two", &ns, &first, first_client.clone()),
    );
    let first = first.app(one).app(two);
    let second = Runner::new(runner_config("second")).expect("runner");
    let second_client = runner_client(&env, &second).await;
    let three = app("three", &ns, &second, second_client);
    let second = second.app(three);
    let (first_addr, first_stop, first_running) = start(first).await;
    let (second_addr, second_stop, second_running) = start(second).await;

    // One object, created with the first runner's client; every app adds its finalizer.
    let configmaps: Api<ConfigMap> = Api::namespaced(first_client, &ns);
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some("probe".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    configmaps
        .create(&PostParams::default(), &probe)
        .await
        .expect("create the probe");
    let all_finalizers = await_condition(configmaps.clone(), "probe", |cm: Option<&ConfigMap>| {
        cm.and_then(|cm| cm.metadata.finalizers.as_ref())
            .is_some_and(|finalizers| finalizers.len() == 3)
    });
    tokio::time::timeout(TIMEOUT, all_finalizers)
        .await
        .expect("the three apps' finalizers within the timeout")
        .expect("watching the probe");

    let created = ["event_type=\"CREATE\"", "kind=\"configmaps\""];
    // The finalizer metrics name the Kind, the others the resource (plural).
    let added = [
        "kind=\"ConfigMap\"",
        "operation=\"add\"",
        "result=\"success\"",
    ];
    let first_body = scrape_until(first_addr, "the two apps' events and patches", |body| {
        value(body, "first_informer_events_total", &created) >= 2.0
            && value(body, "first_opinionated_finalizer_patches_total", &added) >= 2.0
    })
    .await;
    let second_body = scrape_until(second_addr, "the app's event and patch", |body| {
        value(body, "second_informer_events_total", &created) >= 1.0
            && value(body, "second_opinionated_finalizer_patches_total", &added) >= 1.0
    })
    .await;

    // The prefix names every kubeapp metric served: controller, client and finalizer ones.
    for (prefix, body) in [("first_", &first_body), ("second_", &second_body)] {
        for sample in samples(body) {
            assert!(
                sample.starts_with(prefix),
                "{sample:?} lacks {prefix}:\n{body}"
            );
        }
        for family in [
            "informer_events_total",
            "informer_synced",
            "kubernetes_client_requests_total",
            "opinionated_finalizer_patches_total",
        ] {
            assert!(
                body.contains(&format!("\n{prefix}{family}")),
                "{prefix}{family} missing:\n{body}"
            );
        }
    }

    // The two apps of a runner count into one series per kind; the other runner's counts
    // are its own.
    assert_eq!(
        value(&first_body, "first_informer_events_total", &created),
        2.0,
        "two apps, one CREATE each:\n{first_body}"
    );
    assert_eq!(
        value(
            &first_body,
            "first_opinionated_finalizer_patches_total",
            &added
        ),
        2.0,
        "two apps, one finalizer each:\n{first_body}"
    );
    assert_eq!(
        value(&second_body, "second_informer_events_total", &created),
        1.0,
        "one app, one CREATE:\n{second_body}"
    );
    assert_eq!(
        value(
            &second_body,
            "second_opinionated_finalizer_patches_total",
            &added
        ),
        1.0,
        "one app, one finalizer:\n{second_body}"
    );
    // Only the first runner's client created a ConfigMap.
    let create = ["verb=\"create\"", "kind=\"configmaps\""];
    assert_eq!(
        value(
            &first_body,
            "first_kubernetes_client_requests_total",
            &create
        ),
        1.0,
        "{first_body}"
    );
    assert_eq!(
        value(
            &second_body,
            "second_kubernetes_client_requests_total",
            &create
        ),
        0.0,
        "the second runner's client created nothing:\n{second_body}"
    );

    first_stop.cancel();
    second_stop.cancel();
    for running in [first_running, second_running] {
        tokio::time::timeout(TIMEOUT, running)
            .await
            .expect("runner returned in time")
            .expect("runner task joined")
            .expect("clean stop");
    }
}
