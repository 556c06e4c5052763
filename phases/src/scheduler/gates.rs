//! Applying a gate annotation (see [`crate::gate`]): its effect on the phase, the analysis run
//! and the `Paused` condition, written to the status first and acknowledged by removing the
//! annotation after (a gate applied twice after a crash in between has the same effect).

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kubeapp_operator::apply::conditions::{self, NewCondition};
use kubeapp_operator::{Context, Kind, ReconcileError};
use serde_json::Value;

use super::PhaseScheduler;
use crate::analysis::{AnalysisStatus, Outcome};
use crate::gate::{self, GATE_ANNOTATION, Gate, PAUSED, REASON_GATE, REASON_RESUMED};
use crate::phase::Phase;
use crate::status::{self, Extra};

/// What a gate does to an object in a phase.
pub(super) struct Effect<P> {
    pub(super) gate: Gate,
    pub(super) next: P,
    pub(super) analysis: Option<AnalysisStatus>,
    pub(super) paused: Option<NewCondition>,
}

/// Whether the status says the object is paused.
pub(super) fn is_paused(json: &Value) -> bool {
    let conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> =
        serde_json::from_value(json["status"]["conditions"].clone()).unwrap_or_default();
    conditions::is_true(&conditions, PAUSED)
}

/// Whether setting `paused` (a `Paused` condition) leaves the object paused.
pub(super) fn says_paused(paused: &NewCondition) -> bool {
    paused.status == conditions::ConditionStatus::True
}

/// The gate annotation's value, if any.
pub(super) fn annotation<K: Kind>(object: &K) -> Option<String> {
    object
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(GATE_ANNOTATION))
        .cloned()
}

impl<K, P, C> PhaseScheduler<K, P, C>
where
    K: Kind,
    P: Phase,
    C: Send + Sync + 'static,
{
    /// The effect of `gate` on `object` in `phase`, or why it does not apply.
    pub(super) fn effect(
        &self,
        gate: Gate,
        phase: P,
        object: &K,
        json: &Value,
    ) -> Result<Effect<P>, String> {
        if phase.is_final() {
            return Err(format!("{gate}: {} is a final phase", phase.name()));
        }
        let resumed = || {
            is_paused(json).then(|| {
                NewCondition::new(
                    PAUSED,
                    false,
                    REASON_RESUMED,
                    format!("{gate} in phase {}", phase.name()),
                )
            })
        };
        let run = || -> Option<AnalysisStatus> {
            serde_json::from_value::<AnalysisStatus>(json["status"]["analysis"].clone())
                .ok()
                .filter(|run| run.continues_in(phase.name()))
        };
        let declared = self.machine.analyses.get(&phase);
        let ended = |outcome| {
            declared.map(|declared| {
                let mut run = run()
                    .unwrap_or_else(|| AnalysisStatus::start(phase.name(), &(declared.of)(object)));
                run.end_by_gate(outcome, gate.as_str());
                run
            })
        };
        let effect = |next, analysis, paused| Effect {
            gate,
            next,
            analysis,
            paused,
        };
        match gate {
            Gate::Pause => Ok(effect(
                phase,
                None,
                Some(NewCondition::new(
                    PAUSED,
                    true,
                    REASON_GATE,
                    format!(
                        "paused by the {GATE_ANNOTATION} annotation in phase {}",
                        phase.name()
                    ),
                )),
            )),
            Gate::Resume => Ok(effect(
                phase,
                run().map(|mut run| {
                    run.resume();
                    run
                }),
                Some(NewCondition::new(
                    PAUSED,
                    false,
                    REASON_RESUMED,
                    format!("resumed in phase {}", phase.name()),
                )),
            )),
            Gate::Promote => match declared {
                Some(declared) => Ok(effect(
                    declared.on_success,
                    ended(Outcome::Promoted),
                    resumed(),
                )),
                None => Err(format!(
                    "promote: phase {} waits on no analysis",
                    phase.name()
                )),
            },
            Gate::Abort => match (declared, self.machine.abort_to) {
                (Some(declared), _) => Ok(effect(
                    declared.on_failure,
                    ended(Outcome::Aborted),
                    resumed(),
                )),
                (None, Some(to)) if to != phase => Ok(effect(to, None, resumed())),
                _ => Err(format!(
                    "abort: phase {} waits on no analysis and the machine has no abort phase",
                    phase.name()
                )),
            },
        }
    }

    /// Applies the gate `value` found on `object`; returns the object (and its JSON) to go on
    /// with.
    pub(super) async fn apply_gate(
        &self,
        uid: &str,
        value: &str,
        object: Arc<K>,
        json: Value,
        ctx: &Context<C>,
    ) -> Result<(Arc<K>, Value), ReconcileError> {
        let stored = self.stored_phase(uid, &object, &json);
        let phase = if stored.is_empty() {
            Some(P::INITIAL)
        } else {
            P::parse(&stored)
        };
        let effect = match (value.parse::<Gate>(), phase) {
            (Err(unknown), _) => Err(unknown.to_string()),
            (Ok(gate), None) => Err(format!("{gate}: status.phase {stored:?} is not a phase")),
            (Ok(gate), Some(phase)) => self.effect(gate, phase, &object, &json),
        };
        let (object, json) = match (effect, phase) {
            (Ok(effect), Some(phase)) => {
                self.write_effect(uid, phase, effect, object, json, ctx)
                    .await?
            }
            (Err(why), _) => {
                tracing::warn!(kind = %self.kind, name = %object.meta().name.as_deref().unwrap_or(""), %why, "gate ignored");
                publish(ctx, object.as_ref(), true, "GateIgnored", value, why).await;
                (object, json)
            }
            (Ok(_), None) => (object, json),
        };
        acknowledge(object.as_ref(), value, ctx).await?;
        Ok((object, json))
    }

    /// Writes a gate's effect; a transition is counted and reported like a worker's.
    async fn write_effect(
        &self,
        uid: &str,
        phase: P,
        effect: Effect<P>,
        mut object: Arc<K>,
        mut json: Value,
        ctx: &Context<C>,
    ) -> Result<(Arc<K>, Value), ReconcileError> {
        let gate = effect.gate;
        let paused = effect
            .paused
            .as_ref()
            .map_or_else(|| is_paused(&json), says_paused);
        let extra = Extra {
            analysis: effect.analysis.as_ref(),
            paused: effect.paused,
            ready: status::holds_conditions(&json).then(|| status::ready(effect.next, paused)),
        };
        let generation = object.meta().generation;
        let body = status::write(
            &json["status"],
            effect.next.name(),
            generation,
            None,
            None,
            extra,
        );
        if let Some(body) = body {
            let written = status::apply(object.as_ref(), body, ctx).await?;
            self.remember_write(uid, &written, effect.next.name());
            json = serde_json::to_value(&written).map_err(ReconcileError::new)?;
            object =
                Arc::new(serde_json::from_value(json.clone()).map_err(|e| {
                    ReconcileError::new(format!("reading back the status write: {e}"))
                })?);
        }
        let note = if effect.next == phase {
            format!("{gate} in phase {}", phase.name())
        } else {
            format!("{gate}: {} -> {}", phase.name(), effect.next.name())
        };
        tracing::info!(kind = %self.kind, name = %object.meta().name.as_deref().unwrap_or(""), %note, "gate applied");
        publish(
            ctx,
            object.as_ref(),
            false,
            "GateApplied",
            gate.as_str(),
            note,
        )
        .await;
        if effect.next != phase {
            self.moved(uid, object.as_ref(), phase, effect.next, ctx)
                .await;
        }
        Ok((object, json))
    }
}

/// Publishes an Event; one that cannot be written is logged, never undoing what it reports.
pub(super) async fn publish<K: Kind, C>(
    ctx: &Context<C>,
    object: &K,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    if let Err(error) = ctx
        .recorder()
        .publish_action(object, warning, reason, action, note)
        .await
    {
        tracing::warn!(%error, reason, "an Event was not written");
    }
}

/// Removes the annotation if it still says `value` (a newer gate written meanwhile stays, for
/// the reconcile its change triggers).
async fn acknowledge<K: Kind, C>(
    object: &K,
    value: &str,
    ctx: &Context<C>,
) -> Result<(), ReconcileError> {
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match object.meta().namespace.as_deref() {
        Some(namespace) => Api::namespaced_with(ctx.client().clone(), namespace, &resource),
        None => Api::all_with(ctx.client().clone(), &resource),
    };
    let name = object.meta().name.clone().unwrap_or_default();
    let patch: json_patch::Patch =
        serde_json::from_value(gate::acknowledgement(value)).map_err(ReconcileError::new)?;
    match api
        .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(()),
        // The test failed (another gate since) or the object is gone: nothing to acknowledge.
        Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409 | 422) => Ok(()),
        Err(error) => Err(ReconcileError::new(format!(
            "removing the {GATE_ANNOTATION} annotation: {error}"
        ))),
    }
}
