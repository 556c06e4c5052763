//! [`Phase`]: the user's enum of phases, and how it is checked when a machine is built.

use std::fmt;
use std::hash::Hash;

/// A custom kind's phases, usually a fieldless enum. Its string form ([`Phase::name`]) is what
/// `status.phase` stores; an empty or absent `status.phase` is [`Phase::INITIAL`].
///
/// ```
/// use kubeapp_phases::Phase;
///
/// #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// enum Job { Pending, Running, Done }
///
/// impl Phase for Job {
///     const ALL: &'static [Self] = &[Job::Pending, Job::Running, Job::Done];
///     const INITIAL: Self = Job::Pending;
///     fn name(&self) -> &'static str {
///         match self { Job::Pending => "Pending", Job::Running => "Running", Job::Done => "Done" }
///     }
///     fn is_final(&self) -> bool { matches!(self, Job::Done) }
/// }
/// assert!(Job::Done.is_final() && !Job::Done.is_failure());
/// assert_eq!(Job::parse("Running"), Some(Job::Running));
/// ```
pub trait Phase: Copy + Eq + Hash + fmt::Debug + Send + Sync + 'static {
    /// Every phase.
    const ALL: &'static [Self];
    /// The phase of a new object (exactly one).
    const INITIAL: Self;
    /// The string stored in `status.phase` (unique, non-empty).
    fn name(&self) -> &'static str;
    /// Whether the object rests in this phase (no worker, no requeue).
    fn is_final(&self) -> bool;

    /// Whether resting in this (final) phase means the object failed: a rollback, an error it
    /// cannot recover from. Its `Ready` condition is then `False` with reason
    /// [`PHASE_FAILED`](crate::status::PHASE_FAILED) (and `kubeapp trace` exits 4), where a final
    /// phase that is not a failure is `Ready=True`. No phase is a failure unless it says so.
    fn is_failure(&self) -> bool {
        false
    }

    /// The phase named `name`, if any.
    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|phase| phase.name() == name)
    }
}

/// Why a set of phases or a machine over them is not usable (reported when the machine is
/// built, before anything runs).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhaseError {
    /// `ALL` does not contain `INITIAL`.
    #[error("the initial phase {0} is not listed in Phase::ALL")]
    InitialNotListed(String),
    /// The initial phase is final: the machine would never run.
    #[error("the initial phase {0} is final")]
    InitialIsFinal(String),
    /// No phase is final: objects would never rest.
    #[error("no phase is final")]
    NoFinalPhase,
    /// Two phases share a name, or a name is empty.
    #[error("phase name {0:?} is empty or used twice")]
    BadName(String),
    /// A non-final phase has no worker and no analysis.
    #[error("the non-final phase {0} has no worker and no analysis")]
    MissingWorker(String),
    /// An analysis was given for a final phase.
    #[error("the final phase {0} cannot wait on an analysis")]
    AnalysisOnFinal(String),
    /// A phase waits on an analysis and the machine has no metric provider.
    #[error("the phase {0} waits on an analysis and the machine has no metric provider")]
    NoMetricProvider(String),
    /// A worker was given for a final phase.
    #[error("the final phase {0} cannot have a worker")]
    WorkerOnFinal(String),
    /// Two inputs of one phase share a key name (their values would be indistinguishable).
    #[error("the input {input:?} is declared twice on phase {phase}")]
    DuplicateInput {
        /// The phase.
        phase: String,
        /// The input's name.
        input: String,
    },
}

/// Checks the phases themselves; see [`PhaseError`].
pub(crate) fn check<P: Phase>() -> Result<(), PhaseError> {
    if !P::ALL.contains(&P::INITIAL) {
        return Err(PhaseError::InitialNotListed(format!("{:?}", P::INITIAL)));
    }
    if P::INITIAL.is_final() {
        return Err(PhaseError::InitialIsFinal(P::INITIAL.name().into()));
    }
    if !P::ALL.iter().any(Phase::is_final) {
        return Err(PhaseError::NoFinalPhase);
    }
    let mut seen = std::collections::HashSet::new();
    for phase in P::ALL {
        if phase.name().is_empty() || !seen.insert(phase.name()) {
            return Err(PhaseError::BadName(phase.name().into()));
        }
    }
    Ok(())
}
