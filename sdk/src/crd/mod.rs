//! CustomResourceDefinitions for a manifest's kinds, with schemas from the Rust types.
//!
//! [`CrdBuilder`] takes a [`ManifestData`] and the Rust type of each kind version (a
//! `#[derive(CustomResource)]` type, one per version, usually in modules `v1`, `v2`, ...), and
//! builds one CRD per kind that serves all the kind's versions:
//!
//! ```
//! use kubeapp_sdk::crd::CrdBuilder;
//! use kubeapp_sdk::manifest::ManifestData;
//!
//! mod v1 {
//!     #[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//!     #[kube(group = "gadgets.example.com", version = "v1", kind = "Gadget", namespaced)]
//!     pub struct GadgetSpec { pub size: i32 }
//! }
//! mod v2 {
//!     #[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//!     #[kube(group = "gadgets.example.com", version = "v2", kind = "Gadget", namespaced,
//!            status = "GadgetStatus")]
//!     pub struct GadgetSpec { pub size: i32, pub color: String }
//!     #[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//!     pub struct GadgetStatus { pub ready: bool }
//! }
//!
//! let manifest = ManifestData::from_yaml(r#"
//! appName: gadgets
//! group: gadgets.example.com
//! preferredVersion: v2
//! versions:
//!   - { name: v1, kinds: [{ kind: Gadget, plural: gadgets }] }
//!   - { name: v2, kinds: [{ kind: Gadget, plural: gadgets }] }
//! "#)?;
//! let crds = CrdBuilder::new(&manifest)
//!     .kind::<v1::Gadget>()
//!     .kind::<v2::Gadget>()
//!     .build()?;
//! assert_eq!(crds.len(), 1);
//! let spec = &crds[0].spec;
//! assert_eq!(crds[0].metadata.name.as_deref(), Some("gadgets.gadgets.example.com"));
//! let storage: Vec<(&str, bool)> =
//!     spec.versions.iter().map(|v| (v.name.as_str(), v.storage)).collect();
//! assert_eq!(storage, [("v1", false), ("v2", true)]);
//! assert!(spec.versions[1].subresources.as_ref().is_some_and(|s| s.status.is_some()));
//! println!("{}", kubeapp_sdk::crd::to_yaml(&crds)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The rules
//!
//! - One CRD per kind of the manifest, named `{plural}.{group}`, with the kind's scope; its
//!   versions are the manifest versions that list the kind, in manifest order.
//! - A version's schema, subresources and printer columns come from the Rust type registered for
//!   it ([`CrdBuilder::kind`]; schemars through `kube::CustomResourceExt::crd`). The status
//!   subresource is there exactly when the type declares a status (`#[kube(status = "...")]`).
//!   The CRD's names (singular, list kind, short names, categories) come from the type of the
//!   storage version, or else the first type registered, or else are derived from the kind.
//! - A kind version without a Rust type uses the `schema` of the manifest instead; then the
//!   status subresource is enabled when the schema has a `status` property. Accepted shapes of
//!   `schema`: a CRD version's `{openAPIV3Schema: {...}}`; an OpenAPI document
//!   `{components: {schemas: {<Kind>: {...}}}}`; a schemas map `{<Kind>: {...}}`; a schema
//!   object itself (`{type: object, properties: ...}`); or the properties of the kind object
//!   (`{spec: {...}, status: {...}}`). `$ref` is not resolved: it is an error, inline the schema.
//! - `served` is the manifest version's `served`. `storage` is set on the manifest's storage
//!   version ([`ManifestData::storage_version`]: `preferredVersion`, or else the last version);
//!   for a kind that does not exist in that version, on the last version the kind appears in.
//! - A kind with `conversion: true` gets the `Webhook` conversion strategy with the client config
//!   given to [`CrdBuilder::conversion_webhook`]. Without one, the CRD keeps the `None` strategy
//!   (the apiserver only rewrites `apiVersion`) and a warning is logged: the CRD still installs
//!   for development, but objects are not converted.
//!
//! # Errors ([`CrdError`])
//!
//! - the manifest is invalid;
//! - a kind version has neither a Rust type nor a manifest schema;
//! - a type's group differs from the manifest's, its kind or version is not in the manifest, or
//!   its plural or scope differs from the manifest's;
//! - two types are registered for the same kind version;
//! - a manifest schema cannot be read as a CRD schema (the error names the field).

mod schema;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;
use kube::api::ObjectMeta;

use crate::manifest::{ManifestData, ManifestError, ManifestKind, ManifestKindVersion};

/// Builds the CRDs of a manifest's kinds; see the [module docs](self) for the rules.
#[derive(Clone, Debug)]
pub struct CrdBuilder<'m> {
    manifest: &'m ManifestData,
    types: Vec<RegisteredType>,
    conversion_webhook: Option<WebhookClientConfig>,
}

/// A Rust type registered for one kind version, reduced to its generated CRD.
#[derive(Clone, Debug)]
struct RegisteredType {
    type_name: &'static str,
    crd: CustomResourceDefinition,
}

impl RegisteredType {
    fn version(&self) -> Option<&CustomResourceDefinitionVersion> {
        self.crd.spec.versions.first()
    }

    fn version_name(&self) -> &str {
        self.version().map_or("", |v| v.name.as_str())
    }
}

impl<'m> CrdBuilder<'m> {
    /// A builder for the CRDs of `manifest`'s kinds.
    pub fn new(manifest: &'m ManifestData) -> Self {
        Self {
            manifest,
            types: Vec::new(),
            conversion_webhook: None,
        }
    }

    /// Registers `K` as the Rust type of its kind in its version (both from `#[kube(...)]`);
    /// its schema becomes that version's schema.
    #[must_use]
    pub fn kind<K: CustomResourceExt>(mut self) -> Self {
        self.types.push(RegisteredType {
            type_name: std::any::type_name::<K>(),
            crd: K::crd(),
        });
        self
    }

    /// Where the apiserver reaches the conversion webhook of kinds with `conversion: true`
    /// (a Service or a URL, and the CA bundle).
    #[must_use]
    pub fn conversion_webhook(mut self, client_config: WebhookClientConfig) -> Self {
        self.conversion_webhook = Some(client_config);
        self
    }

    /// Builds one CRD per kind of the manifest, in order of first appearance.
    pub fn build(&self) -> Result<Vec<CustomResourceDefinition>, CrdError> {
        self.manifest.validate()?;
        let kinds = self.manifest.kinds();
        let types = self.match_types(&kinds)?;
        kinds
            .iter()
            .map(|kind| self.build_kind(kind, &types))
            .collect()
    }

    /// Checks each registered type against the manifest and indexes them by (kind, version).
    fn match_types(
        &self,
        kinds: &[ManifestKind<'_>],
    ) -> Result<BTreeMap<(String, String), &RegisteredType>, CrdError> {
        let mut by_key: BTreeMap<(String, String), &RegisteredType> = BTreeMap::new();
        for registered in &self.types {
            let spec = &registered.crd.spec;
            let type_name = registered.type_name.to_string();
            if spec.group != self.manifest.group {
                return Err(CrdError::GroupMismatch {
                    type_name,
                    type_group: spec.group.clone(),
                    manifest_group: self.manifest.group.clone(),
                });
            }
            let Some(kind) = kinds.iter().find(|k| k.kind == spec.names.kind) else {
                return Err(CrdError::UnknownKind {
                    type_name,
                    kind: spec.names.kind.clone(),
                    manifest_kinds: kinds.iter().map(|k| k.kind.to_string()).collect(),
                });
            };
            let version = registered.version_name().to_string();
            if !kind.versions.iter().any(|v| v.version.name == version) {
                return Err(CrdError::UnknownVersion {
                    type_name,
                    kind: kind.kind.to_string(),
                    version,
                    manifest_versions: kind
                        .versions
                        .iter()
                        .map(|v| v.version.name.clone())
                        .collect(),
                });
            }
            if spec.names.plural != kind.plural {
                return Err(CrdError::PluralMismatch {
                    type_name,
                    kind: kind.kind.to_string(),
                    type_plural: spec.names.plural.clone(),
                    manifest_plural: kind.plural.clone(),
                });
            }
            if spec.scope != kind.scope.as_str() {
                return Err(CrdError::ScopeMismatch {
                    type_name,
                    kind: kind.kind.to_string(),
                    type_scope: spec.scope.clone(),
                    manifest_scope: kind.scope.as_str().to_string(),
                });
            }
            let key = (kind.kind.to_string(), version.clone());
            if let Some(first) = by_key.insert(key, registered) {
                return Err(CrdError::DuplicateType {
                    kind: kind.kind.to_string(),
                    version,
                    first: first.type_name.to_string(),
                    second: type_name,
                });
            }
        }
        Ok(by_key)
    }

    fn build_kind(
        &self,
        kind: &ManifestKind<'_>,
        types: &BTreeMap<(String, String), &RegisteredType>,
    ) -> Result<CustomResourceDefinition, CrdError> {
        let storage = self.storage_version_of(kind);
        let mut versions = Vec::with_capacity(kind.versions.len());
        let mut names = None;
        for kv in &kind.versions {
            let key = (kind.kind.to_string(), kv.version.name.clone());
            let mut version = match types.get(&key) {
                Some(registered) => {
                    // Names (short names, categories) of the stored version's type win.
                    if names.is_none() || kv.version.name == storage {
                        names = Some(registered.crd.spec.names.clone());
                    }
                    registered
                        .version()
                        .cloned()
                        .ok_or_else(|| CrdError::MissingType {
                            kind: kind.kind.to_string(),
                            version: kv.version.name.clone(),
                        })?
                }
                None => version_from_manifest_schema(kind, kv)?,
            };
            version.name.clone_from(&kv.version.name);
            version.served = kv.version.served;
            version.storage = kv.version.name == storage;
            versions.push(version);
        }
        Ok(CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some(format!("{}.{}", kind.plural, self.manifest.group)),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: self.manifest.group.clone(),
                names: names.unwrap_or_else(|| default_names(kind)),
                scope: kind.scope.as_str().to_string(),
                versions,
                conversion: self.conversion_for(kind),
                preserve_unknown_fields: None,
            },
            status: None,
        })
    }

    /// The manifest's storage version when the kind exists there, else the kind's last version.
    fn storage_version_of(&self, kind: &ManifestKind<'_>) -> String {
        let preferred = self.manifest.storage_version().unwrap_or_default();
        let mut names = kind.versions.iter().map(|v| v.version.name.as_str());
        if names.clone().any(|name| name == preferred) {
            preferred.to_string()
        } else {
            names.next_back().unwrap_or_default().to_string()
        }
    }

    fn conversion_for(&self, kind: &ManifestKind<'_>) -> Option<CustomResourceConversion> {
        if !kind.conversion || kind.versions.len() < 2 {
            return None;
        }
        match &self.conversion_webhook {
            Some(client_config) => Some(CustomResourceConversion {
                strategy: "Webhook".into(),
                webhook: Some(WebhookConversion {
                    client_config: Some(client_config.clone()),
                    conversion_review_versions: vec!["v1".into()],
                }),
            }),
            None => {
                tracing::warn!(
                    kind = kind.kind,
                    "the manifest declares conversion but no conversion webhook was configured; \
                     the CRD uses the None strategy and objects are not converted"
                );
                None
            }
        }
    }
}

fn default_names(kind: &ManifestKind<'_>) -> CustomResourceDefinitionNames {
    CustomResourceDefinitionNames {
        kind: kind.kind.to_string(),
        plural: kind.plural.clone(),
        singular: Some(kind.kind.to_lowercase()),
        list_kind: Some(format!("{}List", kind.kind)),
        short_names: None,
        categories: None,
    }
}

fn version_from_manifest_schema(
    kind: &ManifestKind<'_>,
    kv: &ManifestKindVersion<'_>,
) -> Result<CustomResourceDefinitionVersion, CrdError> {
    let Some(raw) = &kv.kind.schema else {
        return Err(CrdError::MissingType {
            kind: kind.kind.to_string(),
            version: kv.version.name.clone(),
        });
    };
    let props =
        schema::crd_schema(kind.kind, raw).map_err(|(field, message)| CrdError::InvalidSchema {
            kind: kind.kind.to_string(),
            version: kv.version.name.clone(),
            field,
            message,
        })?;
    let has_status = props
        .properties
        .as_ref()
        .is_some_and(|p| p.contains_key("status"));
    Ok(CustomResourceDefinitionVersion {
        name: kv.version.name.clone(),
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(props),
        }),
        subresources: has_status.then(|| CustomResourceSubresources {
            status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
            scale: None,
        }),
        ..CustomResourceDefinitionVersion::default()
    })
}

/// CRDs as one YAML stream (`---` before each), for `kubectl apply -f -`.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, CrdError> {
    crate::manifest::to_yaml_documents(crds).map_err(|message| CrdError::Yaml { message })
}

/// Why the CRDs of a manifest could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CrdError {
    /// The manifest itself is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A kind version has neither a Rust type nor a schema in the manifest.
    #[error(
        "kind {kind} version {version} has no Rust type (register one with \
         CrdBuilder::kind::<T>()) and no schema in the manifest"
    )]
    MissingType {
        /// The kind.
        kind: String,
        /// The version.
        version: String,
    },
    /// A type's API group is not the manifest's.
    #[error(
        "type {type_name} has group `{type_group}`, but the manifest's group is `{manifest_group}`"
    )]
    GroupMismatch {
        /// The Rust type.
        type_name: String,
        /// Its group.
        type_group: String,
        /// The manifest's group.
        manifest_group: String,
    },
    /// A type's kind is not in the manifest.
    #[error(
        "type {type_name} is kind {kind}, which the manifest does not list (it lists {manifest_kinds:?})"
    )]
    UnknownKind {
        /// The Rust type.
        type_name: String,
        /// Its kind.
        kind: String,
        /// The manifest's kinds.
        manifest_kinds: Vec<String>,
    },
    /// A type's version does not list its kind in the manifest.
    #[error(
        "type {type_name} is kind {kind} version {version}, but the manifest has {kind} only in versions {manifest_versions:?}"
    )]
    UnknownVersion {
        /// The Rust type.
        type_name: String,
        /// Its kind.
        kind: String,
        /// Its version.
        version: String,
        /// The versions the manifest lists the kind in.
        manifest_versions: Vec<String>,
    },
    /// A type's plural is not the manifest's.
    #[error(
        "type {type_name} has plural `{type_plural}`, but the manifest's plural of {kind} is `{manifest_plural}`"
    )]
    PluralMismatch {
        /// The Rust type.
        type_name: String,
        /// Its kind.
        kind: String,
        /// Its plural.
        type_plural: String,
        /// The manifest's plural.
        manifest_plural: String,
    },
    /// A type's scope is not the manifest's.
    #[error("type {type_name} is {type_scope}, but the manifest's {kind} is {manifest_scope}")]
    ScopeMismatch {
        /// The Rust type.
        type_name: String,
        /// Its kind.
        kind: String,
        /// Its scope.
        type_scope: String,
        /// The manifest's scope.
        manifest_scope: String,
    },
    /// Two types were registered for one kind version.
    #[error("kind {kind} version {version} has two types: {first} and {second}")]
    DuplicateType {
        /// The kind.
        kind: String,
        /// The version.
        version: String,
        /// The type registered first.
        first: String,
        /// The type registered second.
        second: String,
    },
    /// A manifest schema cannot be used as a CRD schema.
    #[error("schema of kind {kind} version {version}: {field}: {message}")]
    InvalidSchema {
        /// The kind.
        kind: String,
        /// The version.
        version: String,
        /// The field path inside the schema.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The CRDs could not be written as YAML.
    #[error("writing CRDs as YAML: {message}")]
    Yaml {
        /// The serializer's message.
        message: String,
    },
}

#[cfg(test)]
mod tests;
