//! Oversized admission bodies (issue #32, defect 2): every client gets a status, whether its
//! body is announced by `Content-Length` (with or without `Expect: 100-continue`) or chunked,
//! and the rest of a refused body is discarded only within its byte and time bounds.
//!
//! The clients here write their whole body before they stop (reading the response alongside,
//! as HTTP clients do): a server that answers and closes while they are still sending resets
//! the connection, and such a client sees "broken pipe" or "connection reset", never a status.

mod webhook_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::admission::AdmissionRequest;
use kubeapp_runner::webhook::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_OVERSIZED_DRAIN_BYTES, WebhookConfig, WebhookServer,
};
use kubeapp_sdk::app::{AdmissionError, App, AppError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use webhook_support::{Certs, WAIT, admitted};

/// Admits every Gadget.
struct Admit;

#[async_trait]
impl App for Admit {
    fn name(&self) -> &str {
        "admit"
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
    async fn validate(&self, _: &AdmissionRequest<DynamicObject>) -> Result<(), AdmissionError> {
        Ok(())
    }
}

struct Server {
    certs: Arc<Certs>,
    addr: SocketAddr,
    stop: CancellationToken,
    serving: JoinHandle<()>,
}

impl Server {
    async fn start(configure: impl FnOnce(WebhookConfig) -> WebhookConfig) -> Self {
        let certs = Arc::new(Certs::new());
        let config = configure(
            WebhookConfig::new(&certs.cert, &certs.key).addr(SocketAddr::from(([127, 0, 0, 1], 0))),
        );
        let server = WebhookServer::bind(config, vec![Arc::new(Admit)])
            .await
            .expect("bind");
        let addr = server.local_addr();
        let stop = CancellationToken::new();
        let serving = tokio::spawn({
            let stop = stop.clone();
            async move { server.serve(stop).await.expect("serve") }
        });
        Self {
            certs,
            addr,
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

/// How a client sends its body.
#[derive(Clone, Copy, Debug)]
enum Upload {
    /// `Content-Length`, and the body right behind the header.
    Announced,
    /// `Content-Length` and `Expect: 100-continue`: the body only after `100 Continue`.
    ExpectContinue,
    /// `Transfer-Encoding: chunked`, 64 KiB chunks.
    Chunked,
}

/// What one client saw.
#[derive(Debug, Default)]
struct Seen {
    /// `100 Continue` came before the final status.
    continued: bool,
    /// The final status and the response body, if one came.
    status: Option<(u16, String)>,
    /// Why the response could not be read, if it could not.
    read_error: Option<String>,
    /// Bytes of the body written, and the write error that stopped the upload, if any.
    written: u64,
    write_error: Option<String>,
}

const CHUNK: usize = 64 * 1024;

/// Sends `POST /validate` with a body of `size` bytes as `how` says, reading the response as it
/// comes, and reports what happened. `pause` is waited between chunks (a slow sender).
async fn upload(certs: &Certs, addr: SocketAddr, how: Upload, size: u64, pause: Duration) -> Seen {
    let tls = certs.handshake(addr).await;
    let (mut reader, mut writer) = tokio::io::split(tls);
    let framing = match how {
        Upload::Announced => format!("Content-Length: {size}\r\n"),
        Upload::ExpectContinue => format!("Content-Length: {size}\r\nExpect: 100-continue\r\n"),
        Upload::Chunked => "Transfer-Encoding: chunked\r\n".to_string(),
    };
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{framing}\r\n"
    );
    writer.write_all(head.as_bytes()).await.expect("send head");
    writer.flush().await.expect("flush head");
    let (continue_tx, continue_rx) = tokio::sync::oneshot::channel::<bool>();
    let reading = tokio::spawn(async move {
        let mut seen = Seen::default();
        let mut continue_tx = Some(continue_tx);
        loop {
            match read_response(&mut reader).await {
                Ok((100, _)) => {
                    seen.continued = true;
                    if let Some(tx) = continue_tx.take() {
                        let _ = tx.send(true);
                    }
                }
                Ok(status) => {
                    seen.status = Some(status);
                    break;
                }
                Err(error) => {
                    seen.read_error = Some(error);
                    break;
                }
            }
        }
        // A final status without `100 Continue` tells an expecting client not to send its body.
        if let Some(tx) = continue_tx.take() {
            let _ = tx.send(false);
        }
        seen
    });
    let (written, write_error) = match how {
        // An expecting client sends only once told to continue.
        Upload::ExpectContinue if !continue_rx.await.unwrap_or(false) => (0, None),
        _ => send_body(&mut writer, how, size, pause).await,
    };
    let mut seen = tokio::time::timeout(WAIT, reading)
        .await
        .unwrap_or_else(|_| panic!("{how:?}: no response within {WAIT:?}"))
        .expect("reader joined");
    seen.written = written;
    seen.write_error = write_error;
    seen
}

/// Writes the body (framed as `how` says); returns the bytes written and the error that
/// stopped it, if any.
async fn send_body(
    writer: &mut (impl AsyncWriteExt + Unpin),
    how: Upload,
    size: u64,
    pause: Duration,
) -> (u64, Option<String>) {
    let chunk = vec![b'x'; CHUNK];
    let mut written = 0u64;
    while written < size {
        let n = usize::try_from((size - written).min(CHUNK as u64)).expect("chunk size");
        let sent = match how {
            Upload::Chunked => {
                let mut framed = format!("{n:x}\r\n").into_bytes();
                framed.extend_from_slice(&chunk[..n]);
                framed.extend_from_slice(b"\r\n");
                writer.write_all(&framed).await
            }
            _ => writer.write_all(&chunk[..n]).await,
        };
        if let Err(error) = sent.and(writer.flush().await) {
            return (written, Some(error.to_string()));
        }
        written += n as u64;
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    if matches!(how, Upload::Chunked)
        && let Err(error) = writer.write_all(b"0\r\n\r\n").await
    {
        return (written, Some(error.to_string()));
    }
    (written, None)
}

/// Reads one response: its status and (by `Content-Length`) its body.
async fn read_response(reader: &mut (impl AsyncRead + Unpin)) -> Result<(u16, String), String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match reader.read(&mut byte).await {
            Ok(0) => {
                return Err(format!(
                    "connection closed after {} bytes of a response head",
                    head.len()
                ));
            }
            Ok(_) => head.push(byte[0]),
            Err(error) => return Err(format!("reading the response head: {error}")),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))?;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    reader
        .read_exact(&mut body)
        .await
        .map_err(|error| format!("reading the {length}-byte response body: {error}"))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// What is wrong with a refused upload's outcome, if anything: a 413 naming `limit`, no
/// `100 Continue` before it, and (`whole`) all `size` bytes of the body sent.
fn refusal_problem(seen: &Seen, limit: usize, whole: bool, size: u64) -> Option<String> {
    let mut problems = Vec::new();
    if seen.continued {
        problems.push("100 Continue before the final status");
    }
    match &seen.status {
        None => problems.push("no status"),
        Some((status, body)) => {
            if *status != 413 || !body.contains(&format!("limit of {limit} bytes")) {
                problems.push("not a 413 naming the limit");
            }
        }
    }
    if whole && (seen.write_error.is_some() || seen.written != size) {
        problems.push("upload cut mid-body");
    }
    (!problems.is_empty()).then(|| format!("{}: {seen:?}", problems.join(", ")))
}

/// 20 concurrent 10 MiB uploads against the default 3 MiB limit, announced (with and without
/// `Expect: 100-continue`) and chunked: each gets a 413 naming the limit, an expecting client
/// gets it instead of `100 Continue`, and the others' uploads go through to their end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_oversized_uploads_each_get_a_413_naming_the_limit() {
    // The drain's time bound is not what is tested here: far enough for a loaded machine.
    let server =
        Server::start(|config| config.oversized_drain(DEFAULT_OVERSIZED_DRAIN_BYTES, WAIT)).await;
    const SIZE: u64 = 10 * 1024 * 1024;
    let kinds = [Upload::Announced, Upload::ExpectContinue, Upload::Chunked];
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let how = kinds[i % kinds.len()];
            let (certs, addr) = (Arc::clone(&server.certs), server.addr);
            tokio::spawn(async move {
                let seen = upload(&certs, addr, how, SIZE, Duration::ZERO).await;
                (i, how, seen)
            })
        })
        .collect();
    let mut problems = Vec::new();
    for client in clients {
        let (i, how, seen) = client.await.expect("client joined");
        let whole = !matches!(how, Upload::ExpectContinue);
        if let Some(problem) = refusal_problem(&seen, DEFAULT_MAX_BODY_BYTES, whole, SIZE) {
            problems.push(format!("client {i} ({how:?}): {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The server still serves.
    let response = server.certs.validate(server.addr, "after", 0).await;
    assert!(admitted(&response), "{response}");
    server.stopped().await;
}

/// Past the byte bound the server stops reading and closes: a client sending 64 MiB after a
/// refusal got its 413, and its upload was cut far short of 64 MiB. Past the time bound the
/// server closes too: a client trickling a body announced as 1 GiB got its 413, then the
/// connection closed under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_of_a_refused_body_is_discarded_only_within_its_byte_and_time_bounds() {
    const LIMIT: usize = 64 * 1024;
    const DRAIN: u64 = 1024 * 1024;
    const ENDLESS: u64 = 64 * 1024 * 1024;
    // Byte bound (the time bound out of reach).
    let server = Server::start(|config| {
        config
            .max_body_bytes(LIMIT)
            .oversized_drain(DRAIN, Duration::from_secs(600))
    })
    .await;
    let seen = upload(
        &server.certs,
        server.addr,
        Upload::Chunked,
        ENDLESS,
        Duration::ZERO,
    )
    .await;
    assert_eq!(refusal_problem(&seen, LIMIT, false, ENDLESS), None);
    assert!(
        seen.write_error.is_some() && seen.written < ENDLESS / 2,
        "the server read on past its drain bound of {DRAIN} bytes: {seen:?}"
    );
    server.stopped().await;

    // Time bound (the byte bound out of reach): 64 KiB every 50 ms of a body announced as 1 GiB.
    let server = Server::start(|config| {
        config
            .max_body_bytes(LIMIT)
            .oversized_drain(u64::MAX, Duration::from_millis(500))
    })
    .await;
    let trickle = tokio::time::timeout(
        WAIT,
        upload(
            &server.certs,
            server.addr,
            Upload::Announced,
            1 << 30,
            Duration::from_millis(50),
        ),
    )
    .await
    .expect("the server closed a trickling upload after its drain timeout");
    assert_eq!(refusal_problem(&trickle, LIMIT, false, 1 << 30), None);
    assert!(trickle.write_error.is_some(), "{trickle:?}");
    server.stopped().await;
}
