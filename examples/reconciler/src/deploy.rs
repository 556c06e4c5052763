//! What the `crd` and `manifests` commands print: the CRD, and the manifests that deploy the
//! operator (its RBAC, a Deployment with probes, Services for metrics and webhooks, the webhook
//! configurations), all generated from the embedded manifest so they cannot drift from what the
//! operator does.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, PodSpec, PodTemplateSpec, Probe, SecretVolumeSource,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use kubeapp::sdk::crd::CrdBuilder;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::rbac::RbacBuilder;
use kubeapp::sdk::webhooks::{WebhookEndpoint, admission_configurations};

use crate::kind::{v1, v2};
use crate::webhook;

/// The name of the Deployment, metrics Service and ServiceAccount.
pub const NAME: &str = "kubeapp-example-reconciler";

/// The name of the metrics port of the container and the Service.
pub const METRICS_PORT_NAME: &str = "metrics";

/// The name of the webhook port of the container and the webhook Service.
pub const WEBHOOK_PORT_NAME: &str = "webhook";

/// The Secret (type `kubernetes.io/tls`) holding the webhook server's `tls.crt` and `tls.key`.
pub const TLS_SECRET: &str = "kubeapp-example-reconciler-webhook-tls";

/// Where that Secret is mounted in the container.
pub const TLS_DIR: &str = "/etc/kubeapp/webhook-tls";

/// The CRD of `Template` as YAML, from the manifest and the Rust types of both versions, with
/// the conversion webhook at `endpoint`.
///
/// # Errors
///
/// When the manifest and the types disagree, or the YAML cannot be written.
pub fn crd_yaml(manifest: &ManifestData, endpoint: &WebhookEndpoint) -> anyhow::Result<String> {
    let crds = CrdBuilder::new(manifest)
        .kind::<v1::Template>()
        .kind::<v2::Template>()
        .conversion_webhook(endpoint.conversion_client())
        .build()
        .context("building the CRD from the manifest")?;
    kubeapp::sdk::crd::to_yaml(&crds).context("writing the CRD as YAML")
}

/// The Validating- and MutatingWebhookConfiguration of the manifest, pointing at `endpoint`, as
/// YAML documents.
///
/// # Errors
///
/// When an object cannot be written as YAML.
pub fn webhook_configurations_yaml(
    manifest: &ManifestData,
    endpoint: &WebhookEndpoint,
) -> anyhow::Result<Vec<String>> {
    let (validating, mutating) = admission_configurations(manifest, endpoint);
    let mut docs = Vec::new();
    if let Some(validating) = validating {
        docs.push(
            serde_saphyr::to_string(&validating)
                .context("writing the ValidatingWebhookConfiguration")?,
        );
    }
    if let Some(mutating) = mutating {
        docs.push(
            serde_saphyr::to_string(&mutating)
                .context("writing the MutatingWebhookConfiguration")?,
        );
    }
    Ok(docs)
}

/// YAML documents joined into one stream.
pub fn join_documents(docs: impl IntoIterator<Item = String>) -> String {
    let mut out = String::new();
    for doc in docs {
        if !out.is_empty() {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("---\n");
        }
        out.push_str(&doc);
    }
    out
}

/// Where and how the operator is deployed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deploy {
    /// The namespace of the Deployment, Services and ServiceAccount.
    pub namespace: String,
    /// The container image.
    pub image: String,
    /// The port of `/metrics`, `/livez` and `/readyz`.
    pub metrics_port: u16,
    /// The port of the webhook server.
    pub webhook_port: u16,
}

impl Deploy {
    fn labels(&self) -> BTreeMap<String, String> {
        [
            ("app.kubernetes.io/name".to_string(), NAME.to_string()),
            (
                "app.kubernetes.io/component".to_string(),
                "operator".to_string(),
            ),
        ]
        .into()
    }

    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            name: Some(NAME.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels()),
            ..ObjectMeta::default()
        }
    }

    /// The operator's Deployment: one replica running `run` under the generated ServiceAccount,
    /// with a liveness probe on `/livez` and a readiness probe on `/readyz` at the metrics port.
    pub fn deployment(&self) -> Deployment {
        let probe = |path: &str, period: i32| Probe {
            http_get: Some(HTTPGetAction {
                path: Some(path.to_string()),
                port: IntOrString::String(METRICS_PORT_NAME.to_string()),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(period),
            ..Probe::default()
        };
        let container = Container {
            name: "operator".to_string(),
            image: Some(self.image.clone()),
            args: Some(vec![
                "run".to_string(),
                "--metrics-addr".to_string(),
                format!("0.0.0.0:{}", self.metrics_port),
                "--webhook-addr".to_string(),
                format!("0.0.0.0:{}", self.webhook_port),
                "--webhook-cert-file".to_string(),
                format!("{TLS_DIR}/tls.crt"),
                "--webhook-key-file".to_string(),
                format!("{TLS_DIR}/tls.key"),
                "--log-format".to_string(),
                "json".to_string(),
            ]),
            ports: Some(vec![
                ContainerPort {
                    name: Some(METRICS_PORT_NAME.to_string()),
                    container_port: i32::from(self.metrics_port),
                    ..ContainerPort::default()
                },
                ContainerPort {
                    name: Some(WEBHOOK_PORT_NAME.to_string()),
                    container_port: i32::from(self.webhook_port),
                    ..ContainerPort::default()
                },
            ]),
            liveness_probe: Some(probe("/livez", 10)),
            readiness_probe: Some(probe("/readyz", 5)),
            // The server re-reads the files when the kubelet updates the Secret's volume, so a
            // rotated certificate needs no restart.
            volume_mounts: Some(vec![VolumeMount {
                name: "webhook-tls".to_string(),
                mount_path: TLS_DIR.to_string(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        };
        Deployment {
            metadata: self.meta(),
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                selector: LabelSelector {
                    match_labels: Some(self.labels()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        service_account_name: Some(NAME.to_string()),
                        // The runner stops within --shutdown-timeout (30 s by default).
                        termination_grace_period_seconds: Some(40),
                        containers: vec![container],
                        volumes: Some(vec![Volume {
                            name: "webhook-tls".to_string(),
                            secret: Some(SecretVolumeSource {
                                secret_name: Some(TLS_SECRET.to_string()),
                                ..SecretVolumeSource::default()
                            }),
                            ..Volume::default()
                        }]),
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }
    }

    /// The Service exposing the metrics port, for Prometheus to scrape.
    pub fn service(&self) -> Service {
        Service {
            metadata: self.meta(),
            spec: Some(ServiceSpec {
                selector: Some(self.labels()),
                ports: Some(vec![ServicePort {
                    name: Some(METRICS_PORT_NAME.to_string()),
                    port: i32::from(self.metrics_port),
                    target_port: Some(IntOrString::String(METRICS_PORT_NAME.to_string())),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    /// The Service in front of the webhook server: port [`webhook::SERVICE_PORT`] to the
    /// container's webhook port. The webhook configurations and the CRD's conversion webhook
    /// point at it.
    pub fn webhook_service(&self) -> Service {
        let mut metadata = self.meta();
        metadata.name = Some(webhook::SERVICE_NAME.to_string());
        Service {
            metadata,
            spec: Some(ServiceSpec {
                selector: Some(self.labels()),
                ports: Some(vec![ServicePort {
                    name: Some(WEBHOOK_PORT_NAME.to_string()),
                    port: i32::from(webhook::SERVICE_PORT),
                    target_port: Some(IntOrString::String(WEBHOOK_PORT_NAME.to_string())),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    /// Everything as one YAML stream for `kubectl apply -f -`: ServiceAccount, ClusterRole and
    /// binding (generated from the manifest), Deployment, metrics Service, webhook Service, and
    /// the webhook configurations pointing at `endpoint` (the webhook Service).
    ///
    /// # Errors
    ///
    /// When the RBAC cannot be generated or an object cannot be written as YAML.
    pub fn manifests_yaml(
        &self,
        manifest: &ManifestData,
        endpoint: &WebhookEndpoint,
    ) -> anyhow::Result<String> {
        let rbac = RbacBuilder::new(manifest)
            .name(NAME)
            .service_account(NAME, self.namespace.clone())
            .build()
            .context("generating the RBAC from the manifest")?
            .to_yaml()
            .context("writing the RBAC as YAML")?;
        let mut docs = vec![
            rbac,
            serde_saphyr::to_string(&self.deployment()).context("writing the Deployment")?,
            serde_saphyr::to_string(&self.service()).context("writing the metrics Service")?,
            serde_saphyr::to_string(&self.webhook_service())
                .context("writing the webhook Service")?,
        ];
        docs.extend(webhook_configurations_yaml(manifest, endpoint)?);
        Ok(join_documents(docs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy() -> Deploy {
        Deploy {
            namespace: "ops".into(),
            image: "example:1".into(),
            metrics_port: 9090,
            webhook_port: 8443,
        }
    }

    fn endpoint() -> WebhookEndpoint {
        WebhookEndpoint::service("ops", webhook::SERVICE_NAME, 443, "CA PEM")
    }

    #[test]
    fn the_deployment_probes_livez_and_readyz_on_the_metrics_port() {
        let deployment = deploy().deployment();
        let spec = deployment.spec.expect("spec");
        let pod = spec.template.spec.expect("pod spec");
        assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("example:1"));
        let ports = container.ports.as_ref().expect("ports");
        assert_eq!(ports[0].container_port, 9090);
        assert_eq!(ports[0].name.as_deref(), Some(METRICS_PORT_NAME));
        let path = |probe: &Option<Probe>| {
            let get = probe
                .as_ref()
                .and_then(|p| p.http_get.clone())
                .expect("http probe");
            assert_eq!(get.port, IntOrString::String(METRICS_PORT_NAME.into()));
            get.path.expect("path")
        };
        assert_eq!(path(&container.liveness_probe), "/livez");
        assert_eq!(path(&container.readiness_probe), "/readyz");
        assert_eq!(
            container.args.as_ref().expect("args")[..3],
            ["run", "--metrics-addr", "0.0.0.0:9090"]
        );
    }

    #[test]
    fn the_service_exposes_the_metrics_port() {
        let service = deploy().service();
        let spec = service.spec.expect("spec");
        let port = &spec.ports.expect("ports")[0];
        assert_eq!(port.port, 9090);
        assert_eq!(spec.selector, Some(deploy().labels()));
    }

    #[test]
    fn the_deployment_serves_webhooks_with_the_certificate_from_the_secret() {
        let deployment = deploy().deployment();
        let pod = deployment.spec.expect("spec").template.spec.expect("pod");
        let container = &pod.containers[0];
        let args = container.args.as_ref().expect("args").join(" ");
        assert!(
            args.contains("--webhook-addr 0.0.0.0:8443")
                && args.contains(&format!("--webhook-cert-file {TLS_DIR}/tls.crt"))
                && args.contains(&format!("--webhook-key-file {TLS_DIR}/tls.key")),
            "{args}"
        );
        let port = &container.ports.as_ref().expect("ports")[1];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some(WEBHOOK_PORT_NAME), 8443)
        );
        let mount = &container.volume_mounts.as_ref().expect("mounts")[0];
        assert_eq!(mount.mount_path, TLS_DIR);
        let volume = &pod.volumes.as_ref().expect("volumes")[0];
        assert_eq!(volume.name, mount.name);
        assert_eq!(
            volume
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some(TLS_SECRET)
        );
        let service = deploy().webhook_service();
        let spec = service.spec.expect("spec");
        let port = &spec.ports.expect("ports")[0];
        assert_eq!(port.port, 443);
        assert_eq!(
            port.target_port,
            Some(IntOrString::String(WEBHOOK_PORT_NAME.into()))
        );
    }

    #[test]
    fn the_manifests_hold_rbac_deployment_services_and_webhook_configurations() {
        let manifest = crate::kind::manifest().expect("manifest");
        let yaml = deploy()
            .manifests_yaml(&manifest, &endpoint())
            .expect("yaml");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("parses");
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
                "MutatingWebhookConfiguration",
            ]
        );
        for hook in [&docs[6], &docs[7]] {
            let client = &hook["webhooks"][0]["clientConfig"];
            assert_eq!(client["service"]["name"], webhook::SERVICE_NAME);
            assert_eq!(client["service"]["namespace"], "ops");
            assert!(client["caBundle"].as_str().is_some_and(|ca| !ca.is_empty()));
        }
        let rules = docs[1]["rules"].as_array().expect("rules");
        assert!(
            rules.iter().any(|r| r["resources"][0] == "configmaps"),
            "{rules:?}"
        );
        assert!(yaml.contains("path: /readyz") && yaml.contains("path: /livez"));
        assert_eq!(docs[3]["metadata"]["namespace"], "ops");
    }

    #[test]
    fn the_crd_serves_both_versions_stores_v1_and_converts_through_the_webhook() {
        let manifest = crate::kind::manifest().expect("manifest");
        let yaml = crd_yaml(&manifest, &endpoint()).expect("crd");
        let crds: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("parses");
        let crd = &crds[0];
        assert_eq!(
            crd["metadata"]["name"],
            "templates.reconciler.example.kubeapp.dev"
        );
        let versions: Vec<(&str, bool)> = crd["spec"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| (v["name"].as_str().unwrap_or(""), v["storage"] == true))
            .collect();
        assert_eq!(versions, [("v1", true), ("v2", false)]);
        let v2_spec =
            &crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(v2_spec["properties"]["entries"].is_object(), "{yaml}");
        assert!(yaml.contains("status: {}"), "{yaml}");
        let conversion = &crd["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook");
        let client = &conversion["webhook"]["clientConfig"];
        assert_eq!(client["service"]["path"], "/convert");
        assert!(client["caBundle"].as_str().is_some_and(|ca| !ca.is_empty()));
    }
}
