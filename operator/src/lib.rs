//! # kubeapp-operator
//!
//! The operator runtime of kubeapp, modelled on Go's grafana-app-sdk `operator` package.
//!
//! A controller built with this crate alone (an [`InformerController`] and typed handlers) needs
//! no HTTP server: the Runner that runs apps as an operator process (serving `/metrics`,
//! `/livez`, `/readyz` and the HTTPS webhook server) and the Kubernetes client whose requests are
//! counted are in `kubeapp-runner` (`kubeapp::runner`), which builds on this crate.
//!
//! Where to start: register a kind with an [`InformerController`] through kube-rs's own `Api<K>`
//! and `watcher::Config` ([`InformerController::kind`]); the [`KindHandle<K>`] it returns takes
//! typed [`Watcher<K, C>`]s and [`Reconciler<K, C>`]s (or a kube-rs-style [`ApplyCleanup`]), gives
//! a readable [`Store<K>`], and triggers reconciles from related objects ([`KindHandle::owns`],
//! [`KindHandle::watches`], [`Trigger`]). Handlers get a [`Context<C>`] with the user's data, the
//! client, the apply/status helpers and an Event recorder. Every kind is watched once per process
//! through [`Informers`], shared and reference counted. The controller fans each event out in
//! order per object and concurrently across objects, with retries ([`RetryPolicy`],
//! [`RetryDequeuePolicy`]); the [`controller`] module docs state the guarantees, the [`list_watch`]
//! docs say how deletes missed during a disconnect are still delivered, `docs/api.md` records the
//! API's decisions. Run the controller yourself ([`InformerController::run`] with a
//! [`CancellationToken`]), or as an app of a `kubeapp_runner::Runner` (`kubeapp::runner`), which
//! adds `/metrics`, the health probes, webhooks and the graceful stop on SIGTERM; the Runner
//! hands its apps the one [`MetricsRegistry`] and [`Informers`] they share.
//!
//! Underneath, the type-erased layer the typed one is built on stays available for custom sources
//! and multi-kind handlers in one module, [`erased`]: [`erased::DynWatcher`],
//! [`erased::DynReconciler`], their closure forms over one concrete type, and informers and
//! handlers keyed by a kind name through [`InformerController::erased`]; with [`Informer`]
//! (including synthetic streams) and the shared objects and downcasts of [`object`]
//! ([`object::SharedObject`]).
//!
//! The modules are layered, and each imports only its own layer (without a cycle) and those
//! below (`layers.toml` at the workspace root states it, `tests/layers.rs` enforces it,
//! `ARCHITECTURE.md` draws it):
//!
//! 0. vocabulary: [`object`] (objects, keys, the [`Kind`] bound), `action` ([`ReconcileAction`],
//!    [`TriggerCause`]), metric plumbing;
//! 1. the cache: [`store`] ([`Store<K>`], the shared cache, [`InformerEvent`]s), [`own_writes`];
//! 2. the seams an outside crate plugs into: [`gate`] (what a controller term asks before a
//!    call and for an event) and [`list_scope`] (what a shared informer lists and watches in);
//!    the `kubeapp-ha` crate (leader election, sharding) implements them, and the core never
//!    imports it;
//! 3. the erased handler traits and what handlers write with: [`handler`], [`view`], `watcher`
//!    and `reconciler` (the `Dyn*` traits, public through [`erased`]; the reconcile request,
//!    result and error at the crate root), [`failures`], [`apply`], [`events`];
//! 4. the metric sets: [`metrics`];
//! 5. [`list_watch`] (list+watch, decode, re-list diff) and [`informers`] (the shared registry,
//!    whose fan-out hands events to subscribers through a trait it owns);
//! 6. [`controller`] (per-object lanes, dispatch, retries, and terms: runs that come and go,
//!    [`controller::Term`]);
//! 7. [`opinionated`] (finalizer wrappers) and [`erased`] (the erased layer's public face);
//! 8. the typed handle: [`kind`], [`context`], [`trigger`];
//! 9. the registry of metric sets an operator process serves: `metrics_registry`.
//!
//! An event's path goes up the layers: [`list_watch`] -> [`informers`] (the cache first, then the
//! subscribers) -> [`controller`] (per-object lanes, retries) -> [`erased::DynWatcher`] /
//! [`erased::DynReconciler`] (the typed handlers of [`kind`] behind them) -> [`metrics`] and `tracing` spans
//! (`informer-event-add|update|delete`, `controller-event-watch`, `controller-event-reconcile`,
//! `controller-retry`; failures set `otel.status_code = "ERROR"`).
//!
//! Around that path:
//!
//! - [`opinionated`]: [`OpinionatedWatcher`] and [`OpinionatedReconciler`] wrap any watcher or
//!   reconciler with finalizers, so deletes that happen while the operator is down are still
//!   handled and objects changed meanwhile are re-synced.
//! - [`failures`]: failed handler calls by cause (`handler_failures_total{kind,cause}`), one
//!   log line per missing permission behind a 403, and the opt-in `writes-permitted` readiness
//!   check.
//! - `metrics_registry`: the [`MetricsRegistry`] a Runner (`kubeapp-runner`) owns and hands to
//!   its apps: one prefix, each kubeapp collector set created once, no process-wide collectors.
//! - [`apply`]: what a handler writes with: server-side apply under a field manager with owner
//!   references ([`Applier`]), `status` written only when it changed ([`StatusWriter`]), and
//!   standard conditions; [`events`]: Kubernetes Events about an object ([`EventRecorder`]).
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod action;
pub mod apply;
pub mod context;
pub mod controller;
pub mod erased;
pub mod events;
mod failing_objects;
pub mod failures;
pub mod gate;
pub mod handler;
mod handler_calls;
pub mod informers;
pub mod kind;
mod kind_trackers;
pub mod list_scope;
pub mod list_watch;
mod metric_cells;
mod metric_registration;
pub mod metrics;
mod metrics_registry;
pub mod object;
pub mod opinionated;
pub mod own_writes;
pub mod projection;
mod queue_wait;
mod reconciler;
mod related;
pub mod store;
pub mod trigger;
pub mod view;
mod watcher;

pub use action::{ReconcileAction, TriggerCause};
pub use apply::{Applier, Apply, ApplyError, StatusWrite, StatusWriter};
pub use context::Context;
pub use controller::{
    ControllerConfig, ControllerError, InformerController, RetryDequeuePolicy, RetryPolicy,
};
pub use events::{EventError, EventRecorder};
pub use handler::{BoxError, DynContext, HandlerError};
pub use informers::{InformerOptions, Informers};
pub use kind::{
    ApplyCleanup, HandlerHandle, KindHandle, Reconciler, TriggerHandle, Watcher, WatcherFns,
    apply_cleanup, reconciler_fn,
};
pub use list_watch::{DriftCheck, Informer};
pub use metrics::{ControllerMetrics, MetricSet};
pub use metrics_registry::{MetricSetError, MetricsRegistry, MetricsRegistryError};
pub use object::{Kind, KubeObject, ObjectKey};
pub use opinionated::{OpinionatedOptions, OpinionatedReconciler, OpinionatedWatcher};
pub use own_writes::WrittenPart;
pub use reconciler::{ReconcileError, ReconcileRequest, ReconcileResult, ReconcileState};
pub use store::{InformerEvent, Store, StoreError, SyncedFlag};
/// The token that stops an [`InformerController`] and cancels handler contexts.
pub use tokio_util::sync::CancellationToken;
pub use trigger::Trigger;
