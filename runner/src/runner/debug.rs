//! `/debug/kubeapp`: the process's diagnostics as JSON (see [`kubeapp_sdk::diagnostics`]), and
//! the guard of the metrics port: with [`MetricsAuth`] every path but the probes needs a
//! reviewed bearer token; without it, `/debug/kubeapp` answers only loopback clients (it names
//! objects, kinds and replicas: not for whoever can reach the pod's port).

use std::net::SocketAddr;
use std::sync::Arc;

use http::{StatusCode, header};
use kubeapp_operator::{ControllerMetrics, Informers};
use kubeapp_sdk::app::App;
use kubeapp_sdk::diagnostics::Diagnostics;

use crate::http_server::{Response, text};
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
        report.calls = self.controller.handler_calls();
        report
    }
}

/// Whether a request to a guarded path from `peer` may pass: `None` lets it through, else the
/// 401/403/503 answer (see the module docs).
pub(super) async fn guard(
    auth: Option<&MetricsAuth>,
    request: &http::request::Parts,
    peer: SocketAddr,
) -> Option<Response> {
    let path = request.uri.path();
    match auth {
        Some(auth) => {
            let authorization = request
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok());
            let error = auth.check(authorization, path).await.err()?;
            let status = match &error {
                MetricsAuthError::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
                MetricsAuthError::Forbidden { .. } => StatusCode::FORBIDDEN,
                MetricsAuthError::ReviewFailed { .. } => StatusCode::SERVICE_UNAVAILABLE,
            };
            tracing::debug!(%path, %error, "metrics port request refused");
            Some(text(status, format!("{error}\n")))
        }
        None if path == DEBUG_PATH && !peer.ip().is_loopback() => Some(text(
            StatusCode::FORBIDDEN,
            format!(
                "{DEBUG_PATH} answers only loopback clients unless the metrics port \
                 authenticates (--metrics-auth)\n"
            ),
        )),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use http::StatusCode;
    use http_body_util::{BodyExt as _, Empty};
    use kubeapp_operator::{Informers, MetricsRegistry};
    use prometheus::Registry;

    use super::DiagnosticsSource;
    use crate::runner::http::{HealthState, MetricsRoutes};

    async fn status_from(peer: [u8; 4], path: &str) -> StatusCode {
        status_of(http::Method::GET, peer, path).await
    }

    async fn status_of(method: http::Method, peer: [u8; 4], path: &str) -> StatusCode {
        let metrics = MetricsRegistry::new(None).expect("a registry");
        let routes = MetricsRoutes {
            registry: Registry::new(),
            health: Arc::new(HealthState {
                apps: Vec::new(),
                shutting_down: AtomicBool::new(false),
                check_timeout: Duration::from_secs(1),
            }),
            diagnostics: Arc::new(DiagnosticsSource {
                informers: Informers::new(),
                controller: metrics.controller(),
                apps: Vec::new(),
            }),
            auth: None,
        };
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(Empty::new().map_err(|never| match never {}).boxed_unsync())
            .expect("a request");
        routes
            .handle(request, SocketAddr::from((peer, 40000)))
            .await
            .status()
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

    #[tokio::test]
    async fn unknown_paths_get_404_and_other_methods_405() {
        assert_eq!(
            status_from([127, 0, 0, 1], "/nope").await,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status_of(http::Method::POST, [127, 0, 0, 1], "/metrics").await,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            status_of(http::Method::HEAD, [127, 0, 0, 1], "/livez").await,
            StatusCode::OK
        );
    }
}
