//! # kubeapp-testing
//!
//! Test an operator the way kubeapp tests itself: against a real apiserver, through faults.
//!
//! - [`proxy`]: [`FaultProxy`], an HTTP proxy between the operator under test and the apiserver
//!   (a `kubeapp::sdk::testenv` control plane, or any cluster a `kube::Client` reaches). It ends
//!   watches, withholds or holds back the events of chosen resources, answers chosen writes with
//!   409, 429, 500 or 504 or loses their answers, and halts everything right after a chosen
//!   write, as a crash there would. It works for an operator in the test process
//!   ([`FaultProxy::client`]) and for one run as a child process
//!   ([`FaultProxy::write_kubeconfig`]).
//! - [`quiescence`]: [`Quiescence`], when an operator has nothing left to do (its informers
//!   synced and caching exactly what the apiserver lists, its queues empty), read from its
//!   `/debug/kubeapp`: a test ends each phase on it instead of a guessed sleep.
//! - [`harness`]: [`FaultHarness`], the differential oracle: a [`Scenario`] (a workload in
//!   steps, and the kinds whose end state counts) runs once without faults, then under the
//!   [`FaultPlan`]s the fault-free run suggests (a crash after each of its writes, a conflict
//!   or a lost answer on each, each watched resource withheld or lagging from each step through
//!   the next), in a seeded order within a [`Budget`]; each run's end state must equal the
//!   fault-free one's.
//! - [`process`]: [`OperatorProcess`], the operator under test as a child process of its own
//!   binary (`run --metrics-addr .. --namespace ..`, `KUBECONFIG` naming the run's proxy).
//! - [`faults`]: what can be injected ([`WriteFault`]) and what the proxy saw
//!   ([`WriteRecord`]).
//! - [`request`]: what a request is about ([`ResourceKey`], [`ResourceRequest`]).
//! - [`apiserver`]: [`ApiserverRestart`], how a harness restarts the apiserver (`TestEnv` is
//!   one).
//!
//! Every fault is a history a real apiserver and network can produce: a withheld watch ends in
//! 410 Expired (the client re-lists, as after a watch that fell too far behind), a lagging watch
//! delivers what it held in order, a faulted write never reaches storage (except a lost
//! answer, which did).
//!
//! Why a crate of its own: it serves HTTP and rewrites watch streams (hyper's server), which
//! neither an operator nor `testenv` needs; the facade re-exports it as `kubeapp::testing` with
//! the `testenv` feature, the one a project's tests already enable.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod apiserver;
mod calls;
pub mod faults;
pub mod harness;
pub mod plan;
pub mod process;
pub mod proxy;
pub mod quiescence;
pub mod report;
pub mod request;
pub mod scenario;
mod settle;
pub mod snapshot;
mod stale_lists;
mod status;
mod watch_stream;

pub use apiserver::ApiserverRestart;
pub use faults::{WriteFault, WriteOutcome, WriteRecord};
pub use harness::{Budget, FaultHarness};
pub use plan::FaultPlan;
pub use process::OperatorProcess;
pub use proxy::{FaultProxy, FaultProxyError};
pub use quiescence::{NotQuiescent, Quiescence};
pub use report::{HarnessError, PlanFailure, Report};
pub use request::{ResourceKey, ResourceRequest, Verb};
pub use scenario::{BoxError, OperatorUnderTest, RunContext, RunningOperator, Scenario, Workload};
pub use snapshot::Snapshot;
