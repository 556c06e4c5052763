//! The collectors of finalizer patches.

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::metric_registration::MetricsError;

/// Counters of the opinionated wrappers' finalizer patches.
///
/// | name | type | labels |
/// |---|---|---|
/// | `opinionated_finalizer_patches_total` | counter, patch requests sent | `kind`, `operation` (add, remove, replace), `result` (success, conflict, error) |
/// | `opinionated_finalizer_conflicts_total` | counter, patches refused with 409 Conflict | `kind` |
/// | `opinionated_undecodable_objects_total` | counter, undecodable objects met (see [`opinionated`](crate::opinionated#objects-that-do-not-decode)) | `kind`, `outcome` (handled, released, held, ignored, gone for objects without a decodable state; kept for undecodable states of objects with one) |
///
/// Like [`ControllerMetrics`](crate::ControllerMetrics), a
/// [`MetricsRegistry`](crate::MetricsRegistry) creates one set with its prefix and hands it out
/// ([`MetricsRegistry::finalizer`](crate::MetricsRegistry::finalizer)); there is no process-wide
/// set.
#[derive(Clone, Debug)]
pub struct FinalizerMetrics {
    pub(crate) patches: IntCounterVec,
    pub(crate) conflicts: IntCounterVec,
    pub(crate) undecodable: IntCounterVec,
}

impl FinalizerMetrics {
    /// Fresh collectors registered nowhere, their names prefixed `{namespace}_` when given.
    ///
    /// # Errors
    ///
    /// When `namespace` is not a valid metric name prefix.
    pub fn unregistered(namespace: Option<&str>) -> Result<Self, MetricsError> {
        let ns = namespace.unwrap_or("");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help).namespace(ns), labels).map_err(|source| {
                MetricsError {
                    name: name.to_string(),
                    source,
                }
            })
        };
        Ok(Self {
            patches: counter(
                "opinionated_finalizer_patches_total",
                "Finalizer patch requests of the opinionated wrappers, by operation and result.",
                &["kind", "operation", "result"],
            )?,
            conflicts: counter(
                "opinionated_finalizer_conflicts_total",
                "Finalizer patches refused with 409 Conflict (the object changed meanwhile).",
                &["kind"],
            )?,
            undecodable: counter(
                "opinionated_undecodable_objects_total",
                "Objects that do not decode into the handler's type met by the opinionated wrappers, by outcome.",
                &["kind", "outcome"],
            )?,
        })
    }

    /// All collectors, for a registry of the caller's choosing (an app's
    /// `metric_collectors()`); clones share their counts with `self`.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.patches.clone()),
            Box::new(self.conflicts.clone()),
            Box::new(self.undecodable.clone()),
        ]
    }

    /// Undecodable objects of `kind` met with `outcome` so far.
    pub fn undecodable(&self, kind: &str, outcome: &str) -> u64 {
        self.undecodable.with_label_values(&[kind, outcome]).get()
    }

    /// Patches of `kind` with `result` for `operation` so far.
    pub fn patches(&self, kind: &str, operation: &str, result: &str) -> u64 {
        self.patches
            .with_label_values(&[kind, operation, result])
            .get()
    }

    /// Conflicts met by patches of `kind` so far.
    pub fn conflicts(&self, kind: &str) -> u64 {
        self.conflicts.with_label_values(&[kind]).get()
    }

    pub(crate) fn patch_counter(&self, kind: &str, operation: &str, result: &str) -> IntCounter {
        self.patches.with_label_values(&[kind, operation, result])
    }
}

/// Private collectors registered nowhere, for a wrapper configured without metrics.
#[allow(clippy::expect_used)] // Fixed, valid metric names and no prefix: construction cannot fail.
pub(crate) fn default_metrics() -> FinalizerMetrics {
    FinalizerMetrics::unregistered(None).expect("valid metric names")
}

/// Created by a [`MetricsRegistry`](crate::MetricsRegistry) as its
/// [`finalizer`](crate::MetricsRegistry::finalizer) set.
impl crate::metric_registration::MetricSet for FinalizerMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        Self::unregistered(prefix)
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        Self::collectors(self)
    }
}
