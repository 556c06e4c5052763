//! The canary's phases and their workers.
//!
//! Every worker is idempotent (it may run twice for one phase: the operator may stop after
//! applying the outputs and before recording the next phase): it renders the complete desired
//! outputs of its phase and decides from the object and the inputs alone.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kubeapp::components::Readiness;
use kubeapp::phases::{InputKey, Phase, PhaseMachine, Transition};
use kubeapp::prelude::*;
use serde_json::{Value, json};

use crate::Canary;

/// Waiting's input: the primary Deployment (the stable image), from the owned cache.
const PRIMARY: InputKey<Option<Arc<Deployment>>> = InputKey::new("primary");
/// Waiting's input: the canary Deployment (the new image), from the owned cache.
const CANARY: InputKey<Option<Arc<Deployment>>> = InputKey::new("canary");

/// Where a canary rollout is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Deploy the primary (stable image) and the canary (new image), 10 % of traffic to it.
    Initializing,
    /// Wait for both Deployments (primary and canary) to be available; roll back when the
    /// canary's rollout failed (`Progressing=False`, e.g. `ProgressDeadlineExceeded`: its pods
    /// never became ready).
    Waiting,
    /// Keep both tracks while the canary's analysis (`spec.analysis`) is measured.
    Evaluating,
    /// Move the primary to the new image, all traffic to it.
    Promoting,
    /// All traffic back to the primary, canary scaled to zero.
    RollingBack,
    /// Promoted (final).
    Succeeded,
    /// Rolled back (final).
    Failed,
}

impl Phase for Step {
    const ALL: &'static [Self] = &[
        Step::Initializing,
        Step::Waiting,
        Step::Evaluating,
        Step::Promoting,
        Step::RollingBack,
        Step::Succeeded,
        Step::Failed,
    ];
    const INITIAL: Self = Step::Initializing;

    fn name(&self) -> &'static str {
        match self {
            Step::Initializing => "Initializing",
            Step::Waiting => "Waiting",
            Step::Evaluating => "Evaluating",
            Step::Promoting => "Promoting",
            Step::RollingBack => "RollingBack",
            Step::Succeeded => "Succeeded",
            Step::Failed => "Failed",
        }
    }

    fn is_final(&self) -> bool {
        matches!(self, Step::Succeeded | Step::Failed)
    }

    fn is_failure(&self) -> bool {
        *self == Step::Failed
    }
}

/// A Deployment `name` running `image` with `replicas`, labelled for the canary.
fn deployment(canary: &Canary, name: &str, image: &str, replicas: i32) -> Value {
    let app = canary.name_any();
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": canary.namespace(),
                     "labels": {"app.kubernetes.io/managed-by": "canary-operator"}},
        "spec": {"replicas": replicas,
                 "selector": {"matchLabels": {"app": app, "track": name}},
                 "template": {"metadata": {"labels": {"app": app, "track": name}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

/// The traffic split, as the ConfigMap a mesh or ingress controller would read.
fn weights(canary: &Canary, canary_weight: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{}-traffic", canary.name_any()), "namespace": canary.namespace(),
                     "labels": {"app.kubernetes.io/managed-by": "canary-operator"}},
        "data": {"primary": (100 - canary_weight).to_string(), "canary": canary_weight.to_string()}
    })
}

fn primary_name(canary: &Canary) -> String {
    format!("{}-primary", canary.name_any())
}

fn canary_name(canary: &Canary) -> String {
    format!("{}-canary", canary.name_any())
}

/// The outputs while the canary is tried: both Deployments, 10 % to the canary.
fn trial(canary: &Canary) -> Vec<Value> {
    vec![
        deployment(canary, &primary_name(canary), &canary.spec.stable_image, 1),
        deployment(canary, &canary_name(canary), &canary.spec.image, 1),
        weights(canary, 10),
    ]
}

/// The canary's phase machine (its analyses are measured by the provider the caller adds).
pub fn machine() -> PhaseMachine<Canary, Step> {
    PhaseMachine::<Canary, Step>::new()
        .worker(Step::Initializing, |work, _ctx| async move {
            Ok(Transition::to(Step::Waiting).outputs(trial(&work.object)))
        })
        .input_named(Step::Waiting, PRIMARY, primary_name)
        .input_named(Step::Waiting, CANARY, canary_name)
        .worker(Step::Waiting, |work, _ctx| async move {
            let primary = work.inputs.get(PRIMARY)?.as_deref().map(Readiness::of);
            let canary = work.inputs.get(CANARY)?.as_deref().map(Readiness::of);
            if let Some(Readiness::Failed(why)) = canary {
                return Ok(Transition::to(Step::RollingBack)
                    .outputs(trial(&work.object))
                    .details(json!({"rolloutFailed": why})));
            }
            // Both tracks serve before their traffic is compared.
            let primary = matches!(primary, Some(Readiness::Ready));
            let canary = matches!(canary, Some(Readiness::Ready));
            let next = if primary && canary {
                Step::Evaluating
            } else {
                Step::Waiting
            };
            let details = json!({"primaryAvailable": primary, "canaryAvailable": canary});
            Ok(Transition::to(next)
                .outputs(trial(&work.object))
                .details(details))
        })
        .interval(Step::Waiting, Duration::from_secs(2))
        // The trial's outputs stay ensured while the analysis decides.
        .worker(Step::Evaluating, |work, _ctx| async move {
            Ok(Transition::to(Step::Evaluating).outputs(trial(&work.object)))
        })
        .analysis(
            Step::Evaluating,
            |canary: &Canary| canary.spec.analysis.clone(),
            Step::Promoting,
            Step::RollingBack,
        )
        // `abort` before the analysis (e.g. while Waiting) rolls back too.
        .abort_to(Step::RollingBack)
        .worker(Step::Promoting, |work, _ctx| async move {
            let canary = &work.object;
            let outputs = vec![
                deployment(canary, &primary_name(canary), &canary.spec.image, 1),
                weights(canary, 0),
            ];
            Ok(Transition::to(Step::Succeeded).outputs(outputs))
        })
        .worker(Step::RollingBack, |work, _ctx| async move {
            let canary = &work.object;
            let outputs = vec![
                weights(canary, 0),
                deployment(canary, &canary_name(canary), &canary.spec.image, 0),
            ];
            Ok(Transition::to(Step::Failed).outputs(outputs))
        })
        .on_delete(|canary: Arc<Canary>, _ctx| async move {
            // The outputs carry owner references: the garbage collector deletes them.
            tracing::info!(canary = %canary.name_any(), "canary finalized");
            Ok(())
        })
}
