//! [`PhaseScheduler`]: a built [`PhaseMachine`] as the reconciler of its
//! kind. Per reconcile, on the controller's per-object lane (ordering, retries, metrics):
//!
//! 1. **Deletion** ([`ReconcileAction::Deleted`]: the finalizer is being released, or the object
//!    is gone): run the finalizer hook, if any, and forget the object.
//! 2. **Read the phase** from `status.phase` (absent or empty: the initial phase). When this
//!    process wrote a newer phase than the object carries (a cached copy older than our own
//!    status write), the phase written is used: a finished phase's worker never runs again
//!    because of a stale read. A phase that is not one of the kind's sets `PhaseKnown=False`
//!    and fails with a terminal error (counted, not retried).
//! 3. A **final** phase rests: done, no requeue.
//! 4. Otherwise gather the phase's **inputs**, run its **worker** (a span `phase.worker` with the
//!    phase), **ensure** its outputs (server-side apply, owned by the custom object; an apply that
//!    would change nothing is skipped against the owned kind's cache), **prune** outputs no
//!    longer returned if asked, and write `status` (phase, observedGeneration, details) **only
//!    if it changed**. An error at any step fails the reconcile (retried by the controller's
//!    policy) with the phase unchanged.
//! 5. On a **transition**: a Normal Event `PhaseChanged` (`A -> B`), the metrics, and the next
//!    phase runs **at once** on the object the status write returned (up to 16 transitions per
//!    reconcile, then a requeue). A phase that did not move is worked again after its interval.
//!
//! A **gate** annotation ([`crate::gate`]) is applied before step 2 (`scheduler/gates.rs`): its effect is
//! written to the status, then the annotation is removed. A **paused** object (`Paused=True`)
//! rests after step 3: no worker, no measurement, no requeue, until a gate. A phase with an
//! **analysis** (`scheduler/measure.rs`) measures it after its worker (if any) stayed, when a measurement is
//! due, and requeues for the next one (or its own interval, if shorter and declared).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kubeapp_components::{Cluster, ComponentObject, ReconcileCluster};
use kubeapp_operator::{
    Context, Kind, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler,
};
use serde_json::Value;
use tracing::Instrument;

use crate::analysis::AnalysisStatus;
use crate::inputs::Inputs;
use crate::machine::PhaseMachine;
use crate::phase::{self, Phase, PhaseError};
use crate::status::{self, Extra};
use crate::worker::Work;

mod gates;
mod measure;

/// At most this many transitions in one reconcile (a machine that cycles without rest must not
/// hold the object's lane forever).
const MAX_STEPS: usize = 16;

/// What this process knows of one object.
pub(crate) struct Remembered {
    /// The `resourceVersion` our last status write returned.
    version: u64,
    /// The phase that write stored.
    phase: String,
    /// The phase the objects gauge counts it in, and since when (this process's view).
    counted: Option<(String, Instant)>,
}

/// The reconciler of a phase machine; see the [module docs](self).
///
/// ```no_run
/// # use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "Rollout", namespaced, status = "kubeapp_phases::PhaseStatus")]
/// # pub struct RolloutSpec { app: String }
/// # #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// # enum Step { Waiting, Evaluating, Done, Failed }
/// # impl kubeapp_phases::Phase for Step {
/// #     const ALL: &'static [Self] = &[Step::Waiting, Step::Evaluating, Step::Done, Step::Failed];
/// #     const INITIAL: Self = Step::Waiting;
/// #     fn name(&self) -> &'static str { match self { Step::Waiting => "Waiting",
/// #         Step::Evaluating => "Evaluating", Step::Done => "Done", Step::Failed => "Failed" } }
/// #     fn is_final(&self) -> bool { matches!(self, Step::Done | Step::Failed) }
/// # }
/// # fn demo(rollouts: &kubeapp_operator::KindHandle<Rollout>,
/// #         registry: &kubeapp_operator::MetricsRegistry) -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_phases::{PhaseMachine, Transition};
///
/// let scheduler = PhaseMachine::<Rollout, Step>::new()
///     .worker(Step::Waiting, |_work, _ctx| async move { Ok(Transition::to(Step::Evaluating)) })
///     .worker(Step::Evaluating, |_work, _ctx| async move { Ok(Transition::to(Step::Done)) })
///     // phase_transitions_total and the rest, on the operator's /metrics.
///     .metrics_in(registry)?
///     .build()?;
/// // The kind's reconciler (a simple App: `ManagedKind::<Rollout>::new().reconciler(scheduler)`).
/// rollouts.reconcile(scheduler);
/// # Ok(())
/// # }
/// ```
pub struct PhaseScheduler<K, P, C = ()> {
    pub(crate) kind: String,
    pub(crate) machine: PhaseMachine<K, P, C>,
    pub(crate) memory: Mutex<HashMap<String, Remembered>>,
}

/// Building: a declared machine becomes the scheduler that runs it.
impl<K, P, C> PhaseMachine<K, P, C>
where
    K: Kind,
    P: Phase,
    C: Send + Sync + 'static,
{
    /// Checks the phases and the workers and returns the scheduler (the kind's reconciler).
    ///
    /// # Errors
    ///
    /// See [`PhaseError`]: an inconsistent `Phase` implementation, a worker or an analysis on a
    /// final phase, a non-final phase with neither, an analysis without a metric provider, an
    /// input name declared twice on one phase.
    pub fn build(self) -> Result<PhaseScheduler<K, P, C>, PhaseError> {
        phase::check::<P>()?;
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        if let Some(missing) = P::ALL.iter().find(|p| {
            !p.is_final() && !self.workers.contains_key(p) && !self.analyses.contains_key(p)
        }) {
            return Err(PhaseError::MissingWorker(missing.name().into()));
        }
        if self.provider.is_none()
            && let Some(phase) = P::ALL.iter().find(|p| self.analyses.contains_key(p))
        {
            return Err(PhaseError::NoMetricProvider(phase.name().into()));
        }
        Ok(PhaseScheduler {
            kind: K::kind(&()).into_owned(),
            machine: self,
            memory: Mutex::default(),
        })
    }
}

fn numeric_version(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl<K, P, C> PhaseScheduler<K, P, C>
where
    K: Kind,
    P: Phase,
    C: Send + Sync + 'static,
{
    /// The phase of `object` (its status, or what we wrote later), as stored.
    fn stored_phase(&self, uid: &str, object: &K, json: &Value) -> String {
        let memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        match memory.get(uid) {
            Some(remembered) if remembered.version > numeric_version(object.meta()) => {
                remembered.phase.clone()
            }
            _ => json["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// Records that `uid` is in `phase` (gauge, time in phase); returns the time spent in the
    /// phase it leaves, when this process saw it enter.
    fn count(&self, uid: &str, phase: Option<&str>) -> Option<std::time::Duration> {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = memory.entry(uid.to_string()).or_insert(Remembered {
            version: 0,
            phase: String::new(),
            counted: None,
        });
        let before = entry.counted.as_ref().map(|(p, _)| p.clone());
        if before.as_deref() == phase {
            return None;
        }
        let spent = entry.counted.as_ref().map(|(_, since)| since.elapsed());
        entry.counted = phase.map(|p| (p.to_string(), Instant::now()));
        if let Some(metrics) = &self.machine.metrics {
            metrics.moved(&self.kind, before.as_deref(), phase);
        }
        if phase.is_none() {
            memory.remove(uid);
        }
        spent
    }

    fn remember_write(&self, uid: &str, stored: &kube::api::DynamicObject, phase: &str) {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = memory.entry(uid.to_string()).or_insert(Remembered {
            version: 0,
            phase: String::new(),
            counted: None,
        });
        entry.version = numeric_version(&stored.metadata);
        entry.phase = phase.to_string();
    }

    /// Records a transition: the objects gauge, the transition metrics and a `PhaseChanged`
    /// Event (one that cannot be written does not undo the transition).
    async fn moved(&self, uid: &str, object: &K, from: P, to: P, ctx: &Context<C>) {
        let spent = self.count(uid, Some(to.name()));
        if let Some(metrics) = &self.machine.metrics {
            metrics.transition(&self.kind, from.name(), to.name(), spent);
        }
        let note = format!("{} -> {}", from.name(), to.name());
        gates::publish(ctx, object, false, "PhaseChanged", to.name(), note).await;
    }

    /// Runs one phase's worker (if it has one) and ensures its outputs, then measures its
    /// analysis (if it has one and the worker stayed); returns what was decided.
    async fn work(
        &self,
        phase: P,
        object: &Arc<K>,
        json: &Value,
        ctx: &Context<C>,
    ) -> Result<Worked<P>, ReconcileError> {
        let mut worked = match self.machine.workers.get(&phase) {
            Some(_) => self.run_worker(phase, object, json, ctx).await?,
            None => Worked::stay(phase),
        };
        worked.again = self.machine.intervals.get(&phase).copied();
        if worked.next != phase {
            return Ok(worked);
        }
        match self.machine.analyses.get(&phase) {
            Some(declared) => {
                let measured = self.measure(phase, declared, object, json).await?;
                worked.next = measured.next;
                worked.analysis = Some(measured.run);
                worked.paused = measured.paused;
                worked.again = match (measured.again, worked.again) {
                    (Some(measure), Some(own)) => Some(measure.min(own)),
                    (measure, _) => measure,
                };
            }
            None => {
                worked.again = Some(worked.again.unwrap_or(self.machine.default_interval));
            }
        }
        Ok(worked)
    }

    /// Runs one phase's worker and ensures its outputs.
    async fn run_worker(
        &self,
        phase: P,
        object: &Arc<K>,
        json: &Value,
        ctx: &Context<C>,
    ) -> Result<Worked<P>, ReconcileError> {
        let mut inputs = Inputs::new(phase.name());
        for (_, read) in self.machine.inputs.get(&phase).into_iter().flatten() {
            read(Arc::clone(object), ctx.clone())
                .await?
                .add_to(&mut inputs);
        }
        let worker = self.machine.workers.get(&phase).ok_or_else(|| {
            ReconcileError::terminal(format!("no worker for phase {}", phase.name()))
        })?;
        let span = tracing::info_span!(
            "phase.worker",
            kind = %self.kind,
            phase = phase.name(),
            name = object.meta().name.as_deref().unwrap_or("")
        );
        let started = Instant::now();
        let work = Work {
            object: Arc::clone(object),
            phase,
            inputs,
        };
        let transition = worker(work, ctx.clone()).instrument(span).await;
        if let Some(metrics) = &self.machine.metrics {
            metrics.worked(&self.kind, phase.name(), started.elapsed());
        }
        let transition = transition?;
        let lookup = |resource: &kube::api::ApiResource, namespace: Option<&str>, name: &str| {
            ctx.cached(resource, namespace, name)
        };
        let cluster =
            ReconcileCluster::new(ctx.applier(), ctx.client(), object.as_ref()).with_cache(&lookup);
        let mut applied = Vec::new();
        for mut output in transition.outputs {
            kubeapp_components::unchanged::mark(&mut output.object);
            let stored = cluster
                .apply(phase.name(), &output)
                .await
                .map_err(|e| ReconcileError::new(format!("ensuring {}: {e}", output.describe())))?;
            applied.extend(ComponentObject::of(phase.name(), &output, &stored));
        }
        let outputs = if self.machine.prune {
            let previous: Vec<ComponentObject> =
                serde_json::from_value(json["status"]["outputs"].clone()).unwrap_or_default();
            let same = |a: &ComponentObject, b: &ComponentObject| {
                (&a.api_version, &a.kind, &a.namespace, &a.name)
                    == (&b.api_version, &b.kind, &b.namespace, &b.name)
            };
            for stale in previous
                .iter()
                .filter(|p| !applied.iter().any(|a| same(a, p)))
            {
                cluster
                    .delete(&stale.component, &stale.to_rendered())
                    .await
                    .map_err(|e| {
                        ReconcileError::new(format!("pruning {}/{}: {e}", stale.kind, stale.name))
                    })?;
            }
            Some(applied)
        } else {
            None
        };
        Ok(Worked {
            details: transition.details,
            outputs,
            ..Worked::stay(transition.next)
        })
    }
}

/// What one phase's work decided.
struct Worked<P> {
    next: P,
    details: Option<Value>,
    outputs: Option<Vec<ComponentObject>>,
    analysis: Option<AnalysisStatus>,
    paused: Option<kubeapp_operator::apply::conditions::NewCondition>,
    /// When to work the phase again if it stays (`None`: not until something changes).
    again: Option<Duration>,
}

impl<P> Worked<P> {
    fn stay(next: P) -> Self {
        Self {
            next,
            details: None,
            outputs: None,
            analysis: None,
            paused: None,
            again: None,
        }
    }
}

impl<K, P, C> Reconciler<K, C> for PhaseScheduler<K, P, C>
where
    K: Kind,
    P: Phase,
    C: Send + Sync + 'static,
{
    async fn reconcile(
        &self,
        request: ReconcileRequest<K>,
        ctx: &Context<C>,
    ) -> Result<ReconcileResult, ReconcileError> {
        let mut object = Arc::clone(&request.object);
        let uid = object.meta().uid.clone().unwrap_or_default();
        if request.action == ReconcileAction::Deleted {
            self.count(&uid, None);
            if let Some(hook) = &self.machine.finalizer {
                hook(Arc::clone(&object), ctx.clone()).await?;
            }
            return Ok(ReconcileResult::done());
        }
        if object.meta().deletion_timestamp.is_some() {
            return Ok(ReconcileResult::done());
        }
        let mut json = serde_json::to_value(object.as_ref()).map_err(ReconcileError::new)?;
        if let Some(value) = gates::annotation(object.as_ref()) {
            (object, json) = self.apply_gate(&uid, &value, object, json, ctx).await?;
        }
        for _ in 0..MAX_STEPS {
            let stored = self.stored_phase(&uid, &object, &json);
            let phase = if stored.is_empty() {
                P::INITIAL
            } else if let Some(phase) = P::parse(&stored) {
                phase
            } else {
                let known: Vec<&str> = P::ALL.iter().map(Phase::name).collect();
                let generation = object.meta().generation;
                if let Some(body) =
                    status::unknown_phase(&json["status"], &stored, &known, generation)
                {
                    status::apply(object.as_ref(), body, ctx).await?;
                }
                return Err(ReconcileError::terminal(format!(
                    "status.phase {stored:?} is not a phase of {} (one of: {})",
                    self.kind,
                    known.join(", ")
                )));
            };
            self.count(&uid, Some(phase.name()));
            if phase.is_final() || gates::is_paused(&json) {
                return Ok(ReconcileResult::done());
            }
            let worked = self.work(phase, &object, &json, ctx).await?;
            let next = worked.next;
            let inconclusive = worked.paused.as_ref().map(|p| p.message.clone());
            let paused = worked
                .paused
                .as_ref()
                .map_or_else(|| gates::is_paused(&json), gates::says_paused);
            let body = status::write(
                &json["status"],
                next.name(),
                object.meta().generation,
                worked.details.as_ref(),
                worked.outputs.as_deref(),
                Extra {
                    analysis: worked.analysis.as_ref(),
                    paused: worked.paused,
                    ready: status::holds_conditions(&json).then(|| status::ready(next, paused)),
                },
            );
            if let Some(body) = body {
                let written = status::apply(object.as_ref(), body, ctx).await?;
                self.remember_write(&uid, &written, next.name());
                json = serde_json::to_value(&written).map_err(ReconcileError::new)?;
                object = Arc::new(serde_json::from_value(json.clone()).map_err(|e| {
                    ReconcileError::new(format!("reading back the status write: {e}"))
                })?);
            }
            if next == phase {
                if let Some(why) = inconclusive {
                    let name = object.meta().name.as_deref().unwrap_or("");
                    tracing::warn!(kind = %self.kind, %name, %why, "paused: analysis inconclusive");
                    gates::publish(
                        ctx,
                        object.as_ref(),
                        true,
                        "AnalysisInconclusive",
                        phase.name(),
                        why,
                    )
                    .await;
                }
                return Ok(match worked.again {
                    Some(again) => ReconcileResult::requeue_after(again),
                    None => ReconcileResult::done(),
                });
            }
            self.moved(&uid, object.as_ref(), phase, next, ctx).await;
        }
        Ok(ReconcileResult::requeue_after(std::time::Duration::ZERO))
    }
}

#[cfg(test)]
mod tests;
