//! # kubeapp-components
//!
//! oper8's components in Rust: an operator declares, per custom kind, **components** (atomic
//! groups of Kubernetes objects, such as a Deployment with its Service) and the dependencies
//! between them; a reconcile deploys them in dependency order, then verifies them in the same
//! order (issue "Components: dependent resources as a typed DAG").
//!
//! The user guide, with the decisions behind the design, is `docs/components.md`; the example
//! operator is `examples/components`. The modules:
//!
//! - [`graph`]: the graph of one kind, checked when built (duplicate names, unknown dependencies
//!   and cycles are errors naming the components), ordered by levels of independent components
//!   (what a reconcile may run concurrently), with edge checks and the set of components a
//!   failure halts;
//! - [`component`]: the [`Component`] trait (render, enabled, readiness override), rendered
//!   objects, and the [`Session`] of one reconcile (the custom object, cache reads, typed shared
//!   results);
//! - [`readiness`](mod@readiness): the built-in readiness rules per kind (Deployment, StatefulSet, DaemonSet,
//!   Job, Pod, PersistentVolumeClaim, any object with a `Ready` condition);
//! - [`report`]: what a run did per component (the deploy [`Outcome`], the [`Verified`] result,
//!   the [`ComponentObject`]s applied), gathered in a [`RunReport`]: the vocabulary that the
//!   run produces and the inventory, metrics and status read;
//! - [`run`](mod@run): the deploy and verify phases over a [`Cluster`] (bounded concurrency within a
//!   level, halting downstream of a failure, expected waits and edge checks, disabled components
//!   deleted), with a span per phase and per component;
//! - [`reconciler`]: [`ComponentsReconciler`], a graph as the reconciler of a kind (a
//!   `KindHandle` or a simple App's managed kind), applying through [`ReconcileCluster`]: the
//!   operator crate's server-side apply with a controller owner reference to the custom object;
//! - [`status`]: `Ready` and `Updating` conditions, a [`ComponentsSummary`] and
//!   `observedGeneration`, applied only when changed (`ComponentsReconciler::with_status`);
//! - [`inventory`]: the pruning plan over what the components applied, as recorded in the
//!   custom object's status (what a component rendered before and not now is deleted, also after a
//!   restart);
//! - [`hooks`]: the operator's own code after the deploy and verify phases;
//! - [`metrics`]: outcomes and durations per component and phase;
//! - [`dry_run`]: every component rendered with no cluster, written as a directory tree (an
//!   operator binary's `dry-run` command) or inspected in users' unit tests.
//!
//! A graph, rendered in memory as a unit test of components would (a ConfigMap stands in for the
//! custom kind):
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_components::{ComponentGraph, Outcome, Rendered, Session, dry_run::dry_run};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let graph = ComponentGraph::builder()
//!     .render("config", |s: &Session<ConfigMap>| {
//!         Ok(vec![Rendered::value(json!({"apiVersion": "v1", "kind": "Secret",
//!             "metadata": {"name": "settings", "namespace": s.object().metadata.namespace}}))])
//!     })
//!     .render_when("extra", |_: &ConfigMap| false, |_| Ok(vec![]))
//!     .depends_on("config")
//!     .build()
//!     .expect("no cycle, no unknown name");
//! let mut owner = ConfigMap::default();
//! owner.metadata.name = Some("shop".into());
//! owner.metadata.namespace = Some("shop".into());
//! let run = dry_run(&graph, owner, vec![]).await;
//! assert_eq!(run.applied[0].1["metadata"]["ownerReferences"][0]["name"], "shop");
//! assert_eq!(run.report.deployed[1], Outcome::Disabled);
//! # }
//! ```
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod component;
pub mod dry_run;
pub mod graph;
pub mod hooks;
pub mod inventory;
pub mod metrics;
pub mod readiness;
pub mod reconciler;
pub mod report;
pub mod run;
pub mod server_check;
pub mod status;
pub mod teardown;
pub mod unchanged;

pub use component::{
    Component, ComponentError, EnabledWhen, Rendered, Session, Stores, component_fn,
};
pub use graph::{ComponentGraph, GraphBuilder, GraphError};
pub use hooks::{Hooks, NoHooks};
pub use metrics::ComponentMetrics;
pub use readiness::{Readiness, readiness};
pub use reconciler::{ComponentsReconciler, ReconcileCluster};
pub use report::{ComponentObject, Outcome, RunReport, Verified};
pub use run::{BoxComponent, Cluster, RunOptions, run, run_with};
pub use server_check::Violation;
pub use status::{ComponentsStatus, ComponentsSummary};
pub use teardown::Remaining;
