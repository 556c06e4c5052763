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
//! - [`operator`]: informers, the `InformerController`, watchers, reconcilers, retries, metrics.
//! - [`runner`]: the `Runner` (runs apps as an operator process: `/metrics`, `/livez`,
//!   `/readyz`, graceful shutdown), the HTTPS webhook server and the counted Kubernetes client.
//! - [`ha`]: leader election and sharding, run as terms of an `InformerController`
//!   (`controller.run_while_leading(..)`, `controller.run_sharded(..)` through
//!   [`ha::RunInTerms`], which the [`prelude`] brings into scope).
//! - [`simple`]: the simple `App` built from a manifest and closures.
//! - `components` (feature `components`): oper8-style components, a kind's dependent objects as
//!   a graph, deployed then verified.
//! - `phases` (feature `phases`): Autopilot-style phases, a kind's life as a state machine of
//!   workers with inputs and outputs.
//! - `testing` (feature `testenv`): fault injection for an operator's tests, a proxy between it
//!   and the apiserver that cuts and withholds watches, fails writes and halts after a chosen
//!   write.
//!
//! # Features
//!
//! None is on by default, so an operator compiles only what it uses:
//!
//! - `cli`: `Operator` (the operator binary's commands and flags) in the [`prelude`];
//! - `components`, `phases`: the modules above;
//! - `otlp`: OTLP span export (without it, an operator configured to export fails at start,
//!   saying so);
//! - `testenv`: a real kube-apiserver + etcd for tests, and the fault proxy (`testing`);
//! - `webhook-http2`: HTTP/2 on the webhook server beside HTTP/1.1. Without it the server
//!   offers only HTTP/1.1 through ALPN, which the apiserver uses just as well; HTTP/2 adds the h2
//!   stack to the build and its denial-of-service surface (rapid reset, CVE-2023-44487), which
//!   is why kubebuilder's scaffold turns it off too.
//!
//! The Runner's two servers (metrics and probes over HTTP, webhooks over HTTPS) are written on
//! hyper directly, without a web framework, and the operator's command line uses clap without
//! colours: each saved several seconds of a new project's first build (issue #40; figures in
//! `docs/performance/README.md`).
//!
//! # A complete operator on one page
//!
//! `examples/minimal` (with the `cli` feature; the README opens with it): a `Greeting` kind
//! rendered into a ConfigMap it owns, with the `crd`, `rbac`, `manifests` and `run` commands.
//!
#![cfg_attr(feature = "cli", doc = "```no_run")]
#![cfg_attr(not(feature = "cli"), doc = "```ignore")]
//! //! A complete kubeapp operator on one page: each `Greeting` is rendered into a ConfigMap it owns.
//! //! `crd`, `rbac`, `manifests` and `run` subcommands; metrics, probes and tracing from the Runner.
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp::prelude::*;
//!
//! /// A message to publish in a ConfigMap.
//! #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//! #[kube(
//!     group = "minimal.kubeapp.dev",
//!     version = "v1",
//!     kind = "Greeting",
//!     namespaced
//! )]
//! pub struct GreetingSpec {
//!     /// What the ConfigMap says.
//!     pub message: String,
//! }
//!
//! const MANIFEST: &str = "appName: greeter\ngroup: minimal.kubeapp.dev\nversions: [{ name: v1, kinds: [{ kind: Greeting }] }]\n";
//!
//! /// Renders the ConfigMap; as it is owned, an edit or delete of it calls this again at once.
//! async fn apply(greeting: Arc<Greeting>, ctx: Context) -> Result<ReconcileResult, ReconcileError> {
//!     let config_map = ConfigMap {
//!         metadata: ObjectMeta {
//!             name: greeting.metadata.name.clone(),
//!             namespace: greeting.metadata.namespace.clone(),
//!             ..ObjectMeta::default()
//!         },
//!         data: Some([("message".into(), greeting.spec.message.clone())].into()),
//!         ..ConfigMap::default()
//!     };
//!     ctx.apply(config_map)
//!         .owned_by(greeting.as_ref())?
//!         .send()
//!         .await?;
//!     Ok(ReconcileResult::done())
//! }
//!
//! /// Nothing to undo: the cluster's garbage collector deletes the owned ConfigMap.
//! async fn cleanup(_: Arc<Greeting>, _: Context) -> Result<ReconcileResult, ReconcileError> {
//!     Ok(ReconcileResult::done())
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     Operator::new(MANIFEST)
//!         .manifest_file("manifest.yaml")
//!         .crd::<Greeting>()
//!         .app(|manifest| {
//!             AppConfig::from_manifest(manifest).managed_kind(
//!                 ManagedKind::<Greeting>::new()
//!                     .apply_cleanup_fn(apply, cleanup)
//!                     .owns::<ConfigMap>(watcher::Config::default()),
//!             )
//!         })
//!         .main()
//!         .await
//! }
//! ```

#[cfg(feature = "components")]
pub use kubeapp_components as components;
pub use kubeapp_ha as ha;
pub use kubeapp_operator as operator;
#[cfg(feature = "phases")]
pub use kubeapp_phases as phases;
pub use kubeapp_runner as runner;
pub use kubeapp_sdk as sdk;
pub use kubeapp_simple as simple;
#[cfg(feature = "testenv")]
pub use kubeapp_testing as testing;

/// What a reconciler operator names, in one import: the simple App (`AppConfig`, `ManagedKind`,
/// `UnmanagedKind`), the operator binary (`Operator`, feature `cli`), the controller, kind
/// handles, handler traits and their context, requests and results, the informer registry and
/// store, triggers, the Runner, the controller's leader-elected and sharded runs
/// ([`ha::RunInTerms`], imported unnamed: its methods, not its name), kube-rs's `Api`, `Client`, `watcher`, `ObjectRef`, `ObjectMeta`
/// and `CustomResource`, and the derives a custom resource's spec needs (`Serialize`,
/// `Deserialize`, `JsonSchema`; the crate deriving them still depends on `serde`, `serde_json`
/// and `schemars`, which the generated code names).
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

    pub use kube::api::ObjectMeta;
    pub use kube::runtime::reflector::ObjectRef;
    pub use kube::runtime::watcher;
    pub use kube::{Api, Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};

    pub use kubeapp_ha::RunInTerms as _;
    pub use kubeapp_operator::apply::conditions;
    pub use kubeapp_operator::{
        ApplyCleanup, BoxError, CancellationToken, Context, ControllerConfig, HandlerHandle,
        InformerController, InformerOptions, Informers, Kind, KindHandle, OpinionatedOptions,
        ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler, Store,
        Trigger, TriggerCause, Watcher, WatcherFns, apply_cleanup, reconciler_fn,
    };
    pub use kubeapp_runner::{Runner, RunnerConfig};
    pub use kubeapp_sdk::manifest::ManifestData;
    #[cfg(feature = "cli")]
    pub use kubeapp_simple::operator::Operator;
    pub use kubeapp_simple::{AppConfig, ManagedKind, SimpleApp, UnmanagedKind};
}
