//! [`WebhookConfig`]: address, certificate, and the limits that keep the server available.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The default body limit: the apiserver's own limit on a request is about 3 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The default of [`WebhookConfig::oversized_drain_bytes`]: 32 MiB.
pub const DEFAULT_OVERSIZED_DRAIN_BYTES: u64 = 32 * 1024 * 1024;

/// The default of [`WebhookConfig::oversized_drain_timeout`]: 10 s.
pub const DEFAULT_OVERSIZED_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the webhook server. Every limit has a default chosen so that idle or slow clients
/// cannot starve the apiserver's admission calls; see the [module docs](super#limits).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// Where to listen; default `0.0.0.0:8443`.
    pub addr: SocketAddr,
    /// The PEM certificate chain.
    pub cert_path: PathBuf,
    /// The PEM private key.
    pub key_path: PathBuf,
    /// Bodies larger than this are refused with 413 (default 3 MiB): before any of the body is
    /// read when `Content-Length` announces more (so before `100 Continue`), else as soon as the
    /// limit is passed.
    pub max_body_bytes: usize,
    /// After a 413, how many more bytes of the refused body are read and discarded (default
    /// 32 MiB), so that a client still uploading gets to read the status instead of a
    /// connection reset. A client sending more is cut off; either way the connection closes.
    pub oversized_drain_bytes: u64,
    /// After a 413, how long the rest of the refused body is read and discarded at most
    /// (default 10 s); a client still sending then is cut off.
    pub oversized_drain_timeout: Duration,
    /// How long a client has to complete the TLS handshake once its connection was accepted;
    /// default 10 s. A connection that sends nothing, or half a ClientHello, is closed after it.
    pub tls_handshake_timeout: Duration,
    /// How long a client has, once the handshake is done, to send a complete request header
    /// (HTTP/1.1: for every request, including between keep-alive requests; HTTP/2: for the
    /// first request on the connection); default 10 s.
    pub header_read_timeout: Duration,
    /// The most connections served at once (handshakes included); default 512, well below the
    /// usual open-file limit of 1024. At the cap no further connection is accepted: new clients
    /// wait in the kernel's listen backlog until a connection closes.
    pub max_connections: usize,
    /// How long requests in flight get to finish once the server is asked to stop; default 10 s.
    /// Connections still open after it are closed.
    pub drain_timeout: Duration,
    /// The first pause after a failed `accept` (for example: the process ran out of file
    /// descriptors); default 5 ms. It doubles with every further failure in a row.
    pub accept_backoff_min: Duration,
    /// The longest pause after failed `accept`s in a row; default 1 s.
    pub accept_backoff_max: Duration,
}

impl WebhookConfig {
    /// Defaults, with the certificate and key files.
    pub fn new(cert_path: impl Into<PathBuf>, key_path: impl Into<PathBuf>) -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 8443)),
            cert_path: cert_path.into(),
            key_path: key_path.into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            oversized_drain_bytes: DEFAULT_OVERSIZED_DRAIN_BYTES,
            oversized_drain_timeout: DEFAULT_OVERSIZED_DRAIN_TIMEOUT,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            max_connections: 512,
            drain_timeout: Duration::from_secs(10),
            accept_backoff_min: Duration::from_millis(5),
            accept_backoff_max: Duration::from_secs(1),
        }
    }

    /// Listens on `addr` instead.
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Refuses bodies larger than `bytes` (see [`max_body_bytes`](Self::max_body_bytes)).
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`oversized_drain_bytes`](Self::oversized_drain_bytes) and
    /// [`oversized_drain_timeout`](Self::oversized_drain_timeout).
    #[must_use]
    pub fn oversized_drain(mut self, bytes: u64, timeout: Duration) -> Self {
        self.oversized_drain_bytes = bytes;
        self.oversized_drain_timeout = timeout;
        self
    }

    /// The body limits the review handlers apply.
    pub(crate) fn body_limits(&self) -> super::BodyLimits {
        super::BodyLimits {
            max_body_bytes: self.max_body_bytes,
            drain_bytes: self.oversized_drain_bytes,
            drain_timeout: self.oversized_drain_timeout,
        }
    }

    /// Sets [`tls_handshake_timeout`](Self::tls_handshake_timeout).
    #[must_use]
    pub fn tls_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.tls_handshake_timeout = timeout;
        self
    }

    /// Sets [`header_read_timeout`](Self::header_read_timeout).
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// Sets [`drain_timeout`](Self::drain_timeout).
    #[must_use]
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Sets [`accept_backoff_min`](Self::accept_backoff_min) and
    /// [`accept_backoff_max`](Self::accept_backoff_max).
    #[must_use]
    pub fn accept_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.accept_backoff_min = min;
        self.accept_backoff_max = max.max(min);
        self
    }
}
