//! [`FaultProxy`]: an HTTP proxy between an operator and the apiserver that injects the faults
//! of [`crate::faults`] at the API's layer.

use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::faults::{WatchFaults, WatchFlow, WriteBook, WriteFault, WriteOutcome, WriteRecord};
use crate::request::{ResourceKey, ResourceRequest, Verb};
use crate::stale_lists::StaleLists;
use crate::status;
use crate::watch_stream;

/// The most a request body may carry through the proxy (several times the apiserver's limit).
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// The body of the proxy's answers.
type ProxyBody = UnsyncBoxBody<Bytes, io::Error>;

/// What the proxy could not set up.
#[derive(Debug, thiserror::Error)]
pub enum FaultProxyError {
    /// No port on 127.0.0.1 to listen on.
    #[error("bind the fault proxy's port on 127.0.0.1")]
    Bind(#[source] io::Error),
    /// A client for the proxy's URL could not be made.
    #[error("make a client for the fault proxy at {url}")]
    Client {
        /// The proxy's URL.
        url: String,
        /// Why not.
        #[source]
        source: kube::Error,
    },
    /// The kubeconfig naming the proxy could not be written.
    #[error("write the fault proxy's kubeconfig to {path}")]
    Kubeconfig {
        /// Where it was to go.
        path: PathBuf,
        /// Why not.
        #[source]
        source: io::Error,
    },
}

/// An HTTP proxy on 127.0.0.1 between an operator and the apiserver, which injects faults at
/// the API's layer: it ends watches, withholds or holds back the events of chosen resources,
/// answers chosen writes with errors or loses their answers, and halts everything right after
/// a chosen write, as a crash there would. Every fault it injects is a history a real apiserver
/// and network can produce.
///
/// The operator under test talks plain HTTP to the proxy, with no credentials: an operator in
/// the test process through [`client`](Self::client), one run as a child process through the
/// kubeconfig [`write_kubeconfig`](Self::write_kubeconfig) writes. The proxy forwards with the
/// `kube::Client` it was started with, which holds the credentials and the TLS settings.
///
/// Dropped, it stops: open connections close, and the operator sees the apiserver go away.
///
/// ```no_run
/// # async fn example(upstream: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_testing::{FaultProxy, ResourceKey, WriteFault};
///
/// let proxy = FaultProxy::start(upstream).await?;
/// let operator_client = proxy.client()?;
/// // The operator's next two ConfigMap writes get a 409 from the "apiserver".
/// proxy.fail_writes(Some(ResourceKey::of::<ConfigMap>()), WriteFault::Conflict, 2);
/// # let _ = operator_client;
/// # Ok(())
/// # }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// What every connection of the proxy reads and writes.
struct Shared {
    upstream: kube::Client,
    watch_faults: watch::Sender<WatchFaults>,
    writes: Mutex<WriteBook>,
    /// The number of finished writes.
    writes_done: watch::Sender<u64>,
    /// Lists answered from a lagging cache.
    stale_lists: Mutex<StaleLists>,
}

impl Shared {
    fn book(&self) -> MutexGuard<'_, WriteBook> {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stale_lists(&self) -> MutexGuard<'_, StaleLists> {
        self.stale_lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Logs a finished write.
    fn record(&self, record: WriteRecord) {
        let done = {
            let mut book = self.book();
            book.log.push(record);
            book.log.len() as u64
        };
        self.writes_done.send_replace(done);
    }

    /// Waits while the proxy is halted; a request that waited through a resume is dropped, as
    /// the connection of a process that was killed would be.
    async fn unhalted(&self, resumes: u64) -> Result<(), Dropped> {
        let mut changes = self.watch_faults.subscribe();
        let state = changes
            .wait_for(|state| !state.halted || state.resumes != resumes)
            .await
            .map_err(|_| Dropped)?;
        if state.resumes == resumes {
            Ok(())
        } else {
            Err(Dropped)
        }
    }
}

/// A request the proxy answers by closing its connection (hyper closes it on a service error).
#[derive(Debug, thiserror::Error)]
#[error("the fault proxy dropped the connection")]
struct Dropped;

impl FaultProxy {
    /// Starts the proxy on a free port of 127.0.0.1, forwarding through `upstream`.
    pub async fn start(upstream: kube::Client) -> Result<Self, FaultProxyError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(FaultProxyError::Bind)?;
        let addr = listener.local_addr().map_err(FaultProxyError::Bind)?;
        let shared = Arc::new(Shared {
            upstream,
            watch_faults: watch::Sender::new(WatchFaults::default()),
            writes: Mutex::new(WriteBook::default()),
            writes_done: watch::Sender::new(0),
            stale_lists: Mutex::new(StaleLists::default()),
        });
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, Arc::clone(&shared), stop.clone()));
        Ok(Self { addr, shared, stop })
    }

    /// The proxy's URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client that reaches the apiserver through the proxy, for an operator in the test
    /// process. Its default namespace is `default`.
    pub fn client(&self) -> Result<kube::Client, FaultProxyError> {
        let url = self.url();
        let uri = http::Uri::builder()
            .scheme("http")
            .authority(self.addr.to_string())
            .path_and_query("/")
            .build();
        let config = match uri {
            Ok(uri) => kube::Config::new(uri),
            Err(error) => {
                return Err(FaultProxyError::Client {
                    url,
                    source: kube::Error::Service(error.into()),
                });
            }
        };
        kube::Client::try_from(config).map_err(|source| FaultProxyError::Client { url, source })
    }

    /// Writes a kubeconfig naming the proxy (plain HTTP, no credentials, namespace `default`) to
    /// `path`, for an operator run as a child process (`KUBECONFIG=<path>`).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), FaultProxyError> {
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fault-proxy", "cluster": {"server": self.url()}}],
            "users": [{"name": "fault-proxy", "user": {}}],
            "contexts": [{"name": "fault-proxy", "context": {
                "cluster": "fault-proxy", "user": "fault-proxy", "namespace": "default"}}],
            "current-context": "fault-proxy",
        });
        std::fs::write(path, config.to_string()).map_err(|source| FaultProxyError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Ends every open watch now, as an apiserver restart or a watch timeout does. Clients
    /// re-watch from the last resourceVersion they saw; nothing is lost.
    pub fn cut_watches(&self) {
        self.shared
            .watch_faults
            .send_modify(|state| state.epoch += 1);
    }

    /// From now on answers every list of `resource` in `namespace` that a lagging watch cache
    /// may answer (one with a non-empty `resourceVersion`: `0`, or a version with or without
    /// `resourceVersionMatch=NotOlderThan`) with the list as it is now, as an apiserver whose
    /// cache lags behind etcd does; lists without a `resourceVersion` (consistent reads) and
    /// watches go to the apiserver. A client that lists from the cache after later changes
    /// "travels back in time" (Sieve): it sees deleted objects and old versions.
    ///
    /// Lists the snapshot cannot be the answer to go to the apiserver too, as if the cache had
    /// caught up: one at a version newer than the snapshot's (an apiserver never answers older
    /// than asked), one at an exact version (`resourceVersionMatch=Exact`), one with a label or
    /// field selector, one asking for a Table or for metadata only (`Accept: ...;as=...`).
    /// Neither counter counts them: arm it for lists of the whole namespace.
    ///
    /// # Errors
    ///
    /// When the list cannot be read from the apiserver.
    pub async fn serve_stale_lists(
        &self,
        resource: &kube::api::ApiResource,
        namespace: &str,
    ) -> Result<(), kube::Error> {
        let prefix = if resource.group.is_empty() {
            format!("/api/{}", resource.version)
        } else {
            format!("/apis/{}/{}", resource.group, resource.version)
        };
        let path = format!("{prefix}/namespaces/{namespace}/{}", resource.plural);
        let request = http::Request::get(&path)
            .body(Vec::new())
            .map_err(kube::Error::HttpError)?;
        let body = self.shared.upstream.request_text(request).await?;
        self.shared.stale_lists().arm(
            ResourceKey::new(resource.group.clone(), resource.plural.clone()),
            Some(namespace.to_owned()),
            Bytes::from(body),
        );
        Ok(())
    }

    /// How many lists [`serve_stale_lists`](Self::serve_stale_lists) answered from its
    /// snapshot.
    pub fn stale_lists_served(&self) -> u64 {
        self.shared.stale_lists().served
    }

    /// How many lists of a resource armed with [`serve_stale_lists`](Self::serve_stale_lists)
    /// asked for the latest state, and went to the apiserver.
    pub fn consistent_lists(&self) -> u64 {
        self.shared.stale_lists().consistent
    }

    /// Drops every watch event of `resource` from now on, in open watches and new ones, until
    /// [`release`](Self::release). What changes meanwhile is never seen as it happens: the
    /// client sees only the state at the release (Sieve's unobserved states).
    pub fn withhold(&self, resource: ResourceKey) {
        self.set_flow(resource, Some(WatchFlow::Withheld));
    }

    /// Ends `resource`'s watches with 410 Expired, so that clients re-list and see the current
    /// state, and lets its events flow again. After [`withhold`](Self::withhold) this is what
    /// makes the history one a real apiserver can produce: a watch that fell too far behind.
    pub fn release(&self, resource: ResourceKey) {
        self.shared.watch_faults.send_modify(|state| {
            state.flows.remove(&resource);
            *state.expiries.entry(resource).or_default() += 1;
        });
    }

    /// Holds back every watch event of `resource` from now on, in order, while other resources'
    /// events flow: a lagging watch. [`catch_up`](Self::catch_up) delivers what was held.
    pub fn lag(&self, resource: ResourceKey) {
        self.set_flow(resource, Some(WatchFlow::Lagging));
    }

    /// Delivers what [`lag`](Self::lag) held back, in order, and lets `resource`'s events flow.
    pub fn catch_up(&self, resource: ResourceKey) {
        self.set_flow(resource, None);
    }

    fn set_flow(&self, resource: ResourceKey, flow: Option<WatchFlow>) {
        self.shared.watch_faults.send_modify(|state| match flow {
            Some(flow) => {
                state.flows.insert(resource, flow);
            }
            None => {
                state.flows.remove(&resource);
            }
        });
    }

    /// The next `times` writes to `resource` (to any resource when `None`) get `fault` instead
    /// of the apiserver's answer. Rules apply in the order they were added.
    pub fn fail_writes(&self, resource: Option<ResourceKey>, fault: WriteFault, times: usize) {
        self.shared.book().add_rule(resource, fault, times);
    }

    /// The write numbered `seq` (counted from 1 over the proxy's life) gets `fault`.
    pub fn fail_write_at(&self, seq: u64, fault: WriteFault) {
        self.shared.book().add_rule_at(seq, fault);
    }

    /// Every resource a watch was opened for through the proxy so far.
    pub fn watched_resources(&self) -> Vec<ResourceKey> {
        let mut resources: Vec<ResourceKey> = self
            .shared
            .watch_faults
            .borrow()
            .open
            .keys()
            .cloned()
            .collect();
        resources.sort();
        resources
    }

    /// Drops every write rule not used up yet.
    pub fn clear_write_faults(&self) {
        self.shared.book().clear_rules();
    }

    /// Halts everything right after the `n`-th write (counted from 1 over the proxy's life)
    /// reached the apiserver, as if the operator crashed there: its answer is not delivered,
    /// requests wait and watches deliver nothing until [`resume`](Self::resume).
    pub fn halt_after_write(&self, n: u64) {
        self.shared.book().halt_after = Some(n);
    }

    /// Waits until the proxy halted (after [`halt_after_write`](Self::halt_after_write)).
    pub async fn halted(&self) {
        let mut changes = self.shared.watch_faults.subscribe();
        // The sender lives in `self`: the wait ends only by halting.
        let _ = changes.wait_for(|state| state.halted).await;
    }

    /// Ends a halt: every connection held by it is closed, as the killed operator's were, and
    /// every open watch ends. Stop (or drop) the halted operator first, then resume, then
    /// start the next one.
    pub fn resume(&self) {
        self.shared.book().halt_after = None;
        self.shared.watch_faults.send_modify(|state| {
            state.halted = false;
            state.resumes += 1;
            state.epoch += 1;
        });
    }

    /// Every write that finished, in the order the proxy received them.
    pub fn writes(&self) -> Vec<WriteRecord> {
        let mut log = self.shared.book().log.clone();
        log.sort_by_key(|record| record.seq);
        log
    }

    /// Waits until at least `n` writes finished.
    pub async fn wait_for_writes(&self, n: u64) {
        let mut done = self.shared.writes_done.subscribe();
        let _ = done.wait_for(|&done| done >= n).await;
    }

    /// How many watches of `resource` are open through the proxy.
    pub fn open_watches(&self, resource: &ResourceKey) -> usize {
        self.shared
            .watch_faults
            .borrow()
            .open
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// How many of `resource`'s watch events [`lag`](Self::lag) holds back now.
    pub fn held_events(&self, resource: &ResourceKey) -> usize {
        let state = self.shared.watch_faults.borrow();
        state.held.get(resource).copied().unwrap_or(0)
    }

    /// How many of `resource`'s watch events [`withhold`](Self::withhold) dropped so far.
    pub fn dropped_events(&self, resource: &ResourceKey) -> u64 {
        let state = self.shared.watch_faults.borrow();
        state.dropped.get(resource).copied().unwrap_or(0)
    }

    /// Waits until `condition` holds of the proxy's watch counts (re-checked on each change):
    /// e.g. `proxy.wait_until(|p| p.held_events(&key) >= 2)`.
    pub async fn wait_until(&self, condition: impl Fn(&Self) -> bool) {
        let mut changes = self.shared.watch_faults.subscribe();
        loop {
            changes.borrow_and_update();
            if condition(self) {
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until a watch of `resource` is open through the proxy.
    pub async fn wait_for_watch(&self, resource: &ResourceKey) {
        let mut changes = self.shared.watch_faults.subscribe();
        let _ = changes
            .wait_for(|state| state.open.get(resource).is_some_and(|&open| open > 0))
            .await;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Accepts connections until `stop`, serving each with HTTP/1.1.
async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "the fault proxy could not accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let shared = Arc::clone(&shared);
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { handle(&shared, request).await }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// Answers one request: waits out a halt, then forwards it, with the faults of its kind.
async fn handle(
    shared: &Shared,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Dropped> {
    let resumes = shared.watch_faults.borrow().resumes;
    shared.unhalted(resumes).await?;
    let (parts, body) = request.into_parts();
    // Bounded: the apiserver itself takes at most 3 MiB per request body.
    let body = http_body_util::Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
        .map_err(|_| Dropped)?
        .to_bytes();
    let target = ResourceRequest::parse(&parts.method, parts.uri.path(), parts.uri.query());
    match target {
        Some(target) if target.verb == Verb::Write => {
            write(shared, &parts, body, target, resumes).await
        }
        Some(target) if target.verb == Verb::Watch => {
            watch(shared, &parts, body, target.resource).await
        }
        Some(target) if target.verb == Verb::Read && target.name.is_none() => {
            let accept = parts
                .headers
                .get(header::ACCEPT)
                .and_then(|accept| accept.to_str().ok());
            let stale = shared.stale_lists().answer(
                &target.resource,
                target.namespace.as_deref(),
                parts.uri.query(),
                accept,
            );
            let response = match stale {
                Some(list) => json_response(StatusCode::OK, list, None),
                None => forward(shared, &parts, body).await,
            };
            shared.unhalted(resumes).await?;
            Ok(response)
        }
        _ => {
            let response = forward(shared, &parts, body).await;
            // A crash right after a write: nothing answered later reaches the operator.
            shared.unhalted(resumes).await?;
            Ok(response)
        }
    }
}

/// One write: faulted, forwarded, or forwarded with its answer lost; then a halt if this is the
/// write to halt after.
async fn write(
    shared: &Shared,
    parts: &http::request::Parts,
    body: Bytes,
    target: ResourceRequest,
    resumes: u64,
) -> Result<Response<ProxyBody>, Dropped> {
    let (seq, fault) = shared.book().admit(&target);
    let (answer, outcome) = match fault {
        Some(WriteFault::ResponseLost) => match send(shared, parts, body).await {
            Ok(response) => (Err(Dropped), WriteOutcome::Lost(response.status().as_u16())),
            Err(_) => (Err(Dropped), WriteOutcome::Unreachable),
        },
        Some(fault) => (
            Ok(fault_response(fault, &target)),
            WriteOutcome::Faulted(fault),
        ),
        None => match send(shared, parts, body).await {
            Ok(response) => {
                let status = response.status().as_u16();
                (Ok(streamed(response)), WriteOutcome::Forwarded(status))
            }
            Err(error) => (Ok(bad_gateway(&error)), WriteOutcome::Unreachable),
        },
    };
    let halt = shared.book().halt_after == Some(seq);
    let outcome = match (&outcome, halt) {
        (WriteOutcome::Forwarded(status) | WriteOutcome::Lost(status), true) => {
            WriteOutcome::Halted(Some(*status))
        }
        (_, true) => WriteOutcome::Halted(None),
        (_, false) => outcome,
    };
    if halt {
        shared.watch_faults.send_modify(|state| state.halted = true);
    }
    shared.record(WriteRecord {
        seq,
        method: parts.method.clone(),
        request: target,
        outcome,
    });
    shared.unhalted(resumes).await?;
    answer
}

/// A watch: the apiserver's answer, its event lines pumped through the resource's faults.
async fn watch(
    shared: &Shared,
    parts: &http::request::Parts,
    body: Bytes,
    resource: ResourceKey,
) -> Result<Response<ProxyBody>, Dropped> {
    let response = match send(shared, parts, body).await {
        Ok(response) => response,
        Err(error) => return Ok(bad_gateway(&error)),
    };
    if !response.status().is_success() {
        return Ok(streamed(response));
    }
    let (mut head, upstream) = response.into_parts();
    strip_hop_by_hop(&mut head.headers);
    head.headers.remove(header::CONTENT_LENGTH);
    let (lines, mut received) = mpsc::channel(watch_stream::CLIENT_QUEUE);
    tokio::spawn(watch_stream::pump(
        upstream,
        resource,
        shared.watch_faults.clone(),
        lines,
    ));
    let frames = futures::stream::poll_fn(move |context| {
        received
            .poll_recv(context)
            .map(|line| line.map(|line| Ok::<_, io::Error>(Frame::data(line))))
    });
    Ok(Response::from_parts(
        head,
        StreamBody::new(frames).boxed_unsync(),
    ))
}

/// Forwards a request as it is.
async fn forward(
    shared: &Shared,
    parts: &http::request::Parts,
    body: Bytes,
) -> Response<ProxyBody> {
    match send(shared, parts, body).await {
        Ok(response) => streamed(response),
        Err(error) => bad_gateway(&error),
    }
}

/// Sends a request to the apiserver through the upstream client.
async fn send(
    shared: &Shared,
    parts: &http::request::Parts,
    body: Bytes,
) -> Result<Response<kube::client::Body>, kube::Error> {
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(path)
        .body(kube::client::Body::from(body))
        .map_err(kube::Error::HttpError)?;
    let headers = request.headers_mut();
    headers.extend(parts.headers.clone());
    strip_hop_by_hop(headers);
    // The upstream client authenticates; the operator's own credentials (none) stay here.
    headers.remove(header::AUTHORIZATION);
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
    shared.upstream.send(request).await
}

/// Headers that describe one connection, not the message: never forwarded.
fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TE,
        header::TRAILER,
        header::PROXY_AUTHORIZATION,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

/// The apiserver's answer, streamed through.
fn streamed(response: Response<kube::client::Body>) -> Response<ProxyBody> {
    let (mut head, body) = response.into_parts();
    strip_hop_by_hop(&mut head.headers);
    Response::from_parts(head, body.map_err(io::Error::other).boxed_unsync())
}

/// The proxy's own answer to a faulted write.
fn fault_response(fault: WriteFault, target: &ResourceRequest) -> Response<ProxyBody> {
    let (code, body, retry_after) = match fault {
        WriteFault::Conflict => (
            StatusCode::CONFLICT,
            status::status(409, "Conflict", &status::conflict_message(target), target),
            None,
        ),
        WriteFault::TooManyRequests { retry_after } => (
            StatusCode::TOO_MANY_REQUESTS,
            status::too_many_requests(retry_after, target),
            Some(status::retry_after_seconds(retry_after)),
        ),
        WriteFault::InternalError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            status::status(
                500,
                "InternalError",
                "Internal error occurred: injected by the fault proxy",
                target,
            ),
            None,
        ),
        // `ResponseLost` is answered by closing the connection; `Timeout` is its closest answer.
        WriteFault::Timeout | WriteFault::ResponseLost => (
            StatusCode::GATEWAY_TIMEOUT,
            status::status(
                504,
                "Timeout",
                "Timeout: request did not complete within the allotted timeout (injected by the fault proxy)",
                target,
            ),
            None,
        ),
    };
    json_response(code, body, retry_after)
}

/// A 502 for a request the apiserver could not be asked.
fn bad_gateway(error: &kube::Error) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("the fault proxy could not reach the apiserver: {error}"),
        "reason": "ServiceUnavailable", "code": 502,
    });
    json_response(StatusCode::BAD_GATEWAY, Bytes::from(body.to_string()), None)
}

fn json_response(code: StatusCode, body: Bytes, retry_after: Option<u64>) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(body)
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    response
}
