use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::rbac::OperatorRole;

const MANIFEST: &str = r#"
appName: gadgets
group: gadgets.example.com
versions:
  - { name: v1, kinds: [{ kind: Gadget, plural: gadgets }] }
"#;

fn manifest() -> ManifestData {
    ManifestData::from_yaml(MANIFEST).expect("manifest")
}

fn pod(manifests: &OperatorManifests) -> &PodSpec {
    manifests
        .deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn container(manifests: &OperatorManifests) -> &Container {
    &pod(manifests).containers[0]
}

fn probe_path(probe: Option<&Probe>) -> (String, IntOrString) {
    let get = probe.and_then(|p| p.http_get.clone()).expect("http probe");
    (get.path.expect("path"), get.port)
}

#[test]
fn defaults_name_everything_after_the_app_and_probe_the_metrics_port() {
    let manifest = manifest();
    let built = OperatorDeployment::new(&manifest, "gadgets:1")
        .build()
        .expect("builds");
    assert_eq!(
        built.deployment.metadata.name.as_deref(),
        Some("gadgets-operator")
    );
    assert_eq!(
        built.deployment.metadata.namespace.as_deref(),
        Some("default")
    );
    let spec = built.deployment.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(1));
    let c = container(&built);
    assert_eq!(c.image.as_deref(), Some("gadgets:1"));
    let ports = c.ports.as_ref().expect("ports");
    assert_eq!(ports.len(), 1, "no webhook port without webhooks");
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].container_port),
        (Some(METRICS_PORT_NAME), 9090)
    );
    let on_metrics = IntOrString::String(METRICS_PORT_NAME.into());
    assert_eq!(
        probe_path(c.liveness_probe.as_ref()),
        ("/livez".to_string(), on_metrics.clone())
    );
    assert_eq!(
        probe_path(c.readiness_probe.as_ref()),
        ("/readyz".to_string(), on_metrics)
    );
    let resources = c.resources.as_ref().expect("resources");
    let requests = resources.requests.as_ref().expect("requests");
    assert_eq!(requests["cpu"].0, "100m");
    assert_eq!(requests["memory"].0, "128Mi");
    assert_eq!(
        resources.limits.as_ref().expect("limits")["memory"].0,
        "512Mi"
    );
    assert!(pod(&built).volumes.is_none() && c.volume_mounts.is_none());
    assert!(built.webhook_service.is_none());
    let port = &built
        .metrics_service
        .spec
        .as_ref()
        .expect("spec")
        .ports
        .as_ref()
        .expect("ports")[0];
    assert_eq!(port.port, 9090);
    assert_eq!(
        port.target_port,
        Some(IntOrString::String(METRICS_PORT_NAME.into()))
    );
}

#[test]
fn the_pods_run_as_the_service_account_the_role_is_bound_to() {
    let manifest = manifest();
    let built = OperatorDeployment::new(&manifest, "gadgets:1")
        .name("gizmo")
        .namespace("ops")
        // An adjustment that names another ServiceAccount is overridden.
        .rbac(|rbac| {
            rbac.service_account("someone-else", "elsewhere")
                .unmanaged::<ConfigMap>()
        })
        .build()
        .expect("builds");
    let OperatorRole::Cluster { binding, role } = &built.rbac.role else {
        panic!("a ClusterRole by default");
    };
    let subject = &binding.subjects.as_ref().expect("subjects")[0];
    assert_eq!(
        (Some(subject.name.as_str()), subject.namespace.as_deref()),
        (pod(&built).service_account_name.as_deref(), Some("ops"))
    );
    assert_eq!(
        built.rbac.service_account.metadata.name.as_deref(),
        Some("gizmo")
    );
    assert_eq!(
        built.rbac.service_account.metadata.namespace.as_deref(),
        Some("ops")
    );
    let grants_configmaps = role.rules.iter().flatten().any(|rule| {
        rule.resources.iter().flatten().any(|r| r == "configmaps")
            && rule.verbs == ["get", "list", "watch"]
    });
    assert!(grants_configmaps, "{:?}", role.rules);
}

#[test]
fn labels_and_selectors_identify_the_operator() {
    let manifest = manifest();
    let built = OperatorDeployment::new(&manifest, "gadgets:1")
        .webhooks(WebhookServing::new("tls"))
        .build()
        .expect("builds");
    let labels = built.deployment.metadata.labels.clone().expect("labels");
    assert_eq!(labels["app.kubernetes.io/name"], "gadgets-operator");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "kubeapp");
    let spec = built.deployment.spec.as_ref().expect("spec");
    let selector = spec.selector.match_labels.clone().expect("selector");
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .expect("pod labels");
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    let services = [
        &built.metrics_service,
        built.webhook_service.as_ref().expect("webhook"),
    ];
    for service in services {
        assert_eq!(
            service.spec.as_ref().and_then(|s| s.selector.clone()),
            Some(selector.clone())
        );
        assert_eq!(service.metadata.labels.as_ref(), Some(&labels));
    }
}

#[test]
fn webhooks_add_the_port_the_service_and_the_certificate_mount() {
    let manifest = manifest();
    let webhooks = WebhookServing::new("gadgets-tls");
    let built = OperatorDeployment::new(&manifest, "gadgets:1")
        .args(["run", "--webhook-cert-file", &webhooks.cert_file()])
        .env_from_field("POD_NAME", "metadata.name")
        .env_value("RUST_LOG", "info")
        .webhooks(webhooks)
        .build()
        .expect("builds");
    let c = container(&built);
    assert_eq!(
        c.args.as_deref().expect("args"),
        [
            "run",
            "--webhook-cert-file",
            "/etc/kubeapp/webhook-tls/tls.crt"
        ]
    );
    let env = c.env.as_ref().expect("env");
    assert_eq!(
        env[0]
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("metadata.name")
    );
    assert_eq!(
        (env[1].name.as_str(), env[1].value.as_deref()),
        ("RUST_LOG", Some("info"))
    );
    let port = &c.ports.as_ref().expect("ports")[1];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some(WEBHOOK_PORT_NAME), 8443)
    );
    let mount = &c.volume_mounts.as_ref().expect("mounts")[0];
    assert_eq!(mount.mount_path, DEFAULT_TLS_DIR);
    assert_eq!(mount.read_only, Some(true));
    let volume = &pod(&built).volumes.as_ref().expect("volumes")[0];
    assert_eq!(volume.name, mount.name);
    assert_eq!(
        volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("gadgets-tls")
    );
    let service = built.webhook_service.as_ref().expect("webhook service");
    assert_eq!(
        service.metadata.name.as_deref(),
        Some("gadgets-operator-webhook")
    );
    let port = &service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .expect("ports")[0];
    assert_eq!(port.port, 443);
    assert_eq!(
        port.target_port,
        Some(IntOrString::String(WEBHOOK_PORT_NAME.into()))
    );
}

#[test]
fn the_yaml_holds_every_object_in_apply_order() {
    let manifest = manifest();
    let kinds = |builder: OperatorDeployment<'_>| -> Vec<String> {
        let yaml = builder.build().expect("builds").to_yaml().expect("yaml");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("parses");
        docs.iter()
            .map(|d| d["kind"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    assert_eq!(
        kinds(OperatorDeployment::new(&manifest, "gadgets:1")),
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service"
        ]
    );
    assert_eq!(
        kinds(
            OperatorDeployment::new(&manifest, "gadgets:1")
                .namespace("ops")
                .rbac(|rbac| rbac.scope(crate::rbac::RoleScope::Namespace("ops".into())))
                .webhooks(WebhookServing::new("tls"))
        ),
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "Service"
        ]
    );
}

#[test]
fn invalid_input_is_an_error_naming_the_field() {
    let manifest = manifest();
    let field_of = |builder: OperatorDeployment<'_>| match builder.build() {
        Err(DeployError::InvalidField { field, .. }) => field,
        other => panic!("expected an invalid field, got {other:?}"),
    };
    let base = || OperatorDeployment::new(&manifest, "gadgets:1");
    assert_eq!(field_of(OperatorDeployment::new(&manifest, " ")), "image");
    assert_eq!(field_of(base().name("Gadgets_Operator")), "name");
    assert_eq!(field_of(base().namespace("")), "namespace");
    assert_eq!(field_of(base().replicas(-1)), "replicas");
    assert_eq!(field_of(base().metrics_port(0)), "metrics_port");
    let mut clash = WebhookServing::new("tls");
    clash.port = DEFAULT_METRICS_PORT;
    assert_eq!(field_of(base().webhooks(clash)), "webhooks.port");
    assert_eq!(
        field_of(base().webhooks(WebhookServing::new(""))),
        "webhooks.tls_secret"
    );
    let mut relative = WebhookServing::new("tls");
    relative.tls_dir = "certs".into();
    assert_eq!(field_of(base().webhooks(relative)), "webhooks.tls_dir");
    let message = base()
        .replicas(-1)
        .build()
        .expect_err("invalid")
        .to_string();
    assert!(message.contains("replicas"), "{message}");
}
