//! The dry run over files, with no cluster: a ConfigMap plays the custom object (its `data`
//! toggles components), so no CRD type is needed.

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::*;
use crate::component::{BoxComponent, ComponentError, component_fn};
use crate::graph::ComponentGraph;

/// A component that renders one object of `kind` named after the owner, with `suffix`.
fn named(
    kind: &'static str,
    api_version: &'static str,
    suffix: &'static str,
) -> BoxComponent<ConfigMap> {
    Box::new(component_fn(move |s: &Session<ConfigMap>| {
        let name = s.object().metadata.name.clone().unwrap_or_default();
        Ok(vec![Rendered::value(json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": format!("{name}{suffix}"), "namespace": "shop"},
            "spec": {"owner": name}
        }))])
    }))
}

/// Enabled when the owner's `data.expose` is "true".
struct Exposed(BoxComponent<ConfigMap>);

impl crate::component::Component<ConfigMap> for Exposed {
    fn enabled(&self, session: &Session<ConfigMap>) -> bool {
        session
            .object()
            .data
            .as_ref()
            .and_then(|d| d.get("expose"))
            .is_some_and(|v| v == "true")
    }
    fn render(&self, session: &Session<ConfigMap>) -> Result<Vec<Rendered>, ComponentError> {
        self.0.render(session)
    }
}

fn graph() -> ComponentGraph<ConfigMap, BoxComponent<ConfigMap>> {
    ComponentGraph::builder()
        .component("deployment", named("Deployment", "apps/v1", ""))
        .component(
            "service",
            Box::new(Exposed(named("Service", "v1", "-svc"))) as BoxComponent<ConfigMap>,
        )
        .depends_on_ready("deployment")
        .build()
        .expect("valid graph")
}

fn owner_file(dir: &Path, expose: bool) -> PathBuf {
    let path = dir.join("app.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop\n  namespace: shop\ndata:\n  expose: \"{expose}\"\n"
        ),
    )
    .expect("write the owner");
    path
}

#[tokio::test]
async fn every_component_is_rendered_into_the_tree_even_behind_a_readiness_gate() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out");
    let (run, written) = from_files(&graph(), &owner_file(dir.path(), true), None, &out)
        .await
        .expect("renders");
    let deployment = out.join("v1.ConfigMap/shop/deployment/Deployment.shop.yaml");
    let service = out.join("v1.ConfigMap/shop/service/Service.shop-svc.yaml");
    assert_eq!(written, vec![deployment.clone(), service.clone()]);
    let stored: Value = read_object(&deployment).expect("reads back");
    assert_eq!(stored["spec"]["owner"], "shop");
    let reference = &stored["metadata"]["ownerReferences"][0];
    assert_eq!(reference["kind"], "ConfigMap");
    assert_eq!(reference["name"], "shop");
    assert_eq!(reference["controller"], true);
    assert_eq!(
        reference["uid"], "",
        "a file without a uid gives an empty one"
    );
    assert!(run.report.all_deployed());
}

#[tokio::test]
async fn a_disabled_component_is_marked_with_what_a_reconcile_deletes() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out");
    from_files(&graph(), &owner_file(dir.path(), false), None, &out)
        .await
        .expect("renders");
    let marker = std::fs::read_to_string(out.join("v1.ConfigMap/shop/service/DISABLED"))
        .expect("a DISABLED marker");
    assert!(marker.contains("- Service/shop-svc"), "{marker}");
    assert!(
        !out.join("v1.ConfigMap/shop/service/Service.shop-svc.yaml")
            .exists()
    );
}

#[tokio::test]
async fn existing_objects_answer_with_their_status_for_the_verify_phase() {
    let dir = tempfile::tempdir().expect("tmp");
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).expect("dir");
    std::fs::write(
        existing.join("deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\n  namespace: shop\n  generation: 1\nstatus:\n  observedGeneration: 1\n  conditions:\n  - type: Available\n    status: \"True\"\n  - type: Progressing\n    status: \"True\"\n    reason: NewReplicaSetAvailable\n",
    )
    .expect("write");
    let object: ConfigMap = read_object(&owner_file(dir.path(), true)).expect("owner");
    let run = dry_run(&graph(), object, read_objects(&existing).expect("existing")).await;
    assert_eq!(
        run.report.verified[0],
        crate::report::Verified::Ready,
        "{:?}",
        run.report
    );
    assert!(
        run.applied[0].1.get("status").is_none(),
        "what is written is what a reconcile sends, not the existing status"
    );
}

#[tokio::test]
async fn a_failed_render_and_a_bad_file_are_errors_naming_what_failed() {
    let dir = tempfile::tempdir().expect("tmp");
    let failing: BoxComponent<ConfigMap> = Box::new(component_fn(|_: &Session<ConfigMap>| {
        Err(ComponentError::Failed("no image given".into()))
    }));
    let broken = ComponentGraph::builder()
        .component("web", failing)
        .component("service", named("Service", "v1", ""))
        .depends_on("web")
        .build()
        .expect("valid graph");
    let out = dir.path().join("out");
    let error = from_files(&broken, &owner_file(dir.path(), true), None, &out)
        .await
        .expect_err("a failed render fails the dry run");
    let message = error.to_string();
    assert!(
        message.contains("web: failed: render: no image given"),
        "{message}"
    );
    assert!(message.contains("service: halted: web"), "{message}");
    assert!(out.join("v1.ConfigMap/shop/web/NOT_RENDERED").exists());

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: [unclosed").expect("write");
    let error = from_files(&graph(), &bad, None, &out)
        .await
        .expect_err("not an object");
    assert!(
        error.to_string().starts_with(&bad.display().to_string()),
        "{error}"
    );
}
