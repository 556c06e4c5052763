//! Whether each managed kind's Rust type agrees with the manifest on the four names that
//! address it: group, kind, version and plural.
//!
//! The manifest is where the CRD, the RBAC and the webhooks come from, and the Rust type is
//! what the informer lists and watches (`/apis/{group}/{version}/{plural}`). When they disagree,
//! the watch asks for a resource the CRD does not serve and gets `404` on every retry, so the
//! disagreement is found before anything starts: [`AppConfig::validate`](crate::AppConfig)
//! refuses it ([`AppProblem::KindMismatch`](crate::validate::AppProblem::KindMismatch)), and an
//! [`Operator`](crate::operator::Operator)'s `run` reports each as one line naming the manifest
//! file, the field and both values, and exits 1. The checks run in the order group, kind,
//! version, plural, and a kind reports its first mismatch only (a wrong group makes the rest
//! meaningless).

use std::fmt;

use kubeapp_sdk::manifest::ManifestData;

use crate::kinds::KindSpec;

/// One managed kind whose Rust type disagrees with the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindMismatch {
    /// The kind as the Rust type names it.
    pub kind: String,
    /// The manifest field at fault, as a path (`group`, `versions[0].kinds[1].plural`, ...).
    pub field: String,
    /// What the manifest says there.
    pub manifest: String,
    /// What the Rust type says.
    pub rust: String,
}

impl fmt::Display for KindMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: the manifest says {}, the Rust type of kind {} says {}",
            self.field, self.manifest, self.kind, self.rust
        )
    }
}

/// The first mismatch of each managed kind in `kinds` against `manifest`.
pub(crate) fn mismatches(kinds: &[KindSpec], manifest: &ManifestData) -> Vec<KindMismatch> {
    kinds
        .iter()
        .filter(|spec| spec.managed)
        .filter_map(|spec| mismatch(spec, manifest))
        .collect()
}

fn quoted(value: &str) -> String {
    format!("{value:?}")
}

fn listed<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    let values: Vec<String> = values.into_iter().map(quoted).collect();
    match values.len() {
        0 => "nothing".to_string(),
        1 => values.into_iter().next().unwrap_or_default(),
        _ => format!("one of {}", values.join(", ")),
    }
}

fn mismatch(spec: &KindSpec, manifest: &ManifestData) -> Option<KindMismatch> {
    let resource = &spec.resource;
    let found = |field: String, manifest: String, rust: &str| KindMismatch {
        kind: resource.kind.clone(),
        field,
        manifest,
        rust: quoted(rust),
    };
    if resource.group != manifest.group {
        return Some(found(
            "group".into(),
            quoted(&manifest.group),
            &resource.group,
        ));
    }
    // Where the kind is listed: (version index, kind index) per manifest version.
    let listed_at: Vec<(usize, usize)> = manifest
        .versions
        .iter()
        .enumerate()
        .filter_map(|(v, version)| {
            let k = version.kinds.iter().position(|k| k.kind == resource.kind)?;
            Some((v, k))
        })
        .collect();
    if listed_at.is_empty() {
        let mut kinds: Vec<&str> = Vec::new();
        for version in &manifest.versions {
            for kind in &version.kinds {
                if !kinds.contains(&kind.kind.as_str()) {
                    kinds.push(&kind.kind);
                }
            }
        }
        return Some(found(
            "versions[*].kinds[*].kind".into(),
            listed(kinds),
            &resource.kind,
        ));
    }
    let Some(&(v, k)) = listed_at
        .iter()
        .find(|(v, _)| manifest.versions[*v].name == resource.version)
    else {
        let field = match listed_at.as_slice() {
            [(v, _)] => format!("versions[{v}].name"),
            _ => "versions[*].name".to_string(),
        };
        let names: Vec<String> = listed_at
            .iter()
            .map(|(v, _)| quoted(&manifest.versions[*v].name))
            .collect();
        let which = if names.len() == 1 {
            "the version listing it"
        } else {
            "the versions listing it"
        };
        return Some(found(
            field,
            format!("{} ({which})", names.join(", ")),
            &resource.version,
        ));
    };
    let plural = manifest.versions[v].kinds[k].effective_plural();
    (plural != resource.plural).then(|| {
        found(
            format!("versions[{v}].kinds[{k}].plural"),
            quoted(&plural),
            &resource.plural,
        )
    })
}

#[cfg(test)]
mod tests {
    use kube::CustomResource;
    use kubeapp_operator::ReconcileResult;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{AppConfig, AppConfigError, ManagedKind};

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

    fn widget_manifest(group: &str, kind: &str, version: &str, plural: &str) -> ManifestData {
        ManifestData::from_yaml(&format!(
            "appName: shop\ngroup: {group}\nversions:\n  - name: v0\n    kinds: []\n  - name: {version}\n    kinds:\n      - kind: Gadget\n      - kind: {kind}\n        plural: {plural}\n"
        ))
        .expect("manifest")
    }

    fn problems(manifest: ManifestData) -> Vec<KindMismatch> {
        let config = AppConfig::from_manifest(manifest).managed_kind(
            ManagedKind::<Widget>::new()
                .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) }),
        );
        mismatches(&config.kinds, config.manifest.as_ref().expect("a manifest"))
    }

    #[test]
    fn each_of_the_four_names_is_one_mismatch_naming_the_field_and_both_values() {
        let agreeing = widget_manifest("shop.example.com", "Widget", "v1", "widgets");
        assert_eq!(problems(agreeing), []);
        let cases = [
            (
                widget_manifest("shop.example.org", "Widget", "v1", "widgets"),
                r#"group: the manifest says "shop.example.org", the Rust type of kind Widget says "shop.example.com""#,
            ),
            (
                widget_manifest("shop.example.com", "Widgets", "v1", "widgets"),
                r#"versions[*].kinds[*].kind: the manifest says one of "Gadget", "Widgets", the Rust type of kind Widget says "Widget""#,
            ),
            (
                widget_manifest("shop.example.com", "Widget", "v2", "widgets"),
                r#"versions[1].name: the manifest says "v2" (the version listing it), the Rust type of kind Widget says "v1""#,
            ),
            (
                widget_manifest("shop.example.com", "Widget", "v1", "widgetz"),
                r#"versions[1].kinds[1].plural: the manifest says "widgetz", the Rust type of kind Widget says "widgets""#,
            ),
        ];
        for (manifest, expected) in cases {
            let found = problems(manifest);
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].to_string(), expected);
        }
    }

    #[test]
    fn the_app_refuses_a_version_or_plural_mismatch() {
        let config = AppConfig::from_manifest(widget_manifest(
            "shop.example.com",
            "Widget",
            "v1",
            "widgetz",
        ))
        .managed_kind(
            ManagedKind::<Widget>::new()
                .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) }),
        );
        let err = config.validate().expect_err("the plural disagrees");
        let AppConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}");
        };
        let mismatches: Vec<String> = problems
            .iter()
            .filter(|problem| matches!(problem, crate::AppProblem::KindMismatch(_)))
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            mismatches,
            [
                r#"versions[1].kinds[1].plural: the manifest says "widgetz", the Rust type of kind Widget says "widgets""#
            ]
        );
    }
}
