//! # kubeapp-simple
//!
//! The simple `App` of kubeapp: an operator built from a manifest, managed kinds and closures, with
//! telemetry set up in one call.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod telemetry;
