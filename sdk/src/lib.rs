//! # kubeapp-sdk
//!
//! The foundations of kubeapp that every other crate builds on.
//!
//! - [`testenv`] (cargo feature `testenv`): start a real kube-apiserver + etcd on loopback and get a
//!   `kube::Client` for it, to test operators end to end. Start there when writing tests.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "testenv")]
pub mod testenv;
