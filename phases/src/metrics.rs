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
//! No process-wide registry: register the set where metrics are served (a simple App's
//! `metric_collector` takes it as one collector).

use std::time::Duration;

use kubeapp_operator::metrics::LATENCY_BUCKETS;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

/// The collectors; see the [module docs](self). Clones share their counts.
#[derive(Clone, Debug)]
pub struct PhaseMetrics {
    transitions: IntCounterVec,
    duration: HistogramVec,
    objects: IntGaugeVec,
    worker: HistogramVec,
}

impl PhaseMetrics {
    /// Fresh collectors, each name prefixed with `{prefix}_` when given.
    ///
    /// # Errors
    ///
    /// When `prefix` is not a valid metric name prefix.
    pub fn new(prefix: Option<&str>) -> Result<Self, prometheus::Error> {
        let prefix = prefix.unwrap_or("");
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help)
                    .namespace(prefix)
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &["kind", "phase"],
            )
        };
        Ok(Self {
            transitions: IntCounterVec::new(
                Opts::new("phase_transitions_total", "Phase transitions.").namespace(prefix),
                &["kind", "from", "to"],
            )?,
            duration: histogram("phase_duration_seconds", "Time an object spent in a phase.")?,
            objects: IntGaugeVec::new(
                Opts::new("phase_objects", "Objects in each phase.").namespace(prefix),
                &["kind", "phase"],
            )?,
            worker: histogram("phase_worker_duration_seconds", "Time of one worker call.")?,
        })
    }

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

impl Collector for PhaseMetrics {
    fn desc(&self) -> Vec<&Desc> {
        let mut desc = self.transitions.desc();
        desc.extend(self.duration.desc());
        desc.extend(self.objects.desc());
        desc.extend(self.worker.desc());
        desc
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.transitions.collect();
        families.extend(self.duration.collect());
        families.extend(self.objects.collect());
        families.extend(self.worker.collect());
        families
    }
}
