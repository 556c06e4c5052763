//! The collectors of finalizer patches.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::metrics::MetricsError;

/// Counters of the opinionated wrappers' finalizer patches.
///
/// | name | type | labels |
/// |---|---|---|
/// | `opinionated_finalizer_patches_total` | counter, patch requests sent | `kind`, `operation` (add, remove, replace), `result` (success, conflict, error) |
/// | `opinionated_finalizer_conflicts_total` | counter, patches refused with 409 Conflict | `kind` |
/// | `opinionated_undecodable_objects_total` | counter, undecodable objects met (see [`opinionated`](crate::opinionated#objects-that-do-not-decode)) | `kind`, `outcome` (handled, released, held, ignored, gone) |
///
/// Like [`ControllerMetrics`](crate::ControllerMetrics), one set of collectors exists per
/// namespace prefix in the process, and registering it into a registry again is a no-op.
#[derive(Clone, Debug)]
pub struct FinalizerMetrics {
    pub(crate) patches: IntCounterVec,
    pub(crate) conflicts: IntCounterVec,
    pub(crate) undecodable: IntCounterVec,
}

impl FinalizerMetrics {
    /// Fresh collectors registered nowhere.
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

    /// The process-wide collectors for `namespace`, registered into `registry`; registering
    /// twice is harmless.
    pub fn register(registry: &Registry, namespace: Option<&str>) -> Result<Self, MetricsError> {
        static SHARED: OnceLock<Mutex<HashMap<String, FinalizerMetrics>>> = OnceLock::new();
        let metrics = {
            let mut shared = SHARED
                .get_or_init(Mutex::default)
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let key = namespace.unwrap_or("").to_string();
            match shared.get(&key) {
                Some(metrics) => metrics.clone(),
                None => {
                    let metrics = Self::unregistered(namespace)?;
                    shared.insert(key, metrics.clone());
                    metrics
                }
            }
        };
        let collectors: [(&str, Box<dyn prometheus::core::Collector>); 3] = [
            (
                "opinionated_finalizer_patches_total",
                Box::new(metrics.patches.clone()),
            ),
            (
                "opinionated_finalizer_conflicts_total",
                Box::new(metrics.conflicts.clone()),
            ),
            (
                "opinionated_undecodable_objects_total",
                Box::new(metrics.undecodable.clone()),
            ),
        ];
        for (name, collector) in collectors {
            match registry.register(collector) {
                Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
                Err(source) => {
                    return Err(MetricsError {
                        name: name.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(metrics)
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

/// Collectors registered nowhere, for wrappers configured without metrics.
#[allow(clippy::expect_used)] // Fixed, valid metric names and no prefix: construction cannot fail.
pub(crate) fn default_metrics() -> FinalizerMetrics {
    static DEFAULT: OnceLock<FinalizerMetrics> = OnceLock::new();
    DEFAULT
        .get_or_init(|| FinalizerMetrics::unregistered(None).expect("valid metric names"))
        .clone()
}
