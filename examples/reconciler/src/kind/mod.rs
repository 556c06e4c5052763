//! The example's custom kind, `Template`, in two versions, and its embedded app manifest.
//!
//! A `Template` (group `reconciler.example.kubeapp.dev`, namespaced) carries the data of a
//! ConfigMap in its spec; its status (a subresource) reports the generation the operator last
//! reconciled and a `Ready` condition. Two versions are served:
//!
//! - [`v1`] (stored): `spec.data`, a map from key to value. [`Template`] is this version; the
//!   reconciler, the validator and the mutator work with it.
//! - [`v2`]: `spec.entries`, a list of `{key, value}`; converted to and from `v1` by the
//!   conversion webhook ([`crate::convert`]).
//!
//! The status has the same shape in both versions ([`TemplateStatus`]).

pub mod v1;
pub mod v2;

use kubeapp::sdk::manifest::ManifestData;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use v1::{Template, TemplateSpec};

/// The app manifest, embedded from `manifest.yaml` in the crate directory.
pub const MANIFEST_YAML: &str = include_str!("../../manifest.yaml");

/// The name of the `Ready` condition.
pub const READY: &str = "Ready";

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
            serde_saphyr::from_str(include_str!("../../samples/template.yaml")).expect("sample");
        assert_eq!(sample.spec.data["greeting"], "hello");
        let sample: v2::Template =
            serde_saphyr::from_str(include_str!("../../samples/template-v2.yaml")).expect("v2");
        assert_eq!(sample.spec.entries[0].key, "farewell");
    }
}
