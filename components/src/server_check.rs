//! The checked dry run: every object a [dry run](crate::dry_run) would apply is sent to an
//! apiserver as a server-side apply with `dryRun=All`, so the apiserver itself checks it against
//! the built-in schemas, the CRDs' schemas and their CEL rules, and stores nothing.
//!
//! [`DryRun::check_on_server`] reports each violation with the component, the object and the field path
//! the apiserver names ([`Violation`]). Before sending, an owner reference without a uid (the dry
//! run's custom object was never stored) is dropped, since the apiserver refuses an empty uid and
//! that is not a fault of the rendering. The kind's resource (its plural, whether it is
//! namespaced) comes from the apiserver's discovery, so a kind it does not serve (a CRD not
//! installed) is a violation too. A namespaced object without a namespace is checked in `default`.
//!
//! The apiserver checks one object at a time: references between objects (a Deployment's
//! ServiceAccount, a Secret it mounts) are not resolved, as a dry run cannot know what the cluster
//! will hold.

use std::collections::HashMap;
use std::fmt;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, Scope, pinned_kind};
use serde_json::Value;

use crate::dry_run::DryRun;

/// The field manager of the checking applies (never stored: every apply is a dry run).
pub const CHECK_FIELD_MANAGER: &str = "kubeapp-dry-run-check";

/// One thing the apiserver refused in a rendered object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The component that rendered the object.
    pub component: String,
    /// `apiVersion Kind namespace/name` (no namespace for a cluster-scoped object).
    pub object: String,
    /// The field path the apiserver names (`spec.replicas`), if it names one.
    pub field: Option<String>,
    /// What is wrong, as the apiserver says it.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.component, self.object)?;
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl DryRun {
    /// Sends every object of this dry run to the apiserver of `client` as a server-side dry run;
    /// see the [module docs](self). Returns the violations (empty: the apiserver accepted
    /// everything).
    ///
    /// # Errors
    ///
    /// None of its own: a request that fails for another reason than the object (the apiserver
    /// cannot be reached, a permission is missing) is a violation naming the object, so every
    /// object is checked.
    pub async fn check_on_server(&self, client: &kube::Client) -> Vec<Violation> {
        let mut violations = Vec::new();
        let mut discovered = HashMap::new();
        for (component, object) in &self.applied {
            violations.extend(check_one(component, object, client, &mut discovered).await);
        }
        violations
    }
}

/// What discovery said of each (apiVersion, kind) so far: one request per kind, not per object.
type Discovered = HashMap<(String, String), Result<(ApiResource, ApiCapabilities), String>>;

async fn check_one(
    component: &str,
    object: &Value,
    client: &kube::Client,
    discovered: &mut Discovered,
) -> Vec<Violation> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"].as_str();
    let described = match namespace {
        Some(ns) => format!("{api_version} {kind} {ns}/{name}"),
        None => format!("{api_version} {kind} {name}"),
    };
    let violation = |field: Option<String>, message: String| Violation {
        component: component.to_string(),
        object: described.clone(),
        field,
        message,
    };
    let key = (api_version.to_string(), kind.to_string());
    if !discovered.contains_key(&key) {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = pinned_kind(client, &gvk).await.map_err(|e| e.to_string());
        discovered.insert(key.clone(), found);
    }
    let (resource, capabilities) = match &discovered[&key] {
        Ok(found) => found.clone(),
        Err(error) => {
            return vec![violation(
                None,
                format!("the apiserver does not serve this kind: {error}"),
            )];
        }
    };
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => {
            Api::namespaced_with(client.clone(), namespace.unwrap_or("default"), &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let sent = without_unstored_owners(object.clone());
    let params = PatchParams::apply(CHECK_FIELD_MANAGER).dry_run().force();
    match api.patch(name, &params, &Patch::Apply(&sent)).await {
        Ok(_) => Vec::new(),
        Err(kube::Error::Api(status)) => {
            let causes = status
                .details
                .as_ref()
                .map(|d| d.causes.as_slice())
                .unwrap_or_default();
            if causes.is_empty() {
                vec![violation(None, status.message.clone())]
            } else {
                causes
                    .iter()
                    .map(|cause| {
                        violation(
                            (!cause.field.is_empty()).then(|| cause.field.clone()),
                            cause.message.clone(),
                        )
                    })
                    .collect()
            }
        }
        Err(error) => vec![violation(None, error.to_string())],
    }
}

/// `object` without owner references whose `uid` is empty (see the [module docs](self)).
fn without_unstored_owners(mut object: Value) -> Value {
    if let Some(owners) = object["metadata"]["ownerReferences"].as_array_mut() {
        owners.retain(|o| o["uid"].as_str().is_some_and(|uid| !uid.is_empty()));
        if owners.is_empty()
            && let Some(metadata) = object["metadata"].as_object_mut()
        {
            metadata.remove("ownerReferences");
        }
    }
    object
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn owner_references_without_a_uid_are_dropped_and_others_kept() {
        let object = json!({"metadata": {"name": "a", "ownerReferences": [
            {"kind": "WebApp", "name": "shop", "uid": ""},
            {"kind": "Other", "name": "x", "uid": "1234"}
        ]}});
        let sent = without_unstored_owners(object);
        assert_eq!(
            sent["metadata"]["ownerReferences"],
            json!([{"kind": "Other", "name": "x", "uid": "1234"}])
        );
        let sent = without_unstored_owners(json!({"metadata": {"name": "a", "ownerReferences": [
            {"kind": "WebApp", "name": "shop", "uid": ""}
        ]}}));
        assert_eq!(sent["metadata"], json!({"name": "a"}));
    }

    #[test]
    fn a_violation_names_component_object_and_field() {
        let v = Violation {
            component: "deployment".into(),
            object: "apps/v1 Deployment shop/web".into(),
            field: Some("spec.replicas".into()),
            message: "Invalid value: -1: must be greater than or equal to 0".into(),
        };
        assert_eq!(
            v.to_string(),
            "deployment: apps/v1 Deployment shop/web: spec.replicas: Invalid value: -1: must be \
             greater than or equal to 0"
        );
    }
}
