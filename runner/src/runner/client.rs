//! A Kubernetes client from the environment, inferred as `kube` does.

use std::ffi::OsString;
use std::path::PathBuf;

use kube::config::InferConfigError;

use kubeapp_operator::metrics::MetricsError;
use kubeapp_operator::{MetricSetError, MetricsRegistry};

use crate::client_metrics::{ClientMetrics, instrumented_client};

/// The service-account directory an in-cluster configuration is read from.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// No Kubernetes client could be built from the environment.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Neither a kubeconfig nor an in-cluster configuration was found.
    #[error("no Kubernetes configuration found; tried {tried}")]
    NoConfig {
        /// The sources tried, in order, in words.
        tried: String,
        /// kube's error, with the reason of each source.
        #[source]
        source: InferConfigError,
    },
    /// The client's request metrics could not be created.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The registry refused the client's request metrics: a collector registered before (by
    /// another set, or directly into its Prometheus registry) has one of their names.
    #[error(transparent)]
    Registry(#[from] MetricSetError),
    /// A configuration was found but the client could not be built from it.
    #[error("building a Kubernetes client for {cluster_url}")]
    Client {
        /// The API server the configuration points at.
        cluster_url: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

/// A client for the cluster the environment points at, found the way `kube::Client::try_default`
/// finds it: first a kubeconfig (the files listed in `KUBECONFIG`, else `~/.kube/config`), then
/// the in-cluster configuration (`KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` and the pod's
/// service-account token). The error says what was tried and why each source failed.
///
/// The client counts and times its requests (`kubernetes_client_requests_total`,
/// `kubernetes_client_request_duration_seconds`, see [`client_metrics`](crate::client_metrics)) into collectors of
/// its own, exported nowhere: for a client whose requests show on a Runner's `/metrics`, use
/// [`default_client_with_metrics`] with [`Runner::metrics`](crate::Runner::metrics).
///
/// Needs a Tokio runtime (the client spawns its connection handling).
///
/// ```no_run
/// # async fn demo() -> Result<(), kubeapp_runner::ClientError> {
/// let client = kubeapp_runner::default_client().await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`ClientError`]: no configuration found (naming what was tried), or no client built from it.
pub async fn default_client() -> Result<kube::Client, ClientError> {
    client_from_environment(ClientMetrics::unregistered(None)?).await
}

/// [`default_client`], counting its requests into the [`ClientMetrics`] set of `metrics` (a
/// Runner's [`metrics`](crate::Runner::metrics), so they are served on its `/metrics` under its
/// prefix): `metrics.set::<ClientMetrics>()`, created and registered the first time.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_runner::{Runner, RunnerConfig, default_client_with_metrics};
///
/// let runner = Runner::new(RunnerConfig::default())?;
/// let client = default_client_with_metrics(runner.metrics()).await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// As [`default_client`], and [`ClientError::Registry`] when a collector of the registry has the
/// name of a client metric.
pub async fn default_client_with_metrics(
    metrics: &MetricsRegistry,
) -> Result<kube::Client, ClientError> {
    client_from_environment(metrics.set::<ClientMetrics>()?).await
}

async fn client_from_environment(metrics: ClientMetrics) -> Result<kube::Client, ClientError> {
    let config = kube::Config::infer().await.map_err(|source| {
        let tried = tried_sources(
            std::env::var_os("KUBECONFIG"),
            std::env::home_dir(),
            std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        );
        tracing::debug!(%tried, error = %source, "no Kubernetes configuration found");
        ClientError::NoConfig { tried, source }
    })?;
    let cluster_url = config.cluster_url.to_string();
    tracing::debug!(%cluster_url, "Kubernetes configuration found");
    instrumented_client(config, metrics).map_err(|source| ClientError::Client {
        cluster_url,
        source,
    })
}

/// What [`default_client`] tried, in words, from the environment it saw.
fn tried_sources(
    kubeconfig_env: Option<OsString>,
    home: Option<PathBuf>,
    service_host_set: bool,
) -> String {
    let kubeconfig = match kubeconfig_env {
        Some(paths) if !paths.is_empty() => {
            format!("the kubeconfig in KUBECONFIG={}", paths.to_string_lossy())
        }
        _ => match home {
            Some(home) => format!(
                "the kubeconfig at ~/.kube/config ({}; KUBECONFIG is not set)",
                home.join(".kube").join("config").display()
            ),
            None => "the kubeconfig at ~/.kube/config (no home directory; KUBECONFIG is not set)"
                .to_string(),
        },
    };
    let in_cluster = if service_host_set {
        format!("the in-cluster configuration (service-account token in {SERVICE_ACCOUNT_DIR})")
    } else {
        "the in-cluster configuration (KUBERNETES_SERVICE_HOST is not set: not running in a pod)"
            .to_string()
    };
    format!("{kubeconfig}, then {in_cluster}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_names_the_kubeconfig_variable_when_set() {
        let tried = tried_sources(Some("/tmp/a:/tmp/b".into()), Some("/home/u".into()), false);
        assert!(tried.starts_with("the kubeconfig in KUBECONFIG=/tmp/a:/tmp/b, then "));
        assert!(
            tried.contains("KUBERNETES_SERVICE_HOST is not set"),
            "{tried}"
        );
    }

    #[test]
    fn the_description_names_the_home_kubeconfig_and_the_token_directory() {
        let tried = tried_sources(None, Some("/home/u".into()), true);
        assert!(tried.contains("/home/u/.kube/config"), "{tried}");
        assert!(tried.contains(SERVICE_ACCOUNT_DIR), "{tried}");
    }
}
