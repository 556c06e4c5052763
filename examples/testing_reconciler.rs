//! How to test a reconciler against a real kube-apiserver + etcd (testenv): this example starts
//! its own control plane, runs the reconciler, checks what it did, and exits 0 (or fails
//! loudly). In your own crate the body of `main` is a `#[tokio::test]` (kubeapp with the
//! `testenv` feature as a dev-dependency).
//!
//! What it shows: `kubeapp::sdk::testenv::TestEnv` (kube-apiserver and etcd from
//! `testbin/build.sh` or `kubeapp testenv install`; no cluster, no Docker), `install_crd`, a
//! fresh namespace per test, `env.client()` for the controller and the test alike. The test
//! waits for each expected state with kube's `await_condition` (a watch, not sleeps) under a
//! timeout, and checks through the apiserver: the child ConfigMap and its controller owner
//! reference, `Ready` at the object's generation, a deleted child re-created (testenv runs no
//! garbage collector: that is the reconciler, triggered through `owns`), a spec change followed.
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
    let mut child = ConfigMap::default();
    child.metadata.name = Some(banner.name_any());
    child.metadata.namespace = banner.namespace();
    child.data = Some([("text".into(), banner.spec.text.clone())].into());
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

/// Waits until the object `hello` exists and satisfies `check` (a watch, no polling).
async fn wait_for<K>(
    api: &Api<K>,
    what: &str,
    check: impl Fn(&K) -> bool + Send + 'static,
) -> Result<K, BoxError>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let condition = move |object: Option<&K>| object.is_some_and(&check);
    let waiting = await_condition(api.clone(), "hello", condition);
    let found = tokio::time::timeout(WAIT, waiting)
        .await
        .map_err(|_| format!("{what}: not within {WAIT:?}"))??;
    println!("ok: {what}");
    Ok(found.ok_or("the object is gone")?)
}

fn holds(text: &'static str) -> impl Fn(&ConfigMap) -> bool {
    move |cm| {
        cm.data
            .as_ref()
            .and_then(|d| d.get("text"))
            .is_some_and(|t| t == text)
    }
}

fn ready_at(generation: i64) -> impl Fn(&Banner) -> bool {
    move |banner| {
        let status = banner.status.clone().unwrap_or_default();
        let ready = conditions::is_true(&status.conditions, conditions::READY);
        ready && status.observed_generation == Some(generation)
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let env = TestEnv::start().await?;
    env.install_crd::<Banner>().await?;
    let ns = env.create_namespace("banner").await?;
    let banners: Api<Banner> = Api::namespaced(env.client(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);

    // The operator's side, as the operator registers it (here scoped to the test's namespace).
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

    // The test's side: what a user does, and what the cluster must show then.
    let banner = Banner::new("hello", BannerSpec { text: "hi".into() });
    let uid = banners.create(&PostParams::default(), &banner).await?.uid();
    let cm = wait_for(&config_maps, "the ConfigMap holds the text", holds("hi")).await?;
    let owner = cm
        .owner_references()
        .first()
        .ok_or("the ConfigMap has no owner")?;
    assert_eq!(
        (Some(&owner.uid), owner.controller),
        (uid.as_ref(), Some(true)),
        "controller owner"
    );
    wait_for(&banners, "Ready at generation 1", ready_at(1)).await?;

    let (first, delete) = (cm.uid(), DeleteParams::default());
    config_maps.delete("hello", &delete).await?;
    let recreated = move |cm: &ConfigMap| cm.uid() != first;
    wait_for(&config_maps, "re-created", recreated).await?;

    let change = serde_json::json!({ "spec": { "text": "bye" } });
    banners
        .patch("hello", &PatchParams::default(), &Patch::Merge(&change))
        .await?;
    wait_for(&config_maps, "the ConfigMap follows the spec", holds("bye")).await?;
    wait_for(&banners, "Ready at generation 2", ready_at(2)).await?;

    stop.cancel();
    running.await??;
    println!("all checks passed");
    Ok(())
}
