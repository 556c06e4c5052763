//! What the `crd` and `manifests` commands print: the CRD, and the manifests that deploy the
//! operator (its RBAC, a Deployment with probes, a Service for metrics), all generated from the
//! embedded manifest by the SDK's builders so they cannot drift from what the operator does.

use anyhow::Context as _;
use kubeapp::sdk::crd::CrdBuilder;
use kubeapp::sdk::deploy::OperatorDeployment;
use kubeapp::sdk::manifest::ManifestData;

use crate::kind::Probe;

/// The name of the Deployment, Service and ServiceAccount.
pub const NAME: &str = "kubeapp-example-watcher";

/// The CRD of `Probe` as YAML, from the manifest and the Rust type.
///
/// # Errors
///
/// When the manifest and the type disagree, or the YAML cannot be written.
pub fn crd_yaml(manifest: &ManifestData) -> anyhow::Result<String> {
    let crds = CrdBuilder::new(manifest)
        .kind::<Probe>()
        .build()
        .context("building the CRD from the manifest")?;
    kubeapp::sdk::crd::to_yaml(&crds).context("writing the CRD as YAML")
}

/// Where and how the operator is deployed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deploy {
    /// The namespace of the Deployment, Service and ServiceAccount.
    pub namespace: String,
    /// The container image.
    pub image: String,
    /// The port of `/metrics`, `/livez` and `/readyz`.
    pub metrics_port: u16,
}

impl Deploy {
    /// The operator's deployment: one replica running `run` under the generated ServiceAccount,
    /// probed on `/livez` and `/readyz` at the metrics port, with the pod's name in `POD_NAME`
    /// (the Events' `reportingInstance`). The default grace period (40 s) covers the runner's
    /// shutdown timeout (30 s by default), after in-flight steps finish.
    fn builder<'m>(&self, manifest: &'m ManifestData) -> OperatorDeployment<'m> {
        OperatorDeployment::new(manifest, self.image.clone())
            .name(NAME)
            .namespace(self.namespace.clone())
            .metrics_port(self.metrics_port)
            .args([
                "run".to_string(),
                "--metrics-addr".to_string(),
                format!("0.0.0.0:{}", self.metrics_port),
                "--log-format".to_string(),
                "json".to_string(),
            ])
            .env_from_field("POD_NAME", "metadata.name")
    }

    /// Everything as one YAML stream for `kubectl apply -f -`: ServiceAccount, ClusterRole and
    /// binding (generated from the manifest), Deployment and Service.
    ///
    /// # Errors
    ///
    /// When the objects cannot be built from the manifest or written as YAML.
    pub fn manifests_yaml(&self, manifest: &ManifestData) -> anyhow::Result<String> {
        self.builder(manifest)
            .build()
            .context("building the operator's deployment from the manifest")?
            .to_yaml()
            .context("writing the deployment as YAML")
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
        }
    }

    #[test]
    fn the_deployment_runs_the_operator_with_its_pod_name() {
        let manifest = crate::kind::manifest().expect("manifest");
        let built = deploy().builder(&manifest).build().expect("builds");
        let pod = built
            .deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("pod spec");
        assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("example:1"));
        let env = &container.env.as_ref().expect("env")[0];
        assert_eq!(env.name, "POD_NAME");
        assert_eq!(
            container.args.as_ref().expect("args")[..3],
            ["run", "--metrics-addr", "0.0.0.0:9090"]
        );
    }

    #[test]
    fn the_manifests_hold_rbac_deployment_and_service() {
        let manifest = crate::kind::manifest().expect("manifest");
        let yaml = deploy().manifests_yaml(&manifest).expect("yaml");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("parses");
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment",
                "Service"
            ]
        );
        let rules = docs[1]["rules"].as_array().expect("rules");
        let grants = |group: &str, resource: &str, verb: &str| {
            rules.iter().any(|r| {
                let has = |field: &str, value: &str| {
                    r[field]
                        .as_array()
                        .is_some_and(|items| items.iter().any(|item| item == value))
                };
                has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
            })
        };
        assert!(grants("events.k8s.io", "events", "create"), "{rules:?}");
        assert!(grants("events.k8s.io", "events", "patch"), "{rules:?}");
        assert!(
            grants("watcher.example.kubeapp.dev", "probes", "watch"),
            "{rules:?}"
        );
        assert!(
            grants("watcher.example.kubeapp.dev", "probes", "patch"),
            "{rules:?}"
        );
        assert!(yaml.contains("path: /readyz") && yaml.contains("path: /livez"));
        assert_eq!(docs[3]["metadata"]["namespace"], "ops");
    }

    #[test]
    fn the_crd_comes_from_the_manifest_and_the_type() {
        let manifest = crate::kind::manifest().expect("manifest");
        let yaml = crd_yaml(&manifest).expect("crd");
        assert!(
            yaml.contains("name: probes.watcher.example.kubeapp.dev"),
            "{yaml}"
        );
        assert!(yaml.contains("processingMillis"), "{yaml}");
    }
}
