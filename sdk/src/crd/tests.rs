use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

mod v1 {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "test.kubeapp.dev",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    pub struct GadgetSpec {
        pub size: i32,
    }
}

mod v2 {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "test.kubeapp.dev",
        version = "v2",
        kind = "Gadget",
        namespaced,
        status = "GadgetStatus",
        shortname = "gd"
    )]
    pub struct GadgetSpec {
        pub size: i32,
        pub color: String,
    }
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct GadgetStatus {
        pub ready: bool,
    }
}

/// Types that disagree with the manifest, one module each (the derive names the struct after the
/// kind).
mod wrong_group {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "elsewhere.kubeapp.dev",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    pub struct GadgetSpec {
        pub size: i32,
    }
}

mod unknown_kind {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(group = "test.kubeapp.dev", version = "v1", kind = "Gizmo", namespaced)]
    pub struct GizmoSpec {
        pub size: i32,
    }
}

mod unknown_version {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "test.kubeapp.dev",
        version = "v3",
        kind = "Gadget",
        namespaced
    )]
    pub struct GadgetSpec {
        pub size: i32,
    }
}

mod wrong_scope {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(group = "test.kubeapp.dev", version = "v1", kind = "Gadget")]
    pub struct GadgetSpec {
        pub size: i32,
    }
}

mod wrong_plural {
    use super::*;
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "test.kubeapp.dev",
        version = "v1",
        kind = "Gadget",
        plural = "gadgetry",
        namespaced
    )]
    pub struct GadgetSpec {
        pub size: i32,
    }
}

fn manifest() -> ManifestData {
    ManifestData::from_yaml(
        r#"
appName: test
group: test.kubeapp.dev
preferredVersion: v2
versions:
  - name: v1
    served: true
    kinds:
      - { kind: Gadget, plural: gadgets, scope: Namespaced }
  - name: v2
    served: true
    kinds:
      - { kind: Gadget, plural: gadgets, scope: Namespaced }
      - kind: Fleet
        plural: fleets
        scope: Cluster
        schema:
          spec:
            type: object
            properties:
              count: { type: integer }
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#,
    )
    .expect("valid manifest")
}

fn versions(crd: &CustomResourceDefinition) -> Vec<(&str, bool, bool)> {
    crd.spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect()
}

#[test]
fn one_crd_per_kind_with_every_version_and_the_preferred_one_stored() {
    let m = manifest();
    let crds = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("build");
    let names: Vec<_> = crds
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["gadgets.test.kubeapp.dev", "fleets.test.kubeapp.dev"]
    );
    assert_eq!(
        versions(&crds[0]),
        [("v1", true, false), ("v2", true, true)]
    );
    assert_eq!(crds[0].spec.scope, "Namespaced");
    assert_eq!(crds[0].spec.names.short_names, Some(vec!["gd".to_string()]));
    assert_eq!(crds[1].spec.scope, "Cluster");
    assert_eq!(versions(&crds[1]), [("v2", true, true)]);
}

#[test]
fn schemas_come_from_the_type_of_each_version() {
    let m = manifest();
    let crds = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("build");
    let spec_props = |i: usize| {
        let schema = crds[0].spec.versions[i]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        let spec = &schema.properties.as_ref().expect("properties")["spec"];
        let mut keys: Vec<String> = spec
            .properties
            .as_ref()
            .expect("spec properties")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(spec_props(0), ["size"]);
    assert_eq!(spec_props(1), ["color", "size"]);
}

#[test]
fn status_subresource_only_for_types_and_schemas_with_a_status() {
    let m = manifest();
    let crds = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("build");
    let has_status = |crd: &CustomResourceDefinition, i: usize| {
        crd.spec.versions[i]
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some())
    };
    assert!(!has_status(&crds[0], 0), "v1 has no status");
    assert!(has_status(&crds[0], 1), "v2 declares a status");
    assert!(
        has_status(&crds[1], 0),
        "the Fleet schema has a status property"
    );
}

#[test]
fn served_follows_the_manifest_and_storage_falls_back_to_the_last_version() {
    let mut m = manifest();
    m.versions[0].served = false;
    m.preferred_version = "v1".into();
    let crds = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("build");
    assert_eq!(
        versions(&crds[0]),
        [("v1", false, true), ("v2", true, false)]
    );
    // Fleet does not exist in v1: its only version stores.
    assert_eq!(versions(&crds[1]), [("v2", true, true)]);
}

#[test]
fn a_kind_version_without_type_or_schema_is_an_error() {
    let m = manifest();
    let err = CrdBuilder::new(&m)
        .kind::<v2::Gadget>()
        .build()
        .expect_err("v1 Gadget has no type");
    assert!(
        matches!(&err, CrdError::MissingType { kind, version } if kind == "Gadget" && version == "v1"),
        "{err:?}"
    );
    assert!(err.to_string().contains("CrdBuilder::kind"), "{err}");
}

#[test]
fn types_that_disagree_with_the_manifest_are_errors() {
    let m = manifest();
    let build = |b: CrdBuilder<'_>| b.kind::<v2::Gadget>().build().expect_err("mismatch");
    let err = build(CrdBuilder::new(&m).kind::<wrong_group::Gadget>());
    assert!(matches!(err, CrdError::GroupMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("elsewhere.kubeapp.dev"), "{err}");
    let err = build(CrdBuilder::new(&m).kind::<unknown_kind::Gizmo>());
    assert!(matches!(err, CrdError::UnknownKind { .. }), "{err:?}");
    let err = build(CrdBuilder::new(&m).kind::<unknown_version::Gadget>());
    assert!(matches!(err, CrdError::UnknownVersion { .. }), "{err:?}");
    assert!(err.to_string().contains("v3"), "{err}");
    let err = build(CrdBuilder::new(&m).kind::<wrong_scope::Gadget>());
    assert!(matches!(err, CrdError::ScopeMismatch { .. }), "{err:?}");
    let err = build(CrdBuilder::new(&m).kind::<wrong_plural::Gadget>());
    assert!(matches!(err, CrdError::PluralMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("gadgetry"), "{err}");
    let err = build(CrdBuilder::new(&m).kind::<v2::Gadget>());
    assert!(matches!(err, CrdError::DuplicateType { .. }), "{err:?}");
}

#[test]
fn an_invalid_manifest_is_an_error() {
    let mut m = manifest();
    m.app_name.clear();
    let err = CrdBuilder::new(&m).build().expect_err("invalid");
    assert!(matches!(err, CrdError::Manifest(_)), "{err:?}");
}

#[test]
fn manifest_schemas_are_read_in_every_accepted_shape() {
    let expect_spec = |raw: serde_json::Value| {
        let props = schema::crd_schema("Fleet", &raw).expect("schema");
        assert_eq!(props.type_.as_deref(), Some("object"), "{raw}");
        assert!(
            props.properties.expect("properties").contains_key("spec"),
            "{raw}"
        );
    };
    let object = serde_json::json!({"type": "object", "properties": {"spec": {"type": "object"}}});
    expect_spec(serde_json::json!({ "openAPIV3Schema": object }));
    expect_spec(serde_json::json!({ "components": { "schemas": { "Fleet": object } } }));
    expect_spec(serde_json::json!({ "Fleet": object }));
    expect_spec(object.clone());
    expect_spec(serde_json::json!({ "spec": { "type": "object" } }));
}

#[test]
fn manifest_schema_problems_name_the_field() {
    let err = schema::crd_schema(
        "Fleet",
        &serde_json::json!({"openAPIV3Schema": {"type": "object",
            "properties": {"spec": {"$ref": "#/components/schemas/Spec"}}}}),
    )
    .expect_err("$ref");
    assert_eq!(err.0, "openAPIV3Schema.properties.spec.$ref");
    let err = schema::crd_schema(
        "Fleet",
        &serde_json::json!({"type": "object", "properties": {"spec": {"type": 7}}}),
    )
    .expect_err("bad type");
    assert_eq!(err.0, "properties.spec.type", "{err:?}");
    let err = schema::crd_schema("Fleet", &serde_json::json!({"components": {}}))
        .expect_err("missing kind");
    assert_eq!(err.0, "components.schemas.Fleet");
}

#[test]
fn conversion_uses_the_webhook_when_one_is_configured() {
    let mut m = manifest();
    for version in &mut m.versions {
        version.kinds[0].conversion = true;
    }
    let without = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("build");
    assert!(without[0].spec.conversion.is_none());
    let config = WebhookClientConfig {
        url: Some("https://127.0.0.1:8443/convert".into()),
        ..WebhookClientConfig::default()
    };
    let with = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .conversion_webhook(config.clone())
        .build()
        .expect("build");
    let conversion = with[0].spec.conversion.as_ref().expect("conversion");
    assert_eq!(conversion.strategy, "Webhook");
    let webhook = conversion.webhook.as_ref().expect("webhook");
    assert_eq!(webhook.client_config.as_ref(), Some(&config));
    assert!(with[1].spec.conversion.is_none(), "Fleet does not convert");
}

#[test]
fn yaml_output_is_one_document_per_crd() {
    let m = manifest();
    let crds = CrdBuilder::new(&m)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("build");
    let yaml = to_yaml(&crds).expect("yaml");
    assert_eq!(yaml.matches("---\n").count(), 2, "{yaml}");
    assert!(yaml.contains("kind: CustomResourceDefinition"), "{yaml}");
    let back: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&yaml).expect("parse back");
    assert_eq!(back, crds);
}
