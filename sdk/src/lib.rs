//! # kubeapp-sdk
//!
//! The foundations of kubeapp that every other crate builds on.
//!
//! - [`app`]: the [`App`](app::App) trait an operator binary runs, its health checks and
//!   admission/conversion hooks, and [`AppProvider`](app::AppProvider).
//! - [`admission`] and [`conversion`]: typed validators, mutators and version converters of a
//!   kind, as types or closures.
//! - [`manifest`]: [`ManifestData`], the app manifest (the Go SDK's format, JSON or YAML). Start
//!   there to describe an app's kinds.
//! - [`crd`]: the CustomResourceDefinitions of a manifest's kinds, with schemas from the Rust
//!   types ([`CrdBuilder`]).
//! - [`deploy`]: the Deployment, metrics and webhook Services and RBAC that run the operator
//!   in a cluster, as objects and one YAML stream ([`deploy::OperatorDeployment`]).
//! - [`monitoring`]: the observability assets of an app: a Grafana dashboard and Prometheus
//!   alerting rules over its operator's golden signals ([`monitoring::Monitoring`]).
//! - [`rbac`]: the ServiceAccount, (Cluster)Role and binding an operator of the app needs
//!   ([`RbacBuilder`]).
//! - [`webhooks`]: the Validating/MutatingWebhookConfigurations and the CRD conversion client
//!   config of a manifest's app.
//! - [`error`]: printing an error with its causes once each ([`ErrorChain`](error::ErrorChain)),
//!   and the rule kubeapp's error types follow (a cause is returned from `source()` or printed,
//!   never both).
//! - [`testenv`] (cargo feature `testenv`): start a real kube-apiserver + etcd on loopback and get a
//!   `kube::Client` for it, to test operators end to end. Start there when writing tests.
//! - [`benchmark`] (cargo feature `testenv`): measure an operator under load on that control
//!   plane (requests from the audit log, write-to-handled latencies, handler calls, RSS and CPU).
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod admission;
pub mod app;
#[cfg(feature = "testenv")]
pub mod benchmark;
pub mod conversion;
pub mod crd;
pub mod deploy;
pub mod diagnostics;
pub mod error;
pub mod manifest;
pub mod monitoring;
pub mod rbac;
#[cfg(feature = "testenv")]
pub mod testenv;
pub mod webhooks;

pub use crd::CrdBuilder;
pub use manifest::ManifestData;
pub use rbac::RbacBuilder;
