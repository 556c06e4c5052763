//! An `InformerController` with typed handlers: no simple App, no Runner, no CRD.
//!
//! What it shows: the controller's own API. `controller.kind(api, config, options)` registers
//! ConfigMaps (one shared informer and its cache); `with_context` hands the handlers user data
//! (`ctx.data()`); a `Watcher` (edge-triggered: every add, update and delete, in order) and a
//! `Reconciler` (level-triggered: the newest object, requests merged while they wait, errors
//! retried with backoff) are attached as types. Watchers run before reconcilers for each event.
//! The reconciler stamps each ConfigMap with a checksum of its data through server-side apply
//! (`ctx.apply`, field manager = the controller's name). The update its own write causes
//! reaches the watcher and one more reconcile, which finds nothing to do: only status and
//! finalizer writes are recognised as the controller's own echoes, so handlers stay idempotent.
//!
//! Run it against the cluster of the current kubeconfig (its default namespace; it handles
//! ConfigMaps labelled `examples.kubeapp.dev/checksum`):
//!
//! ```sh
//! cargo run --example controller_without_app         # Ctrl-C stops it
//! # in another terminal:
//! kubectl create configmap web --from-literal=port=80
//! kubectl label configmap web examples.kubeapp.dev/checksum=yes
//! kubectl patch configmap web --type merge -p '{"data": {"port": "8080"}}'
//! ```
//!
//! What to look at: `watcher: add web`, `reconciler: Created web, checksum X`, then per change
//! two `watcher: update web` (the change, then the stamp) and two reconciles (the second finds
//! the stamp right). `kubectl get configmap web -o yaml` shows the
//! `examples.kubeapp.dev/data-checksum` annotation.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::prelude::*;

/// The handlers' user data: what they are configured with.
struct Settings {
    /// The annotation the checksum goes into.
    annotation: &'static str,
}

/// Logs every change of the ConfigMaps, as it happens.
struct Audit;

impl Watcher<ConfigMap, Settings> for Audit {
    async fn add(&self, cm: Arc<ConfigMap>, _ctx: &Context<Settings>) -> Result<(), BoxError> {
        println!("watcher: add {}", cm.name_any());
        Ok(())
    }

    async fn update(
        &self,
        old: Arc<ConfigMap>,
        new: Arc<ConfigMap>,
        ctx: &Context<Settings>,
    ) -> Result<(), BoxError> {
        let stamp = |cm: &ConfigMap| cm.annotations().get(ctx.data().annotation).cloned();
        println!(
            "watcher: update {} (checksum {:?} -> {:?})",
            new.name_any(),
            stamp(&old),
            stamp(&new)
        );
        Ok(())
    }

    async fn delete(&self, cm: Arc<ConfigMap>, _ctx: &Context<Settings>) -> Result<(), BoxError> {
        println!("watcher: delete {}", cm.name_any());
        Ok(())
    }
}

/// Keeps each ConfigMap's checksum annotation in line with its data.
struct Checksum;

impl Reconciler<ConfigMap, Settings> for Checksum {
    async fn reconcile(
        &self,
        request: ReconcileRequest<ConfigMap>,
        ctx: &Context<Settings>,
    ) -> Result<ReconcileResult, ReconcileError> {
        let cm = request.object.as_ref();
        if request.action == ReconcileAction::Deleted {
            return Ok(ReconcileResult::done());
        }
        let mut hasher = DefaultHasher::new(); // a change detector, not a stable digest
        cm.data.hash(&mut hasher);
        let checksum = format!("{:016x}", hasher.finish());
        println!(
            "reconciler: {} {}, checksum {checksum}",
            request.action,
            cm.name_any()
        );
        if cm.annotations().get(ctx.data().annotation) != Some(&checksum) {
            // Only the fields this manager owns: name, namespace and the annotation.
            let stamp = ConfigMap {
                metadata: ObjectMeta {
                    name: cm.metadata.name.clone(),
                    namespace: cm.metadata.namespace.clone(),
                    annotations: Some([(ctx.data().annotation.to_string(), checksum)].into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            ctx.apply(stamp).send().await?;
        }
        Ok(ReconcileResult::done())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    let client = Client::try_default().await?;
    let namespace = client.default_namespace().to_string();
    let controller = InformerController::new(
        ControllerConfig::default()
            .name("checksum-example")
            .max_concurrent_workers(4),
    );
    let settings = Arc::new(Settings {
        annotation: "examples.kubeapp.dev/data-checksum",
    });
    let config_maps = controller
        .kind(
            Api::<ConfigMap>::namespaced(client, &namespace),
            watcher::Config::default().labels("examples.kubeapp.dev/checksum"),
            InformerOptions::default(),
        )
        .with_context(settings);
    let _audit = config_maps.watch(Audit);
    let _checksum = config_maps.reconcile(Checksum);

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });
    // Runs until the stop, then lets handler calls in flight finish (the shutdown grace).
    controller.run(stop).await?;
    Ok(())
}
