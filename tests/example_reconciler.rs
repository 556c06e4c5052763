//! End-to-end test of the reconciler example binary (`examples/reconciler`), run as a child
//! process against a real kube-apiserver + etcd with the `testenv` kubeconfig, serving its
//! webhooks with development certificates from `testenv::CertificateAuthority`.
//!
//! The binary is the one cargo built next to this test (`target/<profile>/kubeapp-example-reconciler`);
//! build it first with `cargo build -p kubeapp-example-reconciler` (`scripts/test` does). The
//! test never runs cargo itself. The webhooks themselves are tested in `example_webhooks.rs`.
//!
//! Every wait is a condition polled against a deadline.

mod example_support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeapp::sdk::testenv::{CertificateAuthority, TestEnv};

use example_support::{
    Operator, eventually, get, output_of, reconciled, reconciler_binary, template, templates,
};

const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// The sum of the samples of `name` for kind `templates` in a Prometheus exposition.
fn samples(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| {
            line.starts_with(&format!("{name}{{")) && line.contains("kind=\"templates\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn data_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

/// Runs the binary with `args`, expecting failure; returns its stderr.
fn failure_of(args: &[&str]) -> String {
    let output = std::process::Command::new(reconciler_binary())
        .args(args)
        .env_remove("WEBHOOK_CERT_FILE")
        .env_remove("WEBHOOK_KEY_FILE")
        .env_remove("WEBHOOK_CA_FILE")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run the example binary");
    assert_eq!(
        output.status.code(),
        Some(1),
        "{args:?} should fail with exit code 1: {output:?}"
    );
    String::from_utf8(output.stderr).expect("UTF-8 output")
}

#[test]
fn crd_and_manifests_carry_the_webhooks_and_help_lists_the_flags() {
    let binary = reconciler_binary();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = CertificateAuthority::new("ca").expect("CA").cert_pem();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca).expect("write ca.crt");
    let ca_file = ca_file.to_str().expect("UTF-8 path");

    // In-cluster form: the conversion webhook is the webhook Service in the given namespace.
    let yaml = output_of(
        &binary,
        &["crd", "--namespace", "ops", "--webhook-ca-file", ca_file],
    );
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&yaml).expect("the crd output parses as CRD YAML");
    assert_eq!(crds.len(), 1, "{yaml}");
    let crd = &crds[0];
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("templates.reconciler.example.kubeapp.dev")
    );
    assert_eq!(crd.spec.names.kind, "Template");
    assert_eq!(crd.spec.scope, "Namespaced");
    let versions: Vec<(&str, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(versions, [("v1", true, true), ("v2", true, false)]);
    assert!(
        crd.spec
            .versions
            .iter()
            .all(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some())),
        "{yaml}"
    );
    let conversion = crd.spec.conversion.as_ref().expect("conversion");
    assert_eq!(conversion.strategy, "Webhook");
    let client = conversion
        .webhook
        .as_ref()
        .and_then(|w| w.client_config.as_ref())
        .expect("a client config");
    let service = client.service.as_ref().expect("a service reference");
    assert_eq!(
        (
            service.namespace.as_str(),
            service.name.as_str(),
            service.port,
            service.path.as_deref()
        ),
        (
            "ops",
            "kubeapp-example-reconciler-webhook",
            Some(443),
            Some("/convert")
        )
    );
    assert_eq!(
        client.ca_bundle.as_ref().map(|b| b.0.as_slice()),
        Some(ca.as_bytes())
    );

    // Local form: a URL.
    let yaml = output_of(
        &binary,
        &[
            "crd",
            "--webhook-url",
            "https://127.0.0.1:9443",
            "--webhook-ca-file",
            ca_file,
        ],
    );
    assert!(
        yaml.contains("url: https://127.0.0.1:9443/convert"),
        "{yaml}"
    );

    // In-cluster manifests: the webhook Service, and configurations pointing at it.
    let manifests = output_of(
        &binary,
        &[
            "manifests",
            "--namespace",
            "ops",
            "--image",
            "example:1",
            "--webhook-ca-file",
            ca_file,
        ],
    );
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&manifests).expect("the manifests output parses");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service",
            "Service",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration"
        ]
    );
    assert!(manifests.contains("path: /livez"), "{manifests}");
    assert!(manifests.contains("path: /readyz"), "{manifests}");
    assert!(manifests.contains("image: example:1"), "{manifests}");
    assert!(manifests.contains("--webhook-cert-file"), "{manifests}");
    assert_eq!(
        docs[5]["metadata"]["name"],
        "kubeapp-example-reconciler-webhook"
    );
    for (doc, path) in [(&docs[6], "/validate"), (&docs[7], "/mutate")] {
        let client = &doc["webhooks"][0]["clientConfig"];
        assert_eq!(
            client["service"]["name"],
            "kubeapp-example-reconciler-webhook"
        );
        assert_eq!(client["service"]["namespace"], "ops");
        assert_eq!(client["service"]["path"], path);
        assert!(client["caBundle"].as_str().is_some_and(|b| !b.is_empty()));
    }

    // Without certificates, `run` refuses to start and names the flags; so do `crd` and
    // `manifests` without the CA.
    let error = failure_of(&["run"]);
    for needle in [
        "--webhook-cert-file",
        "--webhook-key-file",
        "WEBHOOK_CERT_FILE",
        "validation, mutation, conversion",
    ] {
        assert!(error.contains(needle), "{needle} missing from:\n{error}");
    }
    for command in ["crd", "manifests"] {
        let error = failure_of(&[command]);
        assert!(error.contains("--webhook-ca-file"), "{command}: {error}");
    }
    let error = failure_of(&[
        "crd",
        "--webhook-ca-file",
        ca_file,
        "--webhook-url",
        "http://x",
    ]);
    assert!(error.contains("not an https:// URL"), "{error}");

    let help = output_of(&binary, &["--help"]);
    for command in ["crd", "rbac", "manifests", "run"] {
        assert!(
            help.contains(command),
            "{command} missing from --help:\n{help}"
        );
    }
    let help = output_of(&binary, &["run", "--help"]);
    for flag in [
        "--metrics-addr",
        "--namespace",
        "--log-format",
        "--otlp-endpoint",
        "--shutdown-timeout",
        "--webhook-cert-file",
        "--webhook-key-file",
        "--webhook-addr",
        "METRICS_ADDR",
        "WATCH_NAMESPACE",
        "LOG_FORMAT",
        "WEBHOOK_CERT_FILE",
        "WEBHOOK_KEY_FILE",
        "WEBHOOK_ADDR",
    ] {
        assert!(
            help.contains(flag),
            "{flag} missing from run --help:\n{help}"
        );
    }
    let help = output_of(&binary, &["crd", "--help"]);
    for flag in ["--webhook-ca-file", "--webhook-url", "WEBHOOK_CA_FILE"] {
        assert!(
            help.contains(flag),
            "{flag} missing from crd --help:\n{help}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_reconciles_corrects_drift_cleans_up_and_stops_on_sigterm() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env
        .create_namespace("example-reconciler")
        .await
        .expect("namespace");
    let client = env.client();
    let shutdown = format!("{}s", SHUTDOWN_TIMEOUT.as_secs());
    let mut operator = Operator::start(&env, &ns, &["--shutdown-timeout", &shutdown]);
    let addr = operator.metrics_addr;
    let logs = || operator.logs();

    // The CRD is not installed yet: the informer cannot list, so /readyz fails (while /livez
    // passes); once the generated CRD is installed, the informer syncs and /readyz passes.
    let (status, body) = eventually("/readyz answers", logs, || get(addr, "/readyz")).await;
    assert_eq!(status, 503, "not ready before the informers synced: {body}");
    assert!(
        body.contains("templates"),
        "names the unsynced kind: {body}"
    );
    operator.install_crd(&env).await;
    operator.install_webhook_configurations(&env).await;
    eventually("/readyz answers 200", logs, || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    let (status, _) = get(addr, "/livez").await.expect("/livez answers");
    assert_eq!(status, 200);
    operator.wait_for_webhooks(&client, &ns).await;

    // A sample reaches its expected state.
    let templates = templates(&client, &ns, "v1");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let sample = template(
        "v1",
        "greeting",
        serde_json::json!({"data": {"greeting": "hello", "audience": "world"}}),
    );
    let created = templates
        .create(&PostParams::default(), &sample)
        .await
        .expect("create the sample");
    let expected: BTreeMap<String, String> = [
        ("greeting".to_string(), "hello".to_string()),
        ("audience".to_string(), "world".to_string()),
    ]
    .into();
    let cm = eventually("the ConfigMap is rendered", logs, || async {
        configmaps
            .get_opt("greeting")
            .await
            .ok()
            .flatten()
            .filter(|cm| data_of(cm) == expected)
    })
    .await;
    assert!(
        cm.managed_fields().iter().any(|f| f.manager.as_deref()
            == Some("kubeapp-example-reconciler")
            && f.operation.as_deref() == Some("Apply")),
        "server-side applied: {:?}",
        cm.managed_fields()
    );
    eventually("status observedGeneration and Ready=True", logs, || async {
        templates.get("greeting").await.ok().filter(reconciled)
    })
    .await;

    // An update of the spec reaches the ConfigMap and the status.
    let update = serde_json::json!({"spec": {"data": {"greeting": "bonjour"}}});
    let updated = templates
        .patch("greeting", &PatchParams::default(), &Patch::Merge(&update))
        .await
        .expect("update the sample");
    let generation = updated.metadata.generation;
    eventually("the ConfigMap follows the update", logs, || async {
        configmaps
            .get_opt("greeting")
            .await
            .ok()
            .flatten()
            .filter(|cm| data_of(cm).get("greeting").map(String::as_str) == Some("bonjour"))
    })
    .await;
    eventually("status follows the new generation", logs, || async {
        templates
            .get("greeting")
            .await
            .ok()
            .filter(|t| t.metadata.generation == generation && reconciled(t))
    })
    .await;

    // Drift: someone deletes the ConfigMap; the operator owns it (no requeue is configured), so
    // its deletion reconciles the Template, which puts it back.
    let old_uid = configmaps
        .get("greeting")
        .await
        .expect("the ConfigMap")
        .uid()
        .expect("a uid");
    configmaps
        .delete("greeting", &DeleteParams::default())
        .await
        .expect("delete the ConfigMap");
    eventually("the deleted ConfigMap is re-created", logs, || async {
        configmaps
            .get_opt("greeting")
            .await
            .ok()
            .flatten()
            .filter(|cm| cm.uid().as_deref() != Some(old_uid.as_str()))
    })
    .await;

    // Metrics of the events caused.
    let exposition = eventually("/metrics has counts for templates", logs, || async {
        get(addr, "/metrics")
            .await
            .filter(|(status, body)| {
                *status == 200
                    && samples(body, "informer_events_total") > 0.0
                    && samples(body, "reconciler_process_duration_seconds_count") > 0.0
            })
            .map(|(_, body)| body)
    })
    .await;
    assert!(
        samples(&exposition, "reconciler_process_duration_seconds_count") >= 2.0,
        "{exposition}"
    );
    // The operator's own API requests (its client from `default_client`), e.g. the status
    // patches of the reconciler and the informer's list and watch of templates.
    assert!(
        samples(&exposition, "kubernetes_client_requests_total") > 0.0
            && samples(
                &exposition,
                "kubernetes_client_request_duration_seconds_count"
            ) > 0.0,
        "client metrics for templates: {exposition}"
    );
    assert!(
        exposition
            .lines()
            .any(|line| line.starts_with("kubernetes_client_requests_total{")
                && line.contains("kind=\"templates\"")
                && line.contains("subresource=\"status\"")
                && line.contains("verb=\"patch\"")),
        "the reconciler's status patches are counted: {exposition}"
    );

    // Deleting the sample removes the ConfigMap, then the object goes (the finalizer is removed).
    templates
        .delete("greeting", &DeleteParams::default())
        .await
        .expect("delete the sample");
    eventually("the ConfigMap is cleaned up", logs, || async {
        match configmaps.get_opt("greeting").await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    let uid = created.uid().expect("a uid");
    eventually("the sample disappears", logs, || async {
        match templates.get_opt("greeting").await {
            Ok(None) => Some(()),
            Ok(Some(t)) if t.uid().as_deref() != Some(uid.as_str()) => Some(()),
            _ => None,
        }
    })
    .await;

    // SIGTERM: a clean exit with status 0 within the shutdown timeout.
    operator.signal("TERM");
    let exit = tokio::time::timeout(
        SHUTDOWN_TIMEOUT + Duration::from_secs(5),
        operator.child.wait(),
    )
    .await
    .unwrap_or_else(|_| panic!("no exit within the shutdown timeout\n{}", operator.logs()))
    .expect("wait for the operator");
    assert!(exit.success(), "exit status {exit}\n{}", operator.logs());
    let log = operator.logs();
    assert!(log.contains("operator stopped"), "{log}");
}
