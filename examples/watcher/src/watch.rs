//! The watcher: records every lifecycle step of a `Probe` as a Kubernetes Event and in
//! [`StepMetrics`].
//!
//! The simple App wraps it in the opinionated watcher (the default for managed kinds), which puts
//! a finalizer on every `Probe`. So a deletion made while the operator is down still reaches
//! [`ProbeWatcher`] as `delete` when it starts again, and Probes that were already handled get
//! `sync` at start-up instead of a second `add`.
//!
//! Each call first works for the Probe's `spec.processingMillis` (standing in for real work),
//! then writes an `events.k8s.io/v1` Event about the Probe through the handler context's recorder
//! (`Context::recorder`: `regarding` = the Probe, `reason` from [`Step::reason`],
//! `reportingController` = the app name, `reportingInstance` = the `--instance` flag) and counts
//! the step. A call in flight
//! when the operator is asked to stop is finished, not cut short: the controller waits for it
//! within its shutdown grace. When the Event cannot be written the call fails (and is retried by
//! the controller's retry policy), and the step is not counted.

use std::sync::Arc;

use kubeapp::operator::{BoxError, Context, Watcher};

use crate::kind::Probe;
use crate::lifecycle::{self, Step};
use crate::metrics::StepMetrics;

/// The watcher of `Probe`s; see the [module docs](self).
#[derive(Debug)]
pub struct ProbeWatcher {
    metrics: StepMetrics,
}

impl ProbeWatcher {
    /// A watcher counting the steps it records into `metrics`.
    pub fn new(metrics: StepMetrics) -> Self {
        Self { metrics }
    }

    /// Works on `probe` for its processing time, then records `step` with `note`.
    async fn handle(
        &self,
        step: Step,
        probe: &Probe,
        note: String,
        ctx: &Context,
    ) -> Result<(), BoxError> {
        let key = lifecycle::key(probe);
        tracing::info!(
            step = step.label(),
            probe = %key,
            processing_millis = probe.spec.processing_millis,
            "processing started"
        );
        tokio::time::sleep(probe.spec.processing_time()).await;
        // The reason says what happened, the action what the watcher did; a repeat of both
        // within minutes is counted in the Event's series.
        ctx.recorder()
            .publish_action(probe, false, step.reason(), step.action(), note)
            .await?;
        self.metrics.record(step);
        tracing::info!(step = step.label(), probe = %key, "step recorded");
        Ok(())
    }
}

impl Watcher<Probe> for ProbeWatcher {
    async fn add(&self, probe: Arc<Probe>, ctx: &Context) -> Result<(), BoxError> {
        let note = lifecycle::note(Step::Add, &probe, None);
        self.handle(Step::Add, &probe, note, ctx).await
    }

    async fn update(
        &self,
        old: Arc<Probe>,
        new: Arc<Probe>,
        ctx: &Context,
    ) -> Result<(), BoxError> {
        let note = lifecycle::note(Step::Update, &new, Some(&old));
        self.handle(Step::Update, &new, note, ctx).await
    }

    async fn delete(&self, probe: Arc<Probe>, ctx: &Context) -> Result<(), BoxError> {
        let note = lifecycle::note(Step::Delete, &probe, None);
        self.handle(Step::Delete, &probe, note, ctx).await
    }

    async fn sync(&self, probe: Arc<Probe>, ctx: &Context) -> Result<(), BoxError> {
        let note = lifecycle::note(Step::Sync, &probe, None);
        self.handle(Step::Sync, &probe, note, ctx).await
    }
}
