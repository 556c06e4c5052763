//! [`RunnerConfig`]: addresses, timeouts, the metrics prefix and webhook settings of a [`Runner`](crate::Runner).

use std::net::SocketAddr;
use std::time::Duration;

use crate::webhook::WebhookConfig;

/// The configuration of a [`Runner`](crate::Runner): a plain struct with [`Default`] and chained setters.
///
/// ```
/// use std::time::Duration;
/// use kubeapp_runner::RunnerConfig;
///
/// let config = RunnerConfig::default()
///     .metrics_addr(([0, 0, 0, 0], 8080).into())
///     .shutdown_timeout(Duration::from_secs(60))
///     .metrics_prefix("myapp");
/// assert_eq!(config.metrics_prefix.as_deref(), Some("myapp"));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunnerConfig {
    /// Where `/metrics`, `/livez` and `/readyz` are served. Default `0.0.0.0:9090`.
    pub metrics_addr: SocketAddr,
    /// How long the apps get to return after they were asked to stop. Default 30 s.
    pub shutdown_timeout: Duration,
    /// How long the runner keeps everything running after a stop request (SIGTERM, SIGINT or the
    /// stop future) before it stops anything, with `/readyz` already failing. Default 0.
    ///
    /// Kubernetes removes a terminating pod from its Services *while* the pod receives SIGTERM:
    /// for a few seconds the apiserver may still open connections to the webhook server. With a
    /// delay (e.g. 5 s, well inside the pod's `terminationGracePeriodSeconds`) those admission
    /// calls are still served. See the [crate docs](crate#stopping) for the whole sequence.
    pub shutdown_delay: Duration,
    /// The one prefix of every kubeapp metric the runner serves (`{prefix}_{name}`): the
    /// controller, client and finalizer collectors of its
    /// [`MetricsRegistry`](kubeapp_operator::MetricsRegistry), which its apps count into. Collectors of your
    /// own keep the names you give them. Default none.
    pub metrics_prefix: Option<String>,
    /// How long one health check may take before `/readyz` counts it as failed. Default 5 s.
    pub health_check_timeout: Duration,
    /// The HTTPS webhook server (`/validate`, `/mutate`, `/convert` of the apps), when set.
    /// Default none. Apps whose manifest declares admission or conversion need it.
    pub webhook: Option<WebhookConfig>,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 9090)),
            shutdown_timeout: Duration::from_secs(30),
            shutdown_delay: Duration::ZERO,
            metrics_prefix: None,
            health_check_timeout: Duration::from_secs(5),
            webhook: None,
        }
    }
}

impl RunnerConfig {
    /// Sets [`metrics_addr`](Self::metrics_addr).
    #[must_use]
    pub fn metrics_addr(mut self, addr: SocketAddr) -> Self {
        self.metrics_addr = addr;
        self
    }

    /// Sets [`shutdown_timeout`](Self::shutdown_timeout).
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Sets [`shutdown_delay`](Self::shutdown_delay).
    #[must_use]
    pub fn shutdown_delay(mut self, delay: Duration) -> Self {
        self.shutdown_delay = delay;
        self
    }

    /// Sets [`metrics_prefix`](Self::metrics_prefix).
    #[must_use]
    pub fn metrics_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.metrics_prefix = Some(prefix.into());
        self
    }

    /// Serves the apps' webhooks over HTTPS with this configuration; see [`webhook`](Self::webhook).
    #[must_use]
    pub fn webhook(mut self, config: WebhookConfig) -> Self {
        self.webhook = Some(config);
        self
    }

    /// Sets [`health_check_timeout`](Self::health_check_timeout).
    #[must_use]
    pub fn health_check_timeout(mut self, timeout: Duration) -> Self {
        self.health_check_timeout = timeout;
        self
    }
}
