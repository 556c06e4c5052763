//! The operator under test: an `InformerController` with the `Churn` kind registered through a
//! typed `KindHandle` (the shared informer, its cache and the typed handler traits are on the
//! path under test) and one of the opinionated wrappers around handlers that report to the
//! [`Recorder`].
//!
//! The handlers are the product's users here, so they are ordinary: `add` / `Created` work for
//! [`OperatorSettings::add_delay`] before they return (so that, with the controller's default
//! 10 workers, later events of an object arrive while its add still runs or waits), every other
//! call returns at once; no call fails.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::watcher;
use kubeapp::operator::opinionated::{FinalizerMetrics, opinionated_dequeue_policy};
use kubeapp::operator::{
    BoxError, CancellationToken, Context, ControllerConfig, InformerController, InformerOptions,
    OpinionatedOptions, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult,
    Reconciler, RetryPolicy, Watcher,
};
use tokio::task::JoinHandle;

use crate::error::SoakError;
use crate::kind::Churn;
use crate::recorder::{Call, Recorder};

/// The kind label of the finalizer metrics.
const KIND: &str = "Churn";

/// Which opinionated wrapper runs the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Wrapper {
    /// `OpinionatedWatcher` around add/update/delete/sync handlers.
    Watcher,
    /// `OpinionatedReconciler` around one reconcile handler.
    Reconciler,
}

impl Wrapper {
    /// The wrapper's name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Watcher => "watcher",
            Self::Reconciler => "reconciler",
        }
    }
}

impl std::fmt::Display for Wrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the operator under test is set up.
#[derive(Clone, Debug)]
pub struct OperatorSettings {
    /// The wrapper.
    pub wrapper: Wrapper,
    /// The controller's `max_concurrent_workers`.
    pub workers: usize,
    /// How long `add` / `Created` work before returning.
    pub add_delay: Duration,
    /// The first delay of the controller's retry policy ([`patient_retries`]): a wrapper call
    /// fails when its finalizer patch keeps meeting conflicts or the apiserver is down, and the
    /// controller retries it.
    pub retry_base: Duration,
    /// How long the informer may take to list at start.
    pub sync_timeout: Duration,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        Self {
            wrapper: Wrapper::Watcher,
            workers: 10,
            add_delay: Duration::from_millis(30),
            retry_base: Duration::from_millis(250),
            sync_timeout: Duration::from_secs(60),
        }
    }
}

/// Retries that double from `base` up to [`MAX_RETRY_DELAY`] and give up only after
/// [`MAX_RETRY_ATTEMPTS`] (about 10 minutes): an event the controller gives up on is lost by
/// configuration, which would hide what the soak looks for, so the soak's operator outlasts any
/// apiserver restart. (The controller's default gives up after 5 attempts.)
pub fn patient_retries(base: Duration) -> RetryPolicy {
    RetryPolicy::new(move |_, attempt| {
        (attempt <= MAX_RETRY_ATTEMPTS).then(|| {
            base.saturating_mul(2u32.saturating_pow(attempt))
                .min(MAX_RETRY_DELAY)
        })
    })
}

/// The longest delay of [`patient_retries`].
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// The attempts after which [`patient_retries`] gives up.
pub const MAX_RETRY_ATTEMPTS: u32 = 120;

/// A running operator.
pub struct SoakOperator {
    stop: CancellationToken,
    running: JoinHandle<()>,
    metrics: FinalizerMetrics,
}

impl SoakOperator {
    /// Starts the operator on the `Churn` objects of `namespace` and waits until its informer
    /// has listed them. A second controller shares the operator's informer (one watch) with a
    /// plain reconciler that reports to `shadow`: every event must reach both.
    ///
    /// # Errors
    ///
    /// [`SoakError::Setup`] when the wrapper or its metrics cannot be built or the informer does
    /// not sync within [`OperatorSettings::sync_timeout`].
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        recorder: &Recorder,
        shadow: &Recorder,
        settings: &OperatorSettings,
    ) -> Result<Self, SoakError> {
        let metrics = FinalizerMetrics::unregistered(Some("soak"))
            .map_err(|e| SoakError::Setup(format!("finalizer metrics: {e}")))?;
        let options = OpinionatedOptions::default().metrics(metrics.clone());
        let controller = InformerController::new(
            ControllerConfig::default()
                .max_concurrent_workers(settings.workers)
                .retry_policy(patient_retries(settings.retry_base))
                .dequeue_policy(Some(opinionated_dequeue_policy()))
                .shutdown_grace(Duration::from_secs(10)),
        );
        let api = Api::<Churn>::namespaced(client, namespace);
        let churns = controller.kind(
            api.clone(),
            watcher::Config::default(),
            InformerOptions::default(),
        );
        let sharing = InformerController::new(
            ControllerConfig::default()
                .max_concurrent_workers(settings.workers)
                .informers(controller.informers().clone())
                .shutdown_grace(Duration::from_secs(10)),
        );
        let _shadow = sharing
            .kind(api, watcher::Config::default(), InformerOptions::default())
            .reconcile(RecordingReconciler::new(shadow, Duration::ZERO));
        // Attached for the controller's life: the handles are not kept.
        let _attached = match settings.wrapper {
            Wrapper::Watcher => churns
                .watch_opinionated(RecordingWatcher::new(recorder, settings.add_delay), options),
            Wrapper::Reconciler => churns.reconcile_opinionated(
                RecordingReconciler::new(recorder, settings.add_delay),
                options,
            ),
        }
        .map_err(|e| SoakError::Setup(format!("opinionated {}: {e}", settings.wrapper)))?;
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, sharing, stop) = (controller.clone(), sharing, stop.clone());
            async move {
                let (main, shadow) = tokio::join!(controller.run(stop.clone()), sharing.run(stop));
                if let Err(error) = main.and(shadow) {
                    tracing::error!(%error, "the soak operator did not run");
                }
            }
        });
        for (kind, flag) in controller.synced_flags() {
            tokio::time::timeout(settings.sync_timeout, flag.wait())
                .await
                .map_err(|_| {
                    SoakError::Setup(format!(
                        "informer {kind} did not sync within {:?}",
                        settings.sync_timeout
                    ))
                })?;
        }
        Ok(Self {
            stop,
            running,
            metrics,
        })
    }

    /// Finalizer patches that met a 409 Conflict so far.
    pub fn conflicts(&self) -> u64 {
        self.metrics.conflicts(KIND)
    }

    /// Stops the controller (graceful: in-flight handlers finish) and waits for it.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Err(error) = self.running.await {
            tracing::error!(%error, "the soak operator's task failed");
        }
    }
}

fn uid_of(object: &Churn) -> String {
    // Objects from the apiserver always have a UID; an empty one would show up as a loss.
    object.uid().unwrap_or_default()
}

fn record(recorder: &Recorder, call: Call, object: &Churn) {
    recorder.record(
        call,
        &uid_of(object),
        &object.name_any(),
        object.spec.revision,
    );
}

/// The watcher: `add` works for `add_delay`, each call is recorded.
pub struct RecordingWatcher {
    recorder: Recorder,
    add_delay: Duration,
}

impl RecordingWatcher {
    /// A watcher reporting to `recorder`.
    pub fn new(recorder: &Recorder, add_delay: Duration) -> Self {
        Self {
            recorder: recorder.clone(),
            add_delay,
        }
    }
}

impl Watcher<Churn> for RecordingWatcher {
    async fn add(&self, object: Arc<Churn>, _ctx: &Context) -> Result<(), BoxError> {
        tokio::time::sleep(self.add_delay).await;
        record(&self.recorder, Call::Add, &object);
        Ok(())
    }

    async fn update(
        &self,
        _old: Arc<Churn>,
        new: Arc<Churn>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        record(&self.recorder, Call::Update, &new);
        Ok(())
    }

    async fn delete(&self, object: Arc<Churn>, _ctx: &Context) -> Result<(), BoxError> {
        record(&self.recorder, Call::Delete, &object);
        Ok(())
    }

    async fn sync(&self, object: Arc<Churn>, _ctx: &Context) -> Result<(), BoxError> {
        record(&self.recorder, Call::Sync, &object);
        Ok(())
    }
}

/// The reconciler: `Created` works for `add_delay`, each call is recorded.
pub struct RecordingReconciler {
    recorder: Recorder,
    add_delay: Duration,
}

impl RecordingReconciler {
    /// A reconciler reporting to `recorder`.
    pub fn new(recorder: &Recorder, add_delay: Duration) -> Self {
        Self {
            recorder: recorder.clone(),
            add_delay,
        }
    }
}

impl Reconciler<Churn> for RecordingReconciler {
    async fn reconcile(
        &self,
        request: ReconcileRequest<Churn>,
        _ctx: &Context,
    ) -> Result<ReconcileResult, ReconcileError> {
        let call = match request.action {
            ReconcileAction::Created => {
                tokio::time::sleep(self.add_delay).await;
                Call::Created
            }
            ReconcileAction::Updated => Call::Updated,
            ReconcileAction::Resynced => Call::Resynced,
            ReconcileAction::Deleted => Call::Deleted,
        };
        record(&self.recorder, call, &request.object);
        Ok(ReconcileResult::done())
    }
}
