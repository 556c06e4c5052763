//! # kubeapp-runner
//!
//! Running kubeapp apps as an operator process, in a crate of its own so that a controller
//! written with `kubeapp-operator` alone (an `InformerController` and typed handlers) compiles no
//! HTTP server, no webhook TLS server and no metrics exporter. Three rooms:
//!
//! - the [`Runner`] (this page): runs one or more [`App`]s, serves their metrics and health over
//!   plain HTTP, and stops them gracefully; [`default_client`] and [`default_client_with_metrics`]
//!   find a Kubernetes client in the environment;
//! - [`webhook`]: the HTTPS server of the apps' admission and conversion hooks, which a Runner
//!   starts when [`RunnerConfig::webhook`] is set;
//! - [`client_metrics`]: a `kube::Client` whose requests are counted and timed, and its
//!   [`ClientMetrics`](client_metrics::ClientMetrics) set.
//!
//! The metrics registry a Runner owns ([`MetricsRegistry`]) stays in `kubeapp-operator`, so that
//! the controller, the components and the phases register their sets in it without depending
//! on this crate.
//!
//! # What it does
//!
//! - **Apps.** [`Runner::run`] (or [`Runner::run_until`]) calls every app's
//!   [`App::run`] concurrently, each on its own task, with one shared stop token.
//! - **HTTP** on [`RunnerConfig::metrics_addr`] (default `0.0.0.0:9090`), plain HTTP/1.1:
//!   - `GET /metrics`: the Prometheus text format of the runner's [`Registry`]
//!     ([`Runner::registry`]), owned by its [`MetricsRegistry`] ([`Runner::metrics`]). That
//!     handle holds the kubeapp collector sets (controller, finalizer patches, the Kubernetes
//!     client's, any other [`MetricSet`](kubeapp_operator::MetricSet)), each created once per
//!     runner: hand it to the apps (`AppConfig::metrics` of `kubeapp-simple`,
//!     or its sets to [`ControllerConfig::metrics`](kubeapp_operator::ControllerConfig::metrics) and
//!     [`OpinionatedOptions::metrics`](kubeapp_operator::OpinionatedOptions::metrics)), as
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
//! hooks over HTTPS ([`webhook`], default port 8443), bound in [`Runner::bind`] (its
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
//! use kubeapp_runner::{Runner, RunnerConfig};
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
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod accept_backoff;
pub mod client_metrics;
pub mod http_server;
pub mod metrics_auth;
mod runner;
pub mod webhook;

pub use runner::{
    ClientError, EXIT_WORK_ABANDONED, Runner, RunnerConfig, RunnerError, default_client,
    default_client_with_metrics,
};

// Named by the crate docs above.
#[cfg(doc)]
use kubeapp_operator::MetricsRegistry;
#[cfg(doc)]
use kubeapp_sdk::app::App;
#[cfg(doc)]
use prometheus::Registry;
