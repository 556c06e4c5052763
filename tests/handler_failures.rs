//! Issue #32, defect 3, end to end: a handler that keeps failing is not forgotten silently. A
//! reconciler with a capped policy is retried past the point where the Go SDK's schedule gives
//! up; the object gets one Warning Event `HandlerFailed` (not one per retry), it is counted in
//! `controller_objects_failing` with an age that counts from its first failure, and once the
//! dependency is back it succeeds and leaves the gauges. A watcher whose policy gives up leaves a
//! `HandlerGaveUp` Event and the give-up counted; `kubeapp trace` exits 4 for it (3 for the
//! object whose retry is pending). (The default schedules themselves, 5 s doubling
//! capped at 5 minutes for reconcilers and the Go SDK's for watchers, are checked to the second
//! with paused time in `operator/src/controller/tests/failing.rs`.)

mod call_log;
mod example_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use call_log::{CallLog, WAIT, eventually, logs};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kubeapp::operator::{
    CancellationToken, Context, ControllerConfig, InformerController, InformerOptions,
    MetricsRegistry, ReconcileError, ReconcileRequest, ReconcileResult, RetryPolicy, WatcherFns,
    reconciler_fn,
};
use kubeapp::sdk::testenv::TestEnv;

const PREFIX: &str = "e2e_failures";
const KIND: &str = "configmaps";

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// The value of the series of `name` (prefixed) with `kind="configmaps"`, 0 when absent.
fn value(registry: &prometheus::Registry, name: &str) -> f64 {
    let name = format!("{PREFIX}_{name}");
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric().iter())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|label| label.name() == "kind" && label.value() == KIND)
        })
        .map(|metric| metric.get_counter().get_value() + metric.get_gauge().get_value())
        .sum()
}

/// The Warning Events about `name` with `reason`, once at least one is there.
async fn warnings(events: &Api<Event>, name: &str, reason: &str) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found: Vec<Event> = events
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|event| {
                event.type_.as_deref() == Some("Warning")
                    && event.reason.as_deref() == Some(reason)
                    && event
                        .regarding
                        .as_ref()
                        .is_some_and(|r| r.name.as_deref() == Some(name))
            })
            .collect();
        if !found.is_empty() {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Warning Event {reason} about {name} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_gets_one_warning_event_is_counted_as_failing_and_recovers() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("failures").await.expect("namespace");
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
    let events: Api<Event> = Api::namespaced(env.client(), &ns);
    let served = MetricsRegistry::new(Some(PREFIX)).expect("metrics");
    let registry = served.registry().clone();
    let controller = InformerController::new(
        ControllerConfig::default()
            .name("failures-test")
            .metrics(served.controller())
            // Fast stand-ins for the defaults: never giving up (capped), and giving up.
            .reconciler_retry_policy(RetryPolicy::capped_exponential(
                Duration::from_millis(50),
                Duration::from_millis(200),
            ))
            .watcher_retry_policy(RetryPolicy::exponential(Duration::from_millis(50), 2)),
    );
    let kind = controller.kind(
        config_maps.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let log = CallLog::new();
    let healthy = Arc::new(AtomicBool::new(false));
    // When `stuck`'s second call began: its first failure was recorded before it.
    let first_retry = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let _reconciler = kind.reconcile(reconciler_fn({
        let (log, healthy, first_retry) = (log.clone(), healthy.clone(), first_retry.clone());
        move |request: ReconcileRequest<ConfigMap>, ctx: Context| {
            let name = request.object.name_any();
            log.push(format!("reconcile {name} attempt{}", ctx.attempt()));
            if name == "stuck" && ctx.attempt() == 1 {
                *first_retry.lock().expect("lock") = Some(Instant::now());
            }
            let ok = name != "stuck" || healthy.load(Ordering::SeqCst);
            async move {
                if ok {
                    Ok(ReconcileResult::done())
                } else {
                    Err(ReconcileError::new("the dependency is down"))
                }
            }
        }
    }));
    let _watcher = kind.watch(WatcherFns::new().on_add({
        let log = log.clone();
        move |object: Arc<ConfigMap>, ctx: Context| {
            let name = object.name_any();
            log.push(format!("add {name} attempt{}", ctx.attempt()));
            async move {
                if name == "doomed" {
                    Err("this add never works".into())
                } else {
                    Ok(())
                }
            }
        }
    }));
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    for name in ["stuck", "doomed"] {
        config_maps
            .create(&PostParams::default(), &config_map(name))
            .await
            .expect("create");
    }

    // The watcher gives up on `doomed` when its third retry (attempt 3) fails too.
    log.wait_for("the watcher's last attempt", |log| {
        log.iter().any(|e| e == "add doomed attempt3")
    })
    .await;
    let gave_up = warnings(&events, "doomed", "HandlerGaveUp").await;
    assert_eq!(gave_up.len(), 1, "{gave_up:#?}");
    let note = gave_up[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("watcher[0] gave up on Created after attempt 3")
            && note.contains("this add never works"),
        "{note}"
    );
    let failed = warnings(&events, "doomed", "HandlerFailed").await;
    assert_eq!(failed.len(), 1, "one at its first failure: {failed:#?}");
    // `kubeapp trace` reads the give-up as a failure (exit 4), naming the handler's error.
    let (code, stdout, stderr) = example_support::kubeapp(
        env.kubeconfig_path(),
        &["trace", "configmap/doomed", "-n", &ns],
    )
    .await;
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "configmap/doomed in {ns}: FAILED: the operator gave up on it after its last status write: "
        )) && stdout.contains("this add never works"),
        "{stdout}"
    );
    eventually("the give-up is counted", || {
        value(&registry, "controller_retries_given_up_total") == 1.0
    })
    .await;

    // `stuck` is retried past the Go SDK's last attempt (5), with one Warning Event.
    log.wait_for("stuck retried past attempt 8", |log| {
        log.iter().any(|e| e == "reconcile stuck attempt8")
    })
    .await;
    let failed = warnings(&events, "stuck", "HandlerFailed").await;
    assert_eq!(failed.len(), 1, "{failed:#?}");
    // A pending retry is shown, and the verdict stays "not ready" (no status yet: exit 3). With
    // `--wait`, an object that never settles is read until the time is up, then reported as it
    // stands (exit 3), not as an error.
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = example_support::kubeapp(
        env.kubeconfig_path(),
        &["trace", "configmap/stuck", "-n", &ns, "--wait", "3s"],
    )
    .await;
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(3),
        "--wait 3s read until the time was up: {:?}",
        started.elapsed()
    );
    assert!(
        stdout.contains("handler failures:") && stdout.contains("HandlerFailed x1: "),
        "{stdout}"
    );
    let event = &failed[0];
    assert!(
        event.series.is_none() && event.deprecated_count.unwrap_or(1) <= 1,
        "recorded once, not once per retry: {event:#?}"
    );
    assert_eq!(event.action.as_deref(), Some("Reconcile"));
    assert_eq!(event.reporting_controller.as_deref(), Some("failures-test"));
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains("reconciler[0] failed on Created (attempt 0): the dependency is down"),
        "{note}"
    );
    assert!(
        warnings_now(&events, "stuck", "HandlerGaveUp")
            .await
            .is_empty(),
        "a reconciler with a capped policy never gives up"
    );
    // Counted as failing (`doomed` no longer is: given up), aged from its first failure.
    let before_scrape = Instant::now();
    assert_eq!(value(&registry, "controller_objects_failing"), 1.0);
    let age = value(&registry, "controller_oldest_retry_age_seconds");
    let first_retry = first_retry.lock().expect("lock").expect("a second call");
    let at_least = before_scrape.duration_since(first_retry).as_secs_f64();
    assert!(
        age >= at_least,
        "the age ({age} s) counts from the first failure, before the first retry ({at_least} s ago)"
    );

    // The dependency is back: the next retry succeeds, nothing fails any more.
    healthy.store(true, Ordering::SeqCst);
    eventually("stuck succeeds and leaves the gauges", || {
        value(&registry, "controller_objects_failing") == 0.0
            && value(&registry, "controller_oldest_retry_age_seconds") == 0.0
    })
    .await;
    let calls = log.of("stuck").len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(log.of("stuck").len(), calls, "no retry after the success");

    stop.cancel();
    running.await.expect("joined").expect("stopped");
}

/// The Warning Events about `name` with `reason` right now.
async fn warnings_now(events: &Api<Event>, name: &str, reason: &str) -> Vec<Event> {
    events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|event| {
            event.reason.as_deref() == Some(reason)
                && event
                    .regarding
                    .as_ref()
                    .is_some_and(|r| r.name.as_deref() == Some(name))
        })
        .collect()
}
