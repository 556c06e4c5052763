//! Kubernetes objects as YAML: reading the documents a binary printed, grouping them into the
//! files `generate` writes, and server-side applying them (`deploy --apply`, `run`).

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::Value;

/// The field manager of everything `kubeapp` applies.
pub const FIELD_MANAGER: &str = "kubeapp";

/// Why objects could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// The YAML does not parse.
    #[error("{origin}: {message}")]
    Yaml {
        /// Where the YAML came from.
        origin: String,
        /// The parser's message.
        message: String,
    },
    /// A document lacks `apiVersion`, `kind` or `metadata.name`.
    #[error("{origin}: document {index}: {problem}")]
    Document {
        /// Where the YAML came from.
        origin: String,
        /// The document's position, from 1.
        index: usize,
        /// What is missing.
        problem: String,
    },
    /// The apiserver refused an object, or its kind is unknown to it.
    #[error("{origin}: {kind} {name}")]
    Apply {
        /// Where the object came from.
        origin: String,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
        /// What the apiserver said.
        source: Box<kube::Error>,
    },
}

/// The documents of a multi-document YAML text (empty ones dropped).
///
/// # Errors
///
/// YAML that does not parse; `origin` names it.
pub fn parse_documents(yaml: &str, origin: &str) -> Result<Vec<Value>, ObjectsError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).map_err(|e| ObjectsError::Yaml {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    Ok(docs.into_iter().filter(|doc| !doc.is_null()).collect())
}

/// The file `generate` puts `object` in: by its kind, and the dashboard's ConfigMap (label
/// `grafana_dashboard`) and the metrics scraper's identity (component `metrics-scraper`) with
/// the other monitoring objects.
pub fn file_for_object(object: &Value) -> &'static str {
    let labels = &object["metadata"]["labels"];
    if labels["grafana_dashboard"].is_string()
        || labels["app.kubernetes.io/component"] == kubeapp::sdk::monitoring::SCRAPER_COMPONENT
    {
        return "monitoring.yaml";
    }
    file_for(object["kind"].as_str().unwrap_or_default())
}

/// The file `generate` puts an object of `kind` in.
pub fn file_for(kind: &str) -> &'static str {
    match kind {
        "PrometheusRule" | "ServiceMonitor" | "PodMonitor" => "monitoring.yaml",
        "CustomResourceDefinition" => "crds.yaml",
        "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding" => {
            "rbac.yaml"
        }
        "Deployment" => "deployment.yaml",
        "Service" => "services.yaml",
        "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => "webhooks.yaml",
        "Namespace" => "namespace.yaml",
        _ => "other.yaml",
    }
}

/// An object as the apiserver stored it after an apply, with what it takes to read it again.
#[derive(Debug, Clone)]
pub struct Applied {
    /// `Kind namespace/name` (or `Kind name`).
    pub line: String,
    /// The object the apiserver returned (webhooks' changes included).
    pub object: DynamicObject,
    /// Its API resource, in the version it was applied in.
    pub resource: ApiResource,
    /// Whether its kind is namespaced.
    pub namespaced: bool,
    /// The labels the document itself set.
    pub sent_labels: BTreeMap<String, String>,
}

/// Server-side applies `doc` (with `dry_run`, the apiserver checks it and stores nothing) and
/// returns `Kind namespace/name`.
///
/// # Errors
///
/// A document without kind or name, a kind the apiserver does not serve, or a refusal.
pub async fn apply(
    client: &kube::Client,
    doc: &Value,
    origin: &str,
    index: usize,
    dry_run: bool,
) -> Result<String, ObjectsError> {
    Ok(apply_object(client, doc, origin, index, dry_run)
        .await?
        .line)
}

/// [`apply`], returning the stored object.
///
/// # Errors
///
/// As [`apply`].
pub async fn apply_object(
    client: &kube::Client,
    doc: &Value,
    origin: &str,
    index: usize,
    dry_run: bool,
) -> Result<Applied, ObjectsError> {
    let problem = |problem: &str| ObjectsError::Document {
        origin: origin.to_string(),
        index,
        problem: problem.to_string(),
    };
    let object: DynamicObject = serde_json::from_value(doc.clone())
        .map_err(|e| problem(&format!("not a Kubernetes object: {e}")))?;
    let types = object
        .types
        .clone()
        .ok_or_else(|| problem("apiVersion or kind is missing"))?;
    let name = object
        .metadata
        .name
        .clone()
        .ok_or_else(|| problem("metadata.name is missing"))?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((group, version)) => (group.to_string(), version.to_string()),
        None => (String::new(), types.api_version.clone()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &types.kind);
    let failed = |source| ObjectsError::Apply {
        origin: origin.to_string(),
        kind: types.kind.clone(),
        name: name.clone(),
        source: Box::new(source),
    };
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(failed)?;
    let namespace = object.metadata.namespace.clone();
    let api: Api<DynamicObject> = match (&capabilities.scope, &namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    if dry_run {
        params = params.dry_run();
    }
    let stored = api
        .patch(&name, &params, &Patch::Apply(&object))
        .await
        .map_err(failed)?;
    let namespaced = matches!(capabilities.scope, Scope::Namespaced);
    let namespace = stored.metadata.namespace.clone().filter(|_| namespaced);
    Ok(Applied {
        line: match namespace {
            Some(ns) => format!("{} {ns}/{name}", types.kind),
            None => format!("{} {name}", types.kind),
        },
        sent_labels: object.metadata.labels.clone().unwrap_or_default(),
        object: stored,
        resource,
        namespaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_parse_and_go_to_their_files() {
        let docs = parse_documents("---\nkind: A\n---\n---\nkind: B\n", "x.yaml").expect("parses");
        assert_eq!(docs.len(), 2);
        let err = parse_documents("kind: [", "x.yaml").expect_err("bad YAML");
        assert!(err.to_string().starts_with("x.yaml: "), "{err}");
        assert_eq!(file_for("ClusterRoleBinding"), "rbac.yaml");
        assert_eq!(file_for("MutatingWebhookConfiguration"), "webhooks.yaml");
        assert_eq!(file_for("Deployment"), "deployment.yaml");
        assert_eq!(file_for("PrometheusRule"), "monitoring.yaml");
        let dashboard = serde_json::json!({"kind": "ConfigMap",
            "metadata": {"labels": {"grafana_dashboard": "1"}}});
        assert_eq!(file_for_object(&dashboard), "monitoring.yaml");
        let scraper = serde_json::json!({"kind": "ClusterRoleBinding",
            "metadata": {"labels": {"app.kubernetes.io/component": "metrics-scraper"}}});
        assert_eq!(file_for_object(&scraper), "monitoring.yaml");
        assert_eq!(
            file_for_object(&serde_json::json!({"kind": "ConfigMap"})),
            "other.yaml"
        );
    }
}
