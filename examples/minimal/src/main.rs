//! A complete kubeapp operator on one page: each `Greeting` is rendered into a ConfigMap it owns.
//! `crd`, `rbac`, `manifests` and `run` subcommands; metrics, probes and tracing from the Runner.

use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::prelude::*;

/// A message to publish in a ConfigMap.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "minimal.kubeapp.dev",
    version = "v1",
    kind = "Greeting",
    namespaced
)]
pub struct GreetingSpec {
    /// What the ConfigMap says.
    pub message: String,
}

const MANIFEST: &str = include_str!("../manifest.yaml");

/// Renders the ConfigMap; as it is owned, an edit or delete of it calls this again at once.
async fn apply(greeting: Arc<Greeting>, ctx: Context) -> Result<ReconcileResult, ReconcileError> {
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: greeting.metadata.name.clone(),
            namespace: greeting.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        data: Some([("message".into(), greeting.spec.message.clone())].into()),
        ..ConfigMap::default()
    };
    ctx.apply(config_map)
        .owned_by(greeting.as_ref())?
        .send()
        .await?;
    Ok(ReconcileResult::done())
}

/// Nothing to undo: the cluster's garbage collector deletes the owned ConfigMap.
async fn cleanup(_: Arc<Greeting>, _: Context) -> Result<ReconcileResult, ReconcileError> {
    Ok(ReconcileResult::done())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    Operator::new(MANIFEST)
        .manifest_file("manifest.yaml")
        .crd::<Greeting>()
        .app(|manifest| {
            AppConfig::from_manifest(manifest).managed_kind(
                ManagedKind::<Greeting>::new()
                    .apply_cleanup_fn(apply, cleanup)
                    .owns::<ConfigMap>(watcher::Config::default()),
            )
        })
        .main()
        .await
}
