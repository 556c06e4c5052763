//! The deploy and verify phases over an in-memory cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::*;
use crate::graph::GraphBuilder;

/// The custom object of these tests: which components are on.
#[derive(Default)]
struct Spec {
    ingress: bool,
    database_ready: bool,
}

/// A component rendering one ConfigMap-like object named after it.
struct Plain {
    name: &'static str,
    kind: &'static str,
    toggle: Option<fn(&Spec) -> bool>,
    render_error: Option<ComponentError>,
}

fn plain(name: &'static str) -> BoxComponent<Spec> {
    Box::new(Plain {
        name,
        kind: "ConfigMap",
        toggle: None,
        render_error: None,
    })
}

impl Component<Spec> for Plain {
    fn enabled(&self, session: &Session<Spec>) -> bool {
        self.toggle.is_none_or(|on| on(session.object()))
    }

    fn render(&self, _session: &Session<Spec>) -> Result<Vec<Rendered>, ComponentError> {
        if let Some(error) = &self.render_error {
            return Err(error.clone());
        }
        let api_version = if self.kind == "Deployment" {
            "apps/v1"
        } else {
            "v1"
        };
        Ok(vec![Rendered::value(json!({
            "apiVersion": api_version, "kind": self.kind,
            "metadata": {"name": self.name, "generation": 1}
        }))])
    }
}

/// Records applies and deletes, counts concurrency, fails or sets status on request.
#[derive(Default)]
struct Memory {
    log: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    failing: Vec<&'static str>,
    /// `status` given to objects of a component when applied.
    status: HashMap<&'static str, Value>,
}

impl Cluster for Memory {
    async fn apply(&self, component: &str, object: &Rendered) -> Result<Value, String> {
        let mut object = object.object.clone();
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.failing.contains(&component) {
            return Err("the apiserver said no".into());
        }
        self.log
            .lock()
            .expect("log")
            .push(format!("apply {component}"));
        if let Some(status) = self.status.get(component) {
            object["status"] = status.clone();
        }
        Ok(object)
    }

    async fn delete(&self, component: &str, _object: &Rendered) -> Result<(), String> {
        self.log
            .lock()
            .expect("log")
            .push(format!("delete {component}"));
        Ok(())
    }
}

fn ready_deployment() -> Value {
    json!({"observedGeneration": 1, "conditions": [
        {"type": "Available", "status": "True"},
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
}

/// config, secret -> deployment -> service, ingress (toggled)
fn web_app(deployment_status: Option<Value>) -> (ComponentGraph<Spec, BoxComponent<Spec>>, Memory) {
    let graph = GraphBuilder::new()
        .component("config", plain("config"))
        .component("secret", plain("secret"))
        .component(
            "deployment",
            Box::new(Plain {
                name: "deployment",
                kind: "Deployment",
                toggle: None,
                render_error: None,
            }) as BoxComponent<Spec>,
        )
        .depends_on("config")
        .depends_on("secret")
        .component("service", plain("service"))
        .depends_on("deployment")
        .component(
            "ingress",
            Box::new(Plain {
                name: "ingress",
                kind: "Ingress",
                toggle: Some(|spec| spec.ingress),
                render_error: None,
            }) as BoxComponent<Spec>,
        )
        .depends_on("service")
        .build()
        .expect("a valid graph");
    let mut cluster = Memory::default();
    if let Some(status) = deployment_status {
        cluster.status.insert("deployment", status);
    }
    (graph, cluster)
}

fn log(cluster: &Memory) -> Vec<String> {
    cluster.log.lock().expect("log").clone()
}

#[tokio::test]
async fn components_deploy_in_dependency_order_and_verify_when_ready() {
    let (graph, cluster) = web_app(Some(ready_deployment()));
    let session = Session::new(Arc::new(Spec {
        ingress: true,
        ..Spec::default()
    }));
    let report = run(&graph, &session, &cluster, 4).await;
    let order = log(&cluster);
    let at = |entry: &str| order.iter().position(|e| e == entry).expect(entry);
    assert!(
        at("apply deployment") > at("apply config") && at("apply deployment") > at("apply secret")
    );
    assert!(at("apply service") > at("apply deployment"));
    assert!(at("apply ingress") > at("apply service"));
    assert!(report.all_ready(), "{report:?}");
    assert_eq!(
        cluster.most_in_flight.load(Ordering::SeqCst),
        2,
        "config and secret are applied together"
    );
}

#[tokio::test]
async fn concurrency_is_bounded() {
    let (graph, cluster) = web_app(Some(ready_deployment()));
    let session = Session::new(Arc::new(Spec::default()));
    run(&graph, &session, &cluster, 1).await;
    assert_eq!(cluster.most_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_deployment_not_yet_available_leaves_everything_after_it_unverified() {
    let progressing = json!({"observedGeneration": 1, "conditions": [
        {"type": "Available", "status": "False"},
        {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]});
    let (graph, cluster) = web_app(Some(progressing));
    let session = Session::new(Arc::new(Spec::default()));
    let report = run(&graph, &session, &cluster, 4).await;
    assert!(!report.all_ready());
    assert_eq!(
        report.names_where(|_, v| matches!(v, Verified::NotReady(_))),
        ["deployment"]
    );
    assert_eq!(
        report.names_where(|d, v| matches!(d, Outcome::Deployed(_)) && *v == Verified::Skipped),
        ["service"],
        "deployed but not verified before the deployment is ready"
    );
    assert_eq!(
        report.names_where(|d, _| *d == Outcome::Disabled),
        ["ingress"]
    );
}

#[tokio::test]
async fn a_failure_halts_what_depends_on_it_and_nothing_else() {
    let (graph, mut cluster) = web_app(Some(ready_deployment()));
    cluster.failing.push("secret");
    let session = Session::new(Arc::new(Spec {
        ingress: true,
        ..Spec::default()
    }));
    let report = run(&graph, &session, &cluster, 4).await;
    assert!(
        matches!(&report.deployed[1], Outcome::Failed(why) if why.contains("ConfigMap/secret") && why.contains("said no")),
        "{:?}",
        report.deployed[1]
    );
    assert_eq!(
        report.deployed[2],
        Outcome::Halted {
            by: "secret".into()
        }
    );
    assert_eq!(
        report.deployed[3],
        Outcome::Halted {
            by: "deployment".into()
        }
    );
    assert!(
        matches!(report.deployed[0], Outcome::Deployed(_)),
        "config is independent"
    );
    assert_eq!(log(&cluster), ["apply config"]);
}

#[tokio::test]
async fn a_disabled_component_is_deleted_and_does_not_halt_its_dependents() {
    let graph = GraphBuilder::new()
        .component(
            "pdb",
            Box::new(Plain {
                name: "pdb",
                kind: "PodDisruptionBudget",
                toggle: Some(|spec| spec.ingress),
                render_error: None,
            }) as BoxComponent<Spec>,
        )
        .component("app", plain("app"))
        .depends_on("pdb")
        .build()
        .expect("valid");
    let cluster = Memory::default();
    let report = run(
        &graph,
        &Session::new(Arc::new(Spec::default())),
        &cluster,
        2,
    )
    .await;
    assert_eq!(log(&cluster), ["delete pdb", "apply app"]);
    assert_eq!(report.deployed[0], Outcome::Disabled);
    assert!(report.all_ready());
}

#[tokio::test]
async fn expected_waits_and_edge_checks_halt_without_failing() {
    let graph = GraphBuilder::new()
        .component(
            "database",
            Box::new(Plain {
                name: "database",
                kind: "ConfigMap",
                toggle: None,
                render_error: Some(ComponentError::Waiting("the credentials Secret".into())),
            }) as BoxComponent<Spec>,
        )
        .component("schema", plain("schema"))
        .component("app", plain("app"))
        .depends_on_if("schema", |spec: &Spec| spec.database_ready)
        .build()
        .expect("valid");
    let cluster = Memory::default();
    let report = run(
        &graph,
        &Session::new(Arc::new(Spec::default())),
        &cluster,
        2,
    )
    .await;
    assert_eq!(
        report.deployed[0],
        Outcome::Waiting("the credentials Secret".into())
    );
    assert!(
        matches!(&report.deployed[2], Outcome::Waiting(why) if why.contains("schema")),
        "{:?}",
        report.deployed[2]
    );
    assert!(
        report
            .deployed
            .iter()
            .all(|d| !matches!(d, Outcome::Failed(_))),
        "waits are not failures: {report:?}"
    );
    assert_eq!(log(&cluster), ["apply schema"]);
}

#[tokio::test]
async fn a_ready_gated_dependent_waits_for_its_dependency_to_be_ready() {
    let graph = |status: Value| {
        let graph = GraphBuilder::new()
            .component(
                "deployment",
                Box::new(Plain {
                    name: "deployment",
                    kind: "Deployment",
                    toggle: None,
                    render_error: None,
                }) as BoxComponent<Spec>,
            )
            .component("service", plain("service"))
            .depends_on_ready("deployment")
            .build()
            .expect("valid");
        let mut cluster = Memory::default();
        cluster.status.insert("deployment", status);
        (graph, cluster)
    };
    let (not_ready, cluster) = graph(json!({"observedGeneration": 1, "conditions": [
        {"type": "Available", "status": "False"}]}));
    let report = run(
        &not_ready,
        &Session::new(Arc::new(Spec::default())),
        &cluster,
        2,
    )
    .await;
    assert!(
        matches!(&report.deployed[1], Outcome::Waiting(why) if why.starts_with("deployment is not ready: Deployment/deployment")),
        "{:?}",
        report.deployed[1]
    );
    assert_eq!(log(&cluster), ["apply deployment"]);
    let (ready, cluster) = graph(ready_deployment());
    let report = run(
        &ready,
        &Session::new(Arc::new(Spec::default())),
        &cluster,
        2,
    )
    .await;
    assert!(report.all_ready(), "{report:?}");
    assert_eq!(log(&cluster), ["apply deployment", "apply service"]);
}

/// Records which hooks ran; the verify hook can be made to fail.
#[derive(Default)]
struct Recorded {
    calls: Mutex<Vec<&'static str>>,
    fail_deploy: bool,
}

impl crate::hooks::Hooks<Spec> for Arc<Recorded> {
    async fn after_deploy(&self, _: &Session<Spec>, _: &RunReport) -> Result<(), ComponentError> {
        self.calls.lock().expect("calls").push("after_deploy");
        if self.fail_deploy {
            return Err(ComponentError::Failed("the deploy hook failed".into()));
        }
        Ok(())
    }
    async fn after_deploy_unsuccessful(
        &self,
        _: &Session<Spec>,
        _: &RunReport,
    ) -> Result<(), ComponentError> {
        self.calls
            .lock()
            .expect("calls")
            .push("after_deploy_unsuccessful");
        Ok(())
    }
    async fn after_verify(&self, _: &Session<Spec>, _: &RunReport) -> Result<(), ComponentError> {
        self.calls.lock().expect("calls").push("after_verify");
        Ok(())
    }
    async fn after_verify_unsuccessful(
        &self,
        _: &Session<Spec>,
        _: &RunReport,
    ) -> Result<(), ComponentError> {
        self.calls
            .lock()
            .expect("calls")
            .push("after_verify_unsuccessful");
        Ok(())
    }
}

#[tokio::test]
async fn hooks_follow_each_phase_and_a_failed_deploy_hook_skips_the_verify_hook() {
    let session = Session::new(Arc::new(Spec::default()));
    let (graph, cluster) = web_app(Some(ready_deployment()));
    let report = run(&graph, &session, &cluster, 2).await;
    let hooks = Arc::new(Recorded::default());
    crate::hooks::after_run(&hooks, &session, &report)
        .await
        .expect("hooks pass");
    assert_eq!(
        *hooks.calls.lock().expect("calls"),
        ["after_deploy", "after_verify"]
    );

    let (graph, cluster) = web_app(None);
    let report = run(&graph, &session, &cluster, 2).await;
    let hooks = Arc::new(Recorded::default());
    crate::hooks::after_run(&hooks, &session, &report)
        .await
        .expect("hooks pass");
    assert_eq!(
        *hooks.calls.lock().expect("calls"),
        ["after_deploy", "after_verify_unsuccessful"],
        "deployed, but the Deployment is not ready"
    );

    let (graph, mut cluster) = web_app(None);
    cluster.failing.push("config");
    let report = run(&graph, &session, &cluster, 2).await;
    let hooks = Arc::new(Recorded {
        fail_deploy: true,
        ..Recorded::default()
    });
    crate::hooks::after_run(&hooks, &session, &report)
        .await
        .expect("the unsuccessful deploy hook passes");
    assert_eq!(
        *hooks.calls.lock().expect("calls"),
        ["after_deploy_unsuccessful", "after_verify_unsuccessful"]
    );

    let (graph, cluster) = web_app(Some(ready_deployment()));
    let report = run(&graph, &session, &cluster, 2).await;
    let hooks = Arc::new(Recorded {
        fail_deploy: true,
        ..Recorded::default()
    });
    let error = crate::hooks::after_run(&hooks, &session, &report)
        .await
        .expect_err("the deploy hook's failure");
    assert_eq!(error.to_string(), "the deploy hook failed");
    assert_eq!(*hooks.calls.lock().expect("calls"), ["after_deploy"]);
}

#[tokio::test]
async fn outcomes_and_phases_are_counted_per_component() {
    let session = Session::new(Arc::new(Spec::default()));
    let (graph, mut cluster) = web_app(None);
    cluster.failing.push("secret");
    let registry = kubeapp_operator::MetricsRegistry::new(Some("unit")).expect("registry");
    let metrics = registry
        .set::<crate::metrics::ComponentMetrics>()
        .expect("metrics");
    let options = RunOptions {
        concurrency: 2,
        kind: "WebApp".into(),
        metrics: Some(metrics.clone()),
        assume_ready: false,
    };
    run_with(&graph, &session, &cluster, &options).await;
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.registry().gather())
        .expect("encode");
    for line in [
        "unit_component_deploy_total{component=\"config\",kind=\"WebApp\",outcome=\"deployed\"} 1",
        "unit_component_deploy_total{component=\"secret\",kind=\"WebApp\",outcome=\"failed\"} 1",
        "unit_component_deploy_total{component=\"deployment\",kind=\"WebApp\",outcome=\"halted\"} 1",
        "unit_component_deploy_total{component=\"service\",kind=\"WebApp\",outcome=\"halted\"} 1",
        "unit_component_verify_total{component=\"config\",kind=\"WebApp\",outcome=\"ready\"} 1",
        "unit_component_verify_total{component=\"deployment\",kind=\"WebApp\",outcome=\"skipped\"} 1",
        "unit_component_phase_duration_seconds_count{kind=\"WebApp\",phase=\"deploy\"} 1",
        "unit_component_phase_duration_seconds_count{kind=\"WebApp\",phase=\"verify\"} 1",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}
