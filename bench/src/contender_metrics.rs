//! The `/metrics` endpoint of the contenders that have none of their own (kube-runtime, the floor
//! and the cache contenders): a Prometheus registry served on `127.0.0.1:<--metrics-port>`, so the
//! tool reads every contender the same way ([`crate::scrape`]).

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::{Encoder as _, IntCounter, Registry, TextEncoder};

/// The counter of reconcile calls that kube-runtime's contender and the floor export.
pub const RECONCILES_TOTAL: &str = "kubeapp_bench_reconciles_total";

/// A contender's registry with its reconcile counter.
#[derive(Clone, Debug)]
pub struct ContenderMetrics {
    registry: Registry,
    reconciles: IntCounter,
}

impl ContenderMetrics {
    /// A registry holding [`RECONCILES_TOTAL`].
    ///
    /// # Errors
    ///
    /// Never in practice (the name is valid and registered once).
    pub fn new() -> anyhow::Result<Self> {
        let registry = Registry::new();
        let reconciles = IntCounter::new(RECONCILES_TOTAL, "Reconcile calls of the contender.")
            .context("creating the reconcile counter")?;
        registry
            .register(Box::new(reconciles.clone()))
            .context("registering the reconcile counter")?;
        Ok(Self {
            registry,
            reconciles,
        })
    }

    /// Counts one reconcile call.
    pub fn reconciled(&self) {
        self.reconciles.inc();
    }

    /// The registry, for more collectors.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Serves `GET /metrics` on `127.0.0.1:port` in a background task (port 0: nothing served).
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub async fn serve(&self, port: u16) -> anyhow::Result<()> {
        if port == 0 {
            return Ok(());
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the metrics port {addr}"))?;
        let router = Router::new()
            .route("/metrics", get(metrics))
            .with_state(self.registry.clone());
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::warn!(%error, "the metrics server stopped");
            }
        });
        Ok(())
    }
}

async fn metrics(State(registry): State<Registry>) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&registry.gather(), &mut body) {
        Ok(()) => ([(header::CONTENT_TYPE, encoder.format_type())], body).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}
