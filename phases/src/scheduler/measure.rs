//! Measuring a phase's analysis: at most one measurement per reconcile, when one is due (an
//! interval after the last one recorded in `status.analysis`), its outcome deciding the phase.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kubeapp_operator::apply::conditions::NewCondition;
use kubeapp_operator::{Kind, ReconcileError};
use serde_json::Value;
use tracing::Instrument;

use super::PhaseScheduler;
use crate::analysis::{AnalysisStatus, Due, Outcome};
use crate::gate::{PAUSED, REASON_INCONCLUSIVE};
use crate::machine::DeclaredAnalysis;
use crate::phase::Phase;

/// What measuring decided.
pub(super) struct Measured<P> {
    /// The phase to move to (the same one while measuring or paused).
    pub(super) next: P,
    /// The run to record.
    pub(super) run: AnalysisStatus,
    /// `Paused=True` when the run is inconclusive.
    pub(super) paused: Option<NewCondition>,
    /// When to measure again (`None`: paused, until a gate).
    pub(super) again: Option<Duration>,
}

impl<K, P, C> PhaseScheduler<K, P, C>
where
    K: Kind,
    P: Phase,
    C: Send + Sync + 'static,
{
    /// Measures `declared` for `object` in `phase` if a measurement is due.
    pub(super) async fn measure(
        &self,
        phase: P,
        declared: &DeclaredAnalysis<K, P>,
        object: &K,
        json: &Value,
    ) -> Result<Measured<P>, ReconcileError> {
        let analysis = (declared.of)(object);
        analysis.check().map_err(ReconcileError::terminal)?;
        let mut run = serde_json::from_value::<AnalysisStatus>(json["status"]["analysis"].clone())
            .ok()
            .filter(|run| run.continues_in(phase.name()))
            .unwrap_or_else(|| AnalysisStatus::start(phase.name(), &analysis));
        let interval = analysis.interval.0;
        let stay = |run, again| Measured {
            next: phase,
            run,
            paused: None,
            again: Some(again),
        };
        let now = Timestamp::now();
        if let Due::In(left) = run.due(&analysis, now) {
            return Ok(stay(run, left));
        }
        let query = analysis.query_for(json).map_err(ReconcileError::terminal)?;
        let provider = self.machine.provider.as_ref().ok_or_else(|| {
            ReconcileError::terminal(format!("phase {} has no metric provider", phase.name()))
        })?;
        let span = tracing::info_span!(
            "phase.analysis",
            kind = %self.kind,
            phase = phase.name(),
            metric = %analysis.metric,
            name = object.meta().name.as_deref().unwrap_or("")
        );
        let value = provider
            .measure(&query)
            .instrument(span)
            .await
            .map_err(|e| ReconcileError::new(format!("analysis {}: {e}", analysis.metric)))?;
        let Some(value) = value else {
            tracing::debug!(metric = %analysis.metric, %query, "no value yet");
            return Ok(stay(run, interval));
        };
        let outcome = run.record(&analysis, value, now);
        tracing::info!(
            kind = %self.kind,
            name = object.meta().name.as_deref().unwrap_or(""),
            metric = %analysis.metric,
            value,
            ?outcome,
            "measured"
        );
        Ok(match outcome {
            Outcome::Successful | Outcome::Promoted => Measured {
                next: declared.on_success,
                ..stay(run, interval)
            },
            Outcome::Failed | Outcome::Aborted => Measured {
                next: declared.on_failure,
                ..stay(run, interval)
            },
            Outcome::Running => stay(run, interval),
            Outcome::Inconclusive => {
                let paused =
                    NewCondition::new(PAUSED, true, REASON_INCONCLUSIVE, run.message.clone());
                Measured {
                    next: phase,
                    run,
                    paused: Some(paused),
                    again: None,
                }
            }
        })
    }
}
