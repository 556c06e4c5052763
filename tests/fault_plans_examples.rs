//! The example operators under `kubeapp::testing`'s fault harness, each as the binary users
//! deploy (`OperatorProcess`: `run --metrics-addr .. --namespace ..` through a fault proxy): a
//! workload of creates, an update and a delete runs once without faults, then under the plans
//! that run suggests (a crash after a write, a conflict or a lost answer on a write, a watched
//! kind withheld or lagging during a step), within the default budget; every plan must end as
//! the fault-free run did. The reconciler example's run is in `fault_plans.rs`. The components
//! example waits for its Deployments to roll out: its run is in testenv's cluster mode (the real
//! Deployment and ReplicaSet controllers, the scheduler, the garbage collector and a kwok node).
//! So does the canary example's (phases, Deployments as outputs), measured by a real Prometheus
//! (Debian's package; `PROMETHEUS` names another binary).
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

use example_support::{binary, free_port, output_of};

/// Three objects created, the first one's spec changed, the last one deleted.
fn scenario(
    name: &str,
    resource: ApiResource,
    spec: impl Fn(usize) -> Value + Send + Sync + Clone + 'static,
) -> Scenario {
    with_steps(name, resource, spec, true)
}

/// [`scenario`], with the change only if `change_one`.
fn with_steps(
    name: &str,
    resource: ApiResource,
    spec: impl Fn(usize) -> Value + Send + Sync + Clone + 'static,
    change_one: bool,
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
    let scenario = Scenario::new(name).step("create three", move |workload| {
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
    });
    let scenario = if change_one {
        scenario.step("change one", move |workload| {
            let api = api_update(&workload);
            let patch = json!({ "spec": spec(10) });
            async move {
                api.patch("object-0", &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(())
            }
        })
    } else {
        scenario
    };
    scenario
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
    passes_its_plans_in(&env, package, scenario, &[]).await;
}

/// [`passes_its_plans`] on `env`, the operator's environment with `envs`.
async fn passes_its_plans_in(
    env: &TestEnv,
    package: &str,
    scenario: Scenario,
    envs: &[(&str, String)],
) {
    let program = binary(package, package);
    env.install_crds_yaml(&output_of(&program, &["crd"]))
        .await
        .expect("the example's CRDs install");
    let operator = envs
        .iter()
        .fold(OperatorProcess::new(program), |operator, (name, value)| {
            operator.env(*name, value.clone())
        });
    let report = FaultHarness::new(env.client(), env.dir().join("fault-plans"))
        .run(&scenario, &operator)
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
    .normalize(cluster_normalize("WebApp"));
    passes_its_plans_in(&env, "kubeapp-example-components", scenario, &[]).await;
}

/// Removes, anywhere in `value`, what differs between runs by construction: strings that are
/// RFC 3339 times (a measurement's time) and `uid`s.
fn drop_times_and_uids(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|key, field| {
                let time = field.as_str().is_some_and(|text| {
                    text.len() >= 20
                        && text.as_bytes().get(4) == Some(&b'-')
                        && text.as_bytes().get(10) == Some(&b'T')
                });
                key != "uid" && !time
            });
            fields.values_mut().for_each(drop_times_and_uids);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_times_and_uids),
        _ => {}
    }
}

/// The normalisation of a run in the cluster mode: only `primary` keeps its status (times and
/// uids dropped); everything else's status is the cluster controllers' (rollout counts,
/// disruption budgets), as is a Service's address and a Deployment's revision.
fn cluster_normalize(primary: &'static str) -> impl Fn(&mut Value) + Send + Sync + 'static {
    move |object: &mut Value| {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if let Some(fields) = object.as_object_mut() {
            if kind == primary {
                if let Some(status) = fields.get_mut("status") {
                    drop_times_and_uids(status);
                }
            } else {
                fields.remove("status");
            }
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
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_example_passes_its_fault_plans() {
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    let port = free_port();
    let _prometheus = example_support::canary::start_prometheus(env.dir(), port, &[]).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("canary.kubeapp.dev", "v1", "Canary"),
        "canaries",
    );
    // A constant query: object-0 and object-2 succeed (1 >= 0.9), object-1 fails (0.5). No
    // change of a spec: a canary that finished keeps its outcome, so the end state of a change
    // depends on whether the operator saw the canary finish first (a history, not a fault).
    let scenario = with_steps(
        "canary",
        resource,
        |index| {
            let value = if index == 1 { "0.5" } else { "1" };
            json!({ "stableImage": "shop:1", "image": format!("shop:{}", index + 2),
                "analysis": { "metric": "successRate", "query": format!("vector({value})"),
                              "success": ">= 0.9", "count": 2, "interval": "1s" } })
        },
        false,
    )
    .observe::<k8s_openapi::api::apps::v1::Deployment>(None)
    .observe::<ConfigMap>(None)
    .normalize(cluster_normalize("Canary"));
    let prometheus = ("PROMETHEUS_URL", format!("http://127.0.0.1:{port}"));
    passes_its_plans_in(&env, "kubeapp-example-canary", scenario, &[prometheus]).await;
}
