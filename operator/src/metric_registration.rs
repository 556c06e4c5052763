//! How kubeapp's collector sets are made and registered: the latency buckets they share,
//! [`register_all`] into a caller's registry, and the [`MetricsError`] when a registry refuses.
//!
//! Metric plumbing at the bottom of the crate, below every metric set (the controller's, the
//! failing objects', the finalizers', the client's), so that none of them imports another for
//! it. Public through [`metrics`](crate::metrics).

use prometheus::Registry;

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

/// Registers named collectors into `registry`. "Already registered" is accepted (the same set
/// registered again, or a foreign collector under that name, which is then kept: logged).
///
/// # Errors
///
/// The first refusal for another reason (a same-named metric with other labels).
pub(crate) fn register_all<'a>(
    registry: &Registry,
    collectors: impl IntoIterator<Item = (&'a str, Box<dyn prometheus::core::Collector>)>,
) -> Result<(), MetricsError> {
    for (name, collector) in collectors {
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
