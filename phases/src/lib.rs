//! # kubeapp-phases
//!
//! Autopilot's model in Rust: a custom object carries a **phase** in `status.phase`; a
//! **scheduler** runs the **worker** of the object's phase with the phase's **inputs** (each
//! declared and read by a typed [`InputKey`]; see [`inputs`] for what is checked when), ensures
//! the **outputs** it returns and moves the object to the **next phase**. No generated code: the
//! phases are a Rust enum ([`Phase`]), the workers are async closures declared on a
//! [`PhaseMachine`], and the scheduler ([`PhaseScheduler`]) is the kind's reconciler on the
//! existing controller (per-object ordering, retries, metrics).
//!
//! A phase can also wait on a declarative [`Analysis`] (a metric query judged by success and
//! failure conditions once per interval, through a [`MetricProvider`] such as
//! [`PrometheusProvider`]; see [`analysis`]), and a person can pause, resume, promote or abort
//! an object through the [`GATE_ANNOTATION`] annotation (see [`gate`]).
//!
//! The guide, with the decisions behind it, is `docs/phases.md`.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod analysis;
pub mod gate;
pub mod inputs;
pub mod machine;
pub mod metrics;
pub mod phase;
pub mod provider;
pub mod scheduler;
pub mod status;
pub mod worker;

pub use analysis::{Analysis, AnalysisStatus, Comparison};
pub use gate::{GATE_ANNOTATION, Gate};
pub use inputs::{InputKey, Inputs};
pub use machine::PhaseMachine;
pub use metrics::PhaseMetrics;
pub use phase::{Phase, PhaseError};
pub use provider::{MetricProvider, PrometheusProvider};
pub use scheduler::PhaseScheduler;
pub use status::PhaseStatus;
pub use worker::{Transition, Work};
