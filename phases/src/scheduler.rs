//! [`PhaseScheduler`]: a built [`PhaseMachine`](crate::PhaseMachine) as the reconciler of its
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use kubeapp_components::{Cluster, ComponentObject, ReconcileCluster};
use kubeapp_operator::{
    Context, Kind, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler,
};
use serde_json::Value;
use tracing::Instrument;

use crate::inputs::Inputs;
use crate::machine::PhaseMachine;
use crate::phase::{self, Phase, PhaseError};
use crate::status;
use crate::worker::Work;

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
    /// See [`PhaseError`]: an inconsistent `Phase` implementation, a worker on a final phase, a
    /// non-final phase without a worker, an input name declared twice on one phase.
    pub fn build(self) -> Result<PhaseScheduler<K, P, C>, PhaseError> {
        phase::check::<P>()?;
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        if let Some(missing) = P::ALL
            .iter()
            .find(|p| !p.is_final() && !self.workers.contains_key(p))
        {
            return Err(PhaseError::MissingWorker(missing.name().into()));
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

    /// Runs one phase's worker and ensures its outputs; returns the transition.
    async fn work(
        &self,
        phase: P,
        object: &Arc<K>,
        json: &Value,
        ctx: &Context<C>,
    ) -> Result<(P, Option<Value>, Option<Vec<ComponentObject>>), ReconcileError> {
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
        Ok((transition.next, transition.details, outputs))
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
            if phase.is_final() {
                return Ok(ReconcileResult::done());
            }
            let (next, details, outputs) = self.work(phase, &object, &json, ctx).await?;
            let body = status::after_work(
                &json["status"],
                next.name(),
                object.meta().generation,
                details.as_ref(),
                outputs.as_deref(),
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
                let interval = self
                    .machine
                    .intervals
                    .get(&phase)
                    .copied()
                    .unwrap_or(self.machine.default_interval);
                return Ok(ReconcileResult::requeue_after(interval));
            }
            let spent = self.count(&uid, Some(next.name()));
            if let Some(metrics) = &self.machine.metrics {
                metrics.transition(&self.kind, phase.name(), next.name(), spent);
            }
            let note = format!("{} -> {}", phase.name(), next.name());
            // An Event that cannot be written must not undo the transition.
            if let Err(error) = ctx
                .recorder()
                .publish_action(object.as_ref(), false, "PhaseChanged", next.name(), note)
                .await
            {
                tracing::warn!(%error, "the PhaseChanged Event was not written");
            }
        }
        Ok(ReconcileResult::requeue_after(std::time::Duration::ZERO))
    }
}

#[cfg(test)]
mod tests;
