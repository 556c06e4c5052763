//! [`OperatorManifests`], the built objects, and their YAML rendering.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;

use super::DeployError;
use crate::rbac::{OperatorRbac, OperatorRole};

/// Everything that runs an app's operator; see [`OperatorDeployment`](super::OperatorDeployment).
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorManifests {
    /// The ServiceAccount the pods run as, the role and its binding.
    pub rbac: OperatorRbac,
    /// The operator's Deployment.
    pub deployment: Deployment,
    /// The Service exposing the metrics port, for Prometheus to scrape.
    pub metrics_service: Service,
    /// The Service in front of the webhook server, when the operator serves webhooks.
    pub webhook_service: Option<Service>,
}

impl OperatorManifests {
    /// Every object as JSON, in apply order: ServiceAccount, role, binding, Deployment, metrics
    /// Service, webhook Service.
    pub fn to_values(&self) -> Result<Vec<serde_json::Value>, DeployError> {
        fn value<T: serde::Serialize>(
            object: &'static str,
            item: &T,
        ) -> Result<serde_json::Value, DeployError> {
            serde_json::to_value(item).map_err(|e| DeployError::Serialize {
                object,
                message: e.to_string(),
            })
        }
        let mut docs = vec![value("ServiceAccount", &self.rbac.service_account)?];
        match &self.rbac.role {
            OperatorRole::Cluster { role, binding } => {
                docs.push(value("ClusterRole", role)?);
                docs.push(value("ClusterRoleBinding", binding)?);
            }
            OperatorRole::Namespaced { role, binding } => {
                docs.push(value("Role", role)?);
                docs.push(value("RoleBinding", binding)?);
            }
        }
        docs.push(value("Deployment", &self.deployment)?);
        docs.push(value("metrics Service", &self.metrics_service)?);
        if let Some(service) = &self.webhook_service {
            docs.push(value("webhook Service", service)?);
        }
        Ok(docs)
    }

    /// Every object as one multi-document YAML stream for `kubectl apply -f -`, in the order of
    /// [`to_values`](Self::to_values).
    pub fn to_yaml(&self) -> Result<String, DeployError> {
        crate::manifest::to_yaml_documents(&self.to_values()?).map_err(|message| {
            DeployError::Serialize {
                object: "manifests",
                message,
            }
        })
    }
}
