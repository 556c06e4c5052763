//! The bound HTTPS server and its accept loop.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use kubeapp_sdk::app::App;
use tokio_util::sync::CancellationToken;

use super::{ReloadingCert, WebhookConfig, WebhookError, router};

/// A bound HTTPS webhook server; [`serve`](Self::serve) runs it.
pub struct WebhookServer {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    config: WebhookConfig,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

impl WebhookServer {
    /// Loads the certificate (an error names a missing or bad file) and binds the address.
    pub async fn bind(
        config: WebhookConfig,
        apps: Vec<Arc<dyn App>>,
    ) -> Result<Self, WebhookError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver = ReloadingCert::load(&config.cert_path, &config.key_path, provider.clone())?;
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| WebhookError::Bind {
                addr: config.addr,
                source,
            })?;
        Ok(Self {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            router: router(apps, config.max_body_bytes),
            config,
        })
    }

    /// Routes reviews to `apps` from now on, in place of the apps given to [`bind`](Self::bind).
    pub fn route_to(&mut self, apps: Vec<Arc<dyn App>>) {
        self.router = router(apps, self.config.max_body_bytes);
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves until `stop` is cancelled; connections in progress are closed with the server.
    /// A failed handshake or connection is logged and does not affect other connections.
    pub async fn serve(self, stop: CancellationToken) -> Result<(), WebhookError> {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        use hyper_util::service::TowerToHyperService;
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let (tcp, peer) = tokio::select! {
                () = stop.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::warn!(%err, "webhook accept failed");
                        continue;
                    }
                },
            };
            let acceptor = self.acceptor.clone();
            let service = TowerToHyperService::new(self.router.clone());
            let stop = stop.clone();
            connections.spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(err) => {
                        tracing::debug!(%peer, %err, "webhook TLS handshake failed");
                        return;
                    }
                };
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let connection = builder.serve_connection(TokioIo::new(tls), service);
                tokio::select! {
                    () = stop.cancelled() => {}
                    served = connection => if let Err(err) = served {
                        tracing::debug!(%peer, %err, "webhook connection ended with an error");
                    },
                }
            });
        }
        connections.close();
        connections.wait().await;
        Ok(())
    }
}
