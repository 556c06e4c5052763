//! The cluster mode's controllers behind the one-page operator (`examples/minimal`), on one shared
//! cluster (`SharedTestEnv`), each test in its own namespace with its own operator process
//! (`--namespace`):
//!
//! - the garbage collector deletes the ConfigMap a `Greeting` owns once the `Greeting` is deleted,
//!   with background propagation and with foreground propagation (where the `Greeting` is gone
//!   only after its ConfigMap);
//! - deleting a namespace holding `Greeting`s under the operator's finalizer completes: the
//!   namespace controller deletes them, the operator releases them, nothing is left.
//!
//! In the plain mode (no controller-manager) none of this happens: owned ConfigMaps stay and
//! namespaces stay `Terminating`.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;

use example_support::{binary, eventually, free_port, output_of, until_ready};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, PropagationPolicy};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::{SharedTestEnv, TestEnv};

const MINIMAL: &str = "kubeapp-example-minimal";

/// The Greeting CRD goes in before the controllers start, so the garbage collector knows the
/// kind from its first discovery (it refreshes discovery only every 30 s).
static CLUSTER: SharedTestEnv = SharedTestEnv::new(|| {
    let minimal = binary(MINIMAL, MINIMAL);
    TestEnv::builder()
        .cluster()
        .crds_yaml(output_of(&minimal, &["crd"]))
});

fn greetings(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The minimal operator, watching only `ns`, ready; killed when dropped.
struct Operator {
    _child: tokio::process::Child,
    log: std::path::PathBuf,
}

impl Operator {
    async fn start(env: &TestEnv, ns: &str) -> Self {
        let minimal = binary(MINIMAL, MINIMAL);
        let log = env.dir().join(format!("minimal-{ns}.log"));
        let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = tokio::process::Command::new(&minimal)
            .args(["run", "--metrics-addr", &metrics_addr.to_string()])
            .args(["--namespace", ns])
            .env("KUBECONFIG", env.kubeconfig_path())
            .env("RUST_LOG", "info")
            .env_remove("WATCH_NAMESPACE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("start the minimal operator");
        let operator = Self { _child: child, log };
        until_ready(metrics_addr, || operator.logs()).await;
        operator
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Creates Greeting `name` in `ns` and waits for its ConfigMap; returns the ConfigMap's uid.
async fn greeting_with_config_map(env: &TestEnv, operator: &Operator, ns: &str, name: &str) {
    let greeting: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "minimal.kubeapp.dev/v1",
        "kind": "Greeting",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "message": format!("hello from {name}") }
    }))
    .expect("a Greeting");
    greetings(&env.client(), ns)
        .create(&PostParams::default(), &greeting)
        .await
        .expect("create the Greeting");
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), ns);
    eventually(
        "the ConfigMap is rendered",
        || operator.logs(),
        || async { config_maps.get_opt(name).await.ok().flatten() },
    )
    .await;
}

async fn gc_deletes_the_owned_config_map(env: Arc<TestEnv>, policy: PropagationPolicy) {
    let ns = env.create_namespace("gc").await.expect("namespace");
    let operator = Operator::start(&env, &ns).await;
    greeting_with_config_map(&env, &operator, &ns, "hello").await;

    let foreground = matches!(policy, PropagationPolicy::Foreground);
    let params = DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    };
    let deleted_at = std::time::Instant::now();
    greetings(&env.client(), &ns)
        .delete("hello", &params)
        .await
        .expect("delete the Greeting");

    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
    let greetings = greetings(&env.client(), &ns);
    eventually(
        "the garbage collector deletes the owned ConfigMap and the Greeting is gone",
        || operator.logs(),
        || async {
            // Read the Greeting first: in foreground deletion it may go only after its ConfigMap,
            // so a Greeting seen gone with the ConfigMap still there is a broken promise.
            let greeting_gone = matches!(greetings.get_opt("hello").await, Ok(None));
            let config_map_gone = matches!(config_maps.get_opt("hello").await, Ok(None));
            if foreground && greeting_gone {
                assert!(
                    config_map_gone,
                    "foreground deletion: the Greeting went before the ConfigMap it owns"
                );
            }
            (greeting_gone && config_map_gone).then_some(())
        },
    )
    .await;
    eprintln!(
        "figure: Greeting deleted ({}) to it and its ConfigMap gone: {:?}",
        if foreground {
            "foreground"
        } else {
            "background"
        },
        deleted_at.elapsed()
    );
}

#[test]
fn the_garbage_collector_deletes_the_owned_config_map_background() {
    CLUSTER.run(|env| gc_deletes_the_owned_config_map(env, PropagationPolicy::Background));
}

#[test]
fn the_garbage_collector_deletes_the_owned_config_map_foreground() {
    CLUSTER.run(|env| gc_deletes_the_owned_config_map(env, PropagationPolicy::Foreground));
}

#[test]
fn a_namespace_with_finalized_custom_objects_goes_away() {
    CLUSTER.run(|env| async move {
        let ns = env.create_namespace("ns-delete").await.expect("namespace");
        let operator = Operator::start(&env, &ns).await;
        for name in ["one", "two", "three"] {
            greeting_with_config_map(&env, &operator, &ns, name).await;
        }
        let finalized = greetings(&env.client(), &ns)
            .list(&Default::default())
            .await
            .expect("list Greetings");
        assert!(
            finalized.items.iter().all(|g| !g.finalizers().is_empty()),
            "the operator put its finalizer on every Greeting: {:?}",
            finalized
                .items
                .iter()
                .map(|g| g.finalizers())
                .collect::<Vec<_>>()
        );

        let namespaces: Api<Namespace> = Api::all(env.client());
        let deleted_at = std::time::Instant::now();
        namespaces
            .delete(&ns, &DeleteParams::default())
            .await
            .expect("delete the namespace");
        eventually(
            "the namespace is gone (Greetings released, everything deleted)",
            || operator.logs(),
            || async { matches!(namespaces.get_opt(&ns).await, Ok(None)).then_some(()) },
        )
        .await;
        eprintln!(
            "figure: namespace deleted to gone: {:?}",
            deleted_at.elapsed()
        );
    });
}
