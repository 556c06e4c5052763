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

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kubeapp::operator::apply::conditions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use v1::{Template, TemplateSpec};

/// The app manifest, embedded from `manifest.yaml` in the crate directory.
pub const MANIFEST_YAML: &str = include_str!("../../manifest.yaml");

/// What the operator reports about a `Template`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStatus {
    /// The `metadata.generation` of the object the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The conditions (`metav1.Condition`, one per type); the operator sets `Ready`, and the
    /// conditions other writers set are kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use kubeapp::sdk::manifest::ManifestData;

    use super::*;

    #[test]
    fn the_manifest_parses_and_names_the_kind() {
        let manifest = ManifestData::from_yaml(MANIFEST_YAML).expect("manifest.yaml parses");
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
    fn the_conditions_are_a_list_map_keyed_by_type() {
        // So a server-side status apply by another field manager keeps this operator's `Ready`,
        // and this operator's apply keeps theirs.
        for crd in [Template::crd(), v2::Template::crd()] {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
            let conditions =
                &schema["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"];
            assert_eq!(conditions["x-kubernetes-list-type"], "map", "{conditions}");
            assert_eq!(
                conditions["x-kubernetes-list-map-keys"],
                serde_json::json!(["type"]),
                "{conditions}"
            );
        }
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
