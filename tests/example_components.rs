//! End-to-end test of `examples/components` (a `WebApp` rendered as four components) as its users
//! run it: the binary's `crd` output installed into a real kube-apiserver + etcd, `run` started
//! as a child process, then:
//!
//! - the ConfigMap, Deployment and PodDisruptionBudget are applied with a controller owner
//!   reference; the Service (and the Ingress after it) only once the Deployment is available.
//!   While the only node is cordoned the rollout cannot schedule: the Deployment controller
//!   reports `Available=False` (`MinimumReplicasUnavailable`) and the WebApp stays `Ready=False`
//!   with the message naming the deployment component and that reason; uncordoned, it rolls
//!   out.
//!   testenv runs in cluster mode: the real Deployment and ReplicaSet controllers, the scheduler
//!   and a kwok node roll the Deployment out (the test writes no status). `Ready=True` follows,
//!   with the time from create to `Ready=True` printed (not asserted);
//! - `kubeapp trace webapp/shop` exits 3 while the rollout cannot schedule (the Deployment named
//!   `NotReady` with its controller's reason) and 0 once ready, every component with the
//!   objects it applied, each read and judged ready;
//! - the binary's `dry-run`, with no kubeconfig, writes one file per object the operator stored,
//!   each a subset of the stored object once server-assigned fields (uid, resourceVersion,
//!   managedFields, creationTimestamp, generation, status; the owner reference's uid) are removed:
//!   the apiserver adds defaults, so the stored object has more fields, never other values;
//! - a field manager of another writer keeps its annotation through our next apply;
//! - a reconcile with nothing to change writes no status and sends no write at all (its applies
//!   are skipped against the owned children's cache; request counts from the operator's
//!   `/metrics`), and its API requests are printed;
//! - turning the Service and Ingress off deletes them;
//! - with the operator stopped, `minAvailable` is removed; the restarted operator prunes the
//!   PodDisruptionBudget (it finds it in the inventory the status recorded: nothing else names it);
//! - deleting the WebApp deletes its objects (its finalizer cleanup and, through the owner
//!   references checked above, the garbage collector);
//! - SIGTERM stops it with exit code 0.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use example_support::{
    binary, eventually, free_port, get, kubeapp, output_of, send_signal, until_ready,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::TestEnv;
use serde_json::{Value, json};

const EXAMPLE: &str = "kubeapp-example-components";

fn web_apps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("webapps.kubeapp.dev", "v1", "WebApp"),
        "webapps",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn web_app(ns: &str) -> Value {
    json!({
        "apiVersion": "webapps.kubeapp.dev/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns},
        "spec": {"image": "nginx:1.27", "page": "<h1>shop</h1>", "expose": true,
                 "host": "shop.example.com", "minAvailable": 1}
    })
}

/// The operator as a child process, logging into `log`.
struct Running {
    child: tokio::process::Child,
    pid: u32,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Running {
    async fn start(example: &Path, env: &TestEnv, log: PathBuf) -> Self {
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = tokio::process::Command::new(example)
            .args(["run", "--metrics-addr", &metrics.to_string()])
            .env("KUBECONFIG", env.kubeconfig_path())
            .env("RUST_LOG", "info")
            .env_remove("WATCH_NAMESPACE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("start the components operator");
        let pid = child.id().expect("a pid");
        let running = Self {
            child,
            pid,
            metrics,
            log,
        };
        until_ready(metrics, || running.logs()).await;
        running
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of the samples of `name` whose labels contain every one of `labels`.
    async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = get(self.metrics, "/metrics")
            .await
            .expect("/metrics answers");
        body.lines()
            .filter(|line| line.starts_with(name) && labels.iter().all(|l| line.contains(l)))
            .filter(|line| line[name.len()..].starts_with(['{', ' ']))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    async fn stop(mut self) {
        send_signal(self.pid, "TERM");
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), self.child.wait())
            .await
            .expect("stops within a minute of SIGTERM")
            .expect("wait for the operator");
        assert!(status.success(), "exit status {status}\n{}", self.logs());
    }
}

fn ready(app: &DynamicObject) -> bool {
    app.data["status"]["conditions"]
        .as_array()
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        && app.data["status"]["observedGeneration"].as_i64() == app.metadata.generation
}

/// Whether every field of `part` is in `whole` with the same value (lists element by element).
fn subset(part: &Value, whole: &Value) -> bool {
    match (part, whole) {
        (Value::Object(p), Value::Object(w)) => p
            .iter()
            .all(|(k, v)| w.get(k).is_some_and(|wv| subset(v, wv))),
        (Value::Array(p), Value::Array(w)) => {
            p.len() == w.len() && p.iter().zip(w).all(|(a, b)| subset(a, b))
        }
        _ => part == whole,
    }
}

/// The object without what the apiserver assigns.
fn without_server_fields(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "managedFields",
            "creationTimestamp",
            "generation",
        ] {
            meta.remove(field);
        }
        if let Some(references) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for reference in references {
                reference.as_object_mut().map(|r| r.remove("uid"));
            }
        }
    }
    object.as_object_mut().map(|o| o.remove("status"));
    object
}

/// Every object labelled as the `shop` WebApp's, as `Kind.name` with its JSON.
async fn stored_children(client: &kube::Client, ns: &str) -> Vec<(String, Value)> {
    let params = ListParams::default().labels("app.kubernetes.io/instance=shop");
    let mut all = Vec::new();
    macro_rules! collect {
        ($($kind:ty),*) => {$(
            for object in Api::<$kind>::namespaced(client.clone(), ns).list(&params).await.expect("list") {
                let mut value = serde_json::to_value(&object).expect("json");
                value["apiVersion"] = <$kind as kube::Resource>::api_version(&()).into();
                value["kind"] = <$kind as kube::Resource>::kind(&()).into();
                all.push((format!("{}.{}", value["kind"].as_str().unwrap_or(""), object.name_any()), value));
            }
        )*};
    }
    collect!(ConfigMap, Deployment, PodDisruptionBudget, Service, Ingress);
    all
}

/// Runs the binary's `dry-run` for `object` with no kubeconfig; returns the tree's files.
fn dry_run(example: &Path, dir: &Path, object: &Value) -> Vec<(PathBuf, Value)> {
    let file = dir.join("webapp.yaml");
    let mut object = object.clone();
    object["metadata"].as_object_mut().map(|m| m.remove("uid"));
    std::fs::write(&file, serde_json::to_string(&object).expect("json")).expect("write");
    let out = dir.join("dry-run");
    let output = std::process::Command::new(example)
        .args(["dry-run", "--object"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env("HOME", dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run dry-run");
    assert!(
        output.status.success(),
        "dry-run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut files = Vec::new();
    let mut dirs = vec![out.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the tree") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let text = std::fs::read_to_string(&path).expect("read");
                let value: Value = serde_saphyr::from_str(&text).expect("YAML");
                files.push((
                    path.strip_prefix(&out).expect("under out").to_path_buf(),
                    value,
                ));
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// Runs the binary's `dry-run --check` for `object` against the cluster of `kubeconfig`.
fn dry_run_check(
    example: &Path,
    dir: &Path,
    object: &Value,
    kubeconfig: &Path,
) -> std::process::Output {
    let file = dir.join("checked.yaml");
    let mut object = object.clone();
    object["metadata"].as_object_mut().map(|m| m.remove("uid"));
    std::fs::write(&file, serde_json::to_string(&object).expect("json")).expect("write");
    std::process::Command::new(example)
        .args(["dry-run", "--check", "--object"])
        .arg(&file)
        .arg("--out")
        .arg(dir.join("checked"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run dry-run --check")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_components_operator_deploys_verifies_dry_runs_prunes_after_a_restart_and_cleans_up() {
    let example = binary(EXAMPLE, EXAMPLE);
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    env.install_crds_yaml(&output_of(&example, &["crd"]))
        .await
        .expect("the generated CRD installs");
    let ns = env.create_namespace("components").await.expect("namespace");
    let client = env.client();
    let operator = Running::start(&example, &env, env.dir().join("components-1.log")).await;
    let logs = || operator.logs();

    // The only node is cordoned first: the rollout cannot schedule, so the Deployment is not
    // available for as long as the test chooses, whatever the timing.
    let node = env.node_names().into_iter().next().expect("a fake node");
    env.cordon_node(&node, true).await.expect("cordon the node");

    let apps = web_apps(&client, &ns);
    let object: DynamicObject = serde_json::from_value(web_app(&ns)).expect("a WebApp");
    let created_at = Instant::now();
    let created = apps
        .create(&PostParams::default(), &object)
        .await
        .expect("create the WebApp");
    let uid = created.uid().expect("uid");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    eventually("the Deployment and its budget", logs, || async {
        let d = deployments.get_opt("shop").await.ok().flatten()?;
        budgets.get_opt("shop").await.ok().flatten().map(|_| d)
    })
    .await;
    // A rollout that cannot schedule: the real controllers report the Deployment unavailable
    // (their own reason), and verify holds the WebApp not ready, naming that reason.
    let last_status = std::sync::Mutex::new(Value::Null);
    let unavailable = eventually(
        "the Deployment reports MinimumReplicasUnavailable and the WebApp waits for it",
        || {
            format!(
                "{}\nlast statuses: {:#}",
                logs(),
                last_status.lock().expect("lock")
            )
        },
        || async {
            let app = apps.get("shop").await.ok()?;
            let deployment = serde_json::to_value(deployments.get("shop").await.ok()?).ok()?;
            *last_status.lock().expect("lock") =
                json!({"webapp": app.data["status"], "deployment": deployment["status"]});
            let waiting = app.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(|m| {
                            m.contains(
                                "waiting for: deployment (Deployment/shop: Available=False \
                                        (MinimumReplicasUnavailable))",
                            )
                        })
                });
            let condition = deployment["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Available")?
                .clone();
            (waiting
                && condition["status"] == "False"
                && condition["reason"] == "MinimumReplicasUnavailable")
                .then_some(condition)
        },
    )
    .await;
    eprintln!("while the rollout cannot schedule, the Deployment says: {unavailable}");
    // `kubeapp trace`: not ready (exit 3), the Deployment named with the reason its controller
    // gives.
    let kubeconfig = env.kubeconfig_path();
    let (code, stdout, stderr) = kubeapp(kubeconfig, &["trace", "webapp/shop", "-n", &ns]).await;
    assert_eq!(
        code, 3,
        "trace of a WebApp waiting for its rollout: {stdout}{stderr}"
    );
    eprintln!("kubeapp trace webapp/shop:\n{stdout}");
    for shown in [
        format!("webapp/shop in {ns}: NOT READY: Ready=False (ComponentsNotReady)"),
        "  deployment (waiting)".to_string(),
        "    Deployment/shop NotReady: ".to_string(),
        "MinimumReplicasUnavailable".to_string(),
    ] {
        assert!(stdout.contains(&shown), "{shown:?} in:\n{stdout}");
    }
    assert!(
        services.get_opt("shop").await.expect("read").is_none(),
        "the Service waits for an available Deployment"
    );
    env.cordon_node(&node, false)
        .await
        .expect("uncordon the node");
    let app = eventually("Ready=True (the Deployment rolled out)", logs, || async {
        apps.get("shop").await.ok().filter(ready)
    })
    .await;
    // Ready: exit 0, every component ready with the objects it applied, read now.
    let (code, stdout, stderr) = kubeapp(
        kubeconfig,
        &["trace", "webapps/shop", "-n", &ns, "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "trace of a ready WebApp: {stdout}{stderr}");
    let traced: Value = serde_json::from_str(&stdout).expect("trace -o json");
    let tree: BTreeSet<String> = traced["components"]
        .as_array()
        .expect("components")
        .iter()
        .flat_map(|component| {
            let name = component["name"].as_str().unwrap_or_default().to_string();
            let state = component["state"].as_str().unwrap_or_default().to_string();
            component["children"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |child| {
                    format!(
                        "{name} ({state}): {}/{} {}",
                        child["kind"].as_str().unwrap_or_default(),
                        child["name"].as_str().unwrap_or_default(),
                        child["readiness"].as_str().unwrap_or_default()
                    )
                })
        })
        .collect();
    assert_eq!(
        tree,
        BTreeSet::from(
            [
                "config (ready): ConfigMap/shop-page Ready",
                "deployment (ready): Deployment/shop Ready",
                "deployment (ready): PodDisruptionBudget/shop Ready",
                "service (ready): Service/shop Ready",
                "ingress (ready): Ingress/shop Ready",
            ]
            .map(String::from)
        ),
        "{stdout}"
    );
    assert_eq!(traced["verdict"], "Ready", "{stdout}");
    eprintln!(
        "figure: create to Ready=True with 4 components (5 objects), the Deployment rolled out \
         by the cluster mode's controllers: {:?}",
        created_at.elapsed()
    );
    // The component metrics go to the Runner's registry (the app takes the set from it): on
    // /metrics under their names of before.
    for (name, labels) in [
        (
            "component_deploy_total",
            &[
                "kind=\"WebApp\"",
                "component=\"deployment\"",
                "outcome=\"deployed\"",
            ][..],
        ),
        (
            "component_verify_total",
            &[
                "kind=\"WebApp\"",
                "component=\"deployment\"",
                "outcome=\"ready\"",
            ][..],
        ),
        (
            "component_phase_duration_seconds_count",
            &["phase=\"deploy\""][..],
        ),
    ] {
        assert!(
            operator.metric(name, labels).await >= 1.0,
            "{name}{labels:?} on /metrics"
        );
    }

    let stored = stored_children(&client, &ns).await;
    let names: BTreeSet<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "ConfigMap.shop-page",
            "Deployment.shop",
            "Ingress.shop",
            "PodDisruptionBudget.shop",
            "Service.shop"
        ])
    );
    for (name, object) in &stored {
        let references = object["metadata"]["ownerReferences"].as_array();
        assert!(
            references.is_some_and(|r| r
                .iter()
                .any(|r| r["uid"] == uid.as_str() && r["controller"] == true)),
            "{name} is controlled by the WebApp: {references:?}"
        );
    }

    // The dry run, with no cluster, renders what the operator stored.
    let dir = tempfile::tempdir().expect("tmp");
    let files = dry_run(
        &example,
        dir.path(),
        &serde_json::to_value(&app).expect("json"),
    );
    let tree: BTreeSet<String> = files
        .iter()
        .map(|(path, _)| path.display().to_string())
        .collect();
    let expected: BTreeSet<String> = [
        "config/ConfigMap.shop-page.yaml",
        "deployment/Deployment.shop.yaml",
        "deployment/PodDisruptionBudget.shop.yaml",
        "service/Service.shop.yaml",
        "ingress/Ingress.shop.yaml",
    ]
    .iter()
    .map(|f| format!("webapps.kubeapp.dev_v1.WebApp/shop/{f}"))
    .collect();
    assert_eq!(tree, expected);
    for (path, rendered) in &files {
        let file = path.file_name().and_then(|f| f.to_str()).expect("a name");
        let key = file.trim_end_matches(".yaml");
        let (_, stored) = stored.iter().find(|(n, _)| n == key).expect("stored");
        let stored = without_server_fields(stored.clone());
        let rendered = without_server_fields(rendered.clone());
        assert!(
            subset(&rendered, &stored),
            "{key}: the dry run's\n{rendered:#}\nis not what the operator stored:\n{stored:#}"
        );
    }

    // The checked dry run: the apiserver accepts the stored WebApp's rendering, and refuses a
    // PodDisruptionBudget with a negative minAvailable, naming the component and the field.
    let mut app_json = serde_json::to_value(&app).expect("json");
    let accepted = dry_run_check(&example, dir.path(), &app_json, env.kubeconfig_path());
    assert!(
        accepted.status.success()
            && String::from_utf8_lossy(&accepted.stdout)
                .contains("the apiserver accepted every object"),
        "dry-run --check of a valid WebApp: {}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    app_json["spec"]["minAvailable"] = json!(-1);
    let refused = dry_run_check(&example, dir.path(), &app_json, env.kubeconfig_path());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains(&format!(
                "deployment: policy/v1 PodDisruptionBudget {ns}/shop: spec.minAvailable"
            )),
        "dry-run --check of minAvailable -1 must fail naming the component, object and field: {stderr}"
    );

    // Another writer's field survives our next apply.
    let foreign = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "annotations": {"example.com/owner": "platform-team"}}});
    deployments
        .patch(
            "shop",
            &PatchParams::apply("platform-team"),
            &Patch::Apply(&foreign),
        )
        .await
        .expect("another field manager's apply");
    apps.patch(
        "shop",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": "nginx:1.28"}})),
    )
    .await
    .expect("a new image");
    let updated = eventually("the new image is applied", logs, || async {
        deployments.get("shop").await.ok().filter(|d| {
            serde_json::to_value(d).ok().is_some_and(|v| {
                v["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"
            })
        })
    })
    .await;
    assert_eq!(
        updated
            .annotations()
            .get("example.com/owner")
            .map(String::as_str),
        Some("platform-team"),
        "the other field manager's annotation is kept"
    );
    eventually(
        "Ready=True again (the new image rolled out)",
        logs,
        || async { apps.get("shop").await.ok().filter(ready) },
    )
    .await;

    // A reconcile with nothing to change: no status write.
    let status_writes = || {
        operator.metric(
            "kubernetes_client_requests_total",
            &["subresource=\"status\"", "kind=\"webapps\""],
        )
    };
    let reconciles = || operator.metric("reconciler_process_duration_seconds_count", &[]);
    let requests = || operator.metric("kubernetes_client_requests_total", &[]);
    let writes = || async {
        let mut sum = 0.0;
        for verb in ["create", "update", "patch", "delete"] {
            sum += operator
                .metric(
                    "kubernetes_client_requests_total",
                    &[&format!("verb=\"{verb}\"")],
                )
                .await;
        }
        sum
    };
    // Settle: wait until the reconciles caused by the last status writes are done.
    let mut last = (status_writes().await, reconciles().await);
    let idle_by = Instant::now() + std::time::Duration::from_secs(120);
    loop {
        // Polls (no sleep as a wait for a known event): idle is two equal readings in a row
        // with no event waiting or being dispatched (a stalled process would otherwise read as
        // idle with a reconcile still to come).
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = (status_writes().await, reconciles().await);
        let busy = operator.metric("ongoing_reconcile_events", &[]).await
            + operator.metric("informer_queue_depth", &[]).await;
        if now == last && busy == 0.0 {
            break;
        }
        assert!(
            Instant::now() < idle_by,
            "the operator never became idle\n{}",
            logs()
        );
        last = now;
    }
    let (writes_before, reconciles_before, requests_before, all_writes_before) = (
        status_writes().await,
        reconciles().await,
        requests().await,
        writes().await,
    );
    apps.patch(
        "shop",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"example.com/touched": "yes"}}})),
    )
    .await
    .expect("touch the WebApp (no spec change)");
    eventually("a reconcile of the touched WebApp", logs, || async {
        (reconciles().await > reconciles_before).then_some(())
    })
    .await;
    let requests_after = requests().await;
    assert_eq!(
        status_writes().await,
        writes_before,
        "a reconcile that changes nothing writes no status"
    );
    assert_eq!(
        writes().await,
        all_writes_before,
        "a reconcile that changes nothing sends no write (the applies are skipped against the \
         owned children's cache)"
    );
    eprintln!(
        "figure: API requests of one steady-state reconcile (4 components, 5 objects): {}",
        requests_after - requests_before
    );

    // Services and Ingress off: deleted.
    apps.patch(
        "shop",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"expose": false, "host": null}})),
    )
    .await
    .expect("turn the Service and Ingress off");
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    eventually("the Service and Ingress are deleted", logs, || async {
        let service = services.get_opt("shop").await.ok()?;
        let ingress = ingresses.get_opt("shop").await.ok()?;
        (service.is_none() && ingress.is_none()).then_some(())
    })
    .await;
    operator.stop().await;

    // Pruning after a restart: only the inventory in the status names the budget.
    apps.patch(
        "shop",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": null}})),
    )
    .await
    .expect("drop minAvailable while the operator is down");
    let operator = Running::start(&example, &env, env.dir().join("components-2.log")).await;
    let logs = || operator.logs();
    eventually("the restarted operator prunes the budget", logs, || async {
        budgets.get_opt("shop").await.ok()?.is_none().then_some(())
    })
    .await;

    // Deletion: the finalizer cleanup and the garbage collector delete the children.
    apps.delete("shop", &DeleteParams::default())
        .await
        .expect("delete the WebApp");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("the WebApp and its objects are gone", logs, || async {
        let app = apps.get_opt("shop").await.ok()?;
        let deployment = deployments.get_opt("shop").await.ok()?;
        let config = config_maps.get_opt("shop-page").await.ok()?;
        (app.is_none() && deployment.is_none() && config.is_none()).then_some(())
    })
    .await;
    operator.stop().await;
}
