//! What the `crd` and `manifests` commands print: the CRD, and the manifests that deploy the
//! operator (its RBAC, a Deployment with probes, a Service for metrics), all generated from the
//! embedded manifest so they cannot drift from what the operator does.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PodSpec,
    PodTemplateSpec, Probe as ContainerProbe, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use kubeapp::sdk::crd::CrdBuilder;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::rbac::RbacBuilder;

use crate::kind::Probe;

/// The name of the Deployment, Service and ServiceAccount.
pub const NAME: &str = "kubeapp-example-watcher";

/// The name of the metrics port of the container and the Service.
pub const METRICS_PORT_NAME: &str = "metrics";

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
    /// with a liveness probe on `/livez` and a readiness probe on `/readyz` at the metrics port,
    /// and the pod's name in `POD_NAME` (the Events' `reportingInstance`).
    pub fn deployment(&self) -> Deployment {
        let probe = |path: &str, period: i32| ContainerProbe {
            http_get: Some(HTTPGetAction {
                path: Some(path.to_string()),
                port: IntOrString::String(METRICS_PORT_NAME.to_string()),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(period),
            ..ContainerProbe::default()
        };
        let container = Container {
            name: "operator".to_string(),
            image: Some(self.image.clone()),
            args: Some(vec![
                "run".to_string(),
                "--metrics-addr".to_string(),
                format!("0.0.0.0:{}", self.metrics_port),
                "--log-format".to_string(),
                "json".to_string(),
            ]),
            env: Some(vec![EnvVar {
                name: "POD_NAME".to_string(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".to_string(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            }]),
            ports: Some(vec![ContainerPort {
                name: Some(METRICS_PORT_NAME.to_string()),
                container_port: i32::from(self.metrics_port),
                ..ContainerPort::default()
            }]),
            liveness_probe: Some(probe("/livez", 10)),
            readiness_probe: Some(probe("/readyz", 5)),
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
                        // The runner stops within --shutdown-timeout (30 s by default), after
                        // in-flight steps (at most 60 s of processingMillis each) finish.
                        termination_grace_period_seconds: Some(40),
                        containers: vec![container],
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

    /// Everything as one YAML stream for `kubectl apply -f -`: ServiceAccount, ClusterRole and
    /// binding (generated from the manifest), Deployment and Service.
    ///
    /// # Errors
    ///
    /// When the RBAC cannot be generated or an object cannot be written as YAML.
    pub fn manifests_yaml(&self, manifest: &ManifestData) -> anyhow::Result<String> {
        let rbac = RbacBuilder::new(manifest)
            .name(NAME)
            .service_account(NAME, self.namespace.clone())
            .build()
            .context("generating the RBAC from the manifest")?
            .to_yaml()
            .context("writing the RBAC as YAML")?;
        let deployment =
            serde_saphyr::to_string(&self.deployment()).context("writing the Deployment")?;
        let service = serde_saphyr::to_string(&self.service()).context("writing the Service")?;
        let mut out = rbac;
        for doc in [deployment, service] {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("---\n");
            out.push_str(&doc);
        }
        Ok(out)
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
    fn the_deployment_probes_livez_and_readyz_on_the_metrics_port() {
        let deployment = deploy().deployment();
        let spec = deployment.spec.expect("spec");
        let pod = spec.template.spec.expect("pod spec");
        assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("example:1"));
        let port = &container.ports.as_ref().expect("ports")[0];
        assert_eq!(port.container_port, 9090);
        assert_eq!(port.name.as_deref(), Some(METRICS_PORT_NAME));
        let path = |probe: &Option<ContainerProbe>| {
            let get = probe
                .as_ref()
                .and_then(|p| p.http_get.clone())
                .expect("http probe");
            assert_eq!(get.port, IntOrString::String(METRICS_PORT_NAME.into()));
            get.path.expect("path")
        };
        assert_eq!(path(&container.liveness_probe), "/livez");
        assert_eq!(path(&container.readiness_probe), "/readyz");
        let env = &container.env.as_ref().expect("env")[0];
        assert_eq!(env.name, "POD_NAME");
        assert_eq!(
            env.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str()),
            Some("metadata.name")
        );
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
