//! # kubeapp-components
//!
//! oper8's components in Rust: an operator declares, per custom kind, **components** (atomic
//! groups of Kubernetes objects, such as a Deployment with its Service) and the dependencies
//! between them; a reconcile deploys them in dependency order, then verifies them in the same
//! order (issue "Components: dependent resources as a typed DAG").
//!
//! Built so far, each with unit tests:
//!
//! - [`graph`]: the graph of one kind, checked when built (duplicate names, unknown dependencies
//!   and cycles are errors naming the components), ordered by levels of independent components
//!   (what a reconcile may run concurrently), with edge checks and the set of components a
//!   failure halts;
//! - [`readiness`]: the built-in readiness rules per kind (Deployment, StatefulSet, DaemonSet,
//!   Job, Pod, PersistentVolumeClaim, any object with a `Ready` condition).
//!
//! - [`component`]: the [`Component`] trait (render, enabled, readiness override), rendered
//!   objects, and the [`Session`] of one reconcile with typed shared results;
//! - [`run`]: the deploy and verify phases over a [`Cluster`] (bounded concurrency within a
//!   level, halting downstream of a failure, expected waits and edge checks, disabled components
//!   deleted), tested over an in-memory cluster.
//!
//! - [`reconciler`]: [`ComponentsReconciler`], a graph as the reconciler of a kind (a
//!   `KindHandle` or a simple App's managed kind), applying through [`ReconcileCluster`]: the
//!   operator crate's server-side apply with a controller owner reference to the custom object.
//!
//! - [`status`]: `Ready` and `Updating` conditions, a [`ComponentsSummary`] and
//!   `observedGeneration`, applied only when changed (`ComponentsReconciler::with_status`).
//!
//! Still to come: pruning, the dry run, metrics and traces per phase and
//! component, readiness-gated dependencies, and the example.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod component;
pub mod graph;
pub mod readiness;
pub mod reconciler;
pub mod run;
pub mod status;

pub use component::{Component, ComponentError, Rendered, Session, component_fn};
pub use graph::{ComponentGraph, GraphBuilder, GraphError};
pub use readiness::{Readiness, readiness};
pub use reconciler::{ComponentsReconciler, ReconcileCluster};
pub use run::{BoxComponent, Cluster, Outcome, RunReport, Verified, run};
pub use status::ComponentsSummary;
