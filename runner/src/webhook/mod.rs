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
//! # Limits
//!
//! Idle, slow or numerous clients cannot take the server down; every limit is a
//! [`WebhookConfig`] field:
//!
//! | what | default | behaviour |
//! |---|---|---|
//! | TLS handshake | [`tls_handshake_timeout`](WebhookConfig::tls_handshake_timeout) 10 s | a connection that sends no or half a ClientHello is closed |
//! | request header | [`header_read_timeout`](WebhookConfig::header_read_timeout) 10 s | HTTP/1.1: a header not complete in time (also an idle keep-alive connection) closes the connection; HTTP/2: a connection with no request in time is closed |
//! | connections | [`max_connections`](WebhookConfig::max_connections) 512 | at the cap nothing more is accepted: new clients wait in the kernel's listen backlog (they are not refused) until a connection closes |
//! | failed `accept` | [`accept_backoff_min`](WebhookConfig::accept_backoff_min) 5 ms to [`accept_backoff_max`](WebhookConfig::accept_backoff_max) 1 s | out of file descriptors, the loop pauses (doubling) instead of spinning, one warning per attempt |
//! | stop | [`drain_timeout`](WebhookConfig::drain_timeout) 10 s | no new connections; requests in flight finish, idle connections close; what is still open after the timeout is closed |
//! | body | [`max_body_bytes`](WebhookConfig::max_body_bytes) 3 MiB | 413 naming the limit: before `100 Continue` when `Content-Length` announces more, else as soon as the limit is passed |
//! | rest of a refused body | [`oversized_drain_bytes`](WebhookConfig::oversized_drain_bytes) 32 MiB, [`oversized_drain_timeout`](WebhookConfig::oversized_drain_timeout) 10 s | read and discarded after the 413 started, so a client still uploading reads its status instead of a reset; past either bound the connection is closed |
//!
//! The open-file limit applies to the whole process: keep `max_connections` below it, with room
//! for the process's other files and sockets. A [`Runner`](crate::Runner) also keeps the
//! server accepting during its [shutdown delay](crate::RunnerConfig::shutdown_delay)
//! after SIGTERM, before it drains.
//!
//! # Statuses
//!
//! | situation | status |
//! |---|---|
//! | the hook answered (admitted, denied with a message, mutated, converted or failed to convert) | 200, with the review |
//! | body not JSON or not a review | 400 |
//! | body larger than [`WebhookConfig::max_body_bytes`] | 413, naming the limit |
//! | content type not `application/json` | 415 |
//! | no app manages the kind, or its app has no such hook | 404 |
//! | the hook panicked | 500 |
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kubeapp_runner::webhook::{WebhookConfig, WebhookServer};
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
//! server.serve(stop).await?; // returns once drained
//! # Ok(())
//! # }
//! ```

mod body;
mod config;
mod review;
mod server;
#[cfg(test)]
mod tests;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http::Method;
use kubeapp_sdk::app::App;

use self::body::BodyLimits;
pub use self::config::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_OVERSIZED_DRAIN_BYTES, DEFAULT_OVERSIZED_DRAIN_TIMEOUT,
    WebhookConfig,
};
pub use self::server::WebhookServer;
pub use self::tls::ReloadingCert;
use crate::http_server::{RequestBodyError, Response, boxed_request, no_route};

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
    #[error("webhook TLS configuration")]
    Tls(#[from] rustls::Error),
    /// The address could not be bound.
    #[error("binding the webhook server to {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// The review handlers without TLS, for embedding behind another TLS terminator or for tests:
/// `POST /validate`, `POST /mutate` and `POST /convert`; any other path is 404, another method
/// 405. Bodies past `max_body_bytes` are refused with 413; the rest of such a body is discarded
/// within the defaults of [`WebhookConfig::oversized_drain_bytes`] and
/// [`WebhookConfig::oversized_drain_timeout`] (see the [limits](self#limits)).
pub fn router(apps: Vec<Arc<dyn App>>, max_body_bytes: usize) -> WebhookRouter {
    router_with_limits(
        apps,
        BodyLimits {
            max_body_bytes,
            drain_bytes: DEFAULT_OVERSIZED_DRAIN_BYTES,
            drain_timeout: DEFAULT_OVERSIZED_DRAIN_TIMEOUT,
        },
    )
}

/// [`router`] with every body limit given.
fn router_with_limits(apps: Vec<Arc<dyn App>>, limits: BodyLimits) -> WebhookRouter {
    WebhookRouter {
        apps: review::Apps {
            apps: Arc::new(apps),
            limits,
        },
    }
}

/// The webhook server's routes (see [`router`]): call [`handle`](Self::handle), or use it as a
/// `tower::Service` of any HTTP server. Cheap to clone.
#[derive(Clone)]
pub struct WebhookRouter {
    apps: review::Apps,
}

impl std::fmt::Debug for WebhookRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookRouter")
            .field("apps", &self.apps.apps.len())
            .finish_non_exhaustive()
    }
}

impl WebhookRouter {
    /// Answers one request (any body type: hyper's, or a test's `Full`).
    pub async fn handle<B>(&self, request: http::Request<B>) -> Response
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<RequestBodyError>,
    {
        let request = boxed_request(request);
        let post = request.method() == Method::POST;
        match request.uri().path() {
            "/validate" if post => review::validate(&self.apps, request).await,
            "/mutate" if post => review::mutate(&self.apps, request).await,
            "/convert" if post => review::convert(&self.apps, request).await,
            path => no_route(matches!(path, "/validate" | "/mutate" | "/convert")),
        }
    }
}

impl<B> tower::Service<http::Request<B>> for WebhookRouter
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<RequestBodyError>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let router = self.clone();
        Box::pin(async move { Ok(router.handle(request).await) })
    }
}
