//! A components operator: each `WebApp` is rendered as four components, deployed in dependency
//! order and verified in the same order (`kubeapp::components`, oper8's model):
//!
//! - `config`: a ConfigMap with the page to serve;
//! - `deployment` (after `config`): the Deployment, plus a PodDisruptionBudget while
//!   `spec.minAvailable` is set (removed from the spec, it is pruned);
//! - `service` (once the Deployment is available), while `spec.expose` is true;
//! - `ingress` (after `service`), while `spec.host` is set.
//!
//! The status carries `Ready`/`Updating` conditions, a components summary and the inventory that
//! pruning works from; deleting a WebApp deletes its objects (finalizer cleanup). Commands: `crd`,
//! `rbac`, `manifests`, `run`, and `dry-run --object webapp.yaml --out DIR`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kubeapp::components::{
    ComponentGraph, ComponentsReconciler, ComponentsStatus, Rendered, Session, dry_run,
};
use kubeapp::prelude::*;
use serde_json::{Value, json};

/// A web application: an image serving a page, optionally exposed and protected.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "webapps.kubeapp.dev",
    version = "v1",
    kind = "WebApp",
    namespaced,
    status = "ComponentsStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct WebAppSpec {
    /// The container image.
    pub image: String,
    /// The page it serves (mounted from the ConfigMap).
    pub page: String,
    /// Whether a Service exposes it.
    #[serde(default)]
    pub expose: bool,
    /// The Ingress host, if any (needs `expose`).
    pub host: Option<String>,
    /// Pods kept during voluntary disruptions, if any.
    pub min_available: Option<i32>,
}

const MANIFEST: &str = include_str!("../manifest.yaml");
const MANAGED_BY: &str = "app.kubernetes.io/managed-by=webapp-operator";

/// The metadata every child carries: its name, the WebApp's namespace, the operator's label.
fn meta(s: &Session<WebApp>, name: String) -> Value {
    json!({"name": name, "namespace": s.object().namespace(),
           "labels": {"app.kubernetes.io/managed-by": "webapp-operator",
                      "app.kubernetes.io/instance": s.object().name_any()}})
}

fn graph() -> ComponentGraph<WebApp> {
    let graph = ComponentGraph::builder()
        .render("config", |s: &Session<WebApp>| {
            Ok(vec![Rendered::value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": meta(s, format!("{}-page", s.object().name_any())),
                "data": {"index.html": s.object().spec.page}
            }))])
        })
        .render("deployment", |s: &Session<WebApp>| {
            let (app, spec) = (s.object().name_any(), &s.object().spec);
            let mut objects = vec![Rendered::value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(s, app.clone()),
                "spec": {"selector": {"matchLabels": {"app": app}},
                  "template": {"metadata": {"labels": {"app": app}}, "spec": {
                    "containers": [{"name": "web", "image": spec.image,
                      "volumeMounts": [{"name": "page", "mountPath": "/usr/share/nginx/html"}]}],
                    "volumes": [{"name": "page", "configMap": {"name": format!("{app}-page")}}]}}}
            }))];
            if let Some(min) = spec.min_available {
                objects.push(Rendered::value(json!({
                    "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": meta(s, app.clone()),
                    "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": app}}}
                })));
            }
            Ok(objects)
        })
        .depends_on("config")
        .render_when("service", |a: &WebApp| a.spec.expose, |s| {
            let app = s.object().name_any();
            Ok(vec![Rendered::value(json!({
                "apiVersion": "v1", "kind": "Service", "metadata": meta(s, app.clone()),
                "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}
            }))])
        })
        .depends_on_ready("deployment")
        .render_when("ingress", |a: &WebApp| a.spec.host.is_some(), |s| {
            let app = s.object().name_any();
            let backend = json!({"service": {"name": app, "port": {"number": 80}}});
            Ok(vec![Rendered::value(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta(s, app),
                "spec": {"rules": [{"host": s.object().spec.host, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend}]}}]}
            }))])
        })
        .depends_on("service");
    graph
        .build()
        .expect("the graph is declared above: no cycle, no unknown name")
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let owned = || watcher::Config::default().labels(MANAGED_BY);
    Operator::new(MANIFEST)
        .manifest_file("manifest.yaml")
        .crd::<WebApp>()
        .app_with_context(move |context| {
            // Counted in the Runner's registry, under its --metrics-prefix.
            let components = ComponentsReconciler::new(graph())
                .with_status()
                .metrics_in(&context.metrics)?;
            Ok(AppConfig::from_manifest(context.manifest).managed_kind(
                ManagedKind::<WebApp>::new()
                    .reconciler(components)
                    .owns::<ConfigMap>(owned())
                    .owns::<Deployment>(owned())
                    .owns::<PodDisruptionBudget>(owned())
                    .owns::<Service>(owned())
                    .owns::<Ingress>(owned()),
            ))
        })
        .dry_run(|args| async move {
            let out = &args.out;
            let (run, files) =
                dry_run::from_files(&graph(), &args.object, args.existing.as_deref(), out).await?;
            let mut summary = format!("{} objects written under {}", files.len(), out.display());
            if let Some(cluster) = args.cluster().await? {
                let refused = run.check_on_server(&cluster).await;
                if !refused.is_empty() {
                    let lines: Vec<String> = refused.iter().map(ToString::to_string).collect();
                    return Err(format!("the apiserver refused:\n{}", lines.join("\n")).into());
                }
                summary.push_str("; the apiserver accepted every object");
            }
            Ok(summary)
        })
        .main()
        .await
}
