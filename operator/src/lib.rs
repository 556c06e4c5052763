//! # kubeapp-operator
//!
//! The operator runtime of kubeapp: informers, the `InformerController`, watchers, reconcilers,
//! retries, the opinionated finalizer wrappers, the runner and its metrics.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]
pub mod runner;
pub mod webhook;

pub use runner::{Runner, RunnerConfig, RunnerError};
