//! [`Quiescence`]: when an operator has nothing left to do, from what it reports on
//! `/debug/kubeapp` and what the apiserver holds, so that a test ends a phase on a condition,
//! never after a guessed time.
//!
//! An operator is quiescent when every informer it runs has synced and caches exactly what the
//! apiserver lists for it (the same `(uid, resourceVersion)` set, compared by
//! [`cache_checksum`]), and every kind's queue, running handler calls and pending retries are
//! empty; and a second report, read after the lists, says the same (an event between the
//! informer and the queue, or a write the lists raced, shows there).

use std::net::SocketAddr;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kubeapp_sdk::diagnostics::{Diagnostics, InformerDiagnostics, cache_checksum};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::request::ResourceKey;

/// How often a wait reads the operator's report again.
const POLL: Duration = Duration::from_millis(50);

/// The most a `/debug/kubeapp` answer may take up.
const MAX_REPORT_BYTES: u64 = 16 << 20;

/// An operator that did not become quiescent in time.
#[derive(Debug, thiserror::Error)]
#[error("the operator at {addr} was not quiescent within {timeout:?}: {}", .unsettled.join("; "))]
pub struct NotQuiescent {
    /// Where its `/debug/kubeapp` is served.
    pub addr: SocketAddr,
    /// How long the wait was.
    pub timeout: Duration,
    /// What was still unsettled at the last look.
    pub unsettled: Vec<String>,
}

/// Decides whether an operator process is quiescent; see the [module docs](self).
///
/// ```no_run
/// # async fn example(client: kube::Client, metrics_addr: std::net::SocketAddr)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use kubeapp_testing::Quiescence;
///
/// // `client` reaches the apiserver directly (not through a fault proxy); `metrics_addr` is
/// // where the operator serves /metrics and /debug/kubeapp.
/// let quiescence = Quiescence::new(client, metrics_addr);
/// quiescence.wait(Duration::from_secs(60)).await?;
/// # Ok(())
/// # }
/// ```
pub struct Quiescence {
    client: kube::Client,
    addr: SocketAddr,
}

impl Quiescence {
    /// For the operator serving `/debug/kubeapp` at `addr` (its metrics address), with a
    /// `client` that reaches the apiserver directly.
    pub fn new(client: kube::Client, addr: SocketAddr) -> Self {
        Self { client, addr }
    }

    /// What keeps the operator from being quiescent now (empty: quiescent). An unreachable
    /// operator or apiserver is one of the reasons, not an error: a wait rides over restarts.
    pub async fn unsettled(&self) -> Vec<String> {
        self.unsettled_except(&[]).await
    }

    /// [`unsettled`](Self::unsettled), except that the caches of `stale` resources may differ
    /// from the apiserver: for an operator whose watches of them a fault holds back, quiescent
    /// on what it has seen. With `stale` resources, retries and requeues may also wait: an
    /// operator that polls for what it cannot see (a rollout whose Deployment events are held
    /// back) keeps a requeue scheduled for as long as the fault lasts. Nothing may be queued or
    /// running.
    pub async fn unsettled_except(&self, stale: &[ResourceKey]) -> Vec<String> {
        let first = match fetch(self.addr).await {
            Ok(report) => report,
            Err(reason) => return vec![reason],
        };
        let mut unsettled = busy(&first, stale.is_empty());
        if first.informers.is_empty() {
            // Not started yet, or not reporting its informers: nothing to call quiescent.
            unsettled.push("it reports no informer".to_owned());
        }
        if !unsettled.is_empty() {
            return unsettled;
        }
        let compared = first.informers.iter().filter(|informer| {
            informer.listed && !stale.iter().any(|resource| is_of(informer, resource))
        });
        for informer in compared {
            if let Some(reason) = self.differs_from_the_apiserver(informer).await {
                unsettled.push(reason);
            }
        }
        if !unsettled.is_empty() {
            return unsettled;
        }
        match fetch(self.addr).await {
            Ok(second)
                if busy(&second, stale.is_empty()).is_empty()
                    && checksums(&second) == checksums(&first) =>
            {
                Vec::new()
            }
            Ok(_) => vec!["its caches or queues changed during the check".to_owned()],
            Err(reason) => vec![reason],
        }
    }

    /// Waits until the operator is quiescent, reading its report every 50 ms.
    pub async fn wait(&self, timeout: Duration) -> Result<(), NotQuiescent> {
        self.wait_except(timeout, &[]).await
    }

    /// [`wait`](Self::wait) with [`unsettled_except`](Self::unsettled_except).
    pub async fn wait_except(
        &self,
        timeout: Duration,
        stale: &[ResourceKey],
    ) -> Result<(), NotQuiescent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let unsettled = self.unsettled_except(stale).await;
            if unsettled.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(NotQuiescent {
                    addr: self.addr,
                    timeout,
                    unsettled,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether `informer`'s cache differs from what the apiserver lists for it, and how.
    async fn differs_from_the_apiserver(&self, informer: &InformerDiagnostics) -> Option<String> {
        let (group, version) = match informer.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", informer.api_version.as_str()),
        };
        let resource = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: informer.api_version.clone(),
            kind: informer.kind.clone(),
            plural: informer.plural.clone(),
        };
        let api: Api<DynamicObject> = match &informer.namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let mut params = ListParams::default();
        params.label_selector.clone_from(&informer.label_selector);
        params.field_selector.clone_from(&informer.field_selector);
        let what = match &informer.namespace {
            Some(namespace) => format!("{} in {namespace}", informer.kind),
            None => informer.kind.clone(),
        };
        let listed = match api.list_metadata(&params).await {
            Ok(listed) => listed,
            Err(error) => return Some(format!("listing {what} failed: {error}")),
        };
        let checksum = cache_checksum(listed.items.iter().map(|object| {
            (
                object.metadata.uid.as_deref().unwrap_or_default(),
                object
                    .metadata
                    .resource_version
                    .as_deref()
                    .unwrap_or_default(),
            )
        }));
        (checksum != informer.checksum).then(|| {
            format!(
                "the {what} cache ({} objects) is not what the apiserver lists ({})",
                informer.objects,
                listed.items.len()
            )
        })
    }
}

/// Whether `informer` caches `resource`.
fn is_of(informer: &InformerDiagnostics, resource: &ResourceKey) -> bool {
    let group = informer
        .api_version
        .split_once('/')
        .map_or("", |(group, _)| group);
    informer.plural == resource.plural && group == resource.group
}

/// What in a report shows work in progress.
/// What keeps `report`'s operator busy: informers not synced, queued or running work, and (when
/// `retries` count) retries and requeues waiting.
fn busy(report: &Diagnostics, retries: bool) -> Vec<String> {
    let mut busy = Vec::new();
    for informer in &report.informers {
        if !informer.synced {
            busy.push(format!("the {} informer has not synced", informer.kind));
        }
    }
    for kind in &report.kinds {
        let waiting = retries && kind.retries_pending > 0;
        if kind.queue_depth > 0 || kind.in_flight > 0 || waiting {
            busy.push(format!(
                "{}: {} queued, {} being handled, {} waiting for a retry",
                kind.kind, kind.queue_depth, kind.in_flight, kind.retries_pending
            ));
        }
    }
    busy
}

fn checksums(report: &Diagnostics) -> Vec<(&str, &Option<String>, &str)> {
    report
        .informers
        .iter()
        .map(|informer| {
            (
                informer.kind.as_str(),
                &informer.namespace,
                informer.checksum.as_str(),
            )
        })
        .collect()
}

/// The operator's report, or why it could not be read.
pub(crate) async fn fetch(addr: SocketAddr) -> Result<Diagnostics, String> {
    let unreachable = |error: std::io::Error| format!("/debug/kubeapp at {addr}: {error}");
    let mut stream = TcpStream::connect(addr).await.map_err(unreachable)?;
    stream
        .write_all(b"GET /debug/kubeapp HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .map_err(unreachable)?;
    let mut answer = Vec::new();
    stream
        .take(MAX_REPORT_BYTES)
        .read_to_end(&mut answer)
        .await
        .map_err(unreachable)?;
    let split = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| format!("/debug/kubeapp at {addr}: no complete answer"))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("/debug/kubeapp at {addr} answered {status:?}"));
    }
    serde_json::from_slice(&answer[split + 4..])
        .map_err(|error| format!("/debug/kubeapp at {addr}: not a report: {error}"))
}
