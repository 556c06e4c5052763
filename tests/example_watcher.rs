//! End-to-end test of the watcher example binary (`examples/watcher`), run as a child process
//! against a real kube-apiserver + etcd with a `testenv` kubeconfig.
//!
//! The binary is the one cargo built next to this test (`target/<profile>/kubeapp-example-watcher`);
//! build it first with `cargo build -p kubeapp-example-watcher --all-features` (`cargo test
//! --workspace` builds it too). The test never runs cargo itself.
//!
//! Every wait is a condition polled against a deadline; the operator's JSON log lines are what
//! tell the test that a step is in flight.

mod example_support;
#[path = "example_watcher/support.rs"]
mod support;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubeapp::sdk::testenv::TestEnv;

use crate::support::{
    APP, BINARY, FINALIZER, Operator, apply_rbac, count_of, create_probe, event, events_about,
    eventually, get, gone, output_of, probes_api, sample, set_target, steps, uid_of,
};

#[test]
fn crd_help_and_manifests_describe_the_operator() {
    let yaml = output_of(&["crd"]);
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&yaml).expect("the crd output parses as CRD YAML");
    assert_eq!(crds.len(), 1, "{yaml}");
    let crd = &crds[0];
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("probes.watcher.example.kubeapp.dev")
    );
    assert_eq!(crd.spec.names.kind, "Probe");
    assert_eq!(crd.spec.scope, "Namespaced");
    let version = &crd.spec.versions[0];
    assert_eq!((version.name.as_str(), version.storage), ("v1", true));
    let schema = serde_json::to_value(&version.schema).expect("schema");
    assert_eq!(
        schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["processingMillis"]["type"],
        "integer",
        "{yaml}"
    );

    let help = output_of(&["--help"]);
    for command in ["crd", "rbac", "manifests", "run"] {
        assert!(
            help.contains(command),
            "{command} missing from --help:\n{help}"
        );
    }
    let help = output_of(&["run", "--help"]);
    for flag in [
        "--metrics-addr",
        "--namespace",
        "--log-format",
        "--otlp-endpoint",
        "--shutdown-timeout",
        "--instance",
        "METRICS_ADDR",
        "WATCH_NAMESPACE",
        "LOG_FORMAT",
        "SHUTDOWN_TIMEOUT",
        "OTEL_EXPORTER_OTLP_",
        "POD_NAME",
    ] {
        assert!(
            help.contains(flag),
            "{flag} missing from run --help:\n{help}"
        );
    }

    let manifests = output_of(&["manifests", "--namespace", "ops", "--image", "example:1"]);
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&manifests).expect("the manifests parse as YAML");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service"
        ],
        "{manifests}"
    );
    let role: ClusterRole = serde_json::from_value(docs[1].clone()).expect("a ClusterRole");
    let grants = |group: &str, resource: &str, verb: &str| {
        role.rules.iter().flatten().any(|rule| {
            let has = |items: &Option<Vec<String>>, value: &str| {
                items.iter().flatten().any(|item| item == value)
            };
            has(&rule.api_groups, group)
                && rule.resources.iter().flatten().any(|r| r == resource)
                && rule.verbs.iter().any(|v| v == verb)
        })
    };
    assert!(grants("events.k8s.io", "events", "create"), "{manifests}");
    assert!(grants("", "events", "create"), "{manifests}");
    assert!(
        grants("watcher.example.kubeapp.dev", "probes", "patch"),
        "{manifests}"
    );
    let container = &docs[3]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example:1", "{manifests}");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["ports"][0]["name"], "metrics");
    let service = &docs[4];
    assert_eq!(service["metadata"]["namespace"], "ops", "{manifests}");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
}

/// The operator runs with exactly the RBAC its `manifests` command generates: readiness follows
/// the CRD, each lifecycle step becomes an Event and a count, and SIGTERM lets a step in flight
/// finish before a clean exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_steps_become_events_and_metrics_and_sigterm_finishes_the_step_in_flight() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("example-watcher")
        .await
        .expect("namespace");
    let client = env.client();

    // The operator's identity: the generated ServiceAccount, bound to the generated ClusterRole.
    apply_rbac(&client, &output_of(&["rbac", "--namespace", &ns])).await;
    let user = format!("system:serviceaccount:{ns}:{BINARY}");
    let identity = env
        .identity(&user, &["system:serviceaccounts"])
        .await
        .expect("the operator's identity");

    let operator = Operator::start(
        &identity.kubeconfig_path,
        env.dir().join("example-watcher.log"),
        &["--namespace", &ns, "--instance", "e2e-instance"],
    );
    let logs = || operator.logs();

    // The CRD is not installed yet: the informer cannot list, so /readyz fails (while /livez
    // passes); once the generated CRD is installed, the informer syncs and /readyz passes.
    let (status, body) =
        eventually("/readyz answers", logs, || get(operator.addr, "/readyz")).await;
    assert_eq!(status, 503, "not ready before the informers synced: {body}");
    assert!(body.contains("probes"), "names the unsynced kind: {body}");
    let (status, _) = get(operator.addr, "/livez").await.expect("/livez answers");
    assert_eq!(status, 200, "alive while not ready");
    env.install_crds_yaml(&output_of(&["crd"]))
        .await
        .expect("the apiserver accepts the generated CRD");
    operator.wait_ready().await;

    let probes = probes_api(&client, &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // add: an Added Event about the Probe, and the finalizer that makes downtime safe.
    let web = create_probe(&probes, "web", "https://example.com/healthz", 50).await;
    let uid = uid_of(&web);
    let added = event(&events, &uid, "Added", logs).await;
    let regarding = added.regarding.clone().expect("regarding");
    assert_eq!(
        (
            regarding.api_version.as_deref(),
            regarding.kind.as_deref(),
            regarding.name.as_deref(),
            regarding.namespace.as_deref(),
        ),
        (
            Some("watcher.example.kubeapp.dev/v1"),
            Some("Probe"),
            Some("web"),
            Some(ns.as_str()),
        )
    );
    assert_eq!(added.type_.as_deref(), Some("Normal"));
    assert_eq!(added.action.as_deref(), Some("Add"));
    assert_eq!(added.reporting_controller.as_deref(), Some(APP));
    assert_eq!(added.reporting_instance.as_deref(), Some("e2e-instance"));
    let note = added.note.clone().unwrap_or_default();
    assert!(
        note.contains(&format!("Probe {ns}/web added"))
            && note.contains("https://example.com/healthz"),
        "{note}"
    );
    eventually("the finalizer is on the Probe", logs, || async {
        probes
            .get("web")
            .await
            .ok()
            .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
    })
    .await;

    // update: a spec change.
    set_target(&probes, "web", "https://example.com/readyz").await;
    let updated = event(&events, &uid, "Updated", logs).await;
    let note = updated.note.unwrap_or_default();
    assert!(
        note.contains("generation 1 -> 2")
            && note.contains("\"https://example.com/healthz\" -> \"https://example.com/readyz\""),
        "{note}"
    );

    // delete: the Event is written while the finalizer holds the object, then it goes.
    probes
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the Probe");
    let deleted = event(&events, &uid, "Deleted", logs).await;
    assert!(
        deleted
            .note
            .unwrap_or_default()
            .contains("last target \"https://example.com/readyz\""),
        "Deleted Event note"
    );
    gone(&probes, "web", &uid, logs).await;

    // Exactly one Event per step, and the same counts in the custom metric.
    for reason in ["Added", "Updated", "Deleted"] {
        assert_eq!(count_of(&events, &uid, reason).await, 1, "{reason} Events");
    }
    assert_eq!(count_of(&events, &uid, "Synced").await, 0, "Synced Events");
    let exposition = operator
        .metrics_when("/metrics counts the delete", |body| {
            steps(body, "delete") == Some(1.0)
        })
        .await;
    for (step, count) in [
        ("add", 1.0),
        ("update", 1.0),
        ("delete", 1.0),
        ("sync", 0.0),
    ] {
        assert_eq!(
            steps(&exposition, step),
            Some(count),
            "{step}:\n{exposition}"
        );
    }
    // The SDK's metrics, for the kind, next to it.
    let kind = "kind=\"probes\"";
    for (name, labels) in [
        ("informer_events_total", vec![kind, "event_type=\"CREATE\""]),
        ("informer_events_total", vec![kind, "event_type=\"UPDATE\""]),
        ("informer_events_total", vec![kind, "event_type=\"DELETE\""]),
        ("watcher_process_duration_seconds_count", vec![kind]),
        ("informer_reconcile_duration_seconds_count", vec![kind]),
        (
            "kubernetes_client_requests_total",
            vec!["kind=\"events\"", "verb=\"create\"", "status_code=\"201\""],
        ),
    ] {
        assert!(
            sample(&exposition, name, &labels) > 0.0,
            "{name}{labels:?} missing or zero:\n{exposition}"
        );
    }
    assert!(
        exposition.contains("ongoing_reconcile_processes{"),
        "{exposition}"
    );

    // SIGTERM while a step is in flight: the step finishes (its Event is written), then the
    // process exits 0.
    let slow = create_probe(&probes, "slow", "https://example.com/slow", 3000).await;
    let slow_uid = uid_of(&slow);
    let slow_key = format!("{ns}/slow");
    let in_flight = [("step", "add"), ("probe", slow_key.as_str())];
    eventually("the slow add is in flight", logs, || async {
        operator.log_index("processing started", &in_flight)
    })
    .await;
    let operator = operator.terminate().await;
    let started = operator.log_index("processing started", &in_flight);
    let stopping = operator.log_index("stopping the apps", &[]);
    let recorded = operator.log_index("step recorded", &in_flight);
    assert!(
        started < stopping && stopping < recorded && started.is_some(),
        "expected: processing started < stopping the apps < step recorded, got \
         {started:?} {stopping:?} {recorded:?}\n{}",
        operator.logs()
    );
    let slow_added = events_about(&events, &slow_uid).await;
    assert!(
        slow_added
            .iter()
            .any(|e| e.reason.as_deref() == Some("Added")),
        "the in-flight step's Event: {slow_added:?}\n{}",
        operator.logs()
    );
}

/// The opinionated watcher's finalizer: a Probe deleted while the operator is down gets its
/// `Deleted` step when the operator starts again, and a Probe changed meanwhile gets `Synced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_while_the_operator_is_down_is_recorded_after_the_restart() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("example-watcher-down")
        .await
        .expect("namespace");
    let client = env.client();
    env.install_crds_yaml(&output_of(&["crd"]))
        .await
        .expect("the apiserver accepts the generated CRD");
    let probes = probes_api(&client, &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // First run, all namespaces: both Probes are added and get the finalizer.
    let first = Operator::start(env.kubeconfig_path(), env.dir().join("first.log"), &[]);
    first.wait_ready().await;
    let kept = create_probe(&probes, "kept", "https://example.com/a", 0).await;
    let doomed = create_probe(&probes, "doomed", "https://example.com/b", 0).await;
    let (kept_uid, doomed_uid) = (uid_of(&kept), uid_of(&doomed));
    for (name, uid) in [("kept", &kept_uid), ("doomed", &doomed_uid)] {
        event(&events, uid, "Added", || first.logs()).await;
        eventually(
            &format!("the finalizer is on {name}"),
            || first.logs(),
            || async {
                probes
                    .get(name)
                    .await
                    .ok()
                    .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
            },
        )
        .await;
    }
    let first = first.terminate().await;

    // Downtime: one Probe is deleted (the finalizer holds it), the other changed.
    probes
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete doomed");
    let held = probes.get("doomed").await.expect("doomed is still there");
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "held by the finalizer: {held:?}"
    );
    set_target(&probes, "kept", "https://example.com/changed").await;

    // Second run: doomed gets Deleted and goes, kept gets Synced (no second Added).
    let second = Operator::start(env.kubeconfig_path(), env.dir().join("second.log"), &[]);
    let logs = || format!("{}\n{}", first.logs(), second.logs());
    let deleted = event(&events, &doomed_uid, "Deleted", logs).await;
    assert_eq!(deleted.reporting_controller.as_deref(), Some(APP));
    assert_eq!(deleted.reporting_instance.as_deref(), Some(APP));
    gone(&probes, "doomed", &doomed_uid, logs).await;
    let synced = event(&events, &kept_uid, "Synced", logs).await;
    assert!(
        synced
            .note
            .unwrap_or_default()
            .contains("https://example.com/changed"),
        "Synced sees the change made during the downtime"
    );
    assert_eq!(count_of(&events, &kept_uid, "Added").await, 1);
    assert_eq!(count_of(&events, &doomed_uid, "Deleted").await, 1);

    let exposition = second
        .metrics_when("/metrics counts the delete and the sync", |body| {
            steps(body, "delete") == Some(1.0) && steps(body, "sync") == Some(1.0)
        })
        .await;
    for (step, count) in [
        ("add", 0.0),
        ("update", 0.0),
        ("delete", 1.0),
        ("sync", 1.0),
    ] {
        assert_eq!(
            steps(&exposition, step),
            Some(count),
            "{step}:\n{exposition}"
        );
    }
    second.terminate().await;
}
