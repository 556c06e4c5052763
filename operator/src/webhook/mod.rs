//! The HTTPS webhook server: admission (`POST /validate`, `POST /mutate`) and conversion
//! (`POST /convert`) calls from kube-apiserver, routed to the apps' hooks.
//!
//! - **Routing.** A review goes to the app whose [`managed_kinds`](kubeapp_sdk::app::App::managed_kinds)
//!   contain the review's group and kind; the hook called is the app's `validate`, `mutate` or
//!   `convert`. `mutate` returns the changed object and the server computes the JSON patch.
//! - **Errors never crash the server.** Malformed or oversized bodies, a wrong content type, a
//!   kind no app manages or a hook the app lacks, and a hook that panics each get an HTTP status
//!   and a one-line message (table in [`review`](self#statuses)); the server goes on serving.
//! - **TLS** with rustls (ring). The certificate and key are PEM files; they are read again when
//!   they change, so the handshake after a rotation uses the new certificate (see [`ReloadingCert`]).
//!
//! # Statuses
//!
//! | situation | status |
//! |---|---|
//! | the hook answered (admitted, denied with a message, mutated, converted or failed to convert) | 200, with the review |
//! | body not JSON, not a review, or larger than [`WebhookConfig::max_body_bytes`] | 400 |
//! | content type not `application/json` | 415 |
//! | no app manages the kind, or its app has no such hook | 404 |
//! | the hook panicked | 500 |
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kubeapp_operator::webhook::{WebhookConfig, WebhookServer};
//! use kubeapp_sdk::testenv::CertificateAuthority;
//! use tokio_util::sync::CancellationToken;
//!
//! // A development certificate; in a cluster the files come from a Secret (e.g. cert-manager).
//! let dir = tempfile::tempdir()?;
//! let cert = CertificateAuthority::new("dev-ca")?.issue_serving(&["127.0.0.1"])?;
//! std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem)?;
//! std::fs::write(dir.path().join("tls.key"), &cert.key_pem)?;
//!
//! let config = WebhookConfig::new(dir.path().join("tls.crt"), dir.path().join("tls.key"))
//!     .addr(([127, 0, 0, 1], 0).into());
//! let apps = Vec::new(); // the apps whose validate/mutate/convert hooks are served
//! let server = WebhookServer::bind(config, apps).await?;
//! assert_ne!(server.local_addr().port(), 0);
//! let stop = CancellationToken::new();
//! stop.cancel(); // a runner cancels this on shutdown
//! server.serve(stop).await?;
//! # Ok(())
//! # }
//! ```

mod review;
#[cfg(test)]
mod tests;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use kubeapp_sdk::app::App;
use tokio_util::sync::CancellationToken;

pub use self::tls::ReloadingCert;

/// The default body limit: the apiserver's own limit on a request is about 3 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Settings of the webhook server.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Where to listen; default `0.0.0.0:8443`.
    pub addr: SocketAddr,
    /// The PEM certificate chain.
    pub cert_path: PathBuf,
    /// The PEM private key.
    pub key_path: PathBuf,
    /// Bodies larger than this are refused with 400.
    pub max_body_bytes: usize,
}

impl WebhookConfig {
    /// Defaults, with the certificate and key files.
    pub fn new(cert_path: impl Into<PathBuf>, key_path: impl Into<PathBuf>) -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 8443)),
            cert_path: cert_path.into(),
            key_path: key_path.into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// Listens on `addr` instead.
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Refuses bodies larger than `bytes`.
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }
}

/// What can stop the webhook server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A certificate or key file is missing or unusable.
    #[error("webhook TLS file {path}: {message}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The TLS configuration could not be built.
    #[error("webhook TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The address could not be bound.
    #[error("binding the webhook server to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// The review handlers as a plain (not TLS) router, for embedding behind another TLS terminator
/// or for tests.
pub fn router(apps: Vec<Arc<dyn App>>, max_body_bytes: usize) -> Router {
    let state = review::Apps {
        apps: Arc::new(apps),
        max_body_bytes,
    };
    Router::new()
        .route("/validate", post(review::validate))
        .route("/mutate", post(review::mutate))
        .route("/convert", post(review::convert))
        .with_state(state)
}

/// A bound HTTPS webhook server; [`serve`](Self::serve) runs it.
pub struct WebhookServer {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
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
        })
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
