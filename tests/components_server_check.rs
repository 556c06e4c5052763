//! The checked dry run (`kubeapp::components::dry_run::DryRun::check_on_server`), end to end against a real
//! kube-apiserver + etcd: a graph renders a Deployment, a custom resource of a CRD with a schema
//! and a CEL rule, and a ConfigMap. Rendered for a spec that breaks both, the apiserver's own
//! checks report a violation of the Deployment's built-in schema (`spec.replicas`) and one of the
//! CRD's CEL rule, each with the component and the object; the ConfigMap passes; nothing is
//! stored. Rendered for a valid spec, there is no violation. A kind the apiserver does not serve is
//! a violation naming it.

mod call_log;

use call_log::logs;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::{CustomResource, ResourceExt};
use kubeapp::components::dry_run::dry_run;
use kubeapp::components::{ComponentGraph, Rendered, Violation};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "check.kubeapp.dev", version = "v1", kind = "Shop", namespaced)]
struct ShopSpec {
    replicas: i32,
    cache_size: i64,
}

/// The CRD of the custom resource the graph renders: `spec.size` at most 10 by a CEL rule.
const CACHE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: caches.check.kubeapp.dev
spec:
  group: check.kubeapp.dev
  names: {kind: Cache, plural: caches, singular: cache, listKind: CacheList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
            x-kubernetes-validations:
            - rule: "self.size <= 10"
              message: "size must be at most 10"
"#;

fn graph() -> ComponentGraph<Shop> {
    ComponentGraph::<Shop>::builder()
        .render("settings", |s| {
            Ok(vec![Rendered::value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": s.object().name_any(), "namespace": s.object().namespace()},
                "data": {"a": "b"}
            }))])
        })
        .render("web", |s| {
            let name = s.object().name_any();
            Ok(vec![Rendered::value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": s.object().namespace()},
                "spec": {
                    "replicas": s.object().spec.replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}
                    }
                }
            }))])
        })
        .render("cache", |s| {
            Ok(vec![Rendered::value(json!({
                "apiVersion": "check.kubeapp.dev/v1", "kind": "Cache",
                "metadata": {"name": s.object().name_any(), "namespace": s.object().namespace()},
                "spec": {"size": s.object().spec.cache_size}
            }))])
        })
        .build()
        .expect("a valid graph")
}

fn shop(ns: &str, replicas: i32, cache_size: i64) -> Shop {
    let mut shop = Shop::new(
        "corner",
        ShopSpec {
            replicas,
            cache_size,
        },
    );
    shop.metadata.namespace = Some(ns.to_string());
    shop
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_checks_every_rendered_object_and_each_violation_names_its_component_and_field()
 {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds_yaml(CACHE_CRD)
        .await
        .expect("the Cache CRD");
    let ns = env.create_namespace("check").await.expect("namespace");
    let client = env.client();

    let bad = dry_run(&graph(), shop(&ns, -1, 20), Vec::new()).await;
    bad.check().expect("every component rendered");
    let violations = bad.check_on_server(&client).await;
    let by_component = |component: &str| -> Vec<&Violation> {
        violations
            .iter()
            .filter(|v| v.component == component)
            .collect()
    };
    let web = by_component("web");
    assert!(
        web.iter()
            .any(|v| v.field.as_deref() == Some("spec.replicas")
                && v.object == format!("apps/v1 Deployment {ns}/corner")),
        "the Deployment's built-in schema: {violations:#?}"
    );
    let cache = by_component("cache");
    assert!(
        cache
            .iter()
            .any(|v| v.message.contains("size must be at most 10")
                && v.object == format!("check.kubeapp.dev/v1 Cache {ns}/corner")),
        "the CRD's CEL rule: {violations:#?}"
    );
    assert!(
        by_component("settings").is_empty(),
        "the ConfigMap is valid: {violations:#?}"
    );
    assert_eq!(
        violations.len(),
        web.len() + cache.len(),
        "only the web and cache objects are refused: {violations:#?}"
    );
    let stored = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt("corner")
        .await
        .expect("get");
    assert!(stored.is_none(), "a dry run stores nothing");

    let good = dry_run(&graph(), shop(&ns, 2, 5), Vec::new()).await;
    let violations = good.check_on_server(&client).await;
    assert!(
        violations.is_empty(),
        "a valid rendering passes: {violations:#?}"
    );

    let unknown = ComponentGraph::<Shop>::builder()
        .render("widget", |s| {
            Ok(vec![Rendered::value(json!({
                "apiVersion": "check.kubeapp.dev/v1", "kind": "Widget",
                "metadata": {"name": s.object().name_any(), "namespace": s.object().namespace()}
            }))])
        })
        .build()
        .expect("a valid graph");
    let rendered = dry_run(&unknown, shop(&ns, 1, 1), Vec::new()).await;
    let violations = rendered.check_on_server(&client).await;
    assert!(
        matches!(violations.as_slice(), [v] if v.component == "widget"
            && v.message.contains("does not serve")),
        "a kind the apiserver does not serve: {violations:#?}"
    );
}
