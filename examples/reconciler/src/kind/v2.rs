//! Version `v2` of `Template`: the same content reshaped, the ConfigMap's data as a list of
//! `{key, value}` entries (the shape many configuration formats use, and one that can carry a
//! per-entry field later). Served but not stored: the apiserver stores `v1` and the conversion
//! webhook ([`crate::convert`]) translates in both directions.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TemplateStatus;

/// The spec of a `v2` `Template`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "reconciler.example.kubeapp.dev",
    version = "v2",
    kind = "Template",
    plural = "templates",
    namespaced,
    status = "TemplateStatus",
    shortname = "tpl",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
pub struct TemplateSpec {
    /// The entries of the rendered ConfigMap, one per key (keys must be unique).
    #[serde(default)]
    pub entries: Vec<Entry>,
}

/// One key of the rendered ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Entry {
    /// The ConfigMap key.
    pub key: String,
    /// Its value.
    pub value: String,
}
