//! Prometheus metrics of component runs, named like the controller's
//! ([`kubeapp_operator::metrics`]) and with the same optional prefix and latency buckets:
//!
//! | name | type | labels |
//! |---|---|---|
//! | `component_deploy_total` | counter, deploy outcomes | `kind`, `component`, `outcome` (deployed, disabled, waiting, failed, halted) |
//! | `component_deploy_duration_seconds` | histogram, one component's render and applies | `kind`, `component` |
//! | `component_verify_total` | counter, verify outcomes | `kind`, `component`, `outcome` (ready, not_ready, failed, skipped) |
//! | `component_phase_duration_seconds` | histogram, a whole phase of a run | `kind`, `phase` (deploy, verify, prune) |
//! | `component_pruned_objects_total` | counter, objects pruned | `kind`, `result` (deleted, failed) |
//!
//! The set is a [`MetricSet`]: ask the Runner's registry for it, `metrics.set::<ComponentMetrics>()`
//! (in an operator's app builder, `context.metrics.set()`), and it is created once per registry,
//! under the registry's prefix, and served with the Runner's `/metrics`. There is no
//! process-wide registry.

use std::time::Duration;

use kubeapp_operator::metrics::{LATENCY_BUCKETS, MetricSet, MetricsError};
use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};

use crate::report::{Outcome, Verified};

/// The collectors of component runs; see the [module docs](self). Clones share their counts.
#[derive(Clone, Debug)]
pub struct ComponentMetrics {
    deploy_total: IntCounterVec,
    deploy_duration: HistogramVec,
    verify_total: IntCounterVec,
    phase_duration: HistogramVec,
    pruned: IntCounterVec,
}

/// Made once per registry by `MetricsRegistry::set`.
impl MetricSet for ComponentMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        let prefix = prefix.unwrap_or("");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help).namespace(prefix), labels)
                .map_err(MetricsError::named(name))
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help)
                    .namespace(prefix)
                    .buckets(LATENCY_BUCKETS.to_vec()),
                labels,
            )
            .map_err(MetricsError::named(name))
        };
        Ok(Self {
            deploy_total: counter(
                "component_deploy_total",
                "Component deploy outcomes.",
                &["kind", "component", "outcome"],
            )?,
            deploy_duration: histogram(
                "component_deploy_duration_seconds",
                "Time to render and apply one component.",
                &["kind", "component"],
            )?,
            verify_total: counter(
                "component_verify_total",
                "Component verify outcomes.",
                &["kind", "component", "outcome"],
            )?,
            phase_duration: histogram(
                "component_phase_duration_seconds",
                "Time of one phase of a component run.",
                &["kind", "phase"],
            )?,
            pruned: counter(
                "component_pruned_objects_total",
                "Objects pruned because no component renders them any more.",
                &["kind", "result"],
            )?,
        })
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.deploy_total.clone()),
            Box::new(self.deploy_duration.clone()),
            Box::new(self.verify_total.clone()),
            Box::new(self.phase_duration.clone()),
            Box::new(self.pruned.clone()),
        ]
    }
}

impl ComponentMetrics {
    pub(crate) fn deployed(&self, kind: &str, component: &str, outcome: &Outcome, took: Duration) {
        let outcome = match outcome {
            Outcome::Deployed(_) => "deployed",
            Outcome::Disabled => "disabled",
            Outcome::Waiting(_) => "waiting",
            Outcome::Failed(_) => "failed",
            Outcome::Halted { .. } => "halted",
        };
        self.deploy_total
            .with_label_values(&[kind, component, outcome])
            .inc();
        self.deploy_duration
            .with_label_values(&[kind, component])
            .observe(took.as_secs_f64());
    }

    pub(crate) fn verified(&self, kind: &str, component: &str, verified: &Verified) {
        let outcome = match verified {
            Verified::Ready => "ready",
            Verified::NotReady(_) => "not_ready",
            Verified::Failed(_) => "failed",
            Verified::Skipped => "skipped",
        };
        self.verify_total
            .with_label_values(&[kind, component, outcome])
            .inc();
    }

    pub(crate) fn phase(&self, kind: &str, phase: &str, took: Duration) {
        self.phase_duration
            .with_label_values(&[kind, phase])
            .observe(took.as_secs_f64());
    }

    pub(crate) fn pruned(&self, kind: &str, deleted: usize, failed: usize) {
        if deleted > 0 {
            self.pruned
                .with_label_values(&[kind, "deleted"])
                .inc_by(deleted as u64);
        }
        if failed > 0 {
            self.pruned
                .with_label_values(&[kind, "failed"])
                .inc_by(failed as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeapp_operator::MetricsRegistry;

    #[test]
    fn a_registry_makes_one_set_under_its_prefix_and_two_registries_share_nothing() {
        let first = MetricsRegistry::new(Some("shop")).expect("valid prefix");
        let second = MetricsRegistry::new(Some("shop")).expect("valid prefix");
        let set = first.set::<ComponentMetrics>().expect("registers");
        set.deployed("WebApp", "web", &Outcome::Disabled, Duration::ZERO);
        let again = first.set::<ComponentMetrics>().expect("the same set");
        assert_eq!(
            again
                .deploy_total
                .with_label_values(&["WebApp", "web", "disabled"])
                .get(),
            1,
            "one set per registry"
        );
        let mut names: Vec<String> = first
            .registry()
            .gather()
            .iter()
            .map(|family| family.name().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "shop_component_deploy_duration_seconds",
                "shop_component_deploy_total",
            ],
            "the names of the metrics counted so far"
        );
        assert_eq!(
            second
                .set::<ComponentMetrics>()
                .expect("registers")
                .deploy_total
                .with_label_values(&["WebApp", "web", "disabled"])
                .get(),
            0,
            "no shared process-wide state"
        );
    }
}
