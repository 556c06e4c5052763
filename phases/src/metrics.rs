//! Prometheus metrics of phase machines, named like the controller's (optional prefix, the same
//! latency buckets):
//!
//! | name | type | labels |
//! |---|---|---|
//! | `phase_transitions_total` | counter | `kind`, `from`, `to` |
//! | `phase_duration_seconds` | histogram, time an object spent in a phase (from when this process saw it enter) | `kind`, `phase` |
//! | `phase_objects` | gauge, objects currently in each phase (as this process last saw them) | `kind`, `phase` |
//! | `phase_worker_duration_seconds` | histogram, one worker call | `kind`, `phase` |
//!
//! The set is a [`MetricSet`]: ask the Runner's registry for it, `metrics.set::<PhaseMetrics>()`
//! (in an operator's app builder, `context.metrics.set()`), and it is created once per registry,
//! under the registry's prefix, and served with the Runner's `/metrics`. No process-wide
//! registry.

use std::time::Duration;

use kubeapp_operator::metrics::{LATENCY_BUCKETS, MetricSet, MetricsError};
use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

/// The collectors; see the [module docs](self). Clones share their counts.
#[derive(Clone, Debug)]
pub struct PhaseMetrics {
    transitions: IntCounterVec,
    duration: HistogramVec,
    objects: IntGaugeVec,
    worker: HistogramVec,
}

/// Made once per registry by `MetricsRegistry::set`.
impl MetricSet for PhaseMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        let prefix = prefix.unwrap_or("");
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help)
                    .namespace(prefix)
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &["kind", "phase"],
            )
            .map_err(MetricsError::named(name))
        };
        Ok(Self {
            transitions: IntCounterVec::new(
                Opts::new("phase_transitions_total", "Phase transitions.").namespace(prefix),
                &["kind", "from", "to"],
            )
            .map_err(MetricsError::named("phase_transitions_total"))?,
            duration: histogram("phase_duration_seconds", "Time an object spent in a phase.")?,
            objects: IntGaugeVec::new(
                Opts::new("phase_objects", "Objects in each phase.").namespace(prefix),
                &["kind", "phase"],
            )
            .map_err(MetricsError::named("phase_objects"))?,
            worker: histogram("phase_worker_duration_seconds", "Time of one worker call.")?,
        })
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.transitions.clone()),
            Box::new(self.duration.clone()),
            Box::new(self.objects.clone()),
            Box::new(self.worker.clone()),
        ]
    }
}

impl PhaseMetrics {
    pub(crate) fn transition(&self, kind: &str, from: &str, to: &str, spent: Option<Duration>) {
        self.transitions.with_label_values(&[kind, from, to]).inc();
        if let Some(spent) = spent {
            self.duration
                .with_label_values(&[kind, from])
                .observe(spent.as_secs_f64());
        }
    }

    pub(crate) fn moved(&self, kind: &str, from: Option<&str>, to: Option<&str>) {
        if let Some(from) = from {
            self.objects.with_label_values(&[kind, from]).dec();
        }
        if let Some(to) = to {
            self.objects.with_label_values(&[kind, to]).inc();
        }
    }

    pub(crate) fn worked(&self, kind: &str, phase: &str, took: Duration) {
        self.worker
            .with_label_values(&[kind, phase])
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeapp_operator::MetricsRegistry;

    #[test]
    fn the_registry_makes_the_set_once_under_its_prefix_with_the_names_and_labels_of_before() {
        let metrics = MetricsRegistry::new(Some("canary")).expect("registry");
        let set = metrics.set::<PhaseMetrics>().expect("set");
        set.transition("Canary", "Waiting", "Evaluating", Some(Duration::ZERO));
        set.moved("Canary", None, Some("Evaluating"));
        metrics.set::<PhaseMetrics>().expect("the same set").worked(
            "Canary",
            "Evaluating",
            Duration::ZERO,
        );
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&metrics.registry().gather())
            .expect("encode");
        for line in [
            "canary_phase_transitions_total{from=\"Waiting\",kind=\"Canary\",to=\"Evaluating\"} 1",
            "canary_phase_duration_seconds_count{kind=\"Canary\",phase=\"Waiting\"} 1",
            "canary_phase_objects{kind=\"Canary\",phase=\"Evaluating\"} 1",
            "canary_phase_worker_duration_seconds_count{kind=\"Canary\",phase=\"Evaluating\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
