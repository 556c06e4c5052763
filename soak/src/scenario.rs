//! One soak round, and the setup around it: the workload with its fault injectors next to a
//! running operator, then the check.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::Api;
use kubeapp::operator::CancellationToken;
use kubeapp::sdk::testenv::TestEnv;

use crate::checker::{LossReport, wait_for_convergence};
use crate::error::SoakError;
use crate::faults::{FaultCounts, poke_objects, restart_apiserver};
use crate::kind::Churn;
use crate::operator::{OperatorSettings, SoakOperator, Wrapper};
use crate::recorder::Recorder;
use crate::workload::{Ledger, WorkloadSettings, run_workload};

/// The faults injected while the workload runs.
#[derive(Clone, Debug, Default)]
pub struct FaultSettings {
    /// Restart kube-apiserver at this interval (`None`: never).
    pub restart_every: Option<Duration>,
    /// Annotation writes per second that force 409s on finalizer patches (0: none).
    pub conflict_writes_per_second: u32,
    /// Seed of the conflict writer's choices.
    pub seed: u64,
}

/// Everything one round needs.
#[derive(Clone, Debug)]
pub struct ScenarioSettings {
    /// The operator under test.
    pub operator: OperatorSettings,
    /// The workload.
    pub workload: WorkloadSettings,
    /// The faults.
    pub faults: FaultSettings,
    /// How long the handlers may take, after the workload, to see everything.
    pub check_deadline: Duration,
}

impl Default for ScenarioSettings {
    fn default() -> Self {
        Self {
            operator: OperatorSettings::default(),
            workload: WorkloadSettings::default(),
            faults: FaultSettings::default(),
            check_deadline: Duration::from_secs(120),
        }
    }
}

/// What one round did and found.
#[derive(Clone, Debug)]
pub struct RoundOutcome {
    /// The check's result.
    pub report: LossReport,
    /// The same check of the plain reconciler of the second controller sharing the informer.
    pub shadow_report: LossReport,
    /// What the workload did.
    pub ledger: Ledger,
    /// Apiserver restarts during the round.
    pub restarts: u64,
    /// Annotation writes of the conflict writer that succeeded.
    pub pokes: u64,
    /// How long after the workload the check took (until clean, or the deadline).
    pub converge_time: Duration,
}

/// A control plane with the `Churn` CRD, a namespace and the operator under test running.
pub struct SoakEnv {
    /// The control plane.
    pub env: TestEnv,
    /// The namespace of the objects.
    pub namespace: String,
    /// What the handlers saw.
    pub recorder: Recorder,
    /// What the plain reconciler of the second controller sharing the informer saw.
    pub shadow: Recorder,
    /// The operator.
    pub operator: SoakOperator,
}

impl SoakEnv {
    /// Starts a control plane and the operator described by `settings`.
    ///
    /// # Errors
    ///
    /// The control plane or the operator could not be started.
    pub async fn start(settings: &OperatorSettings) -> Result<Self, SoakError> {
        let env = TestEnv::start().await?;
        Self::start_in(env, settings).await
    }

    /// Installs the CRD and starts the operator in `env`.
    ///
    /// # Errors
    ///
    /// The CRD, the namespace or the operator could not be set up.
    pub async fn start_in(env: TestEnv, settings: &OperatorSettings) -> Result<Self, SoakError> {
        env.install_crd::<Churn>().await?;
        let namespace = env.create_namespace("soak").await?;
        let recorder = Recorder::new();
        let shadow = Recorder::new();
        let operator =
            SoakOperator::start(env.client(), &namespace, &recorder, &shadow, settings).await?;
        Ok(Self {
            env,
            namespace,
            recorder,
            shadow,
            operator,
        })
    }

    /// The objects' API.
    pub fn api(&self) -> Api<Churn> {
        Api::namespaced(self.env.client(), &self.namespace)
    }

    /// Runs the workload with the faults of `settings`, then waits for the handlers and checks.
    ///
    /// # Errors
    ///
    /// A request of the workload or checker failed for good, or the apiserver did not restart.
    pub async fn round(&self, settings: &ScenarioSettings) -> Result<RoundOutcome, SoakError> {
        let api = self.api();
        let created = AtomicUsize::new(0);
        let counts = FaultCounts::default();
        let stop_faults = CancellationToken::new();
        let pokes = poke_objects(
            api.clone(),
            settings.workload.clone(),
            &created,
            settings.faults.conflict_writes_per_second,
            &counts,
            stop_faults.clone(),
            settings.faults.seed,
        );
        let restarts = async {
            match settings.faults.restart_every {
                Some(every) => {
                    restart_apiserver(&self.env, every, &counts, stop_faults.clone()).await
                }
                None => Ok(()),
            }
        };
        let workload = async {
            let ledger = run_workload(&api, &settings.workload, &created).await;
            stop_faults.cancel();
            ledger
        };
        let ((), restarted, ledger) = tokio::join!(pokes, restarts, workload);
        // The restarter finishes a restart in progress, so the apiserver runs from here on.
        restarted?;
        let ledger = ledger?;
        let restarts = counts.restarts.load(Ordering::Relaxed);
        let (report, converge_time) = wait_for_convergence(
            &api,
            &ledger,
            &self.recorder,
            settings.operator.wrapper,
            restarts == 0,
            settings.check_deadline,
        )
        .await?;
        let (shadow_report, _) = wait_for_convergence(
            &api,
            &ledger,
            &self.shadow,
            Wrapper::Reconciler,
            restarts == 0,
            settings.check_deadline,
        )
        .await?;
        Ok(RoundOutcome {
            report,
            shadow_report,
            ledger,
            restarts,
            pokes: counts.pokes.load(Ordering::Relaxed),
            converge_time,
        })
    }

    /// Stops the operator, then the control plane.
    pub async fn stop(self) {
        self.operator.stop().await;
        self.env.stop();
    }
}

/// Starts a control plane and the operator, runs one round and stops everything.
///
/// # Errors
///
/// See [`SoakEnv::start`] and [`SoakEnv::round`].
pub async fn run_once(settings: &ScenarioSettings) -> Result<RoundOutcome, SoakError> {
    let soak = SoakEnv::start(&settings.operator).await?;
    let outcome = soak.round(settings).await;
    soak.stop().await;
    outcome
}
