//! How to test a reconciler against a real kube-apiserver + etcd (testenv): this example starts
//! its own control plane, runs the reconciler, checks what it did, and exits 0 (or fails
//! loudly). In your own crate the body of `main` is a `#[tokio::test]` (kubeapp with the
//! `testenv` feature as a dev-dependency).
//!
//! What it shows: `kubeapp::sdk::testenv::TestEnv` (no cluster, no Docker: the two binaries from
//! `testbin/build.sh` or `kubeapp testenv install`, found through `KUBEBUILDER_ASSETS` or the
//! cache): `install_crd`, a fresh namespace per test, `env.client()` for both the controller and
//! the test. The test waits for conditions with kube's `await_condition` (a watch, no sleeps)
//! under a timeout, and checks the promises of the reconciler, each through the apiserver: the
//! child ConfigMap with its controller owner reference, `Ready` and `observedGeneration`, a
//! deleted child re-created (testenv runs no garbage collector, so this is the reconciler's
//! doing through `owns`), and a spec change followed.
//!
//! Run it (no kubeconfig needed):
//!
//! ```sh
//! export KUBEBUILDER_ASSETS=$(testbin/build.sh)   # minutes the first time, then cached
//! cargo run --example testing_reconciler --features testenv
//! ```
//!
//! What to look at: one `ok: ...` line per check, then `all checks passed` and exit status 0.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kubeapp::prelude::*;
use kubeapp::sdk::testenv::TestEnv;
use serde::de::DeserializeOwned;

/// A text to publish in a ConfigMap.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.kubeapp.dev",
    version = "v1",
    kind = "Banner",
    namespaced,
    status = "BannerStatus"
)]
pub struct BannerSpec {
    /// What the ConfigMap says.
    pub text: String,
}

/// What the reconciler reports.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BannerStatus {
    /// The generation the conditions describe.
    pub observed_generation: Option<i64>,
    /// `Ready`.
    #[serde(default)]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
}

/// The reconciler under test: the ConfigMap it owns, then `Ready`.
async fn reconcile(
    request: ReconcileRequest<Banner>,
    ctx: Context,
) -> Result<ReconcileResult, ReconcileError> {
    let banner = request.object.as_ref();
    if request.action == ReconcileAction::Deleted {
        return Ok(ReconcileResult::done());
    }
    let child = ConfigMap {
        metadata: ObjectMeta {
            name: Some(banner.name_any()),
            namespace: banner.namespace(),
            ..ObjectMeta::default()
        },
        data: Some([("text".into(), banner.spec.text.clone())].into()),
        ..ConfigMap::default()
    };
    ctx.apply(child).owned_by(banner)?.send().await?;
    let mut status = banner.status.clone().unwrap_or_default();
    let ready = conditions::ready(true, "Rendered", "the ConfigMap holds the text");
    conditions::set(&mut status.conditions, ready, banner.metadata.generation);
    status.observed_generation = banner.metadata.generation;
    ctx.status(banner).write(status).await?;
    Ok(ReconcileResult::done())
}

/// How long any one expected state may take to appear.
const WAIT: Duration = Duration::from_secs(30);

/// Waits until the object `name` exists and satisfies `check`; returns it.
async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    check: impl Fn(&K) -> bool + Send + 'static,
) -> Result<K, Box<dyn std::error::Error>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let condition = move |object: Option<&K>| object.is_some_and(&check);
    let found = tokio::time::timeout(WAIT, await_condition(api.clone(), name, condition))
        .await
        .map_err(|_| format!("{what}: not within {WAIT:?}"))??;
    println!("ok: {what}");
    found.ok_or_else(|| format!("{what}: the object is gone").into())
}

fn text(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("text").map(String::as_str)
}

fn ready_at(banner: &Banner, generation: i64) -> bool {
    banner.status.as_ref().is_some_and(|s| {
        s.observed_generation == Some(generation)
            && conditions::is_true(&s.conditions, conditions::READY)
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    let env = TestEnv::start().await?;
    env.install_crd::<Banner>().await?;
    let ns = env.create_namespace("banner").await?;
    let banners: Api<Banner> = Api::namespaced(env.client(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);

    // The operator's side, as it would run in the operator (scoped to the test's namespace).
    let controller = InformerController::new(ControllerConfig::default().name("banner-operator"));
    let kind = controller.kind(
        banners.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let _owns = kind.owns(config_maps.clone(), watcher::Config::default());
    let _reconciler = kind.reconcile_fn(reconcile);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    // The test's side: what a user does, and what the cluster must then show.
    let created = banners
        .create(
            &PostParams::default(),
            &Banner::new("hello", BannerSpec { text: "hi".into() }),
        )
        .await?;
    let cm = wait_for(
        &config_maps,
        "hello",
        "the ConfigMap holds the text",
        |cm| text(cm) == Some("hi"),
    )
    .await?;
    let owner = &cm
        .metadata
        .owner_references
        .as_ref()
        .ok_or("no owner reference")?[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        (
            "Banner",
            created.metadata.uid.as_deref().unwrap_or_default()
        )
    );
    assert_eq!(
        owner.controller,
        Some(true),
        "the Banner is the controller owner"
    );
    wait_for(&banners, "hello", "Ready at generation 1", |b| {
        ready_at(b, 1)
    })
    .await?;

    let first_uid = cm.metadata.uid.clone();
    config_maps
        .delete("hello", &DeleteParams::default())
        .await?;
    wait_for(
        &config_maps,
        "hello",
        "the deleted ConfigMap is re-created",
        move |cm| cm.metadata.uid != first_uid,
    )
    .await?;

    let change = serde_json::json!({ "spec": { "text": "bye" } });
    banners
        .patch("hello", &PatchParams::default(), &Patch::Merge(&change))
        .await?;
    wait_for(
        &config_maps,
        "hello",
        "the ConfigMap follows the spec",
        |cm| text(cm) == Some("bye"),
    )
    .await?;
    wait_for(&banners, "hello", "Ready at generation 2", |b| {
        ready_at(b, 2)
    })
    .await?;

    stop.cancel();
    running.await??;
    println!("all checks passed");
    Ok(())
}
