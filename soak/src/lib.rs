//! # kubeapp-soak
//!
//! A load-and-churn test of kubeapp's opinionated wrappers against a real kube-apiserver + etcd:
//! many objects are created, a share of them updated and deleted while the operator still works
//! through the adds, optionally with forced 409 Conflicts and apiserver restarts; then a checker
//! waits until the handlers have seen everything and lists every object whose newest spec or
//! delete never reached a handler. `soak/tests/load_churn.rs` runs it at CI size; the
//! `kubeapp-soak` binary (`scripts/soak`) at any size. See `docs/soak.md`.
//!
//! Modules: [`kind`] (the `Churn` kind), [`recorder`] (what the handlers saw, per UID),
//! [`operator`] (the operator under test), [`workload`] (creates, updates, deletes), [`faults`]
//! (conflict writer, apiserver restarts), [`checker`] (losses), [`scenario`] (one round, and the
//! control plane around it), [`retry`] (the tool's requests across restarts), [`error`].

pub mod checker;
pub mod error;
pub mod faults;
pub mod kind;
pub mod operator;
pub mod recorder;
pub mod retry;
pub mod scenario;
pub mod workload;

pub use checker::{LossKind, LossReport};
pub use error::SoakError;
pub use operator::{OperatorSettings, Wrapper};
pub use scenario::{FaultSettings, RoundOutcome, ScenarioSettings, SoakEnv, run_once};
pub use workload::WorkloadSettings;
