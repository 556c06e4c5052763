//! The fault proxy against a real kube-apiserver + etcd: each fault does what it says to a
//! kube-rs client, and leaves the apiserver's state as a real apiserver would.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeapp_sdk::testenv::TestEnv;
use kubeapp_testing::{FaultProxy, ResourceKey, WriteFault, WriteOutcome};

/// Every wait of these tests: long enough for a loaded 2-core machine, short enough to fail.
const WAIT: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("value".to_owned(), value.to_owned())])),
        ..Default::default()
    }
}

fn secret(name: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn value(config_map: &ConfigMap) -> Option<&str> {
    config_map.data.as_ref()?.get("value").map(String::as_str)
}

fn api_code(error: &kube::Error) -> Option<(u16, String)> {
    match error {
        kube::Error::Api(status) => Some((status.code, status.reason.clone())),
        _ => None,
    }
}

struct Setup {
    env: TestEnv,
    proxy: FaultProxy,
    /// ConfigMaps in `default`, straight to the apiserver.
    direct: Api<ConfigMap>,
    /// ConfigMaps in `default`, through the proxy.
    proxied: Api<ConfigMap>,
}

async fn setup() -> Setup {
    let env = TestEnv::start().await.expect("control plane");
    let proxy = FaultProxy::start(env.client()).await.expect("proxy");
    let direct = Api::default_namespaced(env.client());
    let proxied = Api::default_namespaced(proxy.client().expect("proxied client"));
    Setup {
        env,
        proxy,
        direct,
        proxied,
    }
}

#[tokio::test]
async fn requests_pass_through_and_writes_are_logged_in_order() {
    let Setup {
        env: _env,
        proxy,
        direct,
        proxied,
    } = setup().await;
    proxied
        .create(&PostParams::default(), &config_map("a", "1"))
        .await
        .expect("create through the proxy");
    let read = direct.get("a").await.expect("the apiserver has it");
    assert_eq!(value(&read), Some("1"));
    let listed = proxied.list(&Default::default()).await.expect("list");
    assert!(
        listed
            .items
            .iter()
            .any(|item| item.metadata.name.as_deref() == Some("a"))
    );
    proxied
        .delete("a", &Default::default())
        .await
        .expect("delete through the proxy");
    let writes = proxy.writes();
    let shown: Vec<String> = writes.iter().map(ToString::to_string).collect();
    assert_eq!(writes.len(), 2, "{shown:?}");
    assert_eq!(writes[0].outcome, WriteOutcome::Forwarded(201), "{shown:?}");
    assert_eq!(writes[1].method, http::Method::DELETE, "{shown:?}");
    assert_eq!(writes[1].request.name.as_deref(), Some("a"));
}

#[tokio::test]
async fn faulted_writes_get_the_apiservers_errors_and_never_reach_storage() {
    let Setup {
        env: _env,
        proxy,
        direct,
        proxied,
    } = setup().await;
    let config_maps = ResourceKey::of::<ConfigMap>();
    // Answers the client does not retry reach the caller, and storage is unchanged.
    let faults = [
        (WriteFault::Conflict, 409, "Conflict"),
        (WriteFault::InternalError, 500, "InternalError"),
    ];
    // kube's client retries 429 and 504 by itself (up to 15 times, after `Retry-After`), as
    // it would the apiserver's: one such answer delays the write, which then lands.
    for fault in [
        WriteFault::TooManyRequests {
            retry_after: Duration::from_secs(1),
        },
        WriteFault::Timeout,
    ] {
        proxy.fail_writes(Some(config_maps.clone()), fault, 1);
        let name = format!("retried-{}", proxy.writes().len());
        proxied
            .create(&PostParams::default(), &config_map(&name, "1"))
            .await
            .unwrap_or_else(|error| panic!("{fault}: the client's retry lands: {error}"));
    }
    for (fault, code, reason) in faults {
        proxy.fail_writes(Some(config_maps.clone()), fault, 1);
        let error = proxied
            .create(&PostParams::default(), &config_map("b", "1"))
            .await
            .expect_err("the fault's answer");
        assert_eq!(
            api_code(&error),
            Some((code, reason.to_owned())),
            "{fault}: {error}"
        );
        assert!(
            direct.get_opt("b").await.expect("get").is_none(),
            "{fault}: the write reached storage"
        );
    }
    // Another resource's writes are not matched.
    proxy.fail_writes(Some(config_maps.clone()), WriteFault::Conflict, 1);
    let secrets: Api<Secret> = Api::default_namespaced(proxy.client().expect("client"));
    secrets
        .create(&PostParams::default(), &secret("s"))
        .await
        .expect("a Secret passes a ConfigMap rule");
    proxy.clear_write_faults();
    proxied
        .create(&PostParams::default(), &config_map("b", "1"))
        .await
        .expect("no rule left: the write passes");
    let outcomes: Vec<WriteOutcome> = proxy.writes().into_iter().map(|w| w.outcome).collect();
    assert_eq!(
        outcomes,
        [
            WriteOutcome::Faulted(WriteFault::TooManyRequests {
                retry_after: Duration::from_secs(1)
            }),
            WriteOutcome::Forwarded(201),
            WriteOutcome::Faulted(WriteFault::Timeout),
            WriteOutcome::Forwarded(201),
            WriteOutcome::Faulted(WriteFault::Conflict),
            WriteOutcome::Faulted(WriteFault::InternalError),
            WriteOutcome::Forwarded(201),
            WriteOutcome::Forwarded(201),
        ]
    );
}

#[tokio::test]
async fn a_429_carries_retry_after_as_the_apiserver_sends_it() {
    let Setup {
        env: _env, proxy, ..
    } = setup().await;
    proxy.fail_writes(
        None,
        WriteFault::TooManyRequests {
            retry_after: Duration::from_millis(1_500),
        },
        1,
    );
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(
            serde_json::to_vec(&config_map("c", "1")).expect("JSON"),
        ))
        .expect("request");
    // A client that does not retry by itself, to see the answer (kube's default one retries
    // a 429 after the wait it asks for).
    let mut config = kube::Config::new(proxy.url().parse().expect("the proxy's URL"));
    config.default_retry = false;
    let response = kube::Client::try_from(config)
        .expect("client")
        .send(request)
        .await
        .expect("an answer");
    assert_eq!(response.status(), http::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok()),
        Some("2")
    );
}

#[tokio::test]
async fn a_lost_response_is_an_error_for_a_write_that_landed() {
    let Setup {
        env: _env,
        proxy,
        direct,
        proxied,
    } = setup().await;
    proxy.fail_writes(None, WriteFault::ResponseLost, 1);
    let error = proxied
        .create(&PostParams::default(), &config_map("d", "1"))
        .await
        .expect_err("the answer is lost");
    assert_eq!(
        api_code(&error),
        None,
        "a transport error, not an API one: {error}"
    );
    assert!(
        direct.get_opt("d").await.expect("get").is_some(),
        "the write landed"
    );
    assert_eq!(proxy.writes()[0].outcome, WriteOutcome::Lost(201));
}

#[tokio::test]
async fn a_cut_ends_every_open_watch() {
    let Setup {
        env: _env,
        proxy,
        proxied,
        ..
    } = setup().await;
    let config_maps = ResourceKey::of::<ConfigMap>();
    let list = proxied.list(&Default::default()).await.expect("list");
    let version = list.metadata.resource_version.expect("a resourceVersion");
    let mut events = proxied
        .watch(&WatchParams::default(), &version)
        .await
        .expect("watch")
        .boxed();
    within("the watch to open", proxy.wait_for_watch(&config_maps)).await;
    proxy.cut_watches();
    let mut seen = 0;
    while let Some(event) = within("the watch to end", events.next()).await {
        event.expect("an event");
        seen += 1;
    }
    assert_eq!(
        seen, 0,
        "nothing was written, so the watch ended with no event"
    );
    within(
        "the proxy to count the watch closed",
        proxy.wait_until(|proxy| proxy.open_watches(&config_maps) == 0),
    )
    .await;
}

#[tokio::test]
async fn withheld_states_are_never_seen_and_the_release_relists_the_current_one() {
    let Setup {
        env: _env,
        proxy,
        direct,
        proxied,
    } = setup().await;
    let config_maps = ResourceKey::of::<ConfigMap>();
    direct
        .create(&PostParams::default(), &config_map("e", "1"))
        .await
        .expect("create");
    // The states the client sees, polled all along (the watcher opens its watch only when
    // polled after the list); the 410 that ends a withheld watch is an error the watcher
    // yields before it re-lists, so errors are skipped.
    let (states, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let client = tokio::spawn(async move {
        let mut events = watcher(proxied, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) = event
                && let Some(value) = value(&object)
                && states.send(value.to_owned()).is_err()
            {
                return;
            }
        }
    });
    let first = within("the first state", seen.recv()).await;
    assert_eq!(first.as_deref(), Some("1"));
    within("the watch to open", proxy.wait_for_watch(&config_maps)).await;

    proxy.withhold(config_maps.clone());
    for next in ["2", "3"] {
        direct
            .replace("e", &PostParams::default(), &{
                let mut current = direct.get("e").await.expect("get");
                current.data = config_map("e", next).data;
                current
            })
            .await
            .expect("update");
    }
    within(
        "both updates to be dropped",
        proxy.wait_until(|proxy| proxy.dropped_events(&config_maps) >= 2),
    )
    .await;
    proxy.release(config_maps.clone());
    let after = within("the state after the release", seen.recv()).await;
    assert_eq!(
        after.as_deref(),
        Some("3"),
        "the client re-listed the current state and never saw the intermediate one"
    );
    client.abort();
}

#[tokio::test]
async fn a_lagging_resource_holds_its_events_in_order_while_others_flow() {
    let Setup {
        env,
        proxy,
        direct,
        proxied,
    } = setup().await;
    let config_maps = ResourceKey::of::<ConfigMap>();
    let secrets_direct: Api<Secret> = Api::default_namespaced(env.client());
    let secrets_proxied: Api<Secret> = Api::default_namespaced(proxy.client().expect("client"));
    let cm_version = proxied
        .list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let secret_version = secrets_proxied
        .list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut cm_events = proxied
        .watch(&WatchParams::default(), &cm_version)
        .await
        .expect("watch")
        .boxed();
    let mut secret_events = secrets_proxied
        .watch(&WatchParams::default(), &secret_version)
        .await
        .expect("watch")
        .boxed();
    within("the watch to open", proxy.wait_for_watch(&config_maps)).await;
    within(
        "the watch to open",
        proxy.wait_for_watch(&ResourceKey::of::<Secret>()),
    )
    .await;

    proxy.lag(config_maps.clone());
    for name in ["f1", "f2"] {
        direct
            .create(&PostParams::default(), &config_map(name, "1"))
            .await
            .expect("create");
    }
    secrets_direct
        .create(&PostParams::default(), &secret("f-secret"))
        .await
        .expect("create");
    let secret = within("the Secret's event", secret_events.next())
        .await
        .expect("an event")
        .expect("not an error");
    assert!(
        matches!(secret, WatchEvent::Added(secret) if secret.metadata.name.as_deref() == Some("f-secret"))
    );
    within(
        "both ConfigMap events to be held",
        proxy.wait_until(|proxy| proxy.held_events(&config_maps) == 2),
    )
    .await;
    assert!(
        futures::FutureExt::now_or_never(cm_events.next()).is_none(),
        "a held event reached the client"
    );

    proxy.catch_up(config_maps.clone());
    let mut names = Vec::new();
    for _ in 0..2 {
        match within("a held event", cm_events.next()).await {
            Some(Ok(WatchEvent::Added(object))) => {
                names.push(object.metadata.name.unwrap_or_default())
            }
            other => panic!("expected an Added event, got {other:?}"),
        }
    }
    assert_eq!(names, ["f1", "f2"], "held events arrive in order");
    assert_eq!(proxy.held_events(&config_maps), 0);
}

#[tokio::test]
async fn a_halt_after_a_write_holds_its_answer_and_everything_after_until_resume() {
    let Setup {
        env: _env,
        proxy,
        direct,
        proxied,
    } = setup().await;
    proxy.halt_after_write(2);
    proxied
        .create(&PostParams::default(), &config_map("g1", "1"))
        .await
        .expect("the first write");
    let second = tokio::spawn({
        let proxied = proxied.clone();
        async move {
            proxied
                .create(&PostParams::default(), &config_map("g2", "1"))
                .await
        }
    });
    within("the halt", proxy.halted()).await;
    assert!(
        direct.get_opt("g2").await.expect("get").is_some(),
        "the halting write landed"
    );
    let read = tokio::spawn({
        let proxied = proxied.clone();
        async move { proxied.get("g1").await }
    });
    // A bounded look for something that must not happen: the read stays unanswered.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!read.is_finished(), "a read was answered during the halt");
    assert!(!second.is_finished(), "the halting write was answered");

    proxy.resume();
    let second = within("the held write", second).await.expect("task");
    assert!(second.is_err(), "the held answer is lost: {second:?}");
    let read = within("the held read", read).await.expect("task");
    assert!(read.is_err(), "the held read is dropped: {read:?}");
    let outcomes: Vec<WriteOutcome> = proxy.writes().into_iter().map(|w| w.outcome).collect();
    assert_eq!(
        outcomes,
        [
            WriteOutcome::Forwarded(201),
            WriteOutcome::Halted(Some(201))
        ]
    );
    // The next process (here: the same client, reconnecting) is served again.
    let fresh = Api::<ConfigMap>::default_namespaced(proxy.client().expect("client"));
    assert_eq!(value(&fresh.get("g2").await.expect("get")), Some("1"));
}

#[tokio::test]
async fn a_child_process_reaches_the_apiserver_through_the_written_kubeconfig() {
    let Setup {
        env: _env, proxy, ..
    } = setup().await;
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("kubeconfig");
    proxy.write_kubeconfig(&path).expect("kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("a valid kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a config");
    assert_eq!(config.cluster_url.to_string(), format!("{}/", proxy.url()));
    let client = kube::Client::try_from(config).expect("client");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &config_map("h", "1"))
        .await
        .expect("a write through the kubeconfig");
    assert_eq!(proxy.writes().len(), 1);
}
