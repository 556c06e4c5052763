//! The Deployment and Services of [`OperatorDeployment`](super::OperatorDeployment), from its
//! validated settings.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, HTTPGetAction, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use super::{CONTAINER_NAME, METRICS_PORT_NAME, WEBHOOK_PORT_NAME, WebhookServing};

/// The volume holding the webhook certificate's Secret.
const TLS_VOLUME: &str = "webhook-tls";

/// The validated settings the objects are made from.
pub(super) struct Spec<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub image: &'a str,
    pub replicas: i32,
    pub args: &'a [String],
    pub env: &'a [EnvVar],
    pub resources: &'a ResourceRequirements,
    pub metrics_port: u16,
    pub termination_grace_seconds: i64,
    pub webhooks: Option<&'a WebhookServing>,
}

/// Requests `cpu: 100m`, `memory: 128Mi`; limit `memory: 512Mi`.
pub(super) fn default_resources() -> ResourceRequirements {
    let quantities = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), Quantity((*v).to_string())))
            .collect::<BTreeMap<_, _>>()
    };
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", "100m"), ("memory", "128Mi")])),
        limits: Some(quantities(&[("memory", "512Mi")])),
        ..ResourceRequirements::default()
    }
}

impl Spec<'_> {
    /// What selects the operator's pods.
    fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), self.name.to_string()),
            (
                "app.kubernetes.io/component".to_string(),
                "operator".to_string(),
            ),
        ])
    }

    /// The selector plus `managed-by`.
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        labels.insert(
            "app.kubernetes.io/managed-by".to_string(),
            "kubeapp".to_string(),
        );
        labels
    }

    fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.to_string()),
            labels: Some(self.labels()),
            ..ObjectMeta::default()
        }
    }
}

fn http_probe(path: &str, period_seconds: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(METRICS_PORT_NAME.to_string()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        ..Probe::default()
    }
}

fn container(spec: &Spec<'_>) -> Container {
    let mut ports = vec![ContainerPort {
        name: Some(METRICS_PORT_NAME.to_string()),
        container_port: i32::from(spec.metrics_port),
        ..ContainerPort::default()
    }];
    let mut volume_mounts = None;
    if let Some(webhooks) = spec.webhooks {
        ports.push(ContainerPort {
            name: Some(WEBHOOK_PORT_NAME.to_string()),
            container_port: i32::from(webhooks.port),
            ..ContainerPort::default()
        });
        // Mounted as a directory (no subPath) so the kubelet's updates of a rotated Secret
        // reach the running server.
        volume_mounts = Some(vec![VolumeMount {
            name: TLS_VOLUME.to_string(),
            mount_path: webhooks.tls_dir.clone(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]);
    }
    Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(spec.image.to_string()),
        args: (!spec.args.is_empty()).then(|| spec.args.to_vec()),
        env: (!spec.env.is_empty()).then(|| spec.env.to_vec()),
        ports: Some(ports),
        resources: Some(spec.resources.clone()),
        liveness_probe: Some(http_probe("/livez", 10)),
        readiness_probe: Some(http_probe("/readyz", 5)),
        volume_mounts,
        ..Container::default()
    }
}

/// The operator's Deployment.
pub(super) fn deployment(spec: &Spec<'_>) -> Deployment {
    let volumes = spec.webhooks.map(|webhooks| {
        vec![Volume {
            name: TLS_VOLUME.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(webhooks.tls_secret.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        }]
    });
    Deployment {
        metadata: spec.meta(spec.name),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(spec.selector()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(spec.labels()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(spec.name.to_string()),
                    termination_grace_period_seconds: Some(spec.termination_grace_seconds),
                    containers: vec![container(spec)],
                    volumes,
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

fn service(spec: &Spec<'_>, name: &str, port_name: &str, port: u16) -> Service {
    Service {
        metadata: spec.meta(name),
        spec: Some(ServiceSpec {
            selector: Some(spec.selector()),
            ports: Some(vec![ServicePort {
                name: Some(port_name.to_string()),
                port: i32::from(port),
                target_port: Some(IntOrString::String(port_name.to_string())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The Service exposing the metrics port, named like the Deployment.
pub(super) fn metrics_service(spec: &Spec<'_>) -> Service {
    service(spec, spec.name, METRICS_PORT_NAME, spec.metrics_port)
}

/// The Service in front of the webhook server (default name `{name}-webhook`).
pub(super) fn webhook_service(spec: &Spec<'_>, webhooks: &WebhookServing) -> Service {
    let name = webhooks
        .service_name
        .clone()
        .unwrap_or_else(|| format!("{}-webhook", spec.name));
    service(spec, &name, WEBHOOK_PORT_NAME, webhooks.service_port)
}
