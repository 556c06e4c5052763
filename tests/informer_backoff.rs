//! The informer's backoff against kube-apiserver (contract section 2): a list the operator has no
//! RBAC for is retried with growing gaps (exponential from 0.8 s up to 30 s), not about once a
//! second; once RBAC allows it, the informer syncs and delivers events.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, PostParams};
use kubeapp::operator::erased::DynWatcherFns;
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::{CancellationToken, ControllerConfig, Informer, InformerController};
use kubeapp::sdk::testenv::TestEnv;
use tokio::sync::mpsc;

const KIND: &str = "configmaps";
const PREFIX: &str = "e2e_backoff";
const USER: &str = "backoff-tester";
/// Forbidden lists observed before judging the backoff. kube-runtime's backoff with its jitter
/// (0.8 s * 2^n stretched by [1, 2)) puts at least 0.8, 1.6, 3.2 and 6.4 s between them; a
/// backoff that never grows keeps them about a second apart.
const LISTS: usize = 5;
/// The longest the five lists may take: the largest jittered gaps sum to 24 s, plus slack.
const LISTS_TIMEOUT: Duration = Duration::from_secs(60);

/// The value of `{PREFIX}_kubernetes_watch_errors_total{kind="configmaps"}`.
fn watch_errors(registry: &prometheus::Registry) -> u64 {
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    let series = format!("{PREFIX}_kubernetes_watch_errors_total{{kind=\"{KIND}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let count = value as u64;
            count
        })
}

/// Lets `USER` list and watch ConfigMaps in `ns`.
async fn grant(env: &TestEnv, ns: &str) {
    let mut role = Role::default();
    role.metadata.name = Some("read-configmaps".into());
    role.rules = Some(vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["configmaps".into()]),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        ..PolicyRule::default()
    }]);
    Api::<Role>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let mut binding = RoleBinding::default();
    binding.metadata.name = Some("read-configmaps".into());
    binding.role_ref = RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Role".into(),
        name: "read-configmaps".into(),
    };
    binding.subjects = Some(vec![Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "User".into(),
        name: USER.into(),
        ..Subject::default()
    }]);
    Api::<RoleBinding>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create role binding");
}

#[tokio::test]
async fn a_forbidden_list_is_retried_with_growing_gaps_and_syncs_once_rbac_allows_it() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("backoff").await.expect("namespace");
    let identity = env.identity(USER, &[]).await.expect("identity");

    let served = kubeapp::operator::MetricsRegistry::new(Some(PREFIX)).expect("metrics");
    let registry = served.registry().clone();
    let metrics = served.controller();
    let controller = InformerController::new(ControllerConfig::default().metrics(metrics));
    controller.erased().add_informer(
        KIND,
        Informer::new::<ConfigMap>(
            identity.client.clone(),
            ListWatchOptions::default().namespace(&ns),
        ),
    );
    let (added, mut added_rx) = mpsc::unbounded_channel();
    controller.erased().add_watcher(
        KIND,
        DynWatcherFns::<ConfigMap>::new().on_add(move |cm, _ctx| {
            let _ = added.send(cm.metadata.name.clone().unwrap_or_default());
            async { Ok(()) }
        }),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    // Each failed list is one watch error: note when the counter grows, sampled every 50 ms,
    // until LISTS lists have failed. Counted from the first failure, not from the start, so a
    // slow first list (a loaded machine) cannot cut the observation short.
    let started = Instant::now();
    let mut failures: Vec<Duration> = Vec::new();
    let mut seen = 0;
    while failures.len() < LISTS && started.elapsed() < LISTS_TIMEOUT {
        let now = watch_errors(&registry);
        for _ in seen..now {
            failures.push(started.elapsed());
        }
        seen = now;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gaps: Vec<f64> = failures
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64())
        .collect();
    assert!(
        !controller.is_synced(),
        "the identity has no RBAC: the informer cannot have listed"
    );
    assert!(
        failures.len() >= LISTS,
        "the forbidden list is retried: {} failures in {LISTS_TIMEOUT:?}: {failures:?}",
        failures.len()
    );
    // The fourth gap is at least 6.4 s by design; without growth it would be about 1 s.
    assert!(
        gaps.iter().take(LISTS - 1).any(|&gap| gap >= 4.0),
        "gaps {gaps:?}: the backoff does not grow"
    );
    // The backoff's first step is 0.8 s. A measured gap can come out shorter than the real one
    // by the sampling period plus however long this thread was held up before the sample that
    // saw the first failure (a loaded CI machine). 0.5 s leaves 300 ms for that and still fails
    // a retry without backoff (gaps of a request's round trip) or with a much shorter one.
    assert!(
        gaps.iter().all(|&gap| gap >= 0.5),
        "gaps {gaps:?}: a retry came sooner than the backoff's first step (0.8 s) allows"
    );

    // Granted: the next retry (at most the capped backoff away) lists, syncs and delivers.
    grant(&env, &ns).await;
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("after-rbac".into());
    cm.data = Some(BTreeMap::from([("k".into(), "v".into())]));
    Api::<ConfigMap>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    let delivered = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(name) = added_rx.recv().await {
            if name == "after-rbac" {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        delivered,
        Ok(true),
        "the informer syncs within the capped backoff once RBAC allows the list"
    );
    assert!(controller.is_synced());

    stop.cancel();
    running
        .await
        .expect("no panic")
        .expect("the controller stops cleanly");
}
