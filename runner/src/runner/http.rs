//! The plain-HTTP server: `/metrics`, `/debug/kubeapp`, `/livez` and `/readyz`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::join_all;
use http::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use kubeapp_sdk::app::App;
use prometheus::{Encoder as _, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::debug::{self, DEBUG_PATH, DiagnosticsSource};
use crate::accept_backoff::AcceptBackoff;
use crate::http_server::{Request, Response, full, http1, json, no_route, text};
use crate::metrics_auth::MetricsAuth;

/// How long a client of the metrics port has to send a complete request header (also the most
/// an idle keep-alive connection stays open).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers read: shared between the runner and its server.
pub(crate) struct HealthState {
    /// The apps whose health checks `/readyz` evaluates.
    pub apps: Vec<Arc<dyn App>>,
    /// Set when the graceful shutdown begins: `/readyz` then fails.
    pub shutting_down: AtomicBool,
    /// The longest one health check may take before it counts as failed.
    pub check_timeout: Duration,
}

/// The routes of the metrics and health server: `/metrics` and `/debug/kubeapp` behind the
/// [guard](debug::guard), the probes open. `GET` (or `HEAD`) only.
pub(crate) struct MetricsRoutes {
    pub(crate) registry: Registry,
    pub(crate) health: Arc<HealthState>,
    pub(crate) diagnostics: Arc<DiagnosticsSource>,
    pub(crate) auth: Option<Arc<MetricsAuth>>,
}

impl MetricsRoutes {
    /// Answers one request from `peer` (the guard lets only loopback peers read the diagnostics
    /// when the port does not authenticate).
    pub(crate) async fn handle(&self, request: Request, peer: SocketAddr) -> Response {
        // No route reads a body.
        let (request, _body) = request.into_parts();
        let path = request.uri.path();
        let known = matches!(path, "/livez" | "/readyz" | "/metrics" | DEBUG_PATH);
        if !known || !matches!(request.method, Method::GET | Method::HEAD) {
            return no_route(known);
        }
        match path {
            "/livez" => text(StatusCode::OK, "ok\n"),
            "/readyz" => readyz(&self.health).await,
            _ => {
                if let Some(refusal) = debug::guard(self.auth.as_deref(), &request, peer).await {
                    return refusal;
                }
                if path == DEBUG_PATH {
                    json(&self.diagnostics.report())
                } else {
                    metrics(&self.registry)
                }
            }
        }
    }
}

/// Serves `routes` on `listener` (HTTP/1.1) until `stop` is cancelled, then stops accepting and
/// lets open requests finish (the runner bounds that wait).
pub(super) async fn serve(
    listener: TcpListener,
    routes: MetricsRoutes,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let routes = Arc::new(routes);
    let graceful = GracefulShutdown::new();
    let mut backoff = AcceptBackoff::new(Duration::from_millis(5), Duration::from_secs(1));
    loop {
        let Some((tcp, peer)) = backoff.accept(&listener, &stop, "metrics").await else {
            break;
        };
        let routes = Arc::clone(&routes);
        let service = hyper::service::service_fn(move |request| {
            let routes = Arc::clone(&routes);
            async move {
                let request = crate::http_server::boxed_request(request);
                Ok::<_, std::convert::Infallible>(routes.handle(request, peer).await)
            }
        });
        let connection =
            graceful.watch(http1(HEADER_READ_TIMEOUT).serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%peer, %err, "metrics port connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

fn metrics(registry: &Registry) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&registry.gather(), &mut body) {
        Ok(()) => full(StatusCode::OK, prometheus::TEXT_FORMAT, body),
        Err(error) => {
            tracing::error!(%error, "encoding the metrics failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding the metrics failed: {error}\n"),
            )
        }
    }
}

async fn readyz(health: &HealthState) -> Response {
    let (ready, body) = readiness(health).await;
    let status = if ready {
        StatusCode::OK
    } else {
        tracing::debug!(report = %body, "not ready");
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, body)
}

/// Evaluates every health check of every app, concurrently, each bounded by the check timeout.
/// Returns whether all passed, and the report: one line per check, `app/check: ok` or
/// `app/check: error: reason`, then `ready` or `not ready`.
pub(super) async fn readiness(health: &HealthState) -> (bool, String) {
    let checks = health.apps.iter().flat_map(|app| {
        app.health_checks()
            .into_iter()
            .map(move |check| (app.name().to_string(), check))
    });
    let results = join_all(checks.map(|(app, check)| async move {
        let name = format!("{app}/{}", check.name());
        let result = match tokio::time::timeout(health.check_timeout, check.check()).await {
            Ok(result) => result,
            Err(_) => Err(format!("timed out after {:?}", health.check_timeout)),
        };
        (name, result)
    }))
    .await;

    let mut ready = true;
    let mut body = String::new();
    if health.shutting_down.load(Ordering::SeqCst) {
        ready = false;
        body.push_str("runner: error: shutting down\n");
    }
    for (name, result) in results {
        // Writing into a String cannot fail.
        let _ = match result {
            Ok(()) => writeln!(body, "{name}: ok"),
            Err(reason) => {
                ready = false;
                writeln!(body, "{name}: error: {reason}")
            }
        };
    }
    body.push_str(if ready { "ready\n" } else { "not ready\n" });
    (ready, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use kube::api::ApiResource;
    use kubeapp_sdk::app::{AppError, HealthCheck};

    struct Check(&'static str, Result<(), &'static str>);

    #[async_trait]
    impl HealthCheck for Check {
        fn name(&self) -> String {
            self.0.to_string()
        }
        async fn check(&self) -> Result<(), String> {
            self.1.map_err(str::to_string)
        }
    }

    struct Hanging;

    #[async_trait]
    impl HealthCheck for Hanging {
        fn name(&self) -> String {
            "hangs".to_string()
        }
        async fn check(&self) -> Result<(), String> {
            std::future::pending().await
        }
    }

    struct WithChecks(Vec<Arc<dyn HealthCheck>>);

    #[async_trait]
    impl App for WithChecks {
        fn name(&self) -> &str {
            "checked"
        }
        fn managed_kinds(&self) -> Vec<ApiResource> {
            Vec::new()
        }
        async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
            stop.cancelled().await;
            Ok(())
        }
        fn health_checks(&self) -> Vec<Arc<dyn HealthCheck>> {
            self.0.clone()
        }
    }

    fn state(checks: Vec<Arc<dyn HealthCheck>>) -> HealthState {
        HealthState {
            apps: vec![Arc::new(WithChecks(checks))],
            shutting_down: AtomicBool::new(false),
            check_timeout: Duration::from_millis(50),
        }
    }

    #[tokio::test]
    async fn the_report_lists_each_check_with_its_app() {
        let health = state(vec![
            Arc::new(Check("synced", Ok(()))),
            Arc::new(Check("db", Err("connection refused"))),
        ]);
        let (ready, body) = readiness(&health).await;
        assert!(!ready);
        assert_eq!(
            body,
            "checked/synced: ok\nchecked/db: error: connection refused\nnot ready\n"
        );
    }

    #[tokio::test]
    async fn a_hanging_check_fails_after_the_check_timeout() {
        let health = state(vec![Arc::new(Hanging), Arc::new(Check("synced", Ok(())))]);
        let (ready, body) = readiness(&health).await;
        assert!(!ready);
        assert!(
            body.starts_with("checked/hangs: error: timed out after 50ms\n"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn shutting_down_is_not_ready_even_with_passing_checks() {
        let health = state(vec![Arc::new(Check("synced", Ok(())))]);
        assert_eq!(
            readiness(&health).await,
            (true, "checked/synced: ok\nready\n".into())
        );
        health.shutting_down.store(true, Ordering::SeqCst);
        let (ready, body) = readiness(&health).await;
        assert!(!ready);
        assert!(body.starts_with("runner: error: shutting down\n"), "{body}");
    }
}
