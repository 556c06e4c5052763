//! The example operators under `kubeapp::testing`'s fault harness, each as the binary users
//! deploy (`OperatorProcess`: `run --metrics-addr .. --namespace ..` through a fault proxy): a
//! workload of creates, an update and a delete runs once without faults, then under the plans
//! that run suggests (a crash after a write, a conflict or a lost answer on a write, a watched
//! kind withheld or lagging during a step), within the default budget; every plan must end as
//! the fault-free run did. The reconciler example's run is in `fault_plans.rs`. The components
//! example waits for its Deployments to roll out: its run is in testenv's cluster mode (the real
//! Deployment and ReplicaSet controllers, the scheduler, the garbage collector and a kwok node).
//! The canary example (phases with a Prometheus analysis) is not run under the harness yet.
//!
//! Build the binaries first (`cargo build --workspace --all-features --bins`; `scripts/test`
//! does).

mod example_support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::testing::{Budget, FaultHarness, OperatorProcess, Scenario};
use serde_json::{Value, json};

use example_support::{binary, output_of};

/// Three objects created, the first one's spec changed, the last one deleted.
fn scenario(
    name: &str,
    resource: ApiResource,
    spec: impl Fn(usize) -> Value + Send + Sync + Clone + 'static,
) -> Scenario {
    let object = {
        let resource = resource.clone();
        move |index: usize, spec: Value| -> DynamicObject {
            let mut object = DynamicObject::new(&format!("object-{index}"), &resource);
            object.data = json!({ "spec": spec });
            object
        }
    };
    let api = {
        let resource = resource.clone();
        move |workload: &kubeapp::testing::Workload| -> Api<DynamicObject> {
            Api::namespaced_with(workload.client.clone(), &workload.namespace, &resource)
        }
    };
    let (api_create, api_update, api_delete) = (api.clone(), api.clone(), api);
    let create_spec = spec.clone();
    Scenario::new(name)
        .step("create three", move |workload| {
            let api = api_create(&workload);
            let objects: Vec<DynamicObject> = (0..3)
                .map(|index| object(index, create_spec(index)))
                .collect();
            async move {
                for object in objects {
                    api.create(&PostParams::default(), &object).await?;
                }
                Ok(())
            }
        })
        .step("change one", move |workload| {
            let api = api_update(&workload);
            let patch = json!({ "spec": spec(10) });
            async move {
                api.patch("object-0", &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(())
            }
        })
        .step("delete one", move |workload| {
            let api = api_delete(&workload);
            async move {
                api.delete("object-2", &DeleteParams::default()).await?;
                Ok(())
            }
        })
        .observe_resource(resource, None)
}

/// Installs `package`'s CRDs from its binary, runs `scenario` under the harness with the
/// default budget, and asserts every plan passed.
async fn passes_its_plans(package: &str, scenario: Scenario) {
    let env = TestEnv::start().await.expect("control plane");
    passes_its_plans_in(&env, package, scenario).await;
}

/// [`passes_its_plans`] on `env`.
async fn passes_its_plans_in(env: &TestEnv, package: &str, scenario: Scenario) {
    let program = binary(package, package);
    env.install_crds_yaml(&output_of(&program, &["crd"]))
        .await
        .expect("the example's CRDs install");
    let report = FaultHarness::new(env.client(), env.dir().join("fault-plans"))
        .run(&scenario, &OperatorProcess::new(program))
        .await
        .expect("the fault-free run");
    eprintln!("{report}");
    assert_eq!(
        report.run,
        Budget::default().plans.min(report.available),
        "{report}"
    );
    report.assert_passed();
}

#[tokio::test]
async fn the_minimal_example_passes_its_fault_plans() {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    let scenario = scenario(
        "minimal",
        resource,
        |index| json!({ "message": format!("hello {index}") }),
    )
    .observe::<ConfigMap>(None);
    passes_its_plans("kubeapp-example-minimal", scenario).await;
}

#[tokio::test]
async fn the_watcher_example_passes_its_fault_plans() {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("watcher.example.kubeapp.dev", "v1", "Probe"),
        "probes",
    );
    let scenario = scenario(
        "watcher",
        resource,
        |index| json!({ "target": format!("target {index}") }),
    );
    passes_its_plans("kubeapp-example-watcher", scenario).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_components_example_passes_its_fault_plans() {
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("webapps.kubeapp.dev", "v1", "WebApp"),
        "webapps",
    );
    // Two of three exposed: the Service follows the Deployment's rollout.
    let scenario = scenario("components", resource, |index| {
        json!({ "image": "nginx:1.27", "page": format!("<h1>{index}</h1>"),
                "expose": index % 2 == 0, "minAvailable": 1 })
    })
    .observe::<k8s_openapi::api::apps::v1::Deployment>(None)
    .observe::<k8s_openapi::api::core::v1::Service>(None)
    .observe::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(None)
    .observe::<ConfigMap>(None)
    .normalize(|object| {
        // The cluster's controllers write these (rollout counts, disruption budgets) and assign
        // the Service's address: not the operator's doing, and they differ between runs.
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if kind != "WebApp"
            && let Some(fields) = object.as_object_mut()
        {
            fields.remove("status");
        }
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
            && kind == "Service"
        {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        if let Some(annotations) = object
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove("deployment.kubernetes.io/revision");
        }
    });
    passes_its_plans_in(&env, "kubeapp-example-components", scenario).await;
}
