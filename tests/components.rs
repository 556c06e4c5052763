//! End-to-end test of a component graph as a kind's reconciler (`kubeapp::components`) against a
//! real kube-apiserver + etcd: a `WebApp` rendered into a ConfigMap, a Deployment that depends
//! on it, and a Service (toggled by the spec) that depends on the Deployment:
//!
//! - every object is server-side applied with a controller owner reference to the `WebApp`;
//! - the Service (`depends_on_ready`) appears only once the Deployment is available: testenv
//!   runs in cluster mode with its only node cordoned, so the rollout cannot schedule and the
//!   Service must wait; uncordoned, the real controllers roll the Deployment out (the test
//!   writes no status) and the `owns` trigger on Deployments brings the graph back (its requeue
//!   is an hour);
//! - a deleted child is re-created through `owns` (the graph's requeue is an hour, so only the
//!   trigger can bring it back within the wait);
//! - turning the Service off in the spec deletes it.
//!
//! - the custom object's status (`with_status`): `Ready=False` (`ComponentsNotReady`, the
//!   Deployment waiting) until the Deployment is available, then `Ready=True`, `Updating=False`
//!   and `observedGeneration` current.

mod call_log;

use std::sync::Arc;
use std::time::Duration;

use call_log::{WAIT, logs, wait_object};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{CustomResource, Resource, ResourceExt};
use kubeapp::components::{
    BoxComponent, ComponentError, ComponentGraph, ComponentsReconciler, ComponentsSummary,
    Rendered, Session, component_fn,
};
use kubeapp::operator::{CancellationToken, ControllerConfig, InformerController, InformerOptions};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "components.kubeapp.dev",
    version = "v1",
    kind = "WebApp",
    namespaced,
    status = "WebAppStatus"
)]
struct WebAppSpec {
    image: String,
    expose: bool,
}

/// What the graph writes (see `kubeapp::components::status`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WebAppStatus {
    #[serde(default)]
    #[schemars(schema_with = "kubeapp::operator::apply::conditions::schema")]
    conditions: Vec<Condition>,
    components: Option<ComponentsSummary>,
    observed_generation: Option<i64>,
}

fn condition<'a>(app: &'a WebApp, type_: &str) -> Option<&'a Condition> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn name_of(session: &Session<WebApp>) -> String {
    session.object().name_any()
}

fn graph() -> ComponentGraph<WebApp, BoxComponent<WebApp>> {
    let config: BoxComponent<WebApp> = Box::new(component_fn(|s: &Session<WebApp>| {
        Ok(vec![Rendered::value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-config", name_of(s)),
                         "namespace": s.object().namespace()},
            "data": {"image": s.object().spec.image}
        }))])
    }));
    let deployment: BoxComponent<WebApp> = Box::new(component_fn(|s: &Session<WebApp>| {
        let name = name_of(s);
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": s.object().namespace()},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "web", "image": s.object().spec.image}]}
                }
            }
        }))
        .map_err(|e| ComponentError::Failed(e.to_string()))?;
        Ok(vec![Rendered::of(&deployment)?])
    }));
    let service: BoxComponent<WebApp> = Box::new(Toggled(component_fn(|s: &Session<WebApp>| {
        Ok(vec![Rendered::value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name_of(s), "namespace": s.object().namespace()},
            "spec": {"selector": {"app": name_of(s)}, "ports": [{"port": 80}]}
        }))])
    })));
    ComponentGraph::builder()
        .component("config", config)
        .component("deployment", deployment)
        .depends_on("config")
        .component("service", service)
        .depends_on_ready("deployment")
        .build()
        .expect("a valid graph")
}

/// The Service component: enabled by `spec.expose`.
struct Toggled<C>(C);

impl<C: kubeapp::components::Component<WebApp>> kubeapp::components::Component<WebApp>
    for Toggled<C>
{
    fn enabled(&self, session: &Session<WebApp>) -> bool {
        session.object().spec.expose
    }
    fn render(&self, session: &Session<WebApp>) -> Result<Vec<Rendered>, ComponentError> {
        self.0.render(session)
    }
}

fn owned_by(object: &impl Resource, owner: &WebApp) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(&o.uid) == owner.metadata.uid.as_ref() && o.controller == Some(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_children_are_applied_the_service_waits_for_an_available_deployment_and_deleted_or_disabled_children_follow_the_graph()
 {
    logs();
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    let node = env.node_names().into_iter().next().expect("a fake node");
    env.cordon_node(&node, true).await.expect("cordon the node");
    env.install_crd::<WebApp>().await.expect("CRD");
    let ns = env.create_namespace("components").await.expect("namespace");
    let client = env.client();

    let controller = InformerController::new(ControllerConfig::default().name("components-test"));
    let apps = controller.kind(
        Api::<WebApp>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let _reconciler = apps.reconcile(
        ComponentsReconciler::new(graph())
            .with_status()
            .not_ready_backoff(Duration::from_secs(3600), Duration::from_secs(3600)),
    );
    let _config_maps = apps.owns(
        Api::<ConfigMap>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    );
    let _deployments = apps.owns(
        Api::<Deployment>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    );
    let _services = apps.owns(
        Api::<Service>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    );
    let stop = CancellationToken::new();
    tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    let web_apps: Api<WebApp> = Api::namespaced(client.clone(), &ns);
    let app = web_apps
        .create(
            &PostParams::default(),
            &WebApp::new(
                "shop",
                WebAppSpec {
                    image: "nginx:1".into(),
                    expose: true,
                },
            ),
        )
        .await
        .expect("create the WebApp");
    let owner = Arc::new(app);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let o = Arc::clone(&owner);
    wait_object(
        &config_maps,
        "shop-config",
        "the ConfigMap, owned",
        move |cm| owned_by(cm, &o),
    )
    .await;
    let o = Arc::clone(&owner);
    wait_object(&deployments, "shop", "the Deployment, owned", move |d| {
        owned_by(d, &o)
    })
    .await;
    wait_object(
        &web_apps,
        "shop",
        "Ready=False while the Deployment is not available",
        |app| {
            condition(app, "Ready")
                .is_some_and(|c| c.status == "False" && c.reason == "ComponentsNotReady")
                && app
                    .status
                    .as_ref()
                    .and_then(|s| s.components.as_ref())
                    .is_some_and(|c| c.total == 3 && c.waiting.contains(&"deployment".to_string()))
        },
    )
    .await;
    // The Service waits for the Deployment to be available, which it cannot be while no node
    // takes its pod.
    assert!(
        services.get_opt("shop").await.expect("read").is_none(),
        "the Service must wait for an available Deployment"
    );
    env.cordon_node(&node, false)
        .await
        .expect("uncordon the node");
    let o = Arc::clone(&owner);
    wait_object(
        &services,
        "shop",
        "the Service, owned, once the Deployment is available",
        move |s| owned_by(s, &o),
    )
    .await;

    wait_object(
        &web_apps,
        "shop",
        "Ready=True once every component is ready",
        |app| {
            condition(app, "Ready").is_some_and(|c| c.status == "True")
                && condition(app, "Updating").is_some_and(|c| c.status == "False")
                && app.status.as_ref().and_then(|s| s.observed_generation)
                    == app.metadata.generation
        },
    )
    .await;

    let old_uid = config_maps.get("shop-config").await.expect("config").uid();
    config_maps
        .delete("shop-config", &DeleteParams::default())
        .await
        .expect("delete the ConfigMap");
    wait_object(
        &config_maps,
        "shop-config",
        "the deleted ConfigMap is re-created",
        move |cm| cm.uid() != old_uid,
    )
    .await;

    let service_uid = services
        .get("shop")
        .await
        .expect("service")
        .uid()
        .expect("uid");
    web_apps
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"expose": false}})),
        )
        .await
        .expect("turn the Service off");
    tokio::time::timeout(
        WAIT,
        await_condition(
            services.clone(),
            "shop",
            conditions::is_deleted(&service_uid),
        ),
    )
    .await
    .expect("the disabled Service is deleted in time")
    .expect("watch");
    stop.cancel();
}
