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
//! Still to come: the component trait and session, the deploy and verify phases over the
//! operator crate's apply helpers, status, pruning, the dry run, metrics and the example.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod graph;
pub mod readiness;

pub use graph::{ComponentGraph, GraphBuilder, GraphError};
pub use readiness::{Readiness, readiness};
