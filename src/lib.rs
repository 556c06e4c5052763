//! # kubeapp
//!
//! Write Kubernetes operators in Rust in the style of Go's grafana-app-sdk: informers fan watch
//! events out to ordered watchers and reconcilers, opinionated wrappers manage finalizers so nothing
//! is missed while the operator is down, and a runner serves metrics, health probes and webhooks.
//!
//! This crate is a facade over the workspace's crates:
//!
//! - [`sdk`]: kinds, manifest, the `App` trait, admission and conversion types, and (feature
//!   `testenv`) a real kube-apiserver + etcd for tests, [`sdk::testenv`].
//! - [`operator`]: informers, the `InformerController`, watchers, reconcilers, retries, runner.
//! - [`simple`]: the simple `App` built from a manifest and closures.

pub use kubeapp_operator as operator;
pub use kubeapp_sdk as sdk;
pub use kubeapp_simple as simple;

/// What a reconciler operator on the typed API names, in one import: the controller, kind
/// handles, handler traits and their context, requests and results, the informer registry and
/// store, triggers, and kube-rs's `Api`, `Client`, `watcher` and `ObjectRef`.
///
/// ```no_run
/// use kubeapp::prelude::*;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// # async fn demo(client: Client) -> Result<(), Box<dyn std::error::Error>> {
/// let controller = InformerController::new(ControllerConfig::default().name("settings"));
/// let config_maps = controller.kind(
///     Api::<ConfigMap>::namespaced(client, "default"),
///     watcher::Config::default().labels("app=web"),
///     InformerOptions::default(),
/// );
/// let _reconciler = config_maps.reconcile_fn(|request, ctx| async move {
///     if ctx.attempt() > 0 {
///         println!("retrying {}", request.object.name_any());
///     }
///     Ok(ReconcileResult::done())
/// });
/// controller.run(CancellationToken::new()).await?;
/// # Ok(()) }
/// ```
pub mod prelude {
    pub use std::sync::Arc;

    pub use kube::runtime::reflector::ObjectRef;
    pub use kube::runtime::watcher;
    pub use kube::{Api, Client, Resource, ResourceExt};

    pub use kubeapp_operator::apply::conditions;
    pub use kubeapp_operator::{
        ApplyCleanup, BoxError, CancellationToken, Context, ControllerConfig, HandlerHandle,
        InformerController, InformerOptions, Informers, KindHandle, OpinionatedOptions,
        ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler, Store,
        Trigger, TriggerCause, Watcher, apply_cleanup, reconciler_fn,
    };
}
