//! The errors of a soak run (a loss is not an error: it is the [`crate::checker::LossReport`]).

use std::time::Duration;

/// A soak run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    /// The control plane could not be started or set up.
    #[error("the test control plane")]
    TestEnv(#[from] kubeapp::sdk::testenv::TestEnvError),
    /// The operator under test could not be set up.
    #[error("setting up the operator under test: {0}")]
    Setup(String),
    /// A request of the workload or the checker failed for good.
    #[error("{action}")]
    Kube {
        /// What the tool was doing, naming the object.
        action: String,
        /// The last error.
        source: kube::Error,
    },
    /// A request kept failing (the apiserver stayed unreachable) for longer than allowed.
    #[error("{action}: still failing after {waited:?}")]
    GaveUp {
        /// What the tool was doing, naming the object.
        action: String,
        /// How long it was retried.
        waited: Duration,
        /// The last error.
        source: kube::Error,
    },
}
