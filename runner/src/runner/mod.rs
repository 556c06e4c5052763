//! The [`Runner`] itself: its apps, its servers, its stop sequence (see the [crate docs](crate)).

mod client;
mod config;
mod debug;
mod error;
mod hooks;
mod http;
mod servers;
mod shutdown;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics_auth::MetricsAuth;
use crate::webhook::WebhookServer;
use kubeapp_operator::{MetricsRegistry, MetricsRegistryError};
use kubeapp_sdk::app::App;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use client::{ClientError, default_client, default_client_with_metrics};
pub use config::RunnerConfig;
pub use error::{EXIT_WORK_ABANDONED, RunnerError};
use kubeapp_operator::Informers;

use debug::DiagnosticsSource;
use error::error_chain;
use hooks::ShutdownHook;
use http::HealthState;
use servers::{spawn_server, start_servers, stop_servers};
use shutdown::{AppOutcome, AppTasks, Signals, StopSource};

/// Runs apps, serves their metrics and health, and stops them gracefully; see the
/// [crate docs](crate).
pub struct Runner {
    config: RunnerConfig,
    metrics: MetricsRegistry,
    informers: Informers,
    apps: Vec<Arc<dyn App>>,
    listener: Option<TcpListener>,
    webhook: Option<WebhookServer>,
    shutdown_hooks: Vec<ShutdownHook>,
    metrics_auth: Option<Arc<MetricsAuth>>,
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("config", &self.config)
            .field(
                "apps",
                &self.apps.iter().map(|app| app.name()).collect::<Vec<_>>(),
            )
            .field("local_addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// A runner with no apps yet, a fresh [`MetricsRegistry`] with the prefix of
    /// [`RunnerConfig::metrics_prefix`], and a fresh registry of shared informers.
    ///
    /// # Errors
    ///
    /// [`RunnerError::InvalidMetricsPrefix`] when the prefix is not a valid metric name prefix.
    pub fn new(config: RunnerConfig) -> Result<Self, RunnerError> {
        let metrics =
            MetricsRegistry::new(config.metrics_prefix.as_deref()).map_err(
                |error| match error {
                    MetricsRegistryError::InvalidPrefix { prefix } => {
                        RunnerError::InvalidMetricsPrefix { prefix }
                    }
                    MetricsRegistryError::Metrics(source) => RunnerError::RunnerMetrics(source),
                },
            )?;
        Ok(Self {
            config,
            informers: Informers::new(),
            metrics,
            apps: Vec::new(),
            listener: None,
            webhook: None,
            shutdown_hooks: Vec::new(),
            metrics_auth: None,
        })
    }

    /// The registry of shared informers for this runner's apps: apps built with it (a simple
    /// App's `AppConfig::informers`, a controller's
    /// [`ControllerConfig::informers`](kubeapp_operator::ControllerConfig::informers)) open one watch per
    /// kind, namespace, selectors and transform between them. Its informers count into the
    /// metrics of the first controller built on it (the runner's [`metrics`](Self::metrics)
    /// when the apps are given them).
    pub fn informers(&self) -> &Informers {
        &self.informers
    }

    /// The runner's metrics: hand it to its apps (a simple App's `AppConfig::metrics`) so that
    /// they count into the series `/metrics` serves, under the runner's one prefix; see the
    /// [crate docs](crate).
    pub fn metrics(&self) -> &MetricsRegistry {
        &self.metrics
    }

    /// Requires a bearer token on `/metrics` and `/debug/kubeapp`, reviewed by the apiserver
    /// through `client` (a `TokenReview`, then a `SubjectAccessReview` of `get` on the path);
    /// `/livez` and `/readyz` stay open. Off by default: then `/metrics` is open and
    /// `/debug/kubeapp` answers only loopback clients. See
    /// [`metrics_auth`](crate::metrics_auth) for the RBAC both sides need.
    #[must_use]
    pub fn authenticate_metrics(mut self, client: kube::Client) -> Self {
        self.metrics_auth = Some(Arc::new(MetricsAuth::new(client)));
        self
    }

    /// Adds an app by value (no `Arc` at the call site; chained).
    #[must_use]
    pub fn app(mut self, app: impl App + 'static) -> Self {
        self.apps.push(Arc::new(app));
        self
    }

    /// Adds an app (chained form of [`add_app`](Self::add_app)).
    #[must_use]
    pub fn with_app(mut self, app: Arc<dyn App>) -> Self {
        self.apps.push(app);
        self
    }

    /// Adds an app.
    pub fn add_app(&mut self, app: Arc<dyn App>) -> &mut Self {
        self.apps.push(app);
        self
    }

    /// Runs `hook` when the runner returns, after the apps and the servers stopped: to flush
    /// telemetry (`kubeapp_simple::telemetry::TelemetryGuard::flush_on_shutdown` adds one) or
    /// release what outlives the apps. Hooks run one after the other, in the order added, on every
    /// return of [`run`](Self::run) and [`run_until`](Self::run_until) (errors included) except
    /// [`RunnerError::SecondSignal`], which returns at once.
    pub fn on_shutdown<F, Fut>(&mut self, hook: F) -> &mut Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.shutdown_hooks.push(hooks::boxed(hook));
        self
    }

    /// The registry `/metrics` exports (that of [`metrics`](Self::metrics)). Register
    /// collectors of your own into it (a [`Registry`] is a cheap handle: clone it to keep one).
    pub fn registry(&self) -> &Registry {
        self.metrics.registry()
    }

    /// The configuration.
    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// Binds the HTTP listener now (once; later calls return the same address) and returns the
    /// bound address: with port 0 in the configuration, the port the system picked.
    ///
    /// # Errors
    ///
    /// [`RunnerError::Bind`] when the address cannot be listened on.
    pub async fn bind(&mut self) -> Result<SocketAddr, RunnerError> {
        let addr = self.config.metrics_addr;
        let bind_error = |source| RunnerError::Bind { addr, source };
        let listener = match self.listener.take() {
            Some(listener) => listener,
            None => TcpListener::bind(addr).await.map_err(bind_error)?,
        };
        let local = listener.local_addr().map_err(bind_error)?;
        self.listener = Some(listener);
        if let (Some(config), None) = (&self.config.webhook, &self.webhook) {
            let server = WebhookServer::bind(config.clone(), self.apps.clone()).await?;
            tracing::info!(addr = %server.local_addr(), "serving webhooks over HTTPS");
            self.webhook = Some(server);
        }
        Ok(local)
    }

    /// The address the webhook server listens on, once [`bind`](Self::bind) was called with a
    /// webhook configured.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook.as_ref().map(WebhookServer::local_addr)
    }

    /// The address the HTTP server listens on, once [`bind`](Self::bind) was called.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully; a second signal during the
    /// shutdown returns at once. See the [crate docs](crate) for every outcome.
    ///
    /// # Errors
    ///
    /// Any [`RunnerError`]: start-up failures, a failing app or server, the shutdown timeout, a
    /// second signal.
    pub async fn run(self) -> Result<(), RunnerError> {
        let signals = Signals::install().map_err(RunnerError::Signal)?;
        self.run_with(StopSource::Signals(signals)).await
    }

    /// Runs until `stop` completes (signals are left alone), then shuts down gracefully.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), except that there is no second signal.
    pub async fn run_until<F>(self, stop: F) -> Result<(), RunnerError>
    where
        F: Future<Output = ()> + Send,
    {
        let stop = pin!(stop);
        self.run_with(StopSource::Until(Some(stop))).await
    }

    async fn run_with(mut self, stop: StopSource<'_>) -> Result<(), RunnerError> {
        let shutdown_hooks = std::mem::take(&mut self.shutdown_hooks);
        let result = self.run_apps(stop).await;
        if !matches!(result, Err(RunnerError::SecondSignal { .. })) {
            hooks::run_all(shutdown_hooks).await;
        }
        result
    }

    async fn run_apps(mut self, mut stop: StopSource<'_>) -> Result<(), RunnerError> {
        self.check_webhooks()?;
        self.register_app_collectors()?;
        let addr = self.bind().await?;
        let Self {
            config,
            metrics,
            // Kept only for `/debug/kubeapp`: the registry holds its informers weakly, the apps'
            // controllers hold what they registered in it.
            informers,
            apps,
            listener,
            webhook,
            shutdown_hooks: _,
            metrics_auth,
        } = self;
        let listener = listener.ok_or_else(|| RunnerError::Bind {
            addr,
            source: std::io::Error::other("the listener was not bound"),
        })?;

        let health = Arc::new(HealthState {
            apps: apps.clone(),
            shutting_down: AtomicBool::new(false),
            check_timeout: config.health_check_timeout,
        });
        let server_stop = CancellationToken::new();
        let diagnostics = Arc::new(DiagnosticsSource {
            informers: informers.clone(),
            controller: metrics.controller(),
            apps: apps.clone(),
        });
        let mut servers = start_servers(
            listener,
            metrics.registry().clone(),
            Arc::clone(&health),
            diagnostics,
            metrics_auth,
            &server_stop,
        );
        // Stopped with the apps, after the shutdown delay; drains within its own timeout.
        let webhook_stop = server_stop.child_token();
        let mut server_grace = servers::SERVER_GRACE;
        if let Some(mut webhook) = webhook {
            // Every app, also those added after `bind` created the server.
            webhook.route_to(apps.clone());
            server_grace += webhook.drain_timeout();
            let stop = webhook_stop.clone();
            spawn_server(&mut servers, "webhook", async move {
                webhook.serve(stop).await.map_err(std::io::Error::other)
            });
        }
        tracing::info!(%addr, "serving /metrics, /debug/kubeapp, /livez and /readyz");

        let app_stop = CancellationToken::new();
        let mut tasks = AppTasks::spawn(&apps, &app_stop);
        tracing::info!(
            apps = ?apps.iter().map(|app| app.name()).collect::<Vec<_>>(),
            "runner started"
        );

        // Run until asked to stop, or until an app or a server ends on its own.
        let mut failure = tokio::select! {
            reason = stop.first() => {
                tracing::info!(reason, "stopping the apps");
                None
            }
            Some((app, outcome)) = tasks.next(), if !tasks.is_empty() => {
                let error = match outcome {
                    AppOutcome::Stopped => RunnerError::AppExited { app },
                    AppOutcome::Failed(source) => RunnerError::of_app(app, source),
                    AppOutcome::Panicked(message) => RunnerError::AppPanicked { app, message },
                };
                tracing::error!(error = %error_chain(&error), "stopping the other apps");
                Some(error)
            }
            // Server tasks catch their panics and are only aborted after this point, so every
            // task that ends here ends as `Ok`.
            Some(Ok((server, result))) = servers.join_next() => {
                let source = match result {
                    Err(source) => source,
                    Ok(()) => std::io::Error::other("stopped unexpectedly"),
                };
                let error = RunnerError::Server { server, source };
                tracing::error!(error = %error_chain(&error), "stopping the apps");
                Some(error)
            }
        };

        // Graceful shutdown: fail readiness; after a requested stop, keep serving for the delay
        // (the endpoint is being removed from its Services meanwhile); then stop the apps and the
        // webhook server (it drains), and wait for the apps within the timeout.
        let mut signalled = failure.is_none() && matches!(stop, StopSource::Signals(_));
        health.shutting_down.store(true, Ordering::SeqCst);
        if failure.is_none() && !config.shutdown_delay.is_zero() {
            tracing::info!(delay = ?config.shutdown_delay, "still serving during the shutdown delay");
            if let Err(signal) = shutdown::delay(&mut stop, config.shutdown_delay).await {
                tracing::warn!(
                    signal,
                    "second signal: exiting without waiting for the apps"
                );
                tasks.abort_all();
                servers.abort_all();
                return Err(RunnerError::SecondSignal { signal });
            }
        }
        webhook_stop.cancel();
        app_stop.cancel();
        let deadline = Instant::now() + config.shutdown_timeout;
        while !tasks.is_empty() {
            tokio::select! {
                joined = tokio::time::timeout_at(deadline, tasks.next()) => match joined {
                    Ok(Some((app, outcome))) => note_stopped(app, outcome, &mut failure),
                    Ok(None) => break,
                    Err(_elapsed) => {
                        let apps = tasks.still_running();
                        tasks.abort_all();
                        tracing::error!(
                            timeout = ?config.shutdown_timeout,
                            ?apps,
                            "apps did not stop within the shutdown timeout; dropping them"
                        );
                        failure.get_or_insert(RunnerError::ShutdownTimeout {
                            timeout: config.shutdown_timeout,
                            apps,
                        });
                        break;
                    }
                },
                signal = stop.second() => {
                    if !signalled {
                        // The shutdown began on a failure: this is the first signal.
                        tracing::info!(signal, "signal received; already stopping the apps");
                        signalled = true;
                        continue;
                    }
                    tracing::warn!(signal, "second signal: exiting without waiting for the apps");
                    tasks.abort_all();
                    servers.abort_all();
                    return Err(RunnerError::SecondSignal { signal });
                }
            }
        }

        stop_servers(servers, &server_stop, server_grace).await;
        match failure {
            None => {
                tracing::info!("runner stopped");
                Ok(())
            }
            Some(error) => Err(error),
        }
    }

    /// Registers every app's collectors; "already registered" is accepted.
    /// An app whose manifest declares webhooks needs the webhook server: without it the
    /// apiserver's admission or conversion calls would fail, so the start fails instead.
    fn check_webhooks(&self) -> Result<(), RunnerError> {
        if self.config.webhook.is_some() {
            return Ok(());
        }
        match self
            .apps
            .iter()
            .map(|app| (app, app.declared_webhooks()))
            .find(|(_, declared)| !declared.is_empty())
        {
            Some((app, declared)) => Err(RunnerError::WebhooksRequired {
                app: app.name().to_string(),
                declared: declared.join("; "),
            }),
            None => Ok(()),
        }
    }

    fn register_app_collectors(&self) -> Result<(), RunnerError> {
        for app in &self.apps {
            for collector in app.metric_collectors() {
                match self.registry().register(collector) {
                    Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
                    Err(source) => {
                        return Err(RunnerError::Metrics {
                            app: app.name().to_string(),
                            source,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// Logs an app that returned during the shutdown; keeps the first failure.
fn note_stopped(app: String, outcome: AppOutcome, failure: &mut Option<RunnerError>) {
    let error = match outcome {
        AppOutcome::Stopped => {
            tracing::info!(app, "app stopped");
            return;
        }
        AppOutcome::Failed(source) => RunnerError::of_app(app, source),
        AppOutcome::Panicked(message) => RunnerError::AppPanicked { app, message },
    };
    tracing::error!(error = %error_chain(&error), "app failed while stopping");
    failure.get_or_insert(error);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_defaults_match_the_contract() {
        let config = RunnerConfig::default();
        assert_eq!(config.metrics_addr, SocketAddr::from(([0, 0, 0, 0], 9090)));
        assert_eq!(config.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(config.metrics_prefix, None);
    }

    #[test]
    fn an_invalid_metrics_prefix_is_refused() {
        for prefix in ["", "9lives", "with-dash", "sp ace"] {
            let err =
                Runner::new(RunnerConfig::default().metrics_prefix(prefix)).expect_err(prefix);
            assert!(
                matches!(&err, RunnerError::InvalidMetricsPrefix { prefix: p } if p == prefix),
                "{err:?}"
            );
        }
        assert!(Runner::new(RunnerConfig::default().metrics_prefix("my_app:x")).is_ok());
    }
}
