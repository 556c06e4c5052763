//! The [`Runner`]: runs one or more [`App`]s as an operator process, serves their metrics and
//! health over plain HTTP, and stops them gracefully.
//!
//! # What it does
//!
//! - **Apps.** [`Runner::run`] (or [`Runner::run_until`]) calls every app's
//!   [`App::run`] concurrently, each on its own task, with one shared stop token.
//! - **HTTP** on [`RunnerConfig::metrics_addr`] (default `0.0.0.0:9090`), plain HTTP/1.1:
//!   - `GET /metrics`: the Prometheus text format of the runner's [`Registry`]
//!     ([`Runner::registry`]), owned by its [`MetricsRegistry`] ([`Runner::metrics`]). That
//!     handle holds the kubeapp collectors (controller, Kubernetes client, finalizer patches),
//!     created once per runner: hand it to the apps (`AppConfig::metrics` of `kubeapp-simple`,
//!     or its sets to [`ControllerConfig::metrics`](crate::ControllerConfig::metrics) and
//!     [`OpinionatedOptions::metrics`](crate::OpinionatedOptions::metrics)), as
//!     [`Runner::informers`] is handed over, and they all count into one series per kind;
//!     clients from [`default_client_with_metrics`] record their requests into it. A set is
//!     registered when first handed out, so an app given no handle can still have its private
//!     collectors served (through [`App::metric_collectors`]), unless apps given the handle
//!     already serve those names: give every app of a runner its handle. Two runners in one process
//!     share nothing. At start the runner also registers every app's
//!     [`App::metric_collectors`]: a collector that is already registered (the same one twice,
//!     or two apps that share one) is accepted, never a panic or an error; any other refusal (a
//!     same-named metric with other labels) fails the start with [`RunnerError::Metrics`] naming
//!     the app.
//!   - `GET /livez`: `200 ok` while the runner runs (the server only lives as long as the runner's
//!     loops do).
//!   - `GET /readyz`: evaluated **on every request**, nothing is cached. It calls every app's
//!     [`App::health_checks`] and runs the checks concurrently, each bounded by
//!     [`RunnerConfig::health_check_timeout`] (default 5 s; a check that takes longer fails with
//!     `timed out`). `200` only when every check passes, else `503`. The body has one line per
//!     check, `app/check: ok` or `app/check: error: <reason>`, then `ready` or `not ready`.
//!     During a graceful shutdown it answers `503` with a first line `runner: error: shutting down`,
//!     so traffic drains before the process exits.
//! - **One metrics prefix**: with [`RunnerConfig::metrics_prefix`] set to `ns`, every kubeapp
//!   metric the runner serves is named `ns_<name>` (`ns_informer_events_total`,
//!   `ns_kubernetes_client_requests_total`, `ns_opinionated_finalizer_patches_total`, ...).
//!   Collectors of your own (an app's own, or registered into [`Runner::registry`]) keep the
//!   names you give them.
//!
//! - **Webhooks** (HTTPS, [`RunnerConfig::webhook`]) are served when configured, and required
//!   when any app declares webhooks ([`App::declared_webhooks`]): the start then fails with
//!   [`RunnerError::WebhooksRequired`] naming the app and what it declares.
//!
//! # Stopping
//!
//! - **Signals.** [`Runner::run`] installs SIGTERM and SIGINT handlers before it starts anything,
//!   and keeps them until it returns. The first signal starts the graceful shutdown; a second one
//!   during it makes `run` return at once with [`RunnerError::SecondSignal`] (the apps' tasks are
//!   aborted), so `main` can exit without waiting. (When the shutdown began because an app
//!   failed, the first signal during it is only noted; the second one returns at once.)
//! - **A stop future instead.** [`Runner::run_until`] stops when a future completes, and does not
//!   touch signals: for tests and for embedding the runner in a larger program.
//! - **Graceful shutdown**, in this order:
//!   1. the stop request (signal or stop future): `/readyz` starts failing;
//!   2. the **shutdown delay** ([`RunnerConfig::shutdown_delay`], default 0): everything keeps
//!      running, and the webhook server still accepts new connections and serves them, while
//!      Kubernetes removes the pod from its Services (a second signal now returns at once);
//!   3. every app's stop token is cancelled and, at the same moment, the webhook server stops
//!      accepting and drains: requests in flight finish (up to
//!      [`WebhookConfig::drain_timeout`](crate::webhook::WebhookConfig::drain_timeout)), idle
//!      connections close;
//!   4. the runner waits for every app's `run` to return, up to
//!      [`RunnerConfig::shutdown_timeout`] (default 30 s). Apps are expected to stop taking events
//!      and let their in-flight handlers finish (the `InformerController` does);
//!   5. the metrics server stops (open requests get up to 5 s; the webhook server is waited for
//!      up to 5 s plus its drain timeout);
//!   6. the shutdown hooks run ([`Runner::on_shutdown`], e.g. flushing telemetry), and the runner
//!      returns `Ok(())`.
//!
//!   A shutdown that begins because an app or a server failed skips the delay.
//! - **Timeout.** Apps still running when the timeout expires are aborted (their futures are
//!   dropped at their next await) and the runner returns [`RunnerError::ShutdownTimeout`] naming
//!   them.
//! - **A failing app.** When an app's `run` returns an error (or panics) the runner stops the
//!   other apps as above and returns [`RunnerError::App`] (or [`RunnerError::AppPanicked`]) with
//!   that app's name. Only the first failure is returned, the others are logged; if the other apps
//!   then also miss the shutdown timeout, the first failure is still what is returned (it is the
//!   cause) and the stragglers are logged.
//! - **An app that returns early.** An app's `run` that returns `Ok` before it was asked to stop
//!   is treated as a failure ([`RunnerError::AppExited`]): an operator whose app quietly stopped
//!   would look alive while it does nothing, so the process should exit and be restarted.
//! - **A failing server.** If the HTTP server fails while the apps run, the apps are stopped and
//!   [`RunnerError::Server`] is returned.
//! - A runner with no apps only serves HTTP until it is stopped.
//! - **Abandoned work.** An app that stopped in time but dropped handler calls still running when
//!   its own shutdown grace ran out returns `AppError::Abandoned`; the runner returns
//!   [`RunnerError::Abandoned`] naming the app and the number of calls (an earlier failure, the
//!   cause, still wins).
//!
//! # Exit status
//!
//! [`RunnerError::exit_code`] is what a `main` should exit with (the `kubeapp-simple` operator
//! binary does): 0 after a clean stop, [`EXIT_WORK_ABANDONED`] (3) when the runner stopped but left
//! work undone ([`RunnerError::Abandoned`], [`RunnerError::ShutdownTimeout`],
//! [`RunnerError::SecondSignal`]), and 1 for any other failure. A shutdown timeout shorter than the
//! handlers' work therefore shows up in Kubernetes (the container's exit code and reason
//! `Error`) and in CI, with one error line naming how many calls were abandoned, instead of a
//! clean-looking 0. Nothing is lost by it with opinionated kinds (objects keep their in-progress
//! finalizers and the next start handles them again), but the work was not done.
//!
//! # Addresses in tests
//!
//! Configure port 0 and call [`Runner::bind`] before running: it binds the listener and returns
//! the address the system picked (also available from [`Runner::local_addr`]). `run` binds on
//! its own when `bind` was not called.
//!
//! # Webhooks
//!
//! With [`RunnerConfig::webhook`] set, the runner also serves the apps' admission and conversion
//! hooks over HTTPS ([`crate::webhook`], default port 8443), bound in [`Runner::bind`] (its
//! address: [`Runner::webhook_addr`]) and stopped in the sequence above. Reviews are routed to
//! every app the runner runs, including apps added after `bind`.
//! A missing or bad certificate file fails the start with [`RunnerError::Webhook`]. Whether an
//! app *needs* webhooks is known from its manifest, so that check belongs to the app
//! (`kubeapp-simple` validates it), not to the runner.
//!
//! # Kubernetes client
//!
//! The runner itself never talks to Kubernetes. Apps get their client from the caller;
//! [`default_client_with_metrics`] finds one the way `kube` does (kubeconfig from `KUBECONFIG` or
//! `~/.kube/config`, else in-cluster), counts its requests into the runner's metrics, and says
//! what it tried when it fails ([`default_client`] does the same with private metrics).
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use kube::api::ApiResource;
//! use kubeapp_operator::runner::{Runner, RunnerConfig};
//! use kubeapp_sdk::app::{App, AppError};
//! use tokio_util::sync::CancellationToken;
//!
//! struct Hello;
//!
//! #[async_trait]
//! impl App for Hello {
//!     fn name(&self) -> &str {
//!         "hello"
//!     }
//!     fn managed_kinds(&self) -> Vec<ApiResource> {
//!         Vec::new()
//!     }
//!     async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
//!         stop.cancelled().await; // a real app runs its InformerController here
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = RunnerConfig::default()
//!     .metrics_addr(([127, 0, 0, 1], 0).into())
//!     .shutdown_timeout(std::time::Duration::from_secs(10));
//! let mut runner = Runner::new(config)?.with_app(Arc::new(Hello));
//! let addr = runner.bind().await?;
//! println!("metrics on http://{addr}/metrics");
//!
//! // In a binary: `runner.run().await?` stops on SIGTERM or SIGINT.
//! let stop = CancellationToken::new();
//! stop.cancel(); // for the example, stop at once
//! runner.run_until(stop.cancelled_owned()).await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod config;
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

use crate::metrics_registry::{MetricsRegistry, MetricsRegistryError};
use crate::webhook::WebhookServer;
use kubeapp_sdk::app::App;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::informers::Informers;
pub use client::{ClientError, default_client, default_client_with_metrics};
pub use config::RunnerConfig;
pub use error::{EXIT_WORK_ABANDONED, RunnerError};

use error::error_chain;
use hooks::ShutdownHook;
use http::HealthState;
use servers::{spawn_server, start_servers, stop_servers};
use shutdown::{AppOutcome, AppTasks, Signals, StopSource};

/// Runs apps, serves their metrics and health, and stops them gracefully; see the
/// [module docs](self).
pub struct Runner {
    config: RunnerConfig,
    metrics: MetricsRegistry,
    informers: Informers,
    apps: Vec<Arc<dyn App>>,
    listener: Option<TcpListener>,
    webhook: Option<WebhookServer>,
    shutdown_hooks: Vec<ShutdownHook>,
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
        })
    }

    /// The registry of shared informers for this runner's apps: apps built with it (a simple
    /// App's `AppConfig::informers`, a controller's
    /// [`ControllerConfig::informers`](crate::ControllerConfig::informers)) open one watch per
    /// kind, namespace, selectors and transform between them. Its informers count into the
    /// metrics of the first controller built on it (the runner's [`metrics`](Self::metrics)
    /// when the apps are given them).
    pub fn informers(&self) -> &Informers {
        &self.informers
    }

    /// The runner's metrics: hand it to its apps (a simple App's `AppConfig::metrics`) so that
    /// they count into the series `/metrics` serves, under the runner's one prefix; see the
    /// [module docs](self).
    pub fn metrics(&self) -> &MetricsRegistry {
        &self.metrics
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
    /// shutdown returns at once. See the [module docs](self) for every outcome.
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
            // Dropped here: the apps' controllers hold what they registered in it.
            informers: _,
            apps,
            listener,
            webhook,
            shutdown_hooks: _,
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
        let mut servers = start_servers(
            listener,
            metrics.registry().clone(),
            Arc::clone(&health),
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
        tracing::info!(%addr, "serving /metrics, /livez and /readyz");

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
