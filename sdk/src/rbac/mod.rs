//! The RBAC an app's operator needs, derived from its manifest.
//!
//! [`RbacBuilder`] produces a ServiceAccount, a ClusterRole (or a Role, for an operator that
//! watches one namespace) and the binding of the role to the ServiceAccount, as k8s-openapi
//! objects ([`OperatorRbac`]) and as YAML ([`OperatorRbac::to_yaml`]).
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_sdk::manifest::ManifestData;
//! use kubeapp_sdk::rbac::{OperatorRole, RbacBuilder};
//!
//! let manifest = ManifestData::from_yaml(r#"
//! appName: gadgets
//! group: gadgets.example.com
//! versions:
//!   - { name: v1, kinds: [{ kind: Gadget, plural: gadgets }] }
//! "#)?;
//! let rbac = RbacBuilder::new(&manifest)
//!     .service_account("gadgets-operator", "gadgets-system")
//!     .unmanaged::<ConfigMap>()
//!     .build()?;
//! assert!(matches!(rbac.role, OperatorRole::Cluster { .. }));
//! let first = &rbac.rules()[0];
//! assert_eq!(first.api_groups.as_deref(), Some(&["gadgets.example.com".to_string()][..]));
//! assert_eq!(first.resources.as_deref(), Some(&["gadgets".to_string()][..]));
//! let yaml = rbac.to_yaml()?;
//! assert!(yaml.contains("kind: ClusterRoleBinding"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The rules, in this order
//!
//! 1. The manifest's kinds (its group, every plural): `get`, `list`, `watch`, `create`, `update`,
//!    `patch`, `delete`. The operator reads and writes the objects it owns, and patches their
//!    `metadata.finalizers` (opinionated watchers and reconcilers) through the object itself.
//! 2. `{plural}/status` of the same kinds: `get`, `update`, `patch` (reconcilers write status).
//! 3. `{plural}/finalizers` of the same kinds: `update`, `patch` (needed to set owner references
//!    with `blockOwnerDeletion` on objects the operator creates, where the apiserver enforces it).
//! 4. Unmanaged kinds, grouped by API group: `get`, `list`, `watch`; for those registered with
//!    [`RbacBuilder::unmanaged_opinionated`] also `update`, `patch` (an opinionated watcher adds
//!    its finalizer to them). A kind of the manifest given here again adds nothing.
//!    Kinds the operator owns as children ([`RbacBuilder::owned`]), grouped by API group: the
//!    verbs of managed kinds (it creates, updates and deletes them).
//! 5. `extraPermissions.accessKinds`, one rule each, verbs exactly as the manifest lists them.
//! 6. `events` in the core group and in `events.k8s.io`: `create`, `patch` (event recorders
//!    create events, and patch them to count repeats).
//! 7. `leases` in `coordination.k8s.io`: `get`, `create`, `update` (leader election).
//! 8. With [`RbacBuilder::reviews_tokens`] (an operator run with `--metrics-auth`):
//!    `tokenreviews` in `authentication.k8s.io` and `subjectaccessreviews` in
//!    `authorization.k8s.io`: `create`.
//!
//! Objects are named [`RbacBuilder::name`] (default `{appName}-operator`, also the default
//! ServiceAccount name) and labelled `app.kubernetes.io/name: {appName}` and
//! `app.kubernetes.io/component: operator`.
//!
//! [`gate_users_role`] is the role of the people who gate a phase machine's objects (`kubeapp
//! promote` and friends): `get`, `list`, `watch`, `patch` on the manifest's kinds.
//!
//! With [`RoleScope::Namespace`] the same rules go into a Role and RoleBinding in that namespace.
//! A Role cannot grant cluster-scoped resources, so a manifest with a `Cluster` kind is an error
//! there; leases and events are then granted in that namespace only.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::Resource;
use kube::api::ObjectMeta;

use crate::manifest::{ManifestData, ManifestError, Scope};

/// Verbs on the kinds the app owns.
pub(crate) const MANAGED_VERBS: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
/// Verbs on the status subresource of the kinds the app owns.
pub(crate) const STATUS_VERBS: &[&str] = &["get", "update", "patch"];
/// Verbs on the finalizers subresource of the kinds the app owns.
pub(crate) const FINALIZER_VERBS: &[&str] = &["update", "patch"];
/// Verbs on kinds the operator only watches.
pub(crate) const WATCH_VERBS: &[&str] = &["get", "list", "watch"];
/// Verbs on kinds the operator watches and puts finalizers on.
pub(crate) const OPINIONATED_WATCH_VERBS: &[&str] = &["get", "list", "watch", "update", "patch"];
/// Verbs on events.
pub(crate) const EVENT_VERBS: &[&str] = &["create", "patch"];
/// Verbs on leases.
pub(crate) const LEASE_VERBS: &[&str] = &["get", "create", "update"];
/// Verbs on token and access reviews (`--metrics-auth`).
pub(crate) const REVIEW_VERBS: &[&str] = &["create"];

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Where the operator's role applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RoleScope {
    /// The whole cluster: a ClusterRole and ClusterRoleBinding (the default).
    #[default]
    Cluster,
    /// One namespace: a Role and RoleBinding there.
    Namespace(String),
}

/// A resource the operator watches but does not own, as its RBAC rules see it (group and plural).
/// (`simple::UnmanagedKind` is the typed kind an app declares; this is what RBAC needs of it.)
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WatchedResource {
    /// Its API group (empty for the core group).
    pub group: String,
    /// Its resource (plural).
    pub plural: String,
    /// Whether the operator also puts finalizers on it (an opinionated watcher or reconciler).
    pub opinionated: bool,
}

/// Builds the RBAC an app's operator needs; see the [module docs](self) for the rules.
#[derive(Clone, Debug)]
pub struct RbacBuilder<'m> {
    manifest: &'m ManifestData,
    name: Option<String>,
    service_account: Option<(String, String)>,
    scope: RoleScope,
    unmanaged: Vec<WatchedResource>,
    /// `(group, plural)` of kinds the operator creates as children.
    owned: Vec<(String, String)>,
    /// Whether the operator reviews bearer tokens on its metrics port (`--metrics-auth`).
    reviews_tokens: bool,
}

impl<'m> RbacBuilder<'m> {
    /// A builder for the RBAC of `manifest`'s operator.
    pub fn new(manifest: &'m ManifestData) -> Self {
        Self {
            manifest,
            name: None,
            service_account: None,
            scope: RoleScope::Cluster,
            unmanaged: Vec::new(),
            owned: Vec::new(),
            reviews_tokens: false,
        }
    }

    /// The operator authenticates its metrics port (`--metrics-auth`): `create` on
    /// `tokenreviews` and `subjectaccessreviews` (rule 8). Both are cluster-scoped: a Role cannot
    /// grant them ([`RbacError::ClusterScopedKindInRole`]).
    #[must_use]
    pub fn reviews_tokens(mut self) -> Self {
        self.reviews_tokens = true;
        self
    }

    /// The name of the role and binding (default `{appName}-operator`).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The operator's ServiceAccount (default: named like the role, in namespace `default`).
    #[must_use]
    pub fn service_account(
        mut self,
        name: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Self {
        self.service_account = Some((name.into(), namespace.into()));
        self
    }

    /// Cluster-wide (default) or one namespace.
    #[must_use]
    pub fn scope(mut self, scope: RoleScope) -> Self {
        self.scope = scope;
        self
    }

    /// The operator watches `K` (get, list, watch).
    #[must_use]
    pub fn unmanaged<K: Resource<DynamicType = ()>>(self) -> Self {
        self.unmanaged_kind(WatchedResource {
            group: K::group(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            opinionated: false,
        })
    }

    /// The operator watches `K` and manages a finalizer on it (get, list, watch, update, patch).
    #[must_use]
    pub fn unmanaged_opinionated<K: Resource<DynamicType = ()>>(self) -> Self {
        self.unmanaged_kind(WatchedResource {
            group: K::group(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            opinionated: true,
        })
    }

    /// The operator creates, updates and deletes objects of `K` it owns (children such as the
    /// ConfigMaps a reconciler renders), and watches them (get, list, watch, create, update,
    /// patch, delete).
    #[must_use]
    pub fn owned<K: Resource<DynamicType = ()>>(mut self) -> Self {
        self.owned
            .push((K::group(&()).into_owned(), K::plural(&()).into_owned()));
        self
    }

    /// The operator watches a kind known only by group and plural (e.g. a `DynamicObject` kind).
    #[must_use]
    pub fn unmanaged_kind(mut self, kind: WatchedResource) -> Self {
        self.unmanaged.push(kind);
        self
    }

    /// Builds the ServiceAccount, the role and its binding.
    pub fn build(&self) -> Result<OperatorRbac, RbacError> {
        self.manifest.validate()?;
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-operator", self.manifest.app_name));
        let (sa_name, sa_namespace) = self
            .service_account
            .clone()
            .unwrap_or_else(|| (name.clone(), "default".into()));
        let rules = self.rules()?;
        let labels = BTreeMap::from([
            (
                "app.kubernetes.io/name".to_string(),
                self.manifest.app_name.clone(),
            ),
            (
                "app.kubernetes.io/component".to_string(),
                "operator".to_string(),
            ),
        ]);
        let meta = |namespace: Option<&str>, name: &str| ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(str::to_string),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        };
        let subjects = vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa_name.clone(),
            namespace: Some(sa_namespace.clone()),
            api_group: None,
        }];
        let service_account = ServiceAccount {
            metadata: meta(Some(&sa_namespace), &sa_name),
            ..ServiceAccount::default()
        };
        let role = match &self.scope {
            RoleScope::Cluster => OperatorRole::Cluster {
                role: ClusterRole {
                    metadata: meta(None, &name),
                    rules: Some(rules),
                    aggregation_rule: None,
                },
                binding: ClusterRoleBinding {
                    metadata: meta(None, &name),
                    role_ref: role_ref("ClusterRole", &name),
                    subjects: Some(subjects),
                },
            },
            RoleScope::Namespace(namespace) => OperatorRole::Namespaced {
                role: Role {
                    metadata: meta(Some(namespace), &name),
                    rules: Some(rules),
                },
                binding: RoleBinding {
                    metadata: meta(Some(namespace), &name),
                    role_ref: role_ref("Role", &name),
                    subjects: Some(subjects),
                },
            },
        };
        Ok(OperatorRbac {
            service_account,
            role,
        })
    }

    /// The policy rules, in the order of the module docs.
    pub fn rules(&self) -> Result<Vec<PolicyRule>, RbacError> {
        let manifest = self.manifest;
        let kinds = manifest.kinds();
        if let RoleScope::Namespace(namespace) = &self.scope
            && let Some(kind) = kinds.iter().find(|k| k.scope == Scope::Cluster)
        {
            return Err(RbacError::ClusterScopedKindInRole {
                kind: kind.kind.to_string(),
                namespace: namespace.clone(),
            });
        }
        let plurals: BTreeSet<String> = kinds.iter().map(|k| k.plural.clone()).collect();
        let mut rules = Vec::new();
        if !plurals.is_empty() {
            let group = [manifest.group.as_str()];
            let with_suffix = |suffix: &str| -> Vec<String> {
                plurals.iter().map(|p| format!("{p}{suffix}")).collect()
            };
            rules.push(rule(&group, with_suffix(""), MANAGED_VERBS));
            rules.push(rule(&group, with_suffix("/status"), STATUS_VERBS));
            rules.push(rule(&group, with_suffix("/finalizers"), FINALIZER_VERBS));
        }
        rules.extend(self.unmanaged_rules(&plurals));
        rules.extend(self.owned_rules(&plurals));
        if let Some(extra) = &manifest.extra_permissions {
            for access in &extra.access_kinds {
                let verbs: Vec<&str> = access.actions.iter().map(String::as_str).collect();
                rules.push(rule(
                    &[access.group.as_str()],
                    vec![access.resource.clone()],
                    &verbs,
                ));
            }
        }
        rules.push(rule(
            &["", "events.k8s.io"],
            vec!["events".into()],
            EVENT_VERBS,
        ));
        rules.push(rule(
            &["coordination.k8s.io"],
            vec!["leases".into()],
            LEASE_VERBS,
        ));
        if self.reviews_tokens {
            if let RoleScope::Namespace(namespace) = &self.scope {
                return Err(RbacError::ClusterScopedKindInRole {
                    kind: "TokenReview".into(),
                    namespace: namespace.clone(),
                });
            }
            rules.push(rule(
                &["authentication.k8s.io"],
                vec!["tokenreviews".into()],
                REVIEW_VERBS,
            ));
            rules.push(rule(
                &["authorization.k8s.io"],
                vec!["subjectaccessreviews".into()],
                REVIEW_VERBS,
            ));
        }
        Ok(rules)
    }

    /// One rule per group of owned children, plurals sorted; managed kinds left out.
    fn owned_rules(&self, managed_plurals: &BTreeSet<String>) -> Vec<PolicyRule> {
        let mut grouped: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (group, plural) in &self.owned {
            if !(*group == self.manifest.group && managed_plurals.contains(plural)) {
                grouped.entry(group).or_default().insert(plural);
            }
        }
        grouped
            .into_iter()
            .map(|(group, plurals)| {
                rule(
                    &[group],
                    plurals.into_iter().map(str::to_string).collect(),
                    MANAGED_VERBS,
                )
            })
            .collect()
    }

    /// One rule per (group, opinionated) with the plurals sorted; managed kinds left out.
    fn unmanaged_rules(&self, managed_plurals: &BTreeSet<String>) -> Vec<PolicyRule> {
        let mut grouped: BTreeMap<(bool, &str), BTreeSet<&str>> = BTreeMap::new();
        for kind in &self.unmanaged {
            let managed =
                kind.group == self.manifest.group && managed_plurals.contains(&kind.plural);
            if !managed {
                grouped
                    .entry((kind.opinionated, kind.group.as_str()))
                    .or_default()
                    .insert(kind.plural.as_str());
            }
        }
        grouped
            .into_iter()
            .map(|((opinionated, group), plurals)| {
                let verbs = if opinionated {
                    OPINIONATED_WATCH_VERBS
                } else {
                    WATCH_VERBS
                };
                rule(
                    &[group],
                    plurals.into_iter().map(str::to_string).collect(),
                    verbs,
                )
            })
            .collect()
    }
}

fn rule(groups: &[&str], resources: Vec<String>, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|g| (*g).to_string()).collect()),
        resources: Some(resources),
        verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
        resource_names: None,
        non_resource_urls: None,
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
    }
}

/// What an operator needs to run under its own identity; see [`RbacBuilder`].
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorRbac {
    /// The identity the operator runs as.
    pub service_account: ServiceAccount,
    /// Its role and the binding to the ServiceAccount.
    pub role: OperatorRole,
}

/// A ClusterRole or a Role, with its binding.
#[derive(Clone, Debug, PartialEq)]
pub enum OperatorRole {
    /// Cluster-wide.
    Cluster {
        /// The rules.
        role: ClusterRole,
        /// Binds `role` to the ServiceAccount.
        binding: ClusterRoleBinding,
    },
    /// In one namespace.
    Namespaced {
        /// The rules.
        role: Role,
        /// Binds `role` to the ServiceAccount.
        binding: RoleBinding,
    },
}

impl OperatorRbac {
    /// The role's rules.
    pub fn rules(&self) -> &[PolicyRule] {
        let rules = match &self.role {
            OperatorRole::Cluster { role, .. } => &role.rules,
            OperatorRole::Namespaced { role, .. } => &role.rules,
        };
        rules.as_deref().unwrap_or_default()
    }

    /// The ServiceAccount, the role and the binding as one YAML stream, for `kubectl apply`.
    pub fn to_yaml(&self) -> Result<String, RbacError> {
        let to_value = |v: Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| RbacError::Yaml {
                message: e.to_string(),
            })
        };
        let mut docs = vec![to_value(serde_json::to_value(&self.service_account))?];
        match &self.role {
            OperatorRole::Cluster { role, binding } => {
                docs.push(to_value(serde_json::to_value(role))?);
                docs.push(to_value(serde_json::to_value(binding))?);
            }
            OperatorRole::Namespaced { role, binding } => {
                docs.push(to_value(serde_json::to_value(role))?);
                docs.push(to_value(serde_json::to_value(binding))?);
            }
        }
        crate::manifest::to_yaml_documents(&docs).map_err(|message| RbacError::Yaml { message })
    }
}

/// Why the RBAC of a manifest could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RbacError {
    /// The manifest itself is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A Role (one namespace) cannot grant a cluster-scoped kind.
    #[error(
        "kind {kind} is cluster-scoped, which a Role in namespace {namespace} cannot grant; \
         use RoleScope::Cluster"
    )]
    ClusterScopedKindInRole {
        /// The kind.
        kind: String,
        /// The namespace of the Role.
        namespace: String,
    },
    /// The objects could not be written as YAML.
    #[error("writing RBAC as YAML: {message}")]
    Yaml {
        /// The serializer's message.
        message: String,
    },
}

mod gates;

pub use gates::{GATE_USER_VERBS, gate_users_role};

#[cfg(test)]
mod tests;
