//! The operator under test: an `InformerController` with one `Churn` informer and one of the
//! opinionated wrappers around handlers that report to the [`Recorder`].
//!
//! The handlers are the product's users here, so they are ordinary: `add` / `Created` work for
//! [`OperatorSettings::add_delay`] before they return (so that, with the controller's default
//! 10 workers, later events of an object arrive while its add still runs or waits), every other
//! call returns at once; no call fails.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt as _;
use kubeapp::operator::informer::InformerOptions;
use kubeapp::operator::opinionated::{FinalizerMetrics, opinionated_dequeue_policy};
use kubeapp::operator::{
    CancellationToken, ControllerConfig, HandlerContext, Informer, InformerController,
    OpinionatedOptions, OpinionatedReconciler, OpinionatedWatcher, ReconcileAction, ReconcileError,
    ReconcileResult, RetryPolicy, TypedReconcileRequest, TypedReconciler, WatcherFns,
    typed_reconciler,
};
use tokio::task::JoinHandle;

use crate::error::SoakError;
use crate::kind::Churn;
use crate::recorder::{Call, Recorder};

/// The name the informer is registered under.
pub const INFORMER: &str = "churns";
/// The kind label of the finalizer metrics.
const KIND: &str = "Churn";

/// Which opinionated wrapper runs the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Wrapper {
    /// `OpinionatedWatcher` around add/update/delete/sync handlers.
    DynWatcher,
    /// `OpinionatedReconciler` around one reconcile handler.
    DynReconciler,
}

impl Wrapper {
    /// The wrapper's name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::DynWatcher => "watcher",
            Self::DynReconciler => "reconciler",
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
            wrapper: Wrapper::DynWatcher,
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
    /// has listed them.
    ///
    /// # Errors
    ///
    /// [`SoakError::Setup`] when the wrapper or its metrics cannot be built or the informer does
    /// not sync within [`OperatorSettings::sync_timeout`].
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        recorder: &Recorder,
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
        controller.add_informer(
            INFORMER,
            Informer::new::<Churn>(
                client.clone(),
                InformerOptions::default().namespace(namespace),
            ),
        );
        match settings.wrapper {
            Wrapper::DynWatcher => {
                let watcher = OpinionatedWatcher::for_kind::<Churn>(
                    client,
                    recording_watcher(recorder, settings.add_delay),
                    options,
                )
                .map_err(|e| SoakError::Setup(format!("opinionated watcher: {e}")))?;
                controller.add_watcher(INFORMER, watcher);
            }
            Wrapper::DynReconciler => {
                let reconciler = OpinionatedReconciler::for_kind::<Churn>(
                    client,
                    typed_reconciler(RecordingReconciler::new(recorder, settings.add_delay)),
                    options,
                )
                .map_err(|e| SoakError::Setup(format!("opinionated reconciler: {e}")))?;
                controller.add_reconciler(INFORMER, reconciler);
            }
        }
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move {
                if let Err(error) = controller.run(stop).await {
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

/// The watcher's handlers: `add` works for `add_delay`, each call is recorded.
pub fn recording_watcher(recorder: &Recorder, add_delay: Duration) -> WatcherFns<Churn> {
    let on = |call: Call| {
        let recorder = recorder.clone();
        move |object: Arc<Churn>| {
            record(&recorder, call, &object);
        }
    };
    let (add, update, delete, sync) = (
        on(Call::Add),
        on(Call::Update),
        on(Call::Delete),
        on(Call::Sync),
    );
    WatcherFns::new()
        .on_add(move |_, object| {
            let add = add.clone();
            async move {
                tokio::time::sleep(add_delay).await;
                add(object);
                Ok(())
            }
        })
        .on_update(move |_, _old, new| {
            update(new);
            async { Ok(()) }
        })
        .on_delete(move |_, object| {
            delete(object);
            async { Ok(()) }
        })
        .on_sync(move |_, object| {
            sync(object);
            async { Ok(()) }
        })
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

#[async_trait::async_trait]
impl TypedReconciler<Churn> for RecordingReconciler {
    async fn reconcile(
        &self,
        _ctx: &HandlerContext,
        request: TypedReconcileRequest<Churn>,
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
