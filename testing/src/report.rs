//! What a harness ends with: its [`Report`] (the plans run, and each [`PlanFailure`] with what
//! shows it), or the [`HarnessError`] that stopped it before it could compare anything.

use std::fmt;

use crate::plan::FaultPlan;
use crate::quiescence::NotQuiescent;
use crate::scenario::BoxError;

/// What stopped a harness before it could compare anything.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Setting up a run (its namespace, its proxy, its kubeconfig, its operator) failed.
    #[error("{run}: {what}")]
    Setup {
        /// Which run (`fault-free`, or the plan).
        run: String,
        /// What failed.
        what: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// A workload step failed.
    #[error("{run}: step {step:?} failed")]
    Step {
        /// Which run.
        run: String,
        /// The step's name.
        step: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The fault-free run broke a check on the handler calls (a call saw an object older than
    /// an earlier one did, or a deletion no call saw): no plan can be judged against it.
    #[error("{run}: {}", violations.join("; "))]
    CallChecks {
        /// Which run.
        run: String,
        /// What broke, one line each.
        violations: Vec<String>,
    },
    /// The operator did not become quiescent.
    #[error("{run}: after step {step:?}")]
    NotQuiescent {
        /// Which run.
        run: String,
        /// The last step.
        step: String,
        /// What was unsettled.
        #[source]
        source: NotQuiescent,
    },
}

/// One plan whose run differed from the fault-free run, or could not finish.
#[derive(Clone, Debug)]
pub struct PlanFailure {
    /// The plan.
    pub plan: FaultPlan,
    /// How its end state differed (empty if the run did not finish).
    pub differences: Vec<String>,
    /// Why it did not finish, if it did not.
    pub error: Option<String>,
    /// The operator's writes around the fault, as the proxy logged them.
    pub writes: Vec<String>,
    /// The run's last handler calls (process, number, handler, action, object, version).
    pub calls: Vec<String>,
    /// The operator's log, if it keeps one.
    pub logs: String,
}

/// What a harness found; [`Report::assert_passed`] fails a test on any failure.
#[derive(Clone, Debug)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The seed that ordered the plans (run again with it to get the same plans).
    pub seed: u64,
    /// How many plans the fault-free run suggested.
    pub available: usize,
    /// How many were run.
    pub run: usize,
    /// How many ended as the fault-free run did.
    pub passed: usize,
    /// The others.
    pub failures: Vec<PlanFailure>,
    /// Every plan run, in order (the failed ones included).
    pub plans: Vec<FaultPlan>,
    /// Runs (the fault-free one included) in which no handler call was reported, so the checks
    /// on calls did not judge them: an operator made before the harness in the test process,
    /// or one that does not run kubeapp's controller.
    pub calls_unrecorded: usize,
}

impl Report {
    /// Panics with the report if a plan failed.
    pub fn assert_passed(&self) {
        assert!(self.failures.is_empty(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fault plans for {} (seed {}): {} run of {}, {} passed, {} failed",
            self.scenario,
            self.seed,
            self.run,
            self.available,
            self.passed,
            self.failures.len()
        )?;
        if self.calls_unrecorded > 0 {
            writeln!(
                f,
                "handler calls: none reported in {} runs, so the checks on calls did not judge \
                 them (an operator in the test process made before the FaultHarness, or not on \
                 kubeapp's controller)",
                self.calls_unrecorded
            )?;
        }
        for failure in &self.failures {
            writeln!(f, "- {}", failure.plan)?;
            if let Some(error) = &failure.error {
                writeln!(f, "  did not finish: {error}")?;
            }
            for difference in &failure.differences {
                writeln!(f, "  {difference}")?;
            }
            writeln!(f, "  the operator's writes around the fault:")?;
            for write in &failure.writes {
                writeln!(f, "    {write}")?;
            }
            if !failure.calls.is_empty() {
                writeln!(f, "  the last handler calls:")?;
                for call in &failure.calls {
                    writeln!(f, "    {call}")?;
                }
            }
            if !failure.logs.is_empty() {
                writeln!(f, "  its log:\n{}", failure.logs)?;
            }
            writeln!(
                f,
                "  replay: FaultHarness::replay with {:?}, or KUBEAPP_FAULT_SEED={}",
                failure.plan, self.seed
            )?;
        }
        Ok(())
    }
}

/// How many of a run's last handler calls a failure shows.
pub(crate) const CALLS_SHOWN: usize = 30;

/// The writes around a plan's fault (all of them, at most the last 40, for a watch fault).
pub(crate) fn around(plan: &FaultPlan, writes: Vec<String>) -> Vec<String> {
    let at = match plan {
        FaultPlan::CrashAfterWrite(write) | FaultPlan::FailWrite { write, .. } => {
            usize::try_from(*write).unwrap_or(usize::MAX)
        }
        _ => writes.len(),
    };
    let from = at.saturating_sub(10);
    let to = (at + 10).min(writes.len());
    writes
        .get(from.min(to)..to)
        .map(<[String]>::to_vec)
        .unwrap_or_default()
}
