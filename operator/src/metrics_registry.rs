//! [`MetricsRegistry`]: a Prometheus registry, the one prefix of the kubeapp metrics in it, and the
//! kubeapp collector sets registered into it.
//!
//! # One handle per Runner, no process globals
//!
//! A [`Runner`](crate::Runner) owns one `MetricsRegistry` (what its `/metrics` serves), made with
//! the prefix of [`RunnerConfig::metrics_prefix`](crate::RunnerConfig::metrics_prefix). The handle
//! creates each kubeapp collector set once, with every name prefixed `{prefix}_`, and registers it
//! into its registry:
//!
//! - [`controller`](MetricsRegistry::controller): informers and controllers
//!   ([`ControllerMetrics`]);
//! - [`client`](MetricsRegistry::client): Kubernetes client requests ([`ClientMetrics`]);
//! - [`finalizer`](MetricsRegistry::finalizer): the opinionated wrappers' finalizer patches
//!   ([`FinalizerMetrics`]).
//!
//! A set is registered the first time it is handed out, so a registry only serves the kubeapp
//! names that something counts into: an app given no handle can still hand its private
//! collectors to a Runner (`App::metric_collectors`) without a clash with unused ones. (An app
//! given no handle next to apps given the Runner's would clash: give every app of a Runner its
//! handle.) It hands out clones of those sets, which count into the same series. So everything given one
//! handle (every app of a Runner, through `AppConfig::metrics` of `kubeapp-simple` or
//! [`ControllerConfig::metrics`](crate::ControllerConfig::metrics)) sums into one series per kind,
//! and two handles (two Runners, two tests in one process) share nothing. Clones of a handle share
//! everything (an `Arc` inside).
//!
//! Collectors made without a handle (the `unregistered` constructors, and the defaults of a
//! controller, an informer registry, an opinionated wrapper or
//! [`default_client`](crate::runner::default_client) given no metrics) belong to what made them
//! and are exported nowhere.
//!
//! ```
//! use kubeapp_operator::MetricsRegistry;
//!
//! let metrics = MetricsRegistry::new(Some("shop"))?;
//! let controller = metrics.controller(); // for ControllerConfig::metrics
//! # drop(controller);
//! let text = prometheus::TextEncoder::new().encode_to_string(&metrics.registry().gather())?;
//! # drop(text);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::{Arc, Once};

use kubeapp_sdk::error::ErrorChain;
use prometheus::Registry;

use crate::client_metrics::ClientMetrics;
use crate::metric_registration::MetricsError;
use crate::metrics::ControllerMetrics;
use crate::opinionated::FinalizerMetrics;

/// Why a [`MetricsRegistry`] could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MetricsRegistryError {
    /// The prefix is not the start of a valid Prometheus metric name.
    #[error(
        "invalid metrics prefix {prefix:?}: use letters, digits, `_` and `:`, not starting with a digit"
    )]
    InvalidPrefix {
        /// The rejected prefix.
        prefix: String,
    },
    /// A collector could not be created or registered.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// A registry with the kubeapp collectors in it; see the [module docs](self).
#[derive(Clone)]
pub struct MetricsRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    prefix: Option<String>,
    controller: ControllerMetrics,
    client: ClientMetrics,
    finalizer: FinalizerMetrics,
    /// Whether each set was registered yet: controller, client, finalizer.
    registered: [Once; 3],
}

impl MetricsRegistry {
    /// A fresh registry holding the kubeapp collectors, their names prefixed `{prefix}_` when a
    /// prefix is given.
    ///
    /// # Errors
    ///
    /// [`MetricsRegistryError::InvalidPrefix`] when `prefix` cannot start a metric name.
    pub fn new(prefix: Option<&str>) -> Result<Self, MetricsRegistryError> {
        Self::with_registry(Registry::new(), prefix)
    }

    /// As [`new`](Self::new), registering into `registry` (one of the caller's, which may hold
    /// other collectors). A collector already registered there under one of the kubeapp names
    /// is kept, and ours under that name is not exported.
    ///
    /// # Errors
    ///
    /// [`MetricsRegistryError::InvalidPrefix`], or [`MetricsRegistryError::Metrics`] when a
    /// collector cannot be created.
    pub fn with_registry(
        registry: Registry,
        prefix: Option<&str>,
    ) -> Result<Self, MetricsRegistryError> {
        if let Some(prefix) = prefix
            && !valid_metric_prefix(prefix)
        {
            return Err(MetricsRegistryError::InvalidPrefix {
                prefix: prefix.to_string(),
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                controller: ControllerMetrics::unregistered(prefix)?,
                client: ClientMetrics::unregistered(prefix)?,
                finalizer: FinalizerMetrics::unregistered(prefix)?,
                registry,
                prefix: prefix.map(str::to_string),
                registered: [Once::new(), Once::new(), Once::new()],
            }),
        })
    }

    /// Registers a set the first time it is handed out; a refusal (a same-named metric with
    /// other labels registered before) is logged: the counts still work, unexported.
    fn register_once(
        &self,
        index: usize,
        set: &str,
        register: impl FnOnce(&Registry) -> Result<(), MetricsError>,
    ) {
        self.inner.registered[index].call_once(|| {
            if let Err(error) = register(&self.inner.registry) {
                tracing::warn!(set, error = %ErrorChain(&error), "kubeapp metrics not exported");
            }
        });
    }

    /// The Prometheus registry (what a Runner's `/metrics` serves); register collectors of your
    /// own into it.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The prefix of the kubeapp metric names, if any.
    pub fn prefix(&self) -> Option<&str> {
        self.inner.prefix.as_deref()
    }

    /// The informer and controller collectors (for
    /// [`ControllerConfig::metrics`](crate::ControllerConfig::metrics)).
    pub fn controller(&self) -> ControllerMetrics {
        self.register_once(0, "controller", |registry| {
            self.inner.controller.register_into(registry)
        });
        self.inner.controller.clone()
    }

    /// The Kubernetes client collectors (for
    /// [`instrumented_client`](crate::client_metrics::instrumented_client)).
    pub fn client(&self) -> ClientMetrics {
        self.register_once(1, "client", |registry| {
            self.inner.client.register_into(registry)
        });
        self.inner.client.clone()
    }

    /// The finalizer patch collectors (for
    /// [`OpinionatedOptions::metrics`](crate::OpinionatedOptions::metrics)).
    pub fn finalizer(&self) -> FinalizerMetrics {
        self.register_once(2, "finalizer", |registry| {
            self.inner.finalizer.register_into(registry)
        });
        self.inner.finalizer.clone()
    }
}

impl fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsRegistry")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// Whether `prefix` is a valid Prometheus metric name (it becomes the start of every name).
fn valid_metric_prefix(prefix: &str) -> bool {
    let mut chars = prefix.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::ReconcileAction;

    fn value(registry: &Registry, name: &str) -> f64 {
        registry
            .gather()
            .iter()
            .find(|family| family.name() == name)
            .map_or(0.0, |family| {
                family
                    .get_metric()
                    .iter()
                    .map(|metric| metric.get_counter().get_value())
                    .sum()
            })
    }

    #[test]
    fn two_registries_in_one_process_do_not_share_counts() {
        let first = MetricsRegistry::new(Some("apart")).expect("first");
        let second = MetricsRegistry::new(Some("apart")).expect("second");
        first
            .controller()
            .for_kind("k")
            .action(ReconcileAction::Created)
            .events_total
            .inc();
        first.finalizer().patch_counter("k", "add", "success").inc();
        assert_eq!(value(first.registry(), "apart_informer_events_total"), 1.0);
        assert_eq!(
            value(
                first.registry(),
                "apart_opinionated_finalizer_patches_total"
            ),
            1.0
        );
        assert_eq!(value(second.registry(), "apart_informer_events_total"), 0.0);
        assert_eq!(
            value(
                second.registry(),
                "apart_opinionated_finalizer_patches_total"
            ),
            0.0
        );
        assert_eq!(second.finalizer().patches("k", "add", "success"), 0);
    }

    #[test]
    fn clones_of_a_handle_count_into_one_series() {
        let metrics = MetricsRegistry::new(Some("shared")).expect("metrics");
        let (one, two) = (metrics.clone(), metrics.clone());
        for handle in [&one, &two] {
            handle
                .controller()
                .for_kind("k")
                .action(ReconcileAction::Created)
                .events_total
                .inc();
        }
        let families = metrics.registry().gather();
        let events = families
            .iter()
            .find(|family| family.name() == "shared_informer_events_total")
            .expect("registered");
        let created: Vec<f64> = events
            .get_metric()
            .iter()
            .filter(|metric| {
                metric
                    .get_label()
                    .iter()
                    .any(|label| label.name() == "event_type" && label.value() == "CREATE")
            })
            .map(|metric| metric.get_counter().get_value())
            .collect();
        assert_eq!(created, [2.0], "one CREATE series, counted by both clones");
    }

    #[test]
    fn every_kubeapp_name_takes_the_prefix() {
        let metrics = MetricsRegistry::new(Some("pre")).expect("metrics");
        metrics.controller().for_kind("k").watch_events.inc();
        metrics
            .finalizer()
            .patch_counter("k", "add", "success")
            .inc();
        metrics.client().requests("200", "get", "pods", "");
        let families = metrics.registry().gather();
        assert!(!families.is_empty());
        for family in &families {
            assert!(family.name().starts_with("pre_"), "{}", family.name());
        }
        let unprefixed = MetricsRegistry::new(None).expect("metrics");
        unprefixed.controller().for_kind("k").watch_events.inc();
        assert_eq!(
            value(unprefixed.registry(), "kubernetes_watch_events_total"),
            1.0
        );
    }

    #[test]
    fn an_invalid_prefix_is_refused() {
        for prefix in ["", "9lives", "with-dash", "sp ace"] {
            let err = MetricsRegistry::new(Some(prefix)).expect_err(prefix);
            assert!(
                matches!(&err, MetricsRegistryError::InvalidPrefix { prefix: p } if p == prefix),
                "{err:?}"
            );
        }
        assert!(MetricsRegistry::new(Some("my_app:x")).is_ok());
    }
}
