//! Checking an app's kinds against each other and against its manifest (contract section 10).
//!
//! Every problem is collected; none stops the check. Problems:
//!
//! - a kind (managed or unmanaged) with both a reconciler and a watcher, or with neither;
//! - an apply/cleanup handler on a kind without the opinionated wrapper (nothing would hold
//!   the deletion until `cleanup` ran);
//! - the same kind (group and kind) added twice;
//! - with a manifest:
//!   - a manifest kind with no managed kind;
//!   - a managed kind that is not in the manifest (a different group counts as not in it).
//!     *Decision:* this is an error, because the manifest is where the kind's CRD, RBAC and
//!     webhooks come from; a kind the app only watches belongs in the unmanaged kinds;
//!   - a capability the manifest declares (validation or mutation in any version of the kind,
//!     or conversion) without the matching handler;
//!   - a handler (validator, mutator, converter) whose capability the manifest does not declare;
//!   - a managed kind whose Rust type is in a version the manifest does not list it in, or has
//!     another plural ([`crate::manifest_match`]; a kind or group that differs is the
//!     "not in the manifest" problem above).
//!
//! Without a manifest only the first two checks apply: handlers are routed, nothing is compared.

use kubeapp_sdk::manifest::ManifestData;

use crate::kinds::KindSpec;
use crate::manifest_match::{self, KindMismatch};

/// An admission or conversion capability of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// A validating admission webhook (a validator).
    Validation,
    /// A mutating admission webhook (a mutator).
    Mutation,
    /// A conversion webhook (a converter).
    Conversion,
}

impl Capability {
    /// The handler that provides the capability.
    pub fn handler(self) -> &'static str {
        match self {
            Capability::Validation => "validator",
            Capability::Mutation => "mutator",
            Capability::Conversion => "converter",
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capability::Validation => "validation",
            Capability::Mutation => "mutation",
            Capability::Conversion => "conversion",
        })
    }
}

/// One thing wrong with an app's configuration; `kind` is `Kind` or `Kind.group`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppProblem {
    /// The manifest has the kind, but no managed kind was added for it.
    #[error("manifest kind {kind} has no managed kind")]
    ManifestKindNotManaged {
        /// The manifest kind.
        kind: String,
    },
    /// A managed kind that the manifest (of `group`) does not list.
    #[error("managed kind {kind} is not in the manifest of group {group}")]
    ManagedKindNotInManifest {
        /// The managed kind.
        kind: String,
        /// The manifest's group.
        group: String,
    },
    /// The manifest declares a capability for the kind, but the kind has no handler for it.
    #[error("{kind}: the manifest declares {capability} but the kind has no {handler}", handler = capability.handler())]
    CapabilityWithoutHandler {
        /// The kind.
        kind: String,
        /// The capability.
        capability: Capability,
    },
    /// The kind has a handler whose capability the manifest does not declare.
    #[error("{kind}: the kind has a {handler} but the manifest does not declare {capability}", handler = capability.handler())]
    HandlerWithoutCapability {
        /// The kind.
        kind: String,
        /// The capability.
        capability: Capability,
    },
    /// The kind has both a reconciler and a watcher.
    #[error("{kind}: has both a reconciler and a watcher; give it one")]
    ReconcilerAndWatcher {
        /// The kind.
        kind: String,
    },
    /// The kind has neither a reconciler nor a watcher.
    #[error("{kind}: has neither a reconciler nor a watcher; give it one")]
    NoHandler {
        /// The kind.
        kind: String,
    },
    /// The kind has an apply/cleanup handler but no opinionated wrapper, whose finalizer is what
    /// guarantees `cleanup` before deletion.
    #[error(
        "{kind}: apply/cleanup needs the opinionated finalizer; do not make the kind plain, or use a reconciler"
    )]
    CleanupWithoutFinalizer {
        /// The kind.
        kind: String,
    },
    /// The kind was added more than once.
    #[error("{kind}: added more than once")]
    DuplicateKind {
        /// The kind.
        kind: String,
    },
    /// A managed kind's Rust type disagrees with the manifest on its version or plural: the
    /// informer would list a resource the CRD does not serve.
    #[error("{0}")]
    KindMismatch(KindMismatch),
}

/// Every problem of `kinds` (managed and unmanaged) and of the managed ones against `manifest`.
pub(crate) fn problems(kinds: &[KindSpec], manifest: Option<&ManifestData>) -> Vec<AppProblem> {
    let mut problems = Vec::new();
    for (index, spec) in kinds.iter().enumerate() {
        let kind = spec.display_name();
        let seen_before = kinds[..index].iter().any(|earlier| {
            earlier.resource.group == spec.resource.group
                && earlier.resource.kind == spec.resource.kind
        });
        if seen_before {
            problems.push(AppProblem::DuplicateKind { kind: kind.clone() });
        }
        if spec.apply_cleanup && !spec.opinionated {
            problems.push(AppProblem::CleanupWithoutFinalizer { kind: kind.clone() });
        }
        match (spec.has_reconciler, spec.has_watcher) {
            (true, true) => problems.push(AppProblem::ReconcilerAndWatcher { kind }),
            (false, false) => problems.push(AppProblem::NoHandler { kind }),
            _ => {}
        }
    }
    if let Some(manifest) = manifest {
        problems.extend(manifest_problems(kinds, manifest));
    }
    problems
}

fn manifest_problems(kinds: &[KindSpec], manifest: &ManifestData) -> Vec<AppProblem> {
    let mut problems = Vec::new();
    let manifest_kinds = manifest.kinds();
    let managed = || kinds.iter().filter(|spec| spec.managed);
    let qualified = |kind: &str| format!("{kind}.{}", manifest.group);
    for manifest_kind in &manifest_kinds {
        let spec = managed().find(|spec| {
            spec.resource.group == manifest.group && spec.resource.kind == manifest_kind.kind
        });
        let Some(spec) = spec else {
            problems.push(AppProblem::ManifestKindNotManaged {
                kind: qualified(manifest_kind.kind),
            });
            continue;
        };
        let admission = manifest_kind
            .versions
            .iter()
            .filter_map(|version| version.kind.admission.as_ref());
        let declared = [
            (
                Capability::Validation,
                admission.clone().any(|a| a.supports_any_validation()),
                spec.validator.is_some(),
            ),
            (
                Capability::Mutation,
                admission.clone().any(|a| a.supports_any_mutation()),
                spec.mutator.is_some(),
            ),
            (
                Capability::Conversion,
                manifest_kind.conversion,
                spec.converter.is_some(),
            ),
        ];
        for (capability, declared, handled) in declared {
            let kind = qualified(manifest_kind.kind);
            match (declared, handled) {
                (true, false) => {
                    problems.push(AppProblem::CapabilityWithoutHandler { kind, capability });
                }
                (false, true) => {
                    problems.push(AppProblem::HandlerWithoutCapability { kind, capability });
                }
                _ => {}
            }
        }
    }
    problems.extend(
        manifest_match::mismatches(kinds, manifest)
            .into_iter()
            // A kind or group that differs is reported above, as not in the manifest.
            .filter(|found| found.field.contains(".name") || found.field.ends_with(".plural"))
            .map(AppProblem::KindMismatch),
    );
    for spec in managed() {
        let listed = spec.resource.group == manifest.group
            && manifest_kinds
                .iter()
                .any(|kind| kind.kind == spec.resource.kind);
        if !listed {
            problems.push(AppProblem::ManagedKindNotInManifest {
                kind: spec.display_name(),
                group: manifest.group.clone(),
            });
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::CustomResource;
    use kubeapp_operator::{ReconcileResult, WatcherFns};
    use kubeapp_sdk::conversion::VersionConverter;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{AppConfig, AppConfigError, ManagedKind, UnmanagedKind};

    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "shop.example.com",
        version = "v1",
        kind = "Widget",
        namespaced
    )]
    struct WidgetSpec {
        size: i32,
    }

    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "shop.example.com",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    struct GadgetSpec {
        size: i32,
    }

    const WIDGET: &str = "Widget.shop.example.com";
    const GADGET: &str = "Gadget.shop.example.com";

    /// Widget with validation, mutation and conversion declared; Gadget with none.
    fn manifest() -> ManifestData {
        ManifestData::from_yaml(
            r"
appName: shop
group: shop.example.com
versions:
  - name: v1
    kinds:
      - kind: Widget
        conversion: true
        admission:
          validation: { operations: [CREATE] }
          mutation: { operations: ['*'] }
      - kind: Gadget
",
        )
        .expect("manifest")
    }

    fn widget() -> ManagedKind<Widget> {
        ManagedKind::<Widget>::new()
            .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) })
            .validate_fn(|_request| async { Ok(()) })
            .mutate_fn(|request| async move {
                request
                    .object
                    .ok_or_else(|| kubeapp_sdk::app::AdmissionError::denied("no object"))
            })
            .converter(VersionConverter::new(
                |w: Widget| Ok::<Widget, String>(w),
                |w: Widget| Ok::<Widget, String>(w),
            ))
    }

    fn gadget() -> ManagedKind<Gadget> {
        ManagedKind::<Gadget>::new().watcher(WatcherFns::new())
    }

    fn problems_of(config: &AppConfig) -> Vec<AppProblem> {
        match config.validate() {
            Ok(()) => Vec::new(),
            Err(AppConfigError::Invalid { problems, .. }) => problems,
            Err(other) => panic!("not a validation error: {other}"),
        }
    }

    #[test]
    fn a_valid_app_passes() {
        let config = AppConfig::new("shop")
            .manifest(manifest())
            .managed_kind(widget())
            .managed_kind(gadget())
            .unmanaged_kind(UnmanagedKind::<ConfigMap>::new().watcher(WatcherFns::new()));
        assert_eq!(problems_of(&config), []);
    }

    #[test]
    fn a_manifest_kind_without_managed_kind_is_an_error() {
        let config = AppConfig::new("shop")
            .manifest(manifest())
            .managed_kind(widget());
        assert_eq!(
            problems_of(&config),
            [AppProblem::ManifestKindNotManaged {
                kind: GADGET.into()
            }]
        );
    }

    #[test]
    fn a_managed_kind_not_in_the_manifest_is_an_error_but_an_unmanaged_one_is_not() {
        let config = AppConfig::new("shop")
            .manifest(manifest())
            .managed_kind(widget())
            .managed_kind(gadget())
            .managed_kind(ManagedKind::<ConfigMap>::new().watcher(WatcherFns::new()));
        let problems = problems_of(&config);
        assert_eq!(
            problems,
            [AppProblem::ManagedKindNotInManifest {
                kind: "ConfigMap".into(),
                group: "shop.example.com".into()
            }]
        );
        assert_eq!(
            problems[0].to_string(),
            "managed kind ConfigMap is not in the manifest of group shop.example.com"
        );
    }

    #[test]
    fn each_declared_capability_without_handler_is_an_error() {
        let bare_widget = ManagedKind::<Widget>::new()
            .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) });
        let config = AppConfig::new("shop")
            .manifest(manifest())
            .managed_kind(bare_widget)
            .managed_kind(gadget());
        let problems = problems_of(&config);
        let expected: Vec<AppProblem> = [
            Capability::Validation,
            Capability::Mutation,
            Capability::Conversion,
        ]
        .into_iter()
        .map(|capability| AppProblem::CapabilityWithoutHandler {
            kind: WIDGET.into(),
            capability,
        })
        .collect();
        assert_eq!(problems, expected);
        assert_eq!(
            problems[0].to_string(),
            "Widget.shop.example.com: the manifest declares validation but the kind has no validator"
        );
    }

    #[test]
    fn each_handler_without_declared_capability_is_an_error() {
        let busy_gadget = gadget()
            .validate_fn(|_request| async { Ok(()) })
            .mutate_fn(|request| async move {
                request
                    .object
                    .ok_or_else(|| kubeapp_sdk::app::AdmissionError::denied("no object"))
            })
            .converter(VersionConverter::new(
                |g: Gadget| Ok::<Gadget, String>(g),
                |g: Gadget| Ok::<Gadget, String>(g),
            ));
        let config = AppConfig::new("shop")
            .manifest(manifest())
            .managed_kind(widget())
            .managed_kind(busy_gadget);
        let problems = problems_of(&config);
        let expected: Vec<AppProblem> = [
            Capability::Validation,
            Capability::Mutation,
            Capability::Conversion,
        ]
        .into_iter()
        .map(|capability| AppProblem::HandlerWithoutCapability {
            kind: GADGET.into(),
            capability,
        })
        .collect();
        assert_eq!(problems, expected);
        assert_eq!(
            problems[2].to_string(),
            "Gadget.shop.example.com: the kind has a converter but the manifest does not declare conversion"
        );
    }

    #[test]
    fn a_reconciler_and_a_watcher_or_neither_is_an_error_for_any_kind() {
        let both = gadget().reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) });
        let config = AppConfig::new("shop")
            .managed_kind(both)
            .unmanaged_kind(UnmanagedKind::<ConfigMap>::new());
        assert_eq!(
            problems_of(&config),
            [
                AppProblem::ReconcilerAndWatcher {
                    kind: GADGET.into()
                },
                AppProblem::NoHandler {
                    kind: "ConfigMap".into()
                },
            ]
        );
    }

    #[test]
    fn apply_cleanup_on_a_plain_kind_is_an_error_and_fine_when_opinionated() {
        let done = |_object, _ctx| async { Ok(ReconcileResult::done()) };
        let plain = UnmanagedKind::<ConfigMap>::new().apply_cleanup_fn(done, done);
        let config = AppConfig::new("shop").unmanaged_kind(plain);
        let problems = problems_of(&config);
        assert_eq!(
            problems,
            [AppProblem::CleanupWithoutFinalizer {
                kind: "ConfigMap".into()
            }]
        );
        assert!(
            problems[0]
                .to_string()
                .contains("apply/cleanup needs the opinionated finalizer"),
            "{}",
            problems[0]
        );
        let opinionated = UnmanagedKind::<ConfigMap>::new()
            .apply_cleanup_fn(done, done)
            .opinionated();
        let config = AppConfig::new("shop").unmanaged_kind(opinionated);
        assert_eq!(problems_of(&config), []);
        // A later plain reconciler replaces the apply/cleanup handler, and with it the problem.
        let replaced = UnmanagedKind::<ConfigMap>::new()
            .apply_cleanup_fn(done, done)
            .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) });
        let config = AppConfig::new("shop").unmanaged_kind(replaced);
        assert_eq!(problems_of(&config), []);
    }

    #[test]
    fn every_problem_is_reported_at_once_and_named_in_the_error() {
        let config = AppConfig::new("shop")
            .manifest(manifest())
            .managed_kind(ManagedKind::<Widget>::new())
            .unmanaged_kind(UnmanagedKind::<ConfigMap>::new())
            .unmanaged_kind(UnmanagedKind::<ConfigMap>::new().watcher(WatcherFns::new()));
        let err = config.validate().expect_err("invalid");
        let AppConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(problems.len(), 7, "{err}");
        let message = err.to_string();
        for needle in [
            "app shop is invalid:",
            "Widget.shop.example.com: has neither a reconciler nor a watcher",
            "ConfigMap: added more than once",
            "manifest kind Gadget.shop.example.com has no managed kind",
            "declares conversion but the kind has no converter",
        ] {
            assert!(
                message.contains(needle),
                "{needle:?} missing from {message}"
            );
        }
    }
}
