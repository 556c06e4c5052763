//! The runner's HTTP servers: started on their own tasks, stopped with a grace period.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::debug::DiagnosticsSource;
use super::http::{self, HealthState, MetricsRoutes};
use crate::metrics_auth::MetricsAuth;

/// How long the metrics server gets to finish open requests once the apps have stopped (the
/// webhook server adds its own drain timeout).
pub(super) const SERVER_GRACE: Duration = Duration::from_secs(5);

/// Starts the runner's servers, each on its own task, all stopped by `stop`.
///
/// Seam for the webhook server: the HTTPS admission/conversion server (contract section 9, port
/// 8443) is one more `servers.spawn` here, taking the apps for routing; the rest of the runner
/// (failure handling, the stop sequence) already treats every entry alike.
pub(super) fn start_servers(
    listener: TcpListener,
    registry: Registry,
    health: Arc<HealthState>,
    diagnostics: Arc<DiagnosticsSource>,
    auth: Option<Arc<MetricsAuth>>,
    stop: &CancellationToken,
) -> JoinSet<(&'static str, std::io::Result<()>)> {
    let mut servers = JoinSet::new();
    spawn_server(
        &mut servers,
        "metrics",
        http::serve(
            listener,
            MetricsRoutes {
                registry,
                health,
                diagnostics,
                auth,
            },
            stop.clone(),
        ),
    );
    servers
}

/// Spawns one server; a panic in it becomes its error.
pub(super) fn spawn_server(
    servers: &mut JoinSet<(&'static str, std::io::Result<()>)>,
    name: &'static str,
    server: impl Future<Output = std::io::Result<()>> + Send + 'static,
) {
    servers.spawn(async move {
        let result = AssertUnwindSafe(server)
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the server panicked")));
        (name, result)
    });
}

/// Stops the servers gracefully, giving open requests `grace`.
pub(super) async fn stop_servers(
    mut servers: JoinSet<(&'static str, std::io::Result<()>)>,
    stop: &CancellationToken,
    grace: Duration,
) {
    stop.cancel();
    let all_stopped = tokio::time::timeout(grace, async {
        while let Some(joined) = servers.join_next().await {
            match joined {
                Ok((_, Ok(()))) => {}
                Ok((server, Err(error))) => {
                    tracing::warn!(server, %error, "server stopped with an error")
                }
                Err(error) => tracing::warn!(%error, "server task failed"),
            }
        }
    })
    .await;
    if all_stopped.is_err() {
        tracing::warn!(?grace, "open HTTP requests did not finish; dropping them");
        servers.abort_all();
    }
}
