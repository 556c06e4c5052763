//! The kubeapp guide (`docs/guide/`), compiled.
//!
//! Every chapter of the guide is the documentation of one module here, so `cargo test --doc`
//! compiles each Rust block of the guide and runs the ones that need no cluster (blocks that
//! talk to one are `no_run`; the testing chapter's test starts its own kube-apiserver and etcd
//! and runs). A guide snippet that stops compiling fails the workspace's tests: the guide cannot
//! rot. [`website`] is the operator the chapters build, assembled, which later chapters import.
//! The components and phases references (`docs/components.md`, `docs/phases.md`) are compiled
//! here too.
//!
//! Not a library to depend on (`publish = false`).

#![doc = include_str!("../../docs/guide/README.md")]

pub mod website;

/// `docs/components.md` (the components reference, not a chapter): its Rust blocks compile here.
#[doc = include_str!("../../docs/components.md")]
pub mod reference_components {}

/// `docs/phases.md` (the phases reference, not a chapter): its Rust blocks compile here.
#[doc = include_str!("../../docs/phases.md")]
pub mod reference_phases {}

#[doc = include_str!("../../docs/guide/01-reconciler.md")]
pub mod ch01_reconciler {}

#[doc = include_str!("../../docs/guide/02-children-and-cache.md")]
pub mod ch02_children_and_cache {}

#[doc = include_str!("../../docs/guide/03-status-conditions-events.md")]
pub mod ch03_status_conditions_events {}

#[doc = include_str!("../../docs/guide/04-watcher-and-finalizers.md")]
pub mod ch04_watcher_and_finalizers {}

#[doc = include_str!("../../docs/guide/05-webhooks-and-conversion.md")]
pub mod ch05_webhooks_and_conversion {}

#[doc = include_str!("../../docs/guide/06-components.md")]
pub mod ch06_components {}

#[doc = include_str!("../../docs/guide/07-phases.md")]
pub mod ch07_phases {}

#[doc = include_str!("../../docs/guide/08-testing.md")]
pub mod ch08_testing {}

#[doc = include_str!("../../docs/guide/09-metrics-and-tracing.md")]
pub mod ch09_metrics_and_tracing {}

#[doc = include_str!("../../docs/guide/10-replicas.md")]
pub mod ch10_replicas {}

#[doc = include_str!("../../docs/guide/11-deploying.md")]
pub mod ch11_deploying {}
