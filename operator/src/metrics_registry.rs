//! [`MetricsRegistry`]: a Prometheus registry, the one prefix of the kubeapp metrics in it, and the
//! kubeapp collector sets registered into it.
//!
//! # One handle per Runner, no process globals
//!
//! A Runner (crate `kubeapp-runner`) owns one `MetricsRegistry` (what its `/metrics` serves), made
//! with the prefix of its `RunnerConfig::metrics_prefix`. The handle
//! creates each kubeapp collector set once, with every name prefixed `{prefix}_`, and registers it
//! into its registry:
//!
//! - [`controller`](MetricsRegistry::controller): informers and controllers
//!   ([`ControllerMetrics`]);
//! - [`finalizer`](MetricsRegistry::finalizer): the opinionated wrappers' finalizer patches
//!   ([`FinalizerMetrics`]);
//! - [`set::<M>()`](MetricsRegistry::set): any other [`MetricSet`] (the Kubernetes client's
//!   `ClientMetrics` of `kubeapp-runner`, `kubeapp-ha`'s sharding and leader election's, components', phases', a
//!   user's), made once per registry under its prefix, so no prefix is passed by hand. A set
//!   whose names clash with collectors registered before is a [`MetricSetError::Clash`] and
//!   registers nothing (the two above log a clash instead and count unexported, as they cannot
//!   fail).
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
//! controller, an informer registry, an opinionated wrapper or the Runner crate's
//! `default_client`) belong to what made them and are exported nowhere.
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

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use kubeapp_sdk::error::ErrorChain;
use prometheus::Registry;
use prometheus::core::Collector;

use crate::metric_registration::{MetricSet, MetricsError, register_all};
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

/// Why [`MetricsRegistry::set`] could not hand out a [`MetricSet`].
#[derive(Debug, thiserror::Error)]
pub enum MetricSetError {
    /// A collector of the set could not be created.
    #[error("metric set {set}")]
    Create {
        /// The set's Rust type.
        set: &'static str,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A metric of the set has the name of a collector registered before (by another set or
    /// directly into [`MetricsRegistry::registry`]): none of the set was registered.
    #[error("metric set {set}: {metric} clashes with a collector registered before")]
    Clash {
        /// The set's Rust type.
        set: &'static str,
        /// The clashing metric's full name.
        metric: String,
        /// What the Prometheus registry said.
        #[source]
        source: prometheus::Error,
    },
}

/// A registry with the kubeapp collectors in it: every metric set of an operator process
/// registers here, under its one prefix.
#[derive(Clone)]
pub struct MetricsRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    prefix: Option<String>,
    controller: ControllerMetrics,
    finalizer: FinalizerMetrics,
    /// Every set handed out so far, by its type: each is a `M: MetricSet`, registered once.
    sets: Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
}

/// How a set's collectors go into the registry.
#[derive(Clone, Copy)]
enum Registration {
    /// A clash is the caller's error ([`MetricsRegistry::set`]).
    Strict,
    /// A clash is logged and the set counts unexported (the built-in sets, whose accessors
    /// cannot fail; "already registered" keeps the collector registered before).
    Tolerant,
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
    pub(crate) fn with_registry(
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
                finalizer: FinalizerMetrics::unregistered(prefix)?,
                registry,
                prefix: prefix.map(str::to_string),
                sets: Mutex::default(),
            }),
        })
    }

    /// The Prometheus registry (what a Runner's `/metrics` serves); register collectors of your
    /// own into it, or better, make them a [`MetricSet`] and ask [`set`](Self::set) for it.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The prefix of the kubeapp metric names, if any.
    pub fn prefix(&self) -> Option<&str> {
        self.inner.prefix.as_deref()
    }

    /// The set `M` of this registry: created under its prefix and registered the first time it
    /// is asked for, the same set (clones counting into the same series) every time after, from
    /// every clone of this handle. Two registries never share a set.
    ///
    /// ```
    /// use kubeapp_operator::{ControllerMetrics, MetricsRegistry};
    ///
    /// let metrics = MetricsRegistry::new(Some("shop"))?;
    /// let controller: ControllerMetrics = metrics.set()?; // the same as metrics.controller()
    /// # drop(controller);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`MetricSetError::Clash`] when one of its metrics has the name of a collector
    /// registered before (another set's, or one registered directly into
    /// [`registry`](Self::registry)): then none of the set is registered, and asking again
    /// fails again. [`MetricsRegistryError::Metrics`] when a collector cannot be created.
    pub fn set<M: MetricSet>(&self) -> Result<M, MetricSetError> {
        self.set_registered(Registration::Strict)
    }

    /// The informer and controller collectors (for
    /// [`ControllerConfig::metrics`](crate::ControllerConfig::metrics)).
    pub fn controller(&self) -> ControllerMetrics {
        self.built_in(&self.inner.controller)
    }

    /// The finalizer patch collectors (for
    /// [`OpinionatedOptions::metrics`](crate::OpinionatedOptions::metrics)).
    pub fn finalizer(&self) -> FinalizerMetrics {
        self.built_in(&self.inner.finalizer)
    }

    /// One of the sets made with the registry: registered tolerantly, so it cannot fail.
    fn built_in<M: MetricSet>(&self, made: &M) -> M {
        self.set_registered(Registration::Tolerant)
            .unwrap_or_else(|_: MetricSetError| made.clone())
    }

    /// The set of type `M`, created and registered the first time.
    fn set_registered<M: MetricSet>(
        &self,
        registration: Registration,
    ) -> Result<M, MetricSetError> {
        let mut sets = self
            .inner
            .sets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(set) = sets.get(&TypeId::of::<M>()) {
            return Ok(downcast::<M>(set.as_ref()));
        }
        let set = match self.made_with_registry::<M>() {
            Some(made) => made,
            None => M::create(self.prefix()).map_err(|source| MetricSetError::Create {
                set: std::any::type_name::<M>(),
                source: Box::new(source),
            })?,
        };
        match registration {
            Registration::Strict => register_strictly(&self.inner.registry, &set)?,
            Registration::Tolerant => {
                let named = set
                    .collectors()
                    .into_iter()
                    .map(|collector| (metric_name(collector.as_ref()), collector));
                if let Err(error) = register_all(&self.inner.registry, named) {
                    tracing::warn!(
                        set = std::any::type_name::<M>(),
                        error = %ErrorChain(&error),
                        "kubeapp metrics not exported"
                    );
                }
            }
        }
        sets.insert(TypeId::of::<M>(), Box::new(set.clone()));
        Ok(set)
    }

    /// The built-in set of type `M` made with the registry (so that `set::<ControllerMetrics>()`
    /// and `controller()` hand out one set).
    fn made_with_registry<M: MetricSet>(&self) -> Option<M> {
        let made: [&(dyn Any + Send + Sync); 2] = [&self.inner.controller, &self.inner.finalizer];
        made.into_iter()
            .find_map(|set| set.downcast_ref::<M>())
            .cloned()
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

/// A set stored under `TypeId::of::<M>()` is an `M`.
fn downcast<M: MetricSet>(set: &(dyn Any + Send + Sync)) -> M {
    match set.downcast_ref::<M>() {
        Some(set) => set.clone(),
        None => unreachable!("the sets are keyed by their TypeId"),
    }
}

/// Registers every collector of `set`, or none of them: the first refusal unregisters those
/// registered before it and is returned.
fn register_strictly<M: MetricSet>(registry: &Registry, set: &M) -> Result<(), MetricSetError> {
    for (index, collector) in set.collectors().into_iter().enumerate() {
        let metric = metric_name(collector.as_ref());
        if let Err(source) = registry.register(collector) {
            // `collectors()` hands out the same collectors in the same order every time.
            for registered in set.collectors().into_iter().take(index) {
                // Registered just above: unregistering cannot miss.
                let _ = registry.unregister(registered);
            }
            return Err(MetricSetError::Clash {
                set: std::any::type_name::<M>(),
                metric,
                source,
            });
        }
    }
    Ok(())
}

/// The (first) full name of a collector's metrics, for messages.
fn metric_name(collector: &dyn Collector) -> String {
    collector
        .desc()
        .first()
        .map_or_else(String::new, |desc| desc.fq_name.clone())
}

#[cfg(test)]
mod tests;
