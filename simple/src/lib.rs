//! # kubeapp-simple
//!
//! The simple `SimpleApp` of kubeapp: an operator built from a manifest, managed kinds and closures, with
//! telemetry set up in one call. It serves the common case in a page of code; the
//! `kubeapp-operator` crate gives every part à la carte.
//!
//! Start with [`AppConfig`]: name the app, give it its manifest, add [`ManagedKind`]s (the kinds
//! the app owns: a reconciler or a watcher, optional validator, mutator and converter;
//! opinionated by default) and [`UnmanagedKind`]s (kinds it only watches; plain by default), then
//! build an [`SimpleApp`] with a client and hand it to a `kubeapp_runner::Runner`.
//!
//! - [`kinds`]: the kind builders.
//! - [`validate`]: what makes an app invalid against its manifest (every problem is reported).
//! - [`manifest_match`]: whether each managed kind's Rust type agrees with the manifest on
//!   group, kind, version and plural.
//! - [`config`]: [`AppConfig`], what an app is built from, and why it may be refused.
//! - [`app`]: the [`SimpleApp`] itself: informers, wrappers, finalizer names, health and metrics.
//! - [`provider`]: [`Provider`], the app behind `kubeapp_sdk`'s `AppProvider` (manifest first,
//!   app once a client exists).
//! - [`telemetry`]: logs and OTLP traces in one call.
//! - `cli` (feature `cli`): `OperatorArgs`, the common operator flags for a clap command line.
//! - `operator` (feature `cli`): `Operator`, a whole operator binary (`crd`, `rbac`, `manifests`,
//!   `run`) from a manifest, its CRD types and its app.
//!
//! ```
//! use kube::CustomResource;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_operator::{ReconcileResult, WatcherFns};
//! use kubeapp_sdk::manifest::ManifestData;
//! use kubeapp_simple::{AppConfig, ManagedKind, UnmanagedKind};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//! #[kube(group = "shop.example.com", version = "v1", kind = "Widget", namespaced)]
//! pub struct WidgetSpec { size: i32 }
//!
//! let manifest = ManifestData::from_yaml(r#"
//! appName: shop
//! group: shop.example.com
//! versions:
//!   - name: v1
//!     kinds:
//!       - kind: Widget
//!         admission: { validation: { operations: [CREATE, UPDATE] } }
//! "#)?;
//!
//! let config = AppConfig::new("shop")
//!     .manifest(manifest)
//!     .managed_kind(
//!         ManagedKind::<Widget>::new()
//!             .reconcile_fn(|request, _ctx| async move {
//!                 tracing::info!(action = %request.action, size = request.object.spec.size);
//!                 Ok(ReconcileResult::done())
//!             })
//!             .validate_fn(|request| async move {
//!                 match request.object {
//!                     Some(w) if w.spec.size < 0 => {
//!                         Err(kubeapp_sdk::app::AdmissionError::denied("size must be >= 0"))
//!                     }
//!                     _ => Ok(()),
//!                 }
//!             }),
//!     )
//!     .unmanaged_kind(
//!         UnmanagedKind::<ConfigMap>::new().watcher(
//!             WatcherFns::<ConfigMap>::new().on_add(|cm, _ctx| async move {
//!                 tracing::info!(name = ?cm.metadata.name, "configmap");
//!                 Ok(())
//!             }),
//!         ),
//!     );
//! config.validate()?;
//! // With a cluster: `let app = kubeapp_simple::SimpleApp::new(config, client)?;` and run it in a Runner.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod kinds;
pub mod manifest_match;
#[cfg(feature = "cli")]
pub mod operator;
pub mod provider;
pub mod telemetry;
pub mod validate;

pub use app::{INFORMERS_SYNCED_CHECK, SimpleApp};
pub use config::{AppConfig, AppConfigError};
pub use kinds::{ManagedKind, UnmanagedKind};
pub use provider::Provider;
pub use validate::{AppProblem, Capability};
