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
