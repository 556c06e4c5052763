//! The plain-HTTP server: `/metrics`, `/debug/kubeapp`, `/livez` and `/readyz`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::join_all;
use kubeapp_sdk::app::App;
use prometheus::{Encoder as _, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::debug::{self, DEBUG_PATH, DiagnosticsSource};
use crate::metrics_auth::MetricsAuth;

/// What the handlers read: shared between the runner and its server.
pub(crate) struct HealthState {
    /// The apps whose health checks `/readyz` evaluates.
    pub apps: Vec<Arc<dyn App>>,
    /// Set when the graceful shutdown begins: `/readyz` then fails.
    pub shutting_down: AtomicBool,
    /// The longest one health check may take before it counts as failed.
    pub check_timeout: Duration,
}

/// The router of the metrics and health server: `/metrics` and `/debug/kubeapp` behind the
/// [guard](debug::guard), the probes open.
pub(crate) fn router(
    registry: Registry,
    health: Arc<HealthState>,
    diagnostics: Arc<DiagnosticsSource>,
    auth: Option<Arc<MetricsAuth>>,
) -> Router {
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry)
        .merge(
            Router::new()
                .route(DEBUG_PATH, get(debug::diagnostics))
                .with_state(diagnostics),
        )
        .layer(axum::middleware::from_fn_with_state(auth, debug::guard));
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(health)
        .merge(guarded)
}

/// Serves `router` on `listener` until `stop` is cancelled, then lets open requests finish.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    stop: CancellationToken,
) -> std::io::Result<()> {
    // The peer address tells loopback clients of `/debug/kubeapp` from others.
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(stop.cancelled_owned())
    .await
}

async fn metrics(State(registry): State<Registry>) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&registry.gather(), &mut body) {
        Ok(()) => ([(header::CONTENT_TYPE, encoder.format_type())], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding the metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding the metrics failed: {error}\n"),
            )
                .into_response()
        }
    }
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(health): State<Arc<HealthState>>) -> (StatusCode, String) {
    let (ready, body) = readiness(&health).await;
    let status = if ready {
        StatusCode::OK
    } else {
        tracing::debug!(report = %body, "not ready");
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
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
