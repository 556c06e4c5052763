//! Version `v1` of `Template`, the storage version: the ConfigMap's data as a map from key to
//! value. The reconciler works with this version; objects created or read as `v2` are converted
//! by the conversion webhook ([`crate::convert`]).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TemplateStatus;

/// The spec of a `v1` `Template`: the data of the ConfigMap to render.
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
