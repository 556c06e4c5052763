//! The example's custom kind, `Template`, and its embedded app manifest.
//!
//! A `Template` (group `reconciler.example.kubeapp.dev`, version `v1`, namespaced) carries the
//! data of a ConfigMap in its spec; its status (a subresource) reports the generation the
//! operator last reconciled and a `Ready` condition.

use std::collections::BTreeMap;

use kube::CustomResource;
use kubeapp::sdk::manifest::ManifestData;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The app manifest, embedded from `manifest.yaml` in the crate directory.
pub const MANIFEST_YAML: &str = include_str!("../manifest.yaml");

/// The name of the `Ready` condition.
pub const READY: &str = "Ready";

/// The spec of a `Template`: the data of the ConfigMap to render.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "reconciler.example.kubeapp.dev",
    version = "v1",
    kind = "Template",
    plural = "templates",
    namespaced,
    status = "TemplateStatus",
    shortname = "tpl",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
pub struct TemplateSpec {
    /// The data of the rendered ConfigMap, key by key.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

/// What the operator reports about a `Template`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStatus {
    /// The `metadata.generation` of the object the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The conditions; the operator sets `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<TemplateCondition>,
}

/// A condition in the usual Kubernetes shape.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateCondition {
    /// The condition's name, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A machine-readable reason in CamelCase.
    #[serde(default)]
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default)]
    pub last_transition_time: String,
    /// The generation the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl TemplateStatus {
    /// The condition of type `type_`, if any.
    pub fn condition(&self, type_: &str) -> Option<&TemplateCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The embedded manifest, parsed.
///
/// # Errors
///
/// When `manifest.yaml` does not parse (a build-time mistake; the unit tests catch it).
pub fn manifest() -> Result<ManifestData, kubeapp::sdk::manifest::ManifestError> {
    ManifestData::from_yaml(MANIFEST_YAML)
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn the_manifest_parses_and_names_the_kind() {
        let manifest = manifest().expect("manifest.yaml parses");
        assert_eq!(manifest.group, "reconciler.example.kubeapp.dev");
        assert_eq!(manifest.kinds()[0].kind, "Template");
    }

    #[test]
    fn the_type_has_a_status_subresource() {
        let crd = Template::crd();
        assert_eq!(crd.spec.names.kind, "Template");
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
    }

    #[test]
    fn the_sample_is_a_template() {
        let sample: Template =
            serde_saphyr::from_str(include_str!("../samples/template.yaml")).expect("sample");
        assert_eq!(sample.spec.data["greeting"], "hello");
    }
}
