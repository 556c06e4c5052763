//! The webhook server against misbehaving and well-behaved clients, in process: idle and slow
//! connections are closed by their timeouts, requests in flight finish when the server stops,
//! and the connection cap holds. (What needs a whole process, the open-file limit and SIGTERM,
//! is in `webhook_process.rs`.)

mod webhook_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::admission::AdmissionRequest;
use kubeapp_runner::webhook::{WebhookConfig, WebhookServer};
use kubeapp_sdk::app::{AdmissionError, App, AppError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use webhook_support::{Certs, WAIT, admitted, closed_by_server};

/// Admits every Gadget after `spec.sleepMs`; notifies `started` when a call begins.
struct SlowHooks {
    started: Arc<Notify>,
}

#[async_trait]
impl App for SlowHooks {
    fn name(&self) -> &str {
        "slow-hooks"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![ApiResource::from_gvk(&GroupVersionKind::gvk(
            "g.example.com",
            "v1",
            "Gadget",
        ))]
    }
    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        stop.cancelled().await;
        Ok(())
    }
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        let sleep = request
            .object
            .as_ref()
            .and_then(|object| object.data["spec"]["sleepMs"].as_u64())
            .unwrap_or(0);
        self.started.notify_one();
        tokio::time::sleep(Duration::from_millis(sleep)).await;
        Ok(())
    }
}

/// A running server with `configure` applied to its config.
struct Running {
    certs: Arc<Certs>,
    addr: SocketAddr,
    started: Arc<Notify>,
    stop: CancellationToken,
    serving: JoinHandle<()>,
}

impl Running {
    async fn start(configure: impl FnOnce(WebhookConfig) -> WebhookConfig) -> Self {
        let certs = Arc::new(Certs::new());
        let config = configure(
            WebhookConfig::new(&certs.cert, &certs.key).addr(SocketAddr::from(([127, 0, 0, 1], 0))),
        );
        let started = Arc::new(Notify::new());
        let app = Arc::new(SlowHooks {
            started: Arc::clone(&started),
        });
        let server = WebhookServer::bind(config, vec![app]).await.expect("bind");
        let addr = server.local_addr();
        let stop = CancellationToken::new();
        let serving = tokio::spawn({
            let stop = stop.clone();
            async move { server.serve(stop).await.expect("serve") }
        });
        Self {
            certs,
            addr,
            started,
            stop,
            serving,
        }
    }

    async fn stopped(self) {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.serving)
            .await
            .expect("the server stops in time")
            .expect("joined");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_half_handshaken_and_slow_connections_are_closed_by_their_timeouts() {
    let server = Running::start(|config| {
        config
            .tls_handshake_timeout(Duration::from_millis(500))
            .header_read_timeout(Duration::from_millis(500))
    })
    .await;
    let addr = server.addr;

    // Connected, then silent: no ClientHello at all.
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    // The first bytes of a TLS record header and nothing more.
    let mut half_hello = TcpStream::connect(addr).await.expect("connect");
    half_hello
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .expect("send");
    // Handshake done, then no request at all.
    let mut quiet = server.certs.handshake(addr).await;
    // Handshake done, then a request header that never ends: a byte every 100 ms.
    let mut slow = server.certs.handshake(addr).await;
    slow.write_all(b"POST /validate HTTP/1.1\r\n")
        .await
        .expect("send");
    let (mut slow_read, mut slow_write) = tokio::io::split(slow);
    let dripping = tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        loop {
            interval.tick().await;
            if slow_write.write_all(b"X").await.is_err() || slow_write.flush().await.is_err() {
                return;
            }
        }
    });

    closed_by_server(&mut silent, "a silent connection", WAIT).await;
    closed_by_server(&mut half_hello, "half a ClientHello", WAIT).await;
    closed_by_server(&mut quiet, "no request after the handshake", WAIT).await;
    closed_by_server(&mut slow_read, "a header that never ends", WAIT).await;
    dripping.abort();

    // The server still serves.
    let response = server.certs.validate(addr, "after", 0).await;
    assert!(admitted(&response), "{response}");
    server.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_when_the_server_stops_completes() {
    let server = Running::start(|config| config.drain_timeout(Duration::from_secs(20))).await;
    let (addr, certs) = (server.addr, Arc::clone(&server.certs));
    let client = tokio::spawn(async move { certs.validate(addr, "in-flight", 1500).await });
    tokio::time::timeout(WAIT, server.started.notified())
        .await
        .expect("the hook was called");
    server.stop.cancel();
    let response = tokio::time::timeout(WAIT, client)
        .await
        .expect("response in time")
        .expect("client joined");
    assert!(
        admitted(&response),
        "the call in flight was answered: {response:?}"
    );
    tokio::time::timeout(WAIT, server.serving)
        .await
        .expect("the server stops once drained")
        .expect("joined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_further_clients_in_the_backlog_until_a_slot_frees() {
    let server = Running::start(|config| {
        config
            .max_connections(2)
            .tls_handshake_timeout(Duration::from_secs(120))
    })
    .await;
    let addr = server.addr;
    // Two idle connections take both slots (their handshake timeout is far away).
    let first = TcpStream::connect(addr).await.expect("connect");
    let mut second = TcpStream::connect(addr).await.expect("connect");
    // A third client: its TCP connect completes in the backlog, its handshake cannot.
    let certs = Arc::clone(&server.certs);
    let third = tokio::spawn(async move { certs.validate(addr, "third", 0).await });
    // Not a timing criterion: a correct server never answers here, however long we look.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !third.is_finished(),
        "the third connection was served while two connections held the cap of 2"
    );
    // One slot frees: the third is served.
    second.shutdown().await.expect("close");
    drop(second);
    let response = tokio::time::timeout(WAIT, third)
        .await
        .expect("served once a slot freed")
        .expect("joined");
    assert!(admitted(&response), "{response}");
    drop(first);
    server.stopped().await;
}
