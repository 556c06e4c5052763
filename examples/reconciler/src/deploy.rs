//! What the `crd` and `manifests` commands print: the CRD, and the manifests that deploy the
//! operator (its RBAC, a Deployment with probes, Services for metrics and webhooks, the webhook
//! configurations), all generated from the embedded manifest by the SDK's builders so they cannot
//! drift from what the operator does.

use anyhow::Context as _;
use kubeapp::sdk::crd::CrdBuilder;
use kubeapp::sdk::deploy::{OperatorDeployment, WebhookServing};
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::webhooks::{WebhookEndpoint, admission_configurations};

use crate::kind::{v1, v2};
use crate::webhook;

/// The name of the Deployment, metrics Service and ServiceAccount.
pub const NAME: &str = "kubeapp-example-reconciler";

/// The Secret (type `kubernetes.io/tls`) holding the webhook server's `tls.crt` and `tls.key`.
pub const TLS_SECRET: &str = "kubeapp-example-reconciler-webhook-tls";

/// Where that Secret is mounted in the container.
pub const TLS_DIR: &str = kubeapp::sdk::deploy::DEFAULT_TLS_DIR;

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
    /// The operator's deployment: one replica running `run` under the generated ServiceAccount,
    /// probed on `/livez` and `/readyz` at the metrics port, serving webhooks with the
    /// certificate from [`TLS_SECRET`] behind the Service [`webhook::SERVICE_NAME`]. The server
    /// re-reads the mounted files when the kubelet updates the Secret, so a rotated certificate
    /// needs no restart.
    fn builder<'m>(&self, manifest: &'m ManifestData) -> OperatorDeployment<'m> {
        let webhooks = WebhookServing {
            tls_secret: TLS_SECRET.to_string(),
            tls_dir: TLS_DIR.to_string(),
            port: self.webhook_port,
            service_name: Some(webhook::SERVICE_NAME.to_string()),
            service_port: webhook::SERVICE_PORT,
        };
        OperatorDeployment::new(manifest, self.image.clone())
            .name(NAME)
            .namespace(self.namespace.clone())
            .metrics_port(self.metrics_port)
            .args([
                "run".to_string(),
                "--metrics-addr".to_string(),
                format!("0.0.0.0:{}", self.metrics_port),
                "--webhook-addr".to_string(),
                format!("0.0.0.0:{}", self.webhook_port),
                "--webhook-cert-file".to_string(),
                webhooks.cert_file(),
                "--webhook-key-file".to_string(),
                webhooks.key_file(),
                "--log-format".to_string(),
                "json".to_string(),
            ])
            .webhooks(webhooks)
    }

    /// Everything as one YAML stream for `kubectl apply -f -`: ServiceAccount, ClusterRole and
    /// binding (generated from the manifest), Deployment, metrics Service, webhook Service, and
    /// the webhook configurations pointing at `endpoint` (the webhook Service).
    ///
    /// # Errors
    ///
    /// When the objects cannot be built from the manifest or written as YAML.
    pub fn manifests_yaml(
        &self,
        manifest: &ManifestData,
        endpoint: &WebhookEndpoint,
    ) -> anyhow::Result<String> {
        let deployment = self
            .builder(manifest)
            .build()
            .context("building the operator's deployment from the manifest")?
            .to_yaml()
            .context("writing the deployment as YAML")?;
        let mut docs = vec![deployment];
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
    fn the_deployment_serves_webhooks_with_the_certificate_from_the_secret() {
        let manifest = crate::kind::manifest().expect("manifest");
        let built = deploy().builder(&manifest).build().expect("builds");
        let pod = built
            .deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("pod spec");
        assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
        let args = pod.containers[0].args.as_ref().expect("args").join(" ");
        assert!(
            args.starts_with("run --metrics-addr 0.0.0.0:9090")
                && args.contains("--webhook-addr 0.0.0.0:8443")
                && args.contains(&format!("--webhook-cert-file {TLS_DIR}/tls.crt"))
                && args.contains(&format!("--webhook-key-file {TLS_DIR}/tls.key")),
            "{args}"
        );
        let volume = &pod.volumes.as_ref().expect("volumes")[0];
        assert_eq!(
            volume
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some(TLS_SECRET)
        );
        let service = built.webhook_service.expect("webhook service");
        assert_eq!(
            service.metadata.name.as_deref(),
            Some(webhook::SERVICE_NAME)
        );
        let port = &service.spec.and_then(|s| s.ports).expect("ports")[0];
        assert_eq!(port.port, i32::from(webhook::SERVICE_PORT));
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
