//! Which HTTP versions the webhook server speaks: HTTP/1.1 always; HTTP/2 only when the crate is
//! built with the `http2` feature (offered through ALPN). `scripts/test` runs this file both
//! ways: with every feature, and with none (`cargo test -p kubeapp-runner --test
//! webhook_protocols`).

mod webhook_support;

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::admission::AdmissionRequest;
use kubeapp_runner::webhook::{WebhookConfig, WebhookServer};
use kubeapp_sdk::app::{AdmissionError, App, AppError};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use webhook_support::{Certs, admitted};

/// Admits every Gadget.
struct Admits;

#[async_trait]
impl App for Admits {
    fn name(&self) -> &str {
        "admits"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![ApiResource::from_gvk(&GroupVersionKind::gvk(
            "g.example.com",
            "v1",
            "Gadget",
        ))]
    }
    async fn run(&self, _stop: CancellationToken) -> Result<(), AppError> {
        Ok(())
    }
    async fn validate(&self, _: &AdmissionRequest<DynamicObject>) -> Result<(), AdmissionError> {
        Ok(())
    }
}

/// Starts a server; returns its certificates, address and stop token.
async fn serve(
    configure: impl FnOnce(WebhookConfig) -> WebhookConfig,
) -> (Arc<Certs>, SocketAddr, CancellationToken) {
    let certs = Arc::new(Certs::new());
    let config = configure(
        WebhookConfig::new(&certs.cert, &certs.key).addr(SocketAddr::from(([127, 0, 0, 1], 0))),
    );
    let server = WebhookServer::bind(config, vec![Arc::new(Admits)])
        .await
        .expect("bind");
    let addr = server.local_addr();
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move { server.serve(stop).await.expect("serve") }
    });
    (certs, addr, stop)
}

/// The protocol the server picks when a client offers HTTP/2 first, then HTTP/1.1.
async fn negotiated(certs: &Certs, addr: SocketAddr) -> Option<Vec<u8>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = certs
        .connector_offering(&[b"h2", b"http/1.1"])
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_is_always_served() {
    let (certs, addr, stop) = serve(|config| config).await;
    let response = certs.validate(addr, "g1", 0).await;
    assert!(admitted(&response), "{response}");
    stop.cancel();
}

#[cfg(not(feature = "http2"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_http2_feature_a_client_offering_h2_gets_http11() {
    let (certs, addr, stop) = serve(|config| config).await;
    assert_eq!(
        negotiated(&certs, addr).await.as_deref(),
        Some(b"http/1.1".as_slice())
    );
    stop.cancel();
}

#[cfg(feature = "http2")]
mod http2 {
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    use super::*;
    use webhook_support::{WAIT, closed_by_server, gadget_review};

    /// An HTTP/2 connection (ALPN `h2` only).
    async fn h2_connection(
        certs: &Certs,
        addr: SocketAddr,
    ) -> tokio_rustls::client::TlsStream<TcpStream> {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let tls = certs
            .connector_offering(&[b"h2"])
            .connect(name, tcp)
            .await
            .expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
        tls
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_the_http2_feature_h2_is_negotiated_and_serves_reviews() {
        let (certs, addr, stop) = serve(|config| config).await;
        assert_eq!(
            negotiated(&certs, addr).await.as_deref(),
            Some(b"h2".as_slice())
        );
        let tls = h2_connection(&certs, addr).await;
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .expect("HTTP/2 handshake");
        tokio::spawn(connection);
        let request = http::Request::post(format!("https://{addr}/validate"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(gadget_review("g2", 0))))
            .expect("request");
        let response = tokio::time::timeout(WAIT, sender.send_request(request))
            .await
            .expect("an answer in time")
            .expect("an answer");
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.status(), http::StatusCode::OK);
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(r#""allowed":true"#), "{body}");
        stop.cancel();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_http2_connection_that_sends_no_request_is_closed_after_the_header_timeout() {
        let timeout = Duration::from_millis(300);
        let (certs, addr, stop) = serve(|config| config.header_read_timeout(timeout)).await;
        let mut tls = h2_connection(&certs, addr).await;
        // No preface, no request: the server closes the connection once the timeout passed.
        closed_by_server(&mut tls, "an idle HTTP/2 connection", WAIT).await;
        stop.cancel();
    }
}
