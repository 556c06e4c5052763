//! The objects that run an app's operator in a cluster, derived from its manifest.
//!
//! [`OperatorDeployment`] is the companion of [`RbacBuilder`]: from the same [`ManifestData`] it
//! produces, as k8s-openapi objects ([`OperatorManifests`]) and as one YAML stream
//! ([`OperatorManifests::to_yaml`]):
//!
//! 1. the ServiceAccount, the ClusterRole (or Role) and its binding, from [`RbacBuilder`]: the
//!    least privilege for the manifest's kinds, the kinds the operator only watches
//!    ([`OperatorDeployment::rbac`]) and the manifest's `extraPermissions`;
//! 2. the Deployment running the operator under that ServiceAccount;
//! 3. the metrics Service (port [`DEFAULT_METRICS_PORT`], named [`METRICS_PORT_NAME`]);
//! 4. with [`OperatorDeployment::webhooks`], the webhook Service (port 443 to the container's
//!    [`DEFAULT_WEBHOOK_PORT`]) and the volume mounting the webhook certificate's Secret.
//!
//! ```
//! use kubeapp_sdk::deploy::{OperatorDeployment, WebhookServing};
//! use kubeapp_sdk::manifest::ManifestData;
//!
//! let manifest = ManifestData::from_yaml(r#"
//! appName: gadgets
//! group: gadgets.example.com
//! versions:
//!   - { name: v1, kinds: [{ kind: Gadget, plural: gadgets }] }
//! "#)?;
//! let webhooks = WebhookServing::new("gadgets-webhook-tls");
//! let manifests = OperatorDeployment::new(&manifest, "gadgets:1.0")
//!     .namespace("gadgets-system")
//!     .args(["run", "--webhook-cert-file", &webhooks.cert_file()])
//!     .webhooks(webhooks)
//!     .build()?;
//! let pod = manifests.deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref());
//! assert_eq!(
//!     pod.and_then(|p| p.service_account_name.as_deref()),
//!     manifests.rbac.service_account.metadata.name.as_deref(),
//! );
//! assert!(manifests.webhook_service.is_some());
//! let yaml = manifests.to_yaml()?;
//! assert!(yaml.contains("kind: Deployment") && yaml.contains("path: /readyz"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What the Deployment holds, and the defaults
//!
//! - Name [`OperatorDeployment::name`] (default `{appName}-operator`, as [`RbacBuilder`]'s), which
//!   also names the ServiceAccount, the role, its binding and the metrics Service; so the pod's
//!   `serviceAccountName` is always the binding's subject.
//! - Labels on every object: `app.kubernetes.io/name: {name}`,
//!   `app.kubernetes.io/component: operator`, `app.kubernetes.io/managed-by: kubeapp`. The
//!   Deployment's selector and the Services' selectors use the first two only (a selector cannot
//!   change after creation, so it keeps to what identifies the pods).
//! - Namespace `default`, 1 replica (run more only with leader election), the image's entrypoint
//!   with [`OperatorDeployment::args`], environment [`OperatorDeployment::env`].
//! - Resources (override with [`OperatorDeployment::resources`]): requests `cpu: 100m`,
//!   `memory: 128Mi`, limit `memory: 512Mi`, no CPU limit (a CPU limit throttles the informers'
//!   initial lists without protecting anything a request does not).
//! - Probes on the metrics port, as the Runner serves them: liveness `GET /livez` every 10 s,
//!   readiness `GET /readyz` every 5 s.
//! - `terminationGracePeriodSeconds: 40`: the Runner's default shutdown timeout (30 s) plus
//!   headroom, so the kubelet does not kill an operator that is still stopping cleanly.
//!
//! Invalid input is an [`DeployError`] naming the field (an empty image, a name that is not a
//! DNS label, equal metrics and webhook ports, ...).

mod error;
mod manifests;
mod objects;
mod validate;

pub use error::DeployError;
pub use manifests::OperatorManifests;

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, ResourceRequirements};

use crate::manifest::ManifestData;
use crate::rbac::RbacBuilder;

/// The default port of `/metrics`, `/livez` and `/readyz`.
pub const DEFAULT_METRICS_PORT: u16 = 9090;
/// The default port of the webhook server in the container.
pub const DEFAULT_WEBHOOK_PORT: u16 = 8443;
/// The default port of the webhook Service (the apiserver's default for webhooks).
pub const DEFAULT_WEBHOOK_SERVICE_PORT: u16 = 443;
/// The default directory the webhook certificate's Secret is mounted at.
pub const DEFAULT_TLS_DIR: &str = "/etc/kubeapp/webhook-tls";
/// The name of the metrics port of the container and the metrics Service.
pub const METRICS_PORT_NAME: &str = "metrics";
/// The name of the webhook port of the container and the webhook Service.
pub const WEBHOOK_PORT_NAME: &str = "webhook";
/// The name of the operator's container.
pub const CONTAINER_NAME: &str = "operator";
/// The default `terminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 40;

/// How the operator serves admission and conversion webhooks in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookServing {
    /// The Secret (type `kubernetes.io/tls`) with the server's `tls.crt` and `tls.key`.
    pub tls_secret: String,
    /// Where that Secret is mounted in the container (default [`DEFAULT_TLS_DIR`]).
    pub tls_dir: String,
    /// The container's webhook port (default [`DEFAULT_WEBHOOK_PORT`]).
    pub port: u16,
    /// The webhook Service's name (default `{name}-webhook`).
    pub service_name: Option<String>,
    /// The webhook Service's port (default [`DEFAULT_WEBHOOK_SERVICE_PORT`]).
    pub service_port: u16,
}

impl WebhookServing {
    /// Webhooks served with the certificate in Secret `tls_secret`, everything else defaulted.
    pub fn new(tls_secret: impl Into<String>) -> Self {
        Self {
            tls_secret: tls_secret.into(),
            tls_dir: DEFAULT_TLS_DIR.to_string(),
            port: DEFAULT_WEBHOOK_PORT,
            service_name: None,
            service_port: DEFAULT_WEBHOOK_SERVICE_PORT,
        }
    }

    /// The path of the mounted certificate, for the operator's `--webhook-cert-file`.
    pub fn cert_file(&self) -> String {
        format!("{}/tls.crt", self.tls_dir.trim_end_matches('/'))
    }

    /// The path of the mounted private key, for the operator's `--webhook-key-file`.
    pub fn key_file(&self) -> String {
        format!("{}/tls.key", self.tls_dir.trim_end_matches('/'))
    }
}

type RbacCustomizer<'m> = Box<dyn Fn(RbacBuilder<'m>) -> RbacBuilder<'m> + 'm>;

/// Builds the Deployment, Services and RBAC of an app's operator; see the [module docs](self).
pub struct OperatorDeployment<'m> {
    manifest: &'m ManifestData,
    image: String,
    name: Option<String>,
    namespace: String,
    replicas: i32,
    args: Vec<String>,
    env: Vec<EnvVar>,
    resources: ResourceRequirements,
    metrics_port: u16,
    termination_grace_seconds: i64,
    webhooks: Option<WebhookServing>,
    rbac: Option<RbacCustomizer<'m>>,
}

impl std::fmt::Debug for OperatorDeployment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorDeployment")
            .field("app", &self.manifest.app_name)
            .field("image", &self.image)
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("replicas", &self.replicas)
            .field("metrics_port", &self.metrics_port)
            .field("webhooks", &self.webhooks)
            .finish_non_exhaustive()
    }
}

impl<'m> OperatorDeployment<'m> {
    /// A builder for the deployment of `manifest`'s operator from container image `image`.
    pub fn new(manifest: &'m ManifestData, image: impl Into<String>) -> Self {
        Self {
            manifest,
            image: image.into(),
            name: None,
            namespace: "default".to_string(),
            replicas: 1,
            args: Vec::new(),
            env: Vec::new(),
            resources: objects::default_resources(),
            metrics_port: DEFAULT_METRICS_PORT,
            termination_grace_seconds: DEFAULT_TERMINATION_GRACE_SECONDS,
            webhooks: None,
            rbac: None,
        }
    }

    /// The name of the Deployment, ServiceAccount, role, binding and metrics Service (default
    /// `{appName}-operator`).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The namespace of the Deployment, Services and ServiceAccount (default `default`).
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The number of pods (default 1).
    #[must_use]
    pub fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    /// The container's arguments (after the image's entrypoint), replacing earlier ones.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable to the container.
    #[must_use]
    pub fn env(mut self, var: EnvVar) -> Self {
        self.env.push(var);
        self
    }

    /// Adds an environment variable with a fixed value.
    #[must_use]
    pub fn env_value(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env(EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        })
    }

    /// Adds an environment variable from a field of the pod (downward API), e.g.
    /// `env_from_field("POD_NAME", "metadata.name")`.
    #[must_use]
    pub fn env_from_field(self, name: impl Into<String>, field_path: impl Into<String>) -> Self {
        self.env(EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: field_path.into(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
        })
    }

    /// The container's resource requests and limits, replacing the defaults of the module docs.
    #[must_use]
    pub fn resources(mut self, resources: ResourceRequirements) -> Self {
        self.resources = resources;
        self
    }

    /// The port of `/metrics`, `/livez` and `/readyz` (default [`DEFAULT_METRICS_PORT`]).
    #[must_use]
    pub fn metrics_port(mut self, port: u16) -> Self {
        self.metrics_port = port;
        self
    }

    /// The pod's `terminationGracePeriodSeconds` (default
    /// [`DEFAULT_TERMINATION_GRACE_SECONDS`]); keep it above the Runner's shutdown timeout.
    #[must_use]
    pub fn termination_grace_seconds(mut self, seconds: i64) -> Self {
        self.termination_grace_seconds = seconds;
        self
    }

    /// The operator serves webhooks: adds the webhook port, the webhook Service and the
    /// certificate's Secret volume.
    #[must_use]
    pub fn webhooks(mut self, webhooks: WebhookServing) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// Adjusts the RBAC beyond the manifest, e.g. `|rbac| rbac.unmanaged::<ConfigMap>()` for a
    /// kind the operator watches. The role's name and the ServiceAccount are set after `adjust`
    /// runs, so they always match the Deployment.
    #[must_use]
    pub fn rbac(mut self, adjust: impl Fn(RbacBuilder<'m>) -> RbacBuilder<'m> + 'm) -> Self {
        self.rbac = Some(Box::new(adjust));
        self
    }

    /// The name of every object but the webhook Service.
    pub(crate) fn resolved_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}-operator", self.manifest.app_name))
    }

    /// Builds the RBAC, the Deployment and the Services.
    pub fn build(&self) -> Result<OperatorManifests, DeployError> {
        let name = self.resolved_name();
        self.validate(&name)?;
        let mut rbac = RbacBuilder::new(self.manifest);
        if let Some(adjust) = &self.rbac {
            rbac = adjust(rbac);
        }
        let rbac = rbac
            .name(name.clone())
            .service_account(name.clone(), self.namespace.clone())
            .build()?;
        let spec = objects::Spec {
            name: &name,
            namespace: &self.namespace,
            image: &self.image,
            replicas: self.replicas,
            args: &self.args,
            env: &self.env,
            resources: &self.resources,
            metrics_port: self.metrics_port,
            termination_grace_seconds: self.termination_grace_seconds,
            webhooks: self.webhooks.as_ref(),
        };
        tracing::debug!(name, namespace = %self.namespace, "built the operator's deployment");
        Ok(OperatorManifests {
            deployment: objects::deployment(&spec),
            metrics_service: objects::metrics_service(&spec),
            webhook_service: self
                .webhooks
                .as_ref()
                .map(|webhooks| objects::webhook_service(&spec, webhooks)),
            rbac,
        })
    }
}

#[cfg(test)]
mod tests;
