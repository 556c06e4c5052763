//! The example's own Prometheus metric, `probe_lifecycle_events_total{step}`.
//!
//! It is handed to the Runner through the app's metric collectors ([`crate::app::probe_app`]), so
//! `/metrics` shows it next to the SDK's controller metrics. Every step's series exists from the
//! start (at 0), so a dashboard or an alert sees `delete` before the first delete.

use prometheus::{IntCounterVec, Opts};

use crate::lifecycle::Step;

/// The metric's name.
pub const STEPS_METRIC: &str = "probe_lifecycle_events_total";

/// Counts the lifecycle steps the watcher recorded, by step.
#[derive(Clone, Debug)]
pub struct StepMetrics {
    steps: IntCounterVec,
}

impl StepMetrics {
    /// A fresh counter with every step at 0, registered nowhere yet.
    ///
    /// # Errors
    ///
    /// Only if the metric's name or labels were invalid (a programming mistake; the unit tests
    /// build it).
    pub fn new() -> Result<Self, prometheus::Error> {
        let steps = IntCounterVec::new(
            Opts::new(
                STEPS_METRIC,
                "Lifecycle steps of Probes the watcher recorded as Events, by step.",
            ),
            &["step"],
        )?;
        for step in Step::ALL {
            steps.with_label_values(&[step.label()]);
        }
        Ok(Self { steps })
    }

    /// Counts one recorded `step`.
    pub fn record(&self, step: Step) {
        self.steps.with_label_values(&[step.label()]).inc();
    }

    /// The counter itself (a handle to shared state), for the app's collectors.
    pub fn counter(&self) -> IntCounterVec {
        self.steps.clone()
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{Encoder, Registry, TextEncoder};

    use super::*;

    #[test]
    fn every_step_is_exported_and_counted() {
        let metrics = StepMetrics::new().expect("metric");
        let registry = Registry::new();
        registry
            .register(Box::new(metrics.counter()))
            .expect("registers");
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
