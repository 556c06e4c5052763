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
//! The collectors are created by [`ComponentMetrics::new`] and belong to whoever registers them
//! (a simple App's `metric_collector`, or a registry of the caller's): there is no process-wide
//! registry.

use std::time::Duration;

use kubeapp_operator::metrics::LATENCY_BUCKETS;
use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

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

impl ComponentMetrics {
    /// Fresh collectors, each name prefixed with `{prefix}_` when a prefix is given.
    ///
    /// # Errors
    ///
    /// When `prefix` is not a valid metric name prefix.
    pub fn new(prefix: Option<&str>) -> Result<Self, prometheus::Error> {
        let prefix = prefix.unwrap_or("");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help).namespace(prefix), labels)
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help)
                    .namespace(prefix)
                    .buckets(LATENCY_BUCKETS.to_vec()),
                labels,
            )
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

    /// Every collector, for a registry (or a simple App's `metric_collector`).
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.deploy_total.clone()),
            Box::new(self.deploy_duration.clone()),
            Box::new(self.verify_total.clone()),
            Box::new(self.phase_duration.clone()),
            Box::new(self.pruned.clone()),
        ]
    }

    /// Registers every collector into `registry`.
    ///
    /// # Errors
    ///
    /// When `registry` refuses one (the same names registered twice, say).
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        self.collectors()
            .into_iter()
            .try_for_each(|collector| registry.register(collector))
    }

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

/// The set as one collector (for a simple App's `metric_collector`, which takes one).
impl Collector for ComponentMetrics {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut desc = self.deploy_total.desc();
        desc.extend(self.deploy_duration.desc());
        desc.extend(self.verify_total.desc());
        desc.extend(self.phase_duration.desc());
        desc.extend(self.pruned.desc());
        desc
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut families = self.deploy_total.collect();
        families.extend(self.deploy_duration.collect());
        families.extend(self.verify_total.collect());
        families.extend(self.phase_duration.collect());
        families.extend(self.pruned.collect());
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sets_are_independent_and_register_under_the_prefix() {
        let first = ComponentMetrics::new(Some("shop")).expect("valid prefix");
        let second = ComponentMetrics::new(Some("shop")).expect("valid prefix");
        first.deployed("WebApp", "web", &Outcome::Disabled, Duration::ZERO);
        let registry = Registry::new();
        first.register(&registry).expect("registers");
        let as_one = Registry::new();
        as_one
            .register(Box::new(first.clone()))
            .expect("the set registers as one collector");
        assert_eq!(as_one.gather().len(), registry.gather().len());
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|family| family.name().to_string())
            .collect();
        assert!(names.contains(&"shop_component_deploy_total".to_string()));
        assert_eq!(
            second
                .deploy_total
                .with_label_values(&["WebApp", "web", "disabled"])
                .get(),
            0,
            "no shared process-wide state"
        );
        assert!(ComponentMetrics::new(Some("not a prefix")).is_err());
    }
}
