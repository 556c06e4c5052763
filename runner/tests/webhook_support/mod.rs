//! Helpers shared by the webhook server tests: development certificates, a TLS client trusting
//! them, admission reviews for `g.example.com/v1` Gadgets, and waiting for a connection to close.

#![allow(dead_code)] // each test file uses a part

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on every wait in these tests; conditions are awaited, never slept for.
pub const WAIT: Duration = Duration::from_secs(30);

/// A serving certificate for 127.0.0.1 in a temporary directory, and its CA.
pub struct Certs {
    _dir: tempfile::TempDir,
    /// The CA certificate (PEM) the client trusts.
    pub ca_pem: String,
    /// `tls.crt`.
    pub cert: PathBuf,
    /// `tls.key`.
    pub key: PathBuf,
}

impl Certs {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = kubeapp_sdk::testenv::CertificateAuthority::new("webhook-test-ca").expect("ca");
        let serving = ca.issue_serving(&["127.0.0.1"]).expect("cert");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &serving.cert_pem).expect("write cert");
        std::fs::write(&key, &serving.key_pem).expect("write key");
        Self {
            _dir: dir,
            ca_pem: ca.cert_pem(),
            cert,
            key,
        }
    }

    /// A TLS client that trusts the CA and offers HTTP/1.1 only.
    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        self.connector_offering(&[b"http/1.1"])
    }

    /// A TLS client that trusts the CA and offers `protocols` through ALPN.
    pub fn connector_offering(&self, protocols: &[&[u8]]) -> tokio_rustls::TlsConnector {
        use rustls_pki_types::pem::PemObject as _;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                rustls_pki_types::CertificateDer::from_pem_slice(self.ca_pem.as_bytes())
                    .expect("ca"),
            )
            .expect("root");
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// A TLS connection with the handshake done.
    pub async fn handshake(&self, addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
        self.connector()
            .connect(name, tcp)
            .await
            .expect("TLS handshake")
    }

    /// `POST /validate` of a Gadget named `name` whose hook sleeps `sleep_ms`; the status line
    /// and body. Waits for the whole exchange (the connect may wait in the listen backlog).
    pub async fn validate(&self, addr: SocketAddr, name: &str, sleep_ms: u64) -> String {
        let exchange = async {
            let mut tls = self.handshake(addr).await;
            let body = gadget_review(name, sleep_ms);
            let request = format!(
                "POST /validate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            tls.write_all(request.as_bytes()).await.expect("send");
            let mut response = Vec::new();
            // The server closes after the response; a close without close_notify is fine here.
            let _ = tls.read_to_end(&mut response).await;
            String::from_utf8_lossy(&response).into_owned()
        };
        tokio::time::timeout(WAIT, exchange)
            .await
            .unwrap_or_else(|_| panic!("no response to {name} within {WAIT:?}"))
    }
}

/// An admission review of a `g.example.com/v1` Gadget named `name` with `spec.sleepMs`.
pub fn gadget_review(name: &str, sleep_ms: u64) -> String {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{name}"),
            "kind": {"group": "g.example.com", "version": "v1", "kind": "Gadget"},
            "resource": {"group": "g.example.com", "version": "v1", "resource": "gadgets"},
            "operation": "CREATE",
            "userInfo": {},
            "object": {
                "apiVersion": "g.example.com/v1",
                "kind": "Gadget",
                "metadata": {"name": name},
                "spec": {"sleepMs": sleep_ms}
            },
            "dryRun": false
        }
    })
    .to_string()
}

/// Whether `response` is a 200 that admits the object.
pub fn admitted(response: &str) -> bool {
    response.starts_with("HTTP/1.1 200") && response.contains("\"allowed\":true")
}

/// Reads (and discards) until the server closes the connection (EOF or a reset); panics naming
/// `what` when it is still open after `within`.
pub async fn closed_by_server(stream: &mut (impl AsyncRead + Unpin), what: &str, within: Duration) {
    let drained = tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "{what}: the server left the connection open for more than {within:?}"
    );
}
