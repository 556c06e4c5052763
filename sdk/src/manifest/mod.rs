//! The app manifest: which kinds an app owns, in which versions, with which capabilities.
//!
//! [`ManifestData`] mirrors the app manifest of Go's grafana-app-sdk field for field (camelCase
//! names: `appName`, `group`, `versions[].kinds[]`, `preferredVersion`, `extraPermissions`), so a
//! manifest written for the Go SDK loads here unchanged. From a manifest the SDK derives the
//! CustomResourceDefinitions of its kinds ([`crate::crd`]) and the RBAC its operator needs
//! ([`crate::rbac`]).
//!
//! ```
//! use kubeapp_sdk::manifest::{ManifestData, Scope};
//!
//! let manifest = ManifestData::from_yaml(
//!     r#"
//! appName: gadgets
//! group: gadgets.example.com
//! preferredVersion: v1
//! versions:
//!   - name: v1
//!     served: true
//!     kinds:
//!       - kind: Gadget
//!         plural: gadgets
//!         scope: Namespaced
//!         admission:
//!           validation:
//!             operations: [CREATE, UPDATE]
//! "#,
//! )?;
//! assert_eq!(manifest.app_name, "gadgets");
//! let kinds = manifest.kinds();
//! assert_eq!(kinds[0].kind, "Gadget");
//! assert_eq!(kinds[0].scope, Scope::Namespaced);
//!
//! // The same manifest as JSON, and back.
//! let json = manifest.to_json()?;
//! assert_eq!(ManifestData::from_json(&json)?, manifest);
//! # Ok::<(), kubeapp_sdk::manifest::ManifestError>(())
//! ```
//!
//! # Loading
//!
//! - [`ManifestData::from_file`]: JSON when the name ends in `.json`, YAML for `.yaml`/`.yml`, and
//!   otherwise guessed from the content (a document starting with `{` is JSON).
//! - [`ManifestData::from_json`], [`ManifestData::from_yaml`], [`ManifestData::from_embedded`]
//!   (guesses the format): for a manifest compiled into the binary with `include_str!`.
//!
//! Every loader validates the manifest ([`ManifestData::validate`]) before returning it. Errors
//! ([`ManifestError`]) name where the problem is: the file (or `<embedded manifest>`), the line and
//! column when the parser knows them, and the field path, e.g.
//! `manifest.yaml:7:16: versions[0].kinds[0].scope: unknown variant `Global`, expected
//! `Namespaced` or `Cluster``.
//!
//! # Where this differs from the Go SDK, and why
//!
//! - `served` defaults to `true` when absent (Go's zero value is `false`): a version listed in a
//!   manifest is meant to be served unless it says otherwise.
//! - `scope` defaults to `Namespaced` when absent (Go treats every value other than `Cluster` as
//!   namespaced); any value other than the two is an error here rather than a silent default.
//! - Fields this SDK does not use (`operator`, `routes`, `selectableFields`,
//!   `additionalPrinterColumns`) are accepted and ignored, so Go manifests load; they are not
//!   written back when the manifest is serialized.
//! - `schema` is kept as opaque JSON; [`crate::crd`] explains which shapes it understands.

mod format;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub(crate) use self::format::PLAIN_ORIGIN;
pub use self::format::to_yaml_documents;
pub use self::format::{Format, ManifestError, ManifestProblem};

/// The data of an app manifest: the app's name and group, its versions and kinds, and the extra
/// permissions its operator needs. Field names (in JSON and YAML) are those of the Go SDK.
///
/// Usually loaded from a file or an embedded string (see the [module docs](self)); it can also be
/// written in code, then [`validate`](Self::validate) it:
///
/// ```
/// use kubeapp_sdk::manifest::{ManifestData, ManifestVersion, ManifestVersionKind, Scope};
///
/// let manifest = ManifestData {
///     app_name: "gadgets".into(),
///     group: "gadgets.example.com".into(),
///     versions: vec![ManifestVersion {
///         name: "v1".into(),
///         served: true,
///         kinds: vec![ManifestVersionKind {
///             kind: "Gadget".into(),
///             scope: Scope::Namespaced,
///             ..ManifestVersionKind::default()
///         }],
///     }],
///     ..ManifestData::default()
/// };
/// manifest.validate()?;
/// assert_eq!(manifest.storage_version(), Some("v1"));
/// assert_eq!(manifest.kinds()[0].plural, "gadgets");
/// assert!(manifest.to_yaml()?.contains("appName: gadgets"));
/// # Ok::<(), kubeapp_sdk::manifest::ManifestError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestData {
    /// The app's unique name; it names the operator's RBAC objects and finalizers.
    pub app_name: String,
    /// The API group of every kind the app owns, e.g. `gadgets.example.com`.
    pub group: String,
    /// The versions of the group, oldest first.
    #[serde(default)]
    pub versions: Vec<ManifestVersion>,
    /// The version clients should use and the CRDs store; when empty, the last version listed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub preferred_version: String,
    /// Permissions for kinds the app does not own that its operator needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_permissions: Option<Permissions>,
}

/// One version of the app's group and the kinds it has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestVersion {
    /// The version name, e.g. `v1` or `v1alpha1`.
    pub name: String,
    /// Whether the apiserver serves this version (default `true`).
    #[serde(default = "served_by_default")]
    pub served: bool,
    /// The kinds that exist in this version.
    #[serde(default)]
    pub kinds: Vec<ManifestVersionKind>,
}

fn served_by_default() -> bool {
    true
}

/// A kind as it exists in one version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestVersionKind {
    /// The kind, CamelCase, e.g. `Gadget`.
    pub kind: String,
    /// The resource name, lowercase, e.g. `gadgets`; see [`effective_plural`](Self::effective_plural)
    /// for the default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plural: String,
    /// Whether objects live in a namespace or in the cluster; the same in every version.
    #[serde(default)]
    pub scope: Scope,
    /// The admission capabilities (validation, mutation) of this version of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionCapabilities>,
    /// The kind's OpenAPI v3 schema, used for its CRD when no Rust type is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// Whether the app converts this kind between versions (a conversion webhook).
    #[serde(default)]
    pub conversion: bool,
}

impl ManifestVersionKind {
    /// The plural: `plural` when given, otherwise the lowercased kind followed by `s` (the Go
    /// SDK's default).
    pub fn effective_plural(&self) -> String {
        if self.plural.is_empty() {
            format!("{}s", self.kind.to_lowercase())
        } else {
            self.plural.clone()
        }
    }
}

/// Where objects of a kind live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// In a namespace.
    #[default]
    Namespaced,
    /// In the cluster, outside any namespace.
    Cluster,
}

impl Scope {
    /// The name Kubernetes uses: `Namespaced` or `Cluster`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Namespaced => "Namespaced",
            Scope::Cluster => "Cluster",
        }
    }
}

/// The admission capabilities of a kind version. An absent capability, or one with no
/// operations, means the app does not offer it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCapabilities {
    /// Validation (a validating admission webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ValidationCapability>,
    /// Mutation (a mutating admission webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation: Option<MutationCapability>,
}

impl AdmissionCapabilities {
    /// True when validation is offered for at least one operation.
    pub fn supports_any_validation(&self) -> bool {
        self.validation
            .as_ref()
            .is_some_and(|v| !v.operations.is_empty())
    }

    /// True when mutation is offered for at least one operation.
    pub fn supports_any_mutation(&self) -> bool {
        self.mutation
            .as_ref()
            .is_some_and(|m| !m.operations.is_empty())
    }
}

/// The operations a kind is validated on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationCapability {
    /// The operations; empty means no validation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<AdmissionOperation>,
}

/// The operations a kind is mutated on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MutationCapability {
    /// The operations; empty means no mutation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<AdmissionOperation>,
}

/// An admission operation, spelled as in Kubernetes admission reviews.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AdmissionOperation {
    /// Every operation (`*`).
    #[serde(rename = "*")]
    Any,
    /// `CREATE`.
    #[serde(rename = "CREATE")]
    Create,
    /// `UPDATE`.
    #[serde(rename = "UPDATE")]
    Update,
    /// `DELETE`.
    #[serde(rename = "DELETE")]
    Delete,
    /// `CONNECT`.
    #[serde(rename = "CONNECT")]
    Connect,
}

/// Extra permissions: access to kinds the app does not own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    /// One entry per resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_kinds: Vec<KindPermission>,
}

/// Access to one resource of one API group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindPermission {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The resource (plural), optionally with a subresource: `configmaps`, `pods/log`.
    pub resource: String,
    /// The RBAC verbs granted, e.g. `get`, `list`, `watch`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

/// A kind of the manifest across all versions it appears in; see [`ManifestData::kinds`].
#[derive(Clone, Debug, PartialEq)]
pub struct ManifestKind<'a> {
    /// The kind, e.g. `Gadget`.
    pub kind: &'a str,
    /// Its plural (see [`ManifestVersionKind::effective_plural`]).
    pub plural: String,
    /// Its scope.
    pub scope: Scope,
    /// Whether the app converts it between versions.
    pub conversion: bool,
    /// The versions it appears in, in manifest order.
    pub versions: Vec<ManifestKindVersion<'a>>,
}

/// One version of a [`ManifestKind`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ManifestKindVersion<'a> {
    /// The version.
    pub version: &'a ManifestVersion,
    /// The kind's entry in that version.
    pub kind: &'a ManifestVersionKind,
}

impl ManifestData {
    /// Loads, parses and validates a manifest file, JSON or YAML (see the [module docs](self)).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ManifestError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let format = Format::from_path(path).unwrap_or_else(|| Format::detect(&text));
        format::parse(&text, format, &path.display().to_string())
    }

    /// Parses and validates a JSON manifest.
    pub fn from_json(text: &str) -> Result<Self, ManifestError> {
        format::parse(text, Format::Json, PLAIN_ORIGIN)
    }

    /// Parses and validates a YAML manifest.
    pub fn from_yaml(text: &str) -> Result<Self, ManifestError> {
        format::parse(text, Format::Yaml, PLAIN_ORIGIN)
    }

    /// Parses and validates a manifest compiled into the binary, JSON or YAML (guessed from the
    /// content): `ManifestData::from_embedded(include_str!("../manifest.yaml"))`.
    pub fn from_embedded(text: &str) -> Result<Self, ManifestError> {
        format::parse(text, Format::detect(text), PLAIN_ORIGIN)
    }

    /// Parses and validates a manifest in a known format; `origin` names it in errors.
    pub fn parse(text: &str, format: Format, origin: &str) -> Result<Self, ManifestError> {
        format::parse(text, format, origin)
    }

    /// The manifest as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String, ManifestError> {
        serde_json::to_string_pretty(self).map_err(|e| ManifestError::Serialize {
            format: Format::Json,
            message: e.to_string(),
        })
    }

    /// The manifest as YAML.
    pub fn to_yaml(&self) -> Result<String, ManifestError> {
        serde_saphyr::to_string(self).map_err(|e| ManifestError::Serialize {
            format: Format::Yaml,
            message: e.to_string(),
        })
    }

    /// Checks the manifest's own consistency: every problem found, each with its field path.
    ///
    /// Problems: empty `appName` or `group`, a `group` that is not a lowercase DNS name with a dot, no
    /// versions, empty or duplicate version names, empty or duplicate kinds within a version,
    /// a kind whose plural, scope or conversion differs between versions, a plural that is not a
    /// lowercase DNS label, a `preferredVersion` that is not among the versions, and
    /// `extraPermissions` entries without a resource or actions.
    pub fn validate(&self) -> Result<(), ManifestError> {
        self.validate_from(PLAIN_ORIGIN)
    }

    pub(crate) fn validate_from(&self, origin: &str) -> Result<(), ManifestError> {
        let problems = validate::problems(self);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ManifestError::Invalid {
                origin: origin.to_string(),
                problems,
            })
        }
    }

    /// The version objects are stored in: `preferredVersion`, or the last version listed when it
    /// is empty. `None` only for a manifest without versions.
    pub fn storage_version(&self) -> Option<&str> {
        if self.preferred_version.is_empty() {
            self.versions.last().map(|v| v.name.as_str())
        } else {
            Some(self.preferred_version.as_str())
        }
    }

    /// Every kind of the manifest once, in order of first appearance, with the versions it
    /// appears in. Plural, scope and conversion come from the kind's first version (validation
    /// ensures they agree across versions).
    pub fn kinds(&self) -> Vec<ManifestKind<'_>> {
        let mut order: Vec<&str> = Vec::new();
        let mut by_kind: BTreeMap<&str, ManifestKind<'_>> = BTreeMap::new();
        for version in &self.versions {
            for kind in &version.kinds {
                let entry = by_kind.entry(kind.kind.as_str()).or_insert_with(|| {
                    order.push(kind.kind.as_str());
                    ManifestKind {
                        kind: kind.kind.as_str(),
                        plural: kind.effective_plural(),
                        scope: kind.scope,
                        conversion: kind.conversion,
                        versions: Vec::new(),
                    }
                });
                entry.versions.push(ManifestKindVersion { version, kind });
            }
        }
        order
            .into_iter()
            .filter_map(|kind| by_kind.remove(kind))
            .collect()
    }

    /// The webhooks the manifest declares, one entry per kind that has any, as
    /// `Kind: validation, mutation, conversion` (in that order, only those declared; conversion
    /// counts only for a kind in more than one version). Empty when the app needs no webhook
    /// server.
    pub fn declared_webhooks(&self) -> Vec<String> {
        self.kinds()
            .iter()
            .filter_map(|kind| {
                let admission = || {
                    kind.versions
                        .iter()
                        .filter_map(|v| v.kind.admission.as_ref())
                };
                let mut capabilities = Vec::new();
                if admission().any(AdmissionCapabilities::supports_any_validation) {
                    capabilities.push("validation");
                }
                if admission().any(AdmissionCapabilities::supports_any_mutation) {
                    capabilities.push("mutation");
                }
                if kind.conversion && kind.versions.len() > 1 {
                    capabilities.push("conversion");
                }
                (!capabilities.is_empty())
                    .then(|| format!("{}: {}", kind.kind, capabilities.join(", ")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
