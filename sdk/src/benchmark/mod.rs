//! Measuring an operator under load on a test control plane: the engine of `kubeapp bench` (a
//! user's operator project) and of kubeapp's own benchmark tool (its kubeapp contender).
//!
//! - [`audit`]: the operator's API requests, counted from kube-apiserver's audit log (a
//!   [`TestEnvBuilder`](crate::testenv::TestEnvBuilder) made to write it: [`audit::with_audit_log`]);
//! - [`readiness`]: when the operator has handled each write, seen from the tool's own watch
//!   ([`readiness::ReadinessTracker`], by `status.observedGeneration` or a `Ready` condition);
//! - [`latency`]: p50, p99 and max of the write-to-handled latencies;
//! - [`metrics_text`]: the operator's `/metrics`, e.g. its handler calls;
//! - [`process`]: the operator as a child process, its peak RSS and CPU seconds from `/proc`.
//!
//! Available with the `testenv` feature (Linux: processes are read from `/proc`).

pub mod audit;
pub mod latency;
pub mod metrics_text;
pub mod process;
pub mod readiness;
