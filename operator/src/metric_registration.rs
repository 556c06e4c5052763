//! How kubeapp's collector sets are made and registered: the [`MetricSet`] trait every set
//! implements (so a [`MetricsRegistry`](crate::MetricsRegistry) can create each once, under its
//! one prefix), the latency buckets they share, [`register_all`] into a caller's registry, and
//! the [`MetricsError`] when a registry refuses.
//!
//! Metric plumbing at the bottom of the crate, below every metric set (the controller's, the
//! failing objects', the finalizers'; the Kubernetes client's in `kubeapp-runner`), so that none
//! of them imports another for it. Public through [`metrics`](crate::metrics).

use prometheus::Registry;
use prometheus::core::Collector;

/// A set of collectors that a [`MetricsRegistry`](crate::MetricsRegistry) creates once, with
/// every name under the registry's prefix, and registers into its Prometheus registry:
/// `metrics.set::<MySet>()?`. kubeapp's own sets implement it (the controller's, the client's,
/// the finalizers'; sharding's and leader election's, components' and phases' in their crates), and
/// so can a user's.
///
/// ```
/// use kubeapp_operator::metrics::MetricSet;
/// use prometheus::core::Collector;
/// use prometheus::{IntCounter, Opts};
///
/// #[derive(Clone)]
/// struct Orders {
///     placed: IntCounter,
/// }
///
/// impl MetricSet for Orders {
///     type Error = prometheus::Error;
///
///     fn create(prefix: Option<&str>) -> Result<Self, prometheus::Error> {
///         let opts = Opts::new("orders_placed_total", "Orders placed.")
///             .namespace(prefix.unwrap_or(""));
///         Ok(Self { placed: IntCounter::with_opts(opts)? })
///     }
///
///     fn collectors(&self) -> Vec<Box<dyn Collector>> {
///         vec![Box::new(self.placed.clone())]
///     }
/// }
///
/// let metrics = kubeapp_operator::MetricsRegistry::new(Some("shop"))?;
/// metrics.set::<Orders>()?.placed.inc();
/// assert_eq!(metrics.registry().gather()[0].name(), "shop_orders_placed_total");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait MetricSet: Clone + Send + Sync + 'static {
    /// Why [`create`](MetricSet::create) failed: a user's set may return prometheus' own
    /// `prometheus::Error` (then `?` on each collector's constructor is all it writes); kubeapp's
    /// sets return [`MetricsError`], which names the metric.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Fresh collectors registered nowhere, every name prefixed `{prefix}_` when a prefix is
    /// given (the registry has checked that it is a valid start of a metric name).
    ///
    /// # Errors
    ///
    /// When a collector cannot be created.
    fn create(prefix: Option<&str>) -> Result<Self, Self::Error>;

    /// Every collector of the set, as clones counting into the same series.
    fn collectors(&self) -> Vec<Box<dyn Collector>>;
}

/// Buckets of the latency histograms, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
];

/// Registering the metrics failed for another reason than "already registered" (an invalid
/// namespace prefix, or a same-named metric with other labels).
#[derive(Debug, thiserror::Error)]
#[error("registering metric {name}")]
pub struct MetricsError {
    /// The metric's name.
    pub name: String,
    /// The prometheus error.
    #[source]
    pub source: prometheus::Error,
}

impl MetricsError {
    /// Wraps a prometheus error about the metric `name`: `.map_err(MetricsError::named("x"))`.
    pub fn named(name: &str) -> impl FnOnce(prometheus::Error) -> Self + '_ {
        move |source| Self {
            name: name.to_string(),
            source,
        }
    }
}

/// Registers named collectors into `registry`. "Already registered" is accepted (the same set
/// registered again, or a foreign collector under that name, which is then kept: logged).
///
/// # Errors
///
/// The first refusal for another reason (a same-named metric with other labels).
pub(crate) fn register_all<N: AsRef<str>>(
    registry: &Registry,
    collectors: impl IntoIterator<Item = (N, Box<dyn prometheus::core::Collector>)>,
) -> Result<(), MetricsError> {
    for (name, collector) in collectors {
        let name = name.as_ref();
        match registry.register(collector) {
            Ok(()) => {}
            Err(prometheus::Error::AlreadyReg) => {
                tracing::debug!(
                    metric = name,
                    "already registered (this set or another collector of that name)"
                );
            }
            Err(source) => {
                return Err(MetricsError {
                    name: name.to_string(),
                    source,
                });
            }
        }
    }
    Ok(())
}
