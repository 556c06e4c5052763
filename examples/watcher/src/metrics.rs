//! The example's own Prometheus metric, `probe_lifecycle_events_total{step}`.
//!
//! It is a [`MetricSet`]: the app takes it from the Runner's registry
//! (`context.metrics.set::<StepMetrics>()?`, in `main`), which creates it once under the
//! registry's prefix (`--metrics-prefix`), so `/metrics` shows it next to the SDK's controller
//! metrics. Every step's series exists from the
//! start (at 0), so a dashboard or an alert sees `delete` before the first delete.

use kubeapp::operator::metrics::MetricSet;
use prometheus::core::Collector;
use prometheus::{IntCounterVec, Opts};

use crate::lifecycle::Step;

/// The metric's name.
pub const STEPS_METRIC: &str = "probe_lifecycle_events_total";

/// Counts the lifecycle steps the watcher recorded, by step.
#[derive(Clone, Debug)]
pub struct StepMetrics {
    steps: IntCounterVec,
}

/// A fresh counter with every step at 0, named under the registry's prefix.
impl MetricSet for StepMetrics {
    type Error = prometheus::Error;

    fn create(prefix: Option<&str>) -> Result<Self, prometheus::Error> {
        let steps = IntCounterVec::new(
            Opts::new(
                STEPS_METRIC,
                "Lifecycle steps of Probes the watcher recorded as Events, by step.",
            )
            .namespace(prefix.unwrap_or("")),
            &["step"],
        )?;
        for step in Step::ALL {
            steps.with_label_values(&[step.label()]);
        }
        Ok(Self { steps })
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![Box::new(self.steps.clone())]
    }
}

impl StepMetrics {
    /// Counts one recorded `step`.
    pub fn record(&self, step: Step) {
        self.steps.with_label_values(&[step.label()]).inc();
    }
}

#[cfg(test)]
mod tests {
    use kubeapp::operator::MetricsRegistry;
    use prometheus::{Encoder, TextEncoder};

    use super::*;

    #[test]
    fn every_step_is_exported_and_counted() {
        let registry = MetricsRegistry::new(None).expect("registry");
        let metrics = registry.set::<StepMetrics>().expect("metric");
        let registry = registry.registry();
        metrics.record(Step::Add);
        metrics.record(Step::Add);
        metrics.record(Step::Delete);
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .expect("encodes");
        let text = String::from_utf8(text).expect("UTF-8");
        for line in [
            "probe_lifecycle_events_total{step=\"add\"} 2",
            "probe_lifecycle_events_total{step=\"update\"} 0",
            "probe_lifecycle_events_total{step=\"delete\"} 1",
            "probe_lifecycle_events_total{step=\"sync\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
