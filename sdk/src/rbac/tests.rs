use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::*;

fn manifest() -> ManifestData {
    ManifestData::from_yaml(
        r#"
appName: gadgets
group: gadgets.example.com
versions:
  - name: v1
    kinds:
      - { kind: Gadget, plural: gadgets }
      - { kind: Widget, plural: widgets }
  - name: v2
    kinds:
      - { kind: Gadget, plural: gadgets }
extraPermissions:
  accessKinds:
    - { group: apps, resource: deployments, actions: [get, create] }
"#,
    )
    .expect("valid manifest")
}

/// A rule as (groups, resources, verbs) for compact comparisons.
fn flat(rule: &PolicyRule) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        rule.api_groups.clone().unwrap_or_default(),
        rule.resources.clone().unwrap_or_default(),
        rule.verbs.clone(),
    )
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn rules_follow_the_documented_order_and_verbs() {
    let m = manifest();
    let rbac = RbacBuilder::new(&m)
        .unmanaged::<ConfigMap>()
        .unmanaged_opinionated::<Secret>()
        .build()
        .expect("build");
    let rules: Vec<_> = rbac.rules().iter().map(flat).collect();
    let g = strings(&["gadgets.example.com"]);
    assert_eq!(
        rules,
        [
            (
                g.clone(),
                strings(&["gadgets", "widgets"]),
                strings(MANAGED_VERBS)
            ),
            (
                g.clone(),
                strings(&["gadgets/status", "widgets/status"]),
                strings(STATUS_VERBS)
            ),
            (
                g,
                strings(&["gadgets/finalizers", "widgets/finalizers"]),
                strings(FINALIZER_VERBS)
            ),
            (
                strings(&[""]),
                strings(&["configmaps"]),
                strings(WATCH_VERBS)
            ),
            (
                strings(&[""]),
                strings(&["secrets"]),
                strings(OPINIONATED_WATCH_VERBS)
            ),
            (
                strings(&["apps"]),
                strings(&["deployments"]),
                strings(&["get", "create"])
            ),
            (
                strings(&["", "events.k8s.io"]),
                strings(&["events"]),
                strings(&["create", "patch"])
            ),
            (
                strings(&["coordination.k8s.io"]),
                strings(&["leases"]),
                strings(&["get", "create", "update"])
            ),
        ]
    );
}

#[test]
fn unmanaged_kinds_that_the_app_owns_add_nothing() {
    let m = manifest();
    let rbac = RbacBuilder::new(&m)
        .unmanaged_kind(WatchedResource {
            group: "gadgets.example.com".into(),
            plural: "gadgets".into(),
            opinionated: false,
        })
        .build()
        .expect("build");
    assert_eq!(rbac.rules().len(), 6, "{:?}", rbac.rules());
}

#[test]
fn owned_children_get_the_managed_verbs_after_the_watched_kinds() {
    let m = manifest();
    let rbac = RbacBuilder::new(&m)
        .unmanaged::<ConfigMap>()
        .owned::<Secret>()
        .owned::<k8s_openapi::api::apps::v1::Deployment>()
        .owned::<ConfigMap>()
        .build()
        .expect("build");
    let rules: Vec<_> = rbac.rules().iter().map(flat).collect();
    assert_eq!(
        rules[3],
        (
            strings(&[""]),
            strings(&["configmaps"]),
            strings(WATCH_VERBS)
        )
    );
    assert_eq!(
        rules[4],
        (
            strings(&[""]),
            strings(&["configmaps", "secrets"]),
            strings(MANAGED_VERBS)
        )
    );
    assert_eq!(
        rules[5],
        (
            strings(&["apps"]),
            strings(&["deployments"]),
            strings(MANAGED_VERBS)
        )
    );
}

#[test]
fn cluster_scope_binds_a_cluster_role_to_the_service_account() {
    let m = manifest();
    let rbac = RbacBuilder::new(&m)
        .service_account("op", "ops")
        .build()
        .expect("build");
    assert_eq!(rbac.service_account.metadata.name.as_deref(), Some("op"));
    assert_eq!(
        rbac.service_account.metadata.namespace.as_deref(),
        Some("ops")
    );
    let OperatorRole::Cluster { role, binding } = &rbac.role else {
        panic!("expected a ClusterRole: {:?}", rbac.role);
    };
    assert_eq!(role.metadata.name.as_deref(), Some("gadgets-operator"));
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(binding.role_ref.name, "gadgets-operator");
    let subject = &binding.subjects.as_ref().expect("subjects")[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "op", Some("ops"))
    );
    let labels = role.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["app.kubernetes.io/name"], "gadgets");
}

#[test]
fn namespace_scope_gives_a_role_and_role_binding_there() {
    let m = manifest();
    let rbac = RbacBuilder::new(&m)
        .name("custom")
        .scope(RoleScope::Namespace("team-a".into()))
        .build()
        .expect("build");
    let OperatorRole::Namespaced { role, binding } = &rbac.role else {
        panic!("expected a Role: {:?}", rbac.role);
    };
    assert_eq!(role.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(binding.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(binding.role_ref.name, "custom");
    assert_eq!(
        rbac.service_account.metadata.name.as_deref(),
        Some("custom")
    );
    assert_eq!(
        rbac.service_account.metadata.namespace.as_deref(),
        Some("default")
    );
}

#[test]
fn a_role_cannot_grant_cluster_scoped_kinds() {
    let mut m = manifest();
    for version in &mut m.versions {
        for kind in &mut version.kinds {
            if kind.kind == "Widget" {
                kind.scope = Scope::Cluster;
            }
        }
    }
    let err = RbacBuilder::new(&m)
        .scope(RoleScope::Namespace("team-a".into()))
        .build()
        .expect_err("Widget is cluster-scoped");
    assert!(
        matches!(&err, RbacError::ClusterScopedKindInRole { kind, .. } if kind == "Widget"),
        "{err:?}"
    );
    assert!(
        RbacBuilder::new(&m).build().is_ok(),
        "fine in a ClusterRole"
    );
}

#[test]
fn an_invalid_manifest_is_an_error() {
    let mut m = manifest();
    m.group.clear();
    let err = RbacBuilder::new(&m).build().expect_err("invalid");
    assert!(matches!(err, RbacError::Manifest(_)), "{err:?}");
}

#[test]
fn yaml_holds_the_service_account_role_and_binding() {
    let m = manifest();
    let rbac = RbacBuilder::new(&m).build().expect("build");
    let yaml = rbac.to_yaml().expect("yaml");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("parse back");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    );
    let role: ClusterRole = serde_json::from_value(docs[1].clone()).expect("ClusterRole");
    assert_eq!(role.rules.as_deref(), Some(rbac.rules()));
    // The core group must survive as an empty string, not vanish or become null.
    assert!(yaml.contains("- ''") || yaml.contains("- \"\""), "{yaml}");
}

#[test]
fn reviewing_tokens_adds_the_review_rules_and_is_refused_in_a_role() {
    let manifest = ManifestData::from_yaml(
        "appName: shop\ngroup: shop.example.com\nversions: [{name: v1, kinds: [{kind: Order}]}]\n",
    )
    .expect("manifest");
    let rules = RbacBuilder::new(&manifest)
        .reviews_tokens()
        .rules()
        .expect("rules");
    let last: Vec<_> = rules
        .iter()
        .rev()
        .take(2)
        .map(|r| {
            (
                r.api_groups.clone().unwrap_or_default(),
                r.resources.clone().unwrap_or_default(),
                r.verbs.clone(),
            )
        })
        .collect();
    assert_eq!(
        last,
        vec![
            (
                vec!["authorization.k8s.io".to_string()],
                vec!["subjectaccessreviews".to_string()],
                vec!["create".to_string()]
            ),
            (
                vec!["authentication.k8s.io".to_string()],
                vec!["tokenreviews".to_string()],
                vec!["create".to_string()]
            ),
        ]
    );
    let without = RbacBuilder::new(&manifest).rules().expect("rules");
    assert_eq!(without.len() + 2, rules.len());
    let in_role = RbacBuilder::new(&manifest)
        .scope(RoleScope::Namespace("shop".into()))
        .reviews_tokens()
        .rules();
    assert!(
        matches!(in_role, Err(RbacError::ClusterScopedKindInRole { ref kind, .. }) if kind == "TokenReview"),
        "{in_role:?}"
    );
}
