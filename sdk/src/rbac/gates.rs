//! The role of the people who gate a phase machine's objects (`kubeapp pause|resume|promote|
//! abort KIND/NAME`, or `kubectl annotate KIND/NAME phases.kubeapp.dev/gate=...`): `get`,
//! `list`, `watch` and `patch` on the manifest's kinds, nothing else (no status, no children).
//! Bind it to them with a ClusterRoleBinding, or with a RoleBinding in one namespace. The
//! operator itself needs `patch` on its kinds to remove a gate it applied: its own role (rule 1
//! of the [module docs](super)) has it.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::ObjectMeta;

use super::{RbacError, rule};
use crate::manifest::ManifestData;

/// The verbs a gate's user needs on the kinds: read the object, annotate it, wait for it.
pub const GATE_USER_VERBS: &[&str] = &["get", "list", "watch", "patch"];

/// The ClusterRole `{appName}-gates` for the people who gate the app's objects: the
/// [`GATE_USER_VERBS`] on every kind of the manifest.
///
/// # Errors
///
/// [`RbacError`] when the manifest is invalid.
pub fn gate_users_role(manifest: &ManifestData) -> Result<ClusterRole, RbacError> {
    manifest.validate()?;
    let plurals: BTreeSet<String> = manifest.kinds().iter().map(|k| k.plural.clone()).collect();
    let name = format!("{}-gates", manifest.app_name);
    let labels = [
        ("app.kubernetes.io/name", manifest.app_name.as_str()),
        ("app.kubernetes.io/component", "gates"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Ok(ClusterRole {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        rules: Some(vec![rule(
            &[manifest.group.as_str()],
            plurals.into_iter().collect(),
            GATE_USER_VERBS,
        )]),
        aggregation_rule: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_users_may_read_and_patch_the_apps_kinds_and_nothing_else() {
        let manifest = ManifestData::from_yaml(
            "appName: canary\ngroup: canary.kubeapp.dev\nversions:\n  - name: v1\n    kinds:\n      - {kind: Canary, plural: canaries}\n      - {kind: Rollout, plural: rollouts}\n",
        )
        .expect("a manifest");
        let role = gate_users_role(&manifest).expect("a role");
        assert_eq!(role.metadata.name.as_deref(), Some("canary-gates"));
        let rules = role.rules.expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].api_groups.as_deref(),
            Some(&["canary.kubeapp.dev".to_string()][..])
        );
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["canaries".to_string(), "rollouts".to_string()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "list", "watch", "patch"]);
    }
}
