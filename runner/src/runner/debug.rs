//! `/debug/kubeapp`: the process's diagnostics as JSON (see [`kubeapp_sdk::diagnostics`]), and
//! the guard of the metrics port: with [`MetricsAuth`] every path but the probes needs a
//! reviewed bearer token; without it, `/debug/kubeapp` answers only loopback clients (it names
//! objects, kinds and replicas: not for whoever can reach the pod's port).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::connect_info::MockConnectInfo;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kubeapp_operator::{ControllerMetrics, Informers};
use kubeapp_sdk::app::App;
use kubeapp_sdk::diagnostics::Diagnostics;

use crate::metrics_auth::{MetricsAuth, MetricsAuthError};

/// The diagnostics endpoint's path.
pub(crate) const DEBUG_PATH: &str = "/debug/kubeapp";

/// What the diagnostics are read from.
pub(super) struct DiagnosticsSource {
    pub informers: Informers,
    pub controller: ControllerMetrics,
    pub apps: Vec<Arc<dyn App>>,
}

impl DiagnosticsSource {
    /// The report now.
    pub(super) fn report(&self) -> Diagnostics {
        let mut report = Diagnostics::default();
        report.informers = self.informers.diagnostics();
        report.kinds = self.controller.kind_diagnostics();
        report.apps = self.apps.iter().map(|app| app.diagnostics()).collect();
        report
    }
}

/// `GET /debug/kubeapp`.
pub(super) async fn diagnostics(State(source): State<Arc<DiagnosticsSource>>) -> Response {
    Json(source.report()).into_response()
}

/// Lets a request to a guarded path through, or answers 401/403/503 (see the module docs).
pub(super) async fn guard(
    State(auth): State<Option<Arc<MetricsAuth>>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    match auth {
        Some(auth) => {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok());
            match auth.check(authorization, &path).await {
                Ok(()) => next.run(request).await,
                Err(error) => {
                    let status = match &error {
                        MetricsAuthError::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
                        MetricsAuthError::Forbidden { .. } => StatusCode::FORBIDDEN,
                        MetricsAuthError::ReviewFailed { .. } => StatusCode::SERVICE_UNAVAILABLE,
                    };
                    tracing::debug!(%path, %error, "metrics port request refused");
                    (status, format!("{error}\n")).into_response()
                }
            }
        }
        None if path == DEBUG_PATH && !from_loopback(&request) => (
            StatusCode::FORBIDDEN,
            format!(
                "{DEBUG_PATH} answers only loopback clients unless the metrics port \
                 authenticates (--metrics-auth)\n"
            ),
        )
            .into_response(),
        None => next.run(request).await,
    }
}

/// Whether the request came over a loopback connection (unknown peers are not). The peer is
/// what the server recorded, or what a test's `MockConnectInfo` stands in for it.
fn from_loopback(request: &Request) -> bool {
    let extensions = request.extensions();
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer)
        .or_else(|| {
            extensions
                .get::<MockConnectInfo<SocketAddr>>()
                .map(|MockConnectInfo(peer)| *peer)
        });
    peer.is_some_and(|peer| peer.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use axum::body::Body;
    use axum::extract::connect_info::MockConnectInfo;
    use axum::http::{Request, StatusCode};
    use kubeapp_operator::{Informers, MetricsRegistry};
    use prometheus::Registry;
    use tower::ServiceExt as _;

    use super::DiagnosticsSource;
    use crate::runner::http::{HealthState, router};

    async fn status_from(peer: [u8; 4], path: &str) -> StatusCode {
        let metrics = MetricsRegistry::new(None).expect("a registry");
        let diagnostics = Arc::new(DiagnosticsSource {
            informers: Informers::new(),
            controller: metrics.controller(),
            apps: Vec::new(),
        });
        let health = Arc::new(HealthState {
            apps: Vec::new(),
            shutting_down: AtomicBool::new(false),
            check_timeout: Duration::from_secs(1),
        });
        let app = router(Registry::new(), health, diagnostics, None)
            .layer(MockConnectInfo(SocketAddr::from((peer, 40000))));
        let request = Request::get(path).body(Body::empty()).expect("a request");
        app.oneshot(request).await.expect("an answer").status()
    }

    #[tokio::test]
    async fn without_auth_the_diagnostics_answer_only_loopback_peers() {
        assert_eq!(
            status_from([127, 0, 0, 1], "/debug/kubeapp").await,
            StatusCode::OK
        );
        assert_eq!(
            status_from([10, 1, 2, 3], "/debug/kubeapp").await,
            StatusCode::FORBIDDEN
        );
        // The metrics and the probes stay open to everyone without auth.
        assert_eq!(status_from([10, 1, 2, 3], "/metrics").await, StatusCode::OK);
        assert_eq!(status_from([10, 1, 2, 3], "/livez").await, StatusCode::OK);
    }
}
