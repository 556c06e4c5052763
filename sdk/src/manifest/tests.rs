use super::*;

const YAML: &str = r#"
appName: gadgets
group: gadgets.example.com
preferredVersion: v1
versions:
  - name: v1alpha1
    served: false
    kinds:
      - kind: Gadget
        plural: gadgets
        scope: Namespaced
  - name: v1
    served: true
    kinds:
      - kind: Gadget
        plural: gadgets
        scope: Namespaced
        conversion: false
        admission:
          validation:
            operations: [CREATE, UPDATE]
          mutation:
            operations: ["*"]
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
      - kind: Fleet
        scope: Cluster
extraPermissions:
  accessKinds:
    - group: ""
      resource: configmaps
      actions: [get, list, watch]
"#;

fn manifest() -> ManifestData {
    ManifestData::from_yaml(YAML).expect("valid manifest")
}

fn problems_of(err: ManifestError) -> Vec<ManifestProblem> {
    match err {
        ManifestError::Invalid { problems, .. } => problems,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn yaml_uses_the_go_sdk_field_names() {
    let m = manifest();
    assert_eq!(m.app_name, "gadgets");
    assert_eq!(m.group, "gadgets.example.com");
    assert_eq!(m.preferred_version, "v1");
    assert_eq!(m.versions.len(), 2);
    assert!(!m.versions[0].served);
    let gadget = &m.versions[1].kinds[0];
    let admission = gadget.admission.as_ref().expect("admission");
    assert_eq!(
        admission
            .validation
            .as_ref()
            .expect("validation")
            .operations,
        [AdmissionOperation::Create, AdmissionOperation::Update]
    );
    assert_eq!(
        admission.mutation.as_ref().expect("mutation").operations,
        [AdmissionOperation::Any]
    );
    assert!(admission.supports_any_validation() && admission.supports_any_mutation());
    assert!(gadget.schema.is_some());
    assert_eq!(m.versions[1].kinds[1].scope, Scope::Cluster);
    let extra = m.extra_permissions.as_ref().expect("extra permissions");
    assert_eq!(extra.access_kinds[0].resource, "configmaps");
    assert_eq!(extra.access_kinds[0].actions, ["get", "list", "watch"]);
}

#[test]
fn json_and_yaml_round_trip_to_the_same_data() {
    let m = manifest();
    let json = m.to_json().expect("to json");
    assert!(json.contains("\"appName\": \"gadgets\""), "{json}");
    assert!(json.contains("\"preferredVersion\""), "{json}");
    assert!(json.contains("\"accessKinds\""), "{json}");
    assert_eq!(ManifestData::from_json(&json).expect("from json"), m);
    let yaml = m.to_yaml().expect("to yaml");
    assert_eq!(ManifestData::from_yaml(&yaml).expect("from yaml"), m);
    assert_eq!(
        ManifestData::from_embedded(&json).expect("embedded json"),
        m
    );
    assert_eq!(
        ManifestData::from_embedded(&yaml).expect("embedded yaml"),
        m
    );
}

#[test]
fn absent_served_means_served_and_absent_scope_means_namespaced() {
    let m = ManifestData::from_json(
        r#"{"appName":"a","group":"a.example.com","versions":[{"name":"v1","kinds":[{"kind":"Thing"}]}]}"#,
    )
    .expect("valid");
    assert!(m.versions[0].served);
    assert_eq!(m.versions[0].kinds[0].scope, Scope::Namespaced);
    assert_eq!(m.versions[0].kinds[0].effective_plural(), "things");
}

#[test]
fn fields_of_go_manifests_this_sdk_does_not_use_are_accepted() {
    let m = ManifestData::from_json(
        r#"{"appName":"a","group":"a.example.com","operator":{"url":"https://x"},
            "versions":[{"name":"v1","routes":{},"kinds":[{"kind":"Thing","selectableFields":["spec.x"]}]}]}"#,
    )
    .expect("valid");
    assert_eq!(m.versions[0].kinds[0].kind, "Thing");
}

#[test]
fn a_bad_scope_names_the_field_the_origin_and_the_line() {
    let yaml = YAML.replace("scope: Cluster", "scope: Global");
    let err = ManifestData::parse(&yaml, Format::Yaml, "manifest.yaml").expect_err("bad scope");
    let text = err.to_string();
    match &err {
        ManifestError::Parse {
            field,
            line,
            origin,
            ..
        } => {
            assert_eq!(field, "versions[1].kinds[1].scope", "{text}");
            assert_eq!(origin, "manifest.yaml");
            assert_eq!(*line, Some(31), "{text}");
        }
        other => panic!("expected Parse, got {other:?}"),
    }
    assert!(text.starts_with("manifest.yaml:31:"), "{text}");
    assert!(text.contains("Global"), "{text}");
}

#[test]
fn a_json_type_error_names_the_field_and_position() {
    let err = ManifestData::from_json(
        "{\"appName\": \"a\", \"group\": \"a.example.com\",\n \"versions\": [{\"name\": \"v1\", \"served\": \"yes\"}]}",
    )
    .expect_err("served is a bool");
    let text = err.to_string();
    match &err {
        ManifestError::Parse {
            field,
            line,
            format,
            ..
        } => {
            assert_eq!(field, "versions[0].served");
            assert_eq!(*line, Some(2));
            assert_eq!(*format, Format::Json);
        }
        other => panic!("expected Parse, got {other:?}"),
    }
    assert!(text.starts_with("<embedded manifest>:2:"), "{text}");
    assert!(!text.contains(" at line "), "position given once: {text}");
}

#[test]
fn syntax_errors_give_a_position() {
    let err =
        ManifestData::from_json("{\"appName\": \"a\",\n  \"group\" \"x\"}").expect_err("syntax");
    assert!(
        matches!(err, ManifestError::Parse { line: Some(2), .. }),
        "{err:?}"
    );
    let err = ManifestData::from_yaml("appName: a\ngroup: [unclosed\n").expect_err("syntax");
    assert!(
        matches!(err, ManifestError::Parse { line: Some(_), .. }),
        "{err:?}"
    );
}

#[test]
fn files_are_read_by_extension_or_content_and_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = manifest();
    let json = dir.path().join("manifest.json");
    std::fs::write(&json, m.to_json().expect("json")).expect("write");
    assert_eq!(ManifestData::from_file(&json).expect("json file"), m);
    let no_ext = dir.path().join("manifest");
    std::fs::write(&no_ext, m.to_json().expect("json")).expect("write");
    assert_eq!(ManifestData::from_file(&no_ext).expect("sniffed json"), m);
    let yaml = dir.path().join("manifest.yml");
    std::fs::write(&yaml, YAML.replace("appName: gadgets", "appName: \"\"")).expect("write");
    let err = ManifestData::from_file(&yaml).expect_err("empty appName");
    let text = err.to_string();
    assert!(text.contains(&yaml.display().to_string()), "{text}");
    assert!(text.contains("appName: must not be empty"), "{text}");

    let missing = dir.path().join("absent.yaml");
    let err = ManifestData::from_file(&missing).expect_err("absent");
    assert!(matches!(err, ManifestError::Read { .. }));
    assert!(err.to_string().contains("absent.yaml"), "{err}");
}

#[test]
fn every_validation_problem_is_reported_with_its_field() {
    let mut m = manifest();
    m.app_name.clear();
    m.group = "Not_A_Group".into();
    m.preferred_version = "v9".into();
    let duplicate = m.versions[1].kinds[0].clone();
    m.versions[1].kinds.push(duplicate);
    m.versions[0].kinds[0].scope = Scope::Cluster;
    m.extra_permissions = Some(Permissions {
        access_kinds: vec![KindPermission {
            group: String::new(),
            resource: "secrets".into(),
            actions: vec![],
        }],
    });
    let problems = problems_of(m.validate().expect_err("invalid"));
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "appName",
            "group",
            "versions[1].kinds[0].scope",
            "versions[1].kinds[2].kind",
            "preferredVersion",
            "extraPermissions.accessKinds[0].actions",
        ],
        "{problems:?}"
    );
    assert!(problems[3].message.contains("listed twice"));
    assert!(
        problems[4]
            .message
            .contains("`v9` is not among the versions [v1alpha1, v1]")
    );
    assert!(
        problems[2]
            .message
            .contains("scope `Namespaced` in version `v1`")
    );
}

#[test]
fn duplicate_versions_and_plural_mismatches_are_invalid() {
    let mut m = manifest();
    m.versions[1].kinds[0].plural = "gizmos".into();
    let mut copy = m.versions[0].clone();
    copy.kinds.clear();
    m.versions.push(copy);
    let problems = problems_of(m.validate().expect_err("invalid"));
    assert_eq!(problems[0].field, "versions[1].kinds[0].plural");
    assert_eq!(problems[1].field, "versions[2].name");
    assert!(problems[1].message.contains("listed twice"));
}

#[test]
fn a_manifest_without_versions_is_invalid() {
    let err = ManifestData::from_json(r#"{"appName":"a","group":"a.example.com"}"#)
        .expect_err("no versions");
    assert!(
        err.to_string()
            .contains("versions: must list at least one version"),
        "{err}"
    );
}

#[test]
fn storage_version_is_the_preferred_one_or_else_the_last() {
    let mut m = manifest();
    assert_eq!(m.storage_version(), Some("v1"));
    m.preferred_version.clear();
    m.versions.reverse();
    assert_eq!(m.storage_version(), Some("v1alpha1"));
}

#[test]
fn kinds_gathers_each_kind_across_versions_in_order() {
    let m = manifest();
    let kinds = m.kinds();
    let summary: Vec<(&str, &str, usize)> = kinds
        .iter()
        .map(|k| (k.kind, k.plural.as_str(), k.versions.len()))
        .collect();
    assert_eq!(summary, [("Gadget", "gadgets", 2), ("Fleet", "fleets", 1)]);
    assert_eq!(kinds[0].versions[0].version.name, "v1alpha1");
    assert_eq!(kinds[1].scope, Scope::Cluster);
}

#[test]
fn a_group_without_a_dot_is_invalid_because_crds_need_a_domain() {
    let mut m = manifest();
    m.group = "gadgets".into();
    let problems = problems_of(m.validate().expect_err("no dot"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].field, "group");
    assert!(
        problems[0].message.contains("at least one dot"),
        "{problems:?}"
    );
}

#[test]
fn declared_webhooks_name_each_kind_and_its_capabilities() {
    assert_eq!(
        manifest().declared_webhooks(),
        ["Gadget: validation, mutation"]
    );
    let converted = ManifestData::from_yaml(
        "appName: a\ngroup: a.example.com\nversions:\n  - name: v1\n    kinds:\n      - kind: Part\n        conversion: true\n  - name: v2\n    kinds:\n      - kind: Part\n        conversion: true\n",
    )
    .expect("valid manifest");
    assert_eq!(converted.declared_webhooks(), ["Part: conversion"]);
    // Conversion of a kind that exists in one version only needs no webhook.
    let single = ManifestData::from_yaml(
        "appName: a\ngroup: a.example.com\nversions:\n  - name: v1\n    kinds:\n      - kind: Part\n        conversion: true\n",
    )
    .expect("valid manifest");
    assert!(single.declared_webhooks().is_empty());
}
