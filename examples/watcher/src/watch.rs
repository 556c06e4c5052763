//! The watcher: records every lifecycle step of a `Probe` as a Kubernetes Event and in
//! [`StepMetrics`].
//!
//! The simple App wraps it in the opinionated watcher (the default for managed kinds), which puts
//! a finalizer on every `Probe`. So a deletion made while the operator is down still reaches
//! [`ProbeWatcher`] as `delete` when it starts again, and Probes that were already handled get
//! `sync` at start-up instead of a second `add`.
//!
//! Each call first works for the Probe's `spec.processingMillis` (standing in for real work),
//! then writes an `events.k8s.io/v1` Event about the Probe (`regarding` = the Probe, `reason` from
//! [`Step::reason`], `reportingController` = the app name) and counts the step. A call in flight
//! when the operator is asked to stop is finished, not cut short: the controller waits for it
//! within its shutdown grace. When the Event cannot be written the call fails (and is retried by
//! the controller's retry policy), and the step is not counted.

use std::fmt;
use std::sync::{Arc, OnceLock};

use kube::Resource as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kubeapp::operator::{BoxError, Context, Watcher};

use crate::kind::Probe;
use crate::lifecycle::{self, Step};
use crate::metrics::StepMetrics;

/// An Event about a Probe could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing the {reason} Event of Probe {key}")]
pub struct RecordError {
    /// The Event's reason (`Added`, ...).
    pub reason: &'static str,
    /// `namespace/name` of the Probe.
    pub key: String,
    /// What the apiserver said.
    #[source]
    pub source: kube::Error,
}

/// The watcher of `Probe`s; see the [module docs](self).
pub struct ProbeWatcher {
    reporter: Reporter,
    /// Made on the first call from the handler context's client, then kept (it aggregates
    /// repeated Events into series).
    recorder: OnceLock<Recorder>,
    metrics: StepMetrics,
}

impl ProbeWatcher {
    /// A watcher writing Events as `reporter` (through the app's client), counting into
    /// `metrics`.
    pub fn new(reporter: Reporter, metrics: StepMetrics) -> Self {
        Self {
            reporter,
            recorder: OnceLock::new(),
            metrics,
        }
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
        let event = Event {
            type_: EventType::Normal,
            reason: step.reason().to_string(),
            note: Some(note),
            action: step.action().to_string(),
            secondary: None,
        };
        let recorder = self
            .recorder
            .get_or_init(|| Recorder::new(ctx.client().clone(), self.reporter.clone()));
        recorder
            .publish(&event, &probe.object_ref(&()))
            .await
            .map_err(|source| RecordError {
                reason: step.reason(),
                key: key.clone(),
                source,
            })?;
        self.metrics.record(step);
        tracing::info!(step = step.label(), probe = %key, "step recorded");
        Ok(())
    }
}

impl fmt::Debug for ProbeWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeWatcher")
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
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
