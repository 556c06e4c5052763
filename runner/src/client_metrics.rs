//! Metrics of the Kubernetes client: every request the operator makes, counted and timed.
//!
//! [`instrumented_client`] builds a `kube::Client` whose service stack carries
//! [`ClientMetricsLayer`]; the layer records, per request:
//!
//! | name | type | labels |
//! |---|---|---|
//! | `kubernetes_client_requests_total` | counter | `status_code`, `verb`, `kind`, `subresource` |
//! | `kubernetes_client_request_duration_seconds` | histogram ([`LATENCY_BUCKETS`]) | the same |
//!
//! - `verb` is derived from the method and path as RBAC names it: `get`, `list`, `watch`,
//!   `create`, `update`, `patch`, `delete`, `deletecollection` (and the method, lowercased, for
//!   anything else).
//! - `kind` is the resource as the path names it (`configmaps`, `gadgets`): the URL carries the
//!   plural, not the Kind, and mapping back would need discovery. `subresource` is `status`,
//!   `finalizers`, ... or empty.
//! - `status_code` is the HTTP status, or `error` when no response came (connection refused,
//!   timeout). The duration runs until the response headers arrive, so a watch counts the time
//!   to establish it, not how long it stayed open.
//!
//! Registration follows [`kubeapp_operator::metrics`]: [`ClientMetrics`] is a [`MetricSet`], so a
//! [`MetricsRegistry`](kubeapp_operator::MetricsRegistry) (a Runner's) creates one set with its prefix and hands it out,
//! `metrics.set::<ClientMetrics>()?` (what [`default_client_with_metrics`](crate::default_client_with_metrics)
//! does); [`ClientMetrics::unregistered`] makes a private set, exported nowhere. There are no
//! process-wide collectors.
//!
//! ```
//! use kubeapp_operator::MetricsRegistry;
//! use kubeapp_runner::client_metrics::ClientMetrics;
//!
//! let metrics = MetricsRegistry::new(Some("shop"))?;
//! let client_metrics: ClientMetrics = metrics.set()?; // for `instrumented_client`
//! # drop(client_metrics);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request, Response};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use tower::{Layer, Service};

use kubeapp_operator::metrics::{LATENCY_BUCKETS, MetricSet, MetricsError};

const LABELS: [&str; 4] = ["status_code", "verb", "kind", "subresource"];

/// The client request collectors.
#[derive(Clone, Debug)]
pub struct ClientMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
}

impl ClientMetrics {
    /// Fresh collectors registered nowhere, their names prefixed `{namespace}_` when given.
    ///
    /// # Errors
    ///
    /// When `namespace` is not a valid metric name prefix.
    pub fn unregistered(namespace: Option<&str>) -> Result<Self, MetricsError> {
        let err = |name: &str| {
            let name = name.to_string();
            move |source| MetricsError { name, source }
        };
        let ns = namespace.unwrap_or("");
        let requests = IntCounterVec::new(
            Opts::new(
                "kubernetes_client_requests_total",
                "Requests made to the Kubernetes API.",
            )
            .namespace(ns),
            &LABELS,
        )
        .map_err(err("kubernetes_client_requests_total"))?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "kubernetes_client_request_duration_seconds",
                "Time until the Kubernetes API answered a request (response headers).",
            )
            .namespace(ns)
            .buckets(LATENCY_BUCKETS.to_vec()),
            &LABELS,
        )
        .map_err(err("kubernetes_client_request_duration_seconds"))?;
        Ok(Self { requests, duration })
    }

    /// Requests counted so far with these labels (for tests and diagnostics).
    pub fn requests(&self, status_code: &str, verb: &str, kind: &str, subresource: &str) -> u64 {
        self.requests
            .get_metric_with_label_values(&[status_code, verb, kind, subresource])
            .map_or(0, |c| c.get())
    }

    fn observe(&self, labels: &RequestLabels, status_code: &str, seconds: f64) {
        let values = [
            status_code,
            labels.verb.as_str(),
            &labels.kind,
            &labels.subresource,
        ];
        self.requests.with_label_values(&values).inc();
        self.duration.with_label_values(&values).observe(seconds);
    }
}

/// What a request is, read from its method and path.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RequestLabels {
    verb: String,
    kind: String,
    subresource: String,
}

impl RequestLabels {
    fn of<B>(request: &Request<B>) -> Self {
        let segments: Vec<&str> = request
            .uri()
            .path()
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        // /api/{v}/... or /apis/{group}/{v}/..., then optionally namespaces/{ns}/.
        let mut rest: &[&str] = match segments.first() {
            Some(&"api") => segments.get(2..).unwrap_or(&[]),
            Some(&"apis") => segments.get(3..).unwrap_or(&[]),
            _ => &[],
        };
        if rest.len() >= 3 && rest[0] == "namespaces" {
            rest = &rest[2..];
        }
        let kind = rest.first().copied().unwrap_or("").to_string();
        let named = rest.len() >= 2;
        let subresource = rest.get(2).copied().unwrap_or("").to_string();
        let query = request.uri().query().unwrap_or("");
        let watching = query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1");
        let verb = match *request.method() {
            Method::GET if watching => "watch",
            Method::GET if named => "get",
            Method::GET => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if named => "delete",
            Method::DELETE => "deletecollection",
            ref other => {
                return Self {
                    verb: other.as_str().to_lowercase(),
                    kind,
                    subresource,
                };
            }
        };
        Self {
            verb: verb.to_string(),
            kind,
            subresource,
        }
    }
}

/// A tower layer that records [`ClientMetrics`] for every request.
#[derive(Clone, Debug)]
pub struct ClientMetricsLayer {
    metrics: ClientMetrics,
}

impl ClientMetricsLayer {
    /// A layer recording into `metrics`.
    pub fn new(metrics: ClientMetrics) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for ClientMetricsLayer {
    type Service = ClientMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`ClientMetricsLayer`] wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct ClientMetricsService<S> {
    inner: S,
    metrics: ClientMetrics,
}

impl<S, B, RB> Service<Request<B>> for ClientMetricsService<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let labels = RequestLabels::of(&request);
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let status = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            metrics.observe(&labels, &status, started.elapsed().as_secs_f64());
            response
        })
    }
}

/// A `kube::Client` for `config` whose requests are recorded in `metrics`.
///
/// # Errors
///
/// As [`kube::Client::try_from`].
pub fn instrumented_client(
    config: kube::Config,
    metrics: ClientMetrics,
) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&ClientMetricsLayer::new(metrics))
        .build())
}

/// Created once per [`MetricsRegistry`](kubeapp_operator::MetricsRegistry), under its prefix: `metrics.set::<ClientMetrics>()`.
impl MetricSet for ClientMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        Self::unregistered(prefix)
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.requests.clone()),
            Box::new(self.duration.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use kubeapp_operator::MetricsRegistry;

    use super::*;

    fn labels(method: Method, uri: &str) -> RequestLabels {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .expect("request");
        RequestLabels::of(&request)
    }

    fn expect(verb: &str, kind: &str, subresource: &str) -> RequestLabels {
        RequestLabels {
            verb: verb.into(),
            kind: kind.into(),
            subresource: subresource.into(),
        }
    }

    #[test]
    fn verbs_kinds_and_subresources_are_read_from_method_and_path() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/ns/configmaps/a",
                expect("get", "configmaps", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?limit=500",
                expect("list", "configmaps", ""),
            ),
            (
                Method::GET,
                "/apis/g.example.com/v1/gadgets?watch=true&resourceVersion=5",
                expect("watch", "gadgets", ""),
            ),
            (
                Method::POST,
                "/apis/g.example.com/v1/namespaces/ns/gadgets",
                expect("create", "gadgets", ""),
            ),
            (
                Method::PUT,
                "/apis/g.example.com/v1/namespaces/ns/gadgets/a/status",
                expect("update", "gadgets", "status"),
            ),
            (
                Method::PATCH,
                "/apis/g.example.com/v1/clusterthings/a",
                expect("patch", "clusterthings", ""),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/configmaps/a",
                expect("delete", "configmaps", ""),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/configmaps",
                expect("deletecollection", "configmaps", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns",
                expect("get", "namespaces", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces",
                expect("list", "namespaces", ""),
            ),
        ];
        for (method, uri, want) in cases {
            assert_eq!(labels(method, uri), want, "{uri}");
        }
    }

    #[tokio::test]
    async fn the_layer_counts_requests_with_their_status() {
        let metrics = ClientMetrics::unregistered(Some("layer_test")).expect("metrics");
        let inner = tower::service_fn(|request: Request<()>| async move {
            let status = if request.uri().path().ends_with("/missing") {
                404
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .body(())
                    .expect("response"),
            )
        });
        let mut service = ClientMetricsLayer::new(metrics.clone()).layer(inner);
        for path in [
            "/api/v1/namespaces/ns/configmaps/a",
            "/api/v1/namespaces/ns/configmaps/missing",
        ] {
            let request = Request::get(path).body(()).expect("request");
            tower::ServiceExt::ready(&mut service).await.expect("ready");
            service.call(request).await.expect("infallible");
        }
        assert_eq!(metrics.requests("200", "get", "configmaps", ""), 1);
        assert_eq!(metrics.requests("404", "get", "configmaps", ""), 1);
    }

    #[test]
    fn a_registry_hands_out_one_set_registered_once_under_its_prefix() {
        let metrics = MetricsRegistry::new(Some("twice")).expect("metrics");
        let first: ClientMetrics = metrics.set().expect("first");
        let again: ClientMetrics = metrics.set().expect("asked again: no clash with itself");
        first.observe(&expect("get", "pods", ""), "200", 0.1);
        again.observe(&expect("get", "pods", ""), "200", 0.1);
        assert_eq!(first.requests("200", "get", "pods", ""), 2, "one set");
        let mut names: Vec<String> = metrics
            .registry()
            .gather()
            .iter()
            .map(|family| family.name().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "twice_kubernetes_client_request_duration_seconds",
                "twice_kubernetes_client_requests_total"
            ]
        );
    }
}
