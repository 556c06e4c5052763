//! The bound HTTPS server: its accept loop, one task per connection, and the drain on stop.
//!
//! Built on hyper: its HTTP/1.1 server serves each connection (with the `http2` feature,
//! hyper-util's `auto::Builder` serves HTTP/1.1 or HTTP/2, as the TLS handshake negotiated through
//! ALPN), and hyper-util's `GracefulShutdown` tells every open connection to finish what it is
//! doing and close when the server stops. What is ours is only the accept loop: the connection
//! cap, the pause after failed accepts, and the timeouts of the phases hyper does not bound (the
//! TLS handshake, an HTTP/2 client that never sends a request).

use std::net::SocketAddr;
use std::sync::Arc;
#[cfg(feature = "http2")]
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use kubeapp_sdk::app::App;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{ReloadingCert, WebhookConfig, WebhookError, WebhookRouter, router_with_limits};
use crate::accept_backoff::AcceptBackoff;

/// The protocols offered in the TLS handshake, most preferred first.
#[cfg(feature = "http2")]
const ALPN_PROTOCOLS: &[&[u8]] = &[b"h2", b"http/1.1"];
/// The protocols offered in the TLS handshake (HTTP/2 only with the `http2` feature).
#[cfg(not(feature = "http2"))]
const ALPN_PROTOCOLS: &[&[u8]] = &[b"http/1.1"];

/// A bound HTTPS webhook server; [`serve`](Self::serve) runs it.
pub struct WebhookServer {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: WebhookRouter,
    config: WebhookConfig,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

/// What one connection task needs, shared by all of them.
#[derive(Clone)]
struct ConnectionSettings {
    acceptor: tokio_rustls::TlsAcceptor,
    router: WebhookRouter,
    handshake_timeout: Duration,
    header_timeout: Duration,
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
        tls.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| WebhookError::Bind {
                addr: config.addr,
                source,
            })?;
        Ok(Self {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            router: router_with_limits(apps, config.body_limits()),
            config,
        })
    }

    /// Routes reviews to `apps` from now on, in place of the apps given to [`bind`](Self::bind)
    /// (a [`Runner`](crate::Runner) does this at start, with every app it runs).
    pub(crate) fn route_to(&mut self, apps: Vec<Arc<dyn App>>) {
        self.router = router_with_limits(apps, self.config.body_limits());
    }

    /// How long [`serve`](Self::serve) drains after its stop (the runner waits that long for it).
    pub(crate) fn drain_timeout(&self) -> Duration {
        self.config.drain_timeout
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves until `stop` is cancelled, then stops accepting and drains: requests in flight get
    /// up to [`WebhookConfig::drain_timeout`] to finish, idle connections close at once.
    /// A failed handshake or connection is logged and does not affect other connections; see the
    /// [module docs](super#limits) for the limits applied.
    pub async fn serve(self, stop: CancellationToken) -> Result<(), WebhookError> {
        let Self {
            listener,
            acceptor,
            router,
            config,
        } = self;
        let settings = ConnectionSettings {
            acceptor,
            router,
            handshake_timeout: config.tls_handshake_timeout,
            header_timeout: config.header_read_timeout,
        };
        let graceful = GracefulShutdown::new();
        let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
        let mut connections = JoinSet::new();
        let mut backoff = AcceptBackoff::new(config.accept_backoff_min, config.accept_backoff_max);
        loop {
            // Finished connection tasks leave the set (their slots are free already).
            while connections.try_join_next().is_some() {}
            // A free slot first: at the cap nothing is accepted, so new clients wait in the
            // kernel's listen backlog instead of taking file descriptors.
            let permit = tokio::select! {
                () = stop.cancelled() => break,
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_closed) => break, // never closed: the semaphore is ours
                },
            };
            let Some((tcp, peer)) = backoff.accept(&listener, &stop, "webhook").await else {
                break;
            };
            connections.spawn(serve_connection(
                tcp,
                peer,
                settings.clone(),
                graceful.watcher(),
                permit,
            ));
        }
        // Stop accepting: connects from now on are refused, not left in a backlog.
        drop(listener);
        let open = connections.len();
        tracing::info!(open, drain_timeout = ?config.drain_timeout, "webhook server draining");
        let drained = tokio::time::timeout(config.drain_timeout, graceful.shutdown()).await;
        if drained.is_err() {
            tracing::warn!(
                still_open = connections.len(),
                drain_timeout = ?config.drain_timeout,
                "webhook requests did not finish within the drain timeout; closing their connections"
            );
        }
        // Every connection has ended (or is abandoned): end their tasks too.
        connections.shutdown().await;
        Ok(())
    }
}

/// One connection: the TLS handshake within its timeout, then HTTP until the client closes, a
/// timeout closes it, or the server drains it.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    settings: ConnectionSettings,
    watcher: Watcher,
    _slot: OwnedSemaphorePermit,
) {
    let handshake = tokio::time::timeout(settings.handshake_timeout, settings.acceptor.accept(tcp));
    let tls = match handshake.await {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            tracing::debug!(%peer, %err, "webhook TLS handshake failed");
            return;
        }
        Err(_elapsed) => {
            tracing::debug!(%peer, timeout = ?settings.handshake_timeout, "webhook TLS handshake timed out");
            return;
        }
    };
    let io = TokioIo::new(tls);
    let router = settings.router;
    #[cfg(feature = "http2")]
    if io.inner().get_ref().1.alpn_protocol() == Some(b"h2".as_slice()) {
        return serve_http2(io, peer, router, settings.header_timeout, watcher).await;
    }
    let service = hyper::service::service_fn(move |request| {
        let router = router.clone();
        async move { Ok::<_, std::convert::Infallible>(router.handle(request).await) }
    });
    let connection =
        crate::http_server::http1(settings.header_timeout).serve_connection(io, service);
    if let Err(err) = watcher.watch(connection).await {
        tracing::debug!(%peer, %err, "webhook connection ended with an error");
    }
}

/// One HTTP/2 connection. hyper bounds no phase of it before the first request: a client that
/// sends none within the header timeout is disconnected here (once one came, the deadline no
/// longer applies).
#[cfg(feature = "http2")]
async fn serve_http2(
    io: TokioIo<tokio_rustls::server::TlsStream<TcpStream>>,
    peer: SocketAddr,
    router: WebhookRouter,
    header_timeout: Duration,
    watcher: Watcher,
) {
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    use hyper_util::server::conn::auto;

    let requested = Arc::new(AtomicBool::new(false));
    let marker = Arc::clone(&requested);
    let service = hyper::service::service_fn(move |request| {
        marker.store(true, Ordering::Relaxed);
        let router = router.clone();
        async move { Ok::<_, std::convert::Infallible>(router.handle(request).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new()).http2_only();
    builder.http2().timer(TokioTimer::new());
    let connection = watcher.watch(builder.serve_connection(io, service).into_owned());
    let first_request_deadline = async {
        tokio::time::sleep(header_timeout).await;
        if requested.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = connection => if let Err(err) = served {
            tracing::debug!(%peer, %err, "webhook connection ended with an error");
        },
        () = first_request_deadline => {
            tracing::debug!(%peer, timeout = ?header_timeout, "webhook connection sent no request; closing it");
        }
    }
}
