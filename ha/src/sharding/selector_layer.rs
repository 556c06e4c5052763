//! A client layer that adds the apiserver's `shardSelector` query parameter to the list and
//! watch requests of one collection.
//!
//! kube 5's `ListParams` and `WatchParams` have no field for the parameter (it came with
//! Kubernetes 1.36, alpha, behind the `ShardedListAndWatch` feature gate), so it is added below
//! kube, on the HTTP request: [`ShardSelectorLayer`] wraps a client's service and, for `GET`
//! requests whose path is exactly the collection's (`Api::resource_url`: a list or a watch of
//! it, not a get of one object, a subresource, another kind or a write), appends
//! `shardSelector=<selector>` while a [`ShardSelection`] holds one. The selection is shared
//! and changeable at run time; a request takes the value current when it is sent.
//!
//! The selector syntax is the apiserver's (`k8s.io/apiserver/pkg/sharding/parser.go`):
//! `shardRange(object.metadata.uid, '0x<16 hex>', '0x<16 hex>')` terms joined by `||`, see
//! [`SlotSet::selector`](super::assignment::SlotSet::selector).

use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use tower::{Layer, Service};

/// The query parameter's name (`metav1.ListOptions.ShardSelector`, JSON/query `shardSelector`).
pub const SHARD_SELECTOR_PARAM: &str = "shardSelector";

/// The shard selector a [`ShardSelectorLayer`] adds, shared between the layer and whoever
/// decides it; `None` adds nothing. Cheap to clone; clones share the value.
#[derive(Clone, Debug, Default)]
pub struct ShardSelection(Arc<RwLock<Option<Arc<str>>>>);

impl ShardSelection {
    /// Makes `selector` the one later requests carry (`None`: no parameter).
    pub fn set(&self, selector: Option<String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = selector.map(Arc::from);
    }

    /// The selector requests carry now.
    pub fn get(&self) -> Option<Arc<str>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Adds the [`ShardSelection`] to list and watch requests of one collection path; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct ShardSelectorLayer {
    collection: Arc<str>,
    selection: ShardSelection,
}

impl ShardSelectorLayer {
    /// A layer for the collection at `collection` (e.g. `/apis/g/v1/namespaces/ns/things`, as
    /// `Api::resource_url` gives it).
    pub fn new(collection: impl Into<String>, selection: ShardSelection) -> Self {
        Self {
            collection: Arc::from(collection.into()),
            selection,
        }
    }
}

impl<S> Layer<S> for ShardSelectorLayer {
    type Service = ShardSelectorService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ShardSelectorService {
            inner,
            collection: Arc::clone(&self.collection),
            selection: self.selection.clone(),
        }
    }
}

/// The service [`ShardSelectorLayer`] wraps around a client's stack.
#[derive(Clone, Debug)]
pub struct ShardSelectorService<S> {
    inner: S,
    collection: Arc<str>,
    selection: ShardSelection,
}

impl<S, B> Service<Request<B>> for ShardSelectorService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if request.method() == Method::GET
            && request.uri().path() == &*self.collection
            && let Some(selector) = self.selection.get()
            && let Some(uri) = with_query_param(request.uri(), SHARD_SELECTOR_PARAM, &selector)
        {
            *request.uri_mut() = uri;
        }
        self.inner.call(request)
    }
}

/// `uri` with `name=value` (form-encoded) appended to its query; `None` if the result is not a
/// valid URI (it always is for an encoded value).
fn with_query_param(uri: &Uri, name: &str, value: &str) -> Option<Uri> {
    let encoded: String = form_urlencoded::Serializer::new(String::new())
        .append_pair(name, value)
        .finish();
    let path_and_query = match uri.query() {
        Some(query) if !query.is_empty() => format!("{}?{query}&{encoded}", uri.path()),
        _ => format!("{}?{encoded}", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// A client whose requests pass through `layer` before `client`'s own stack (so `client`'s
/// authentication, metrics and timeouts still apply).
pub(crate) fn layered_client(client: kube::Client, layer: ShardSelectorLayer) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    let send = tower::service_fn(move |request: Request<kube::client::Body>| {
        let client = client.clone();
        async move { client.send(request).await }
    });
    kube::Client::new(layer.layer(send), namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::Mutex;

    /// The URIs a [`recorder`] saw.
    type Seen = Arc<Mutex<Vec<String>>>;

    /// A service that records the URIs it is called with.
    fn recorder() -> (
        Seen,
        impl Service<Request<()>, Response = (), Error = Infallible, Future = Ready<()>>,
    ) {
        let seen = Seen::default();
        let sink = Arc::clone(&seen);
        let service = tower::service_fn(move |request: Request<()>| {
            sink.lock().unwrap().push(request.uri().to_string());
            std::future::ready(Ok::<(), Infallible>(()))
        });
        (seen, service)
    }

    type Ready<T> = std::future::Ready<Result<T, Infallible>>;

    fn request(method: Method, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    const COLLECTION: &str = "/apis/example.dev/v1/namespaces/ns/greetings";

    #[tokio::test]
    async fn only_lists_and_watches_of_the_collection_carry_the_selector() {
        let selection = ShardSelection::default();
        selection.set(Some(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')".into(),
        ));
        let (seen, inner) = recorder();
        let mut service = ShardSelectorLayer::new(COLLECTION, selection).layer(inner);
        for (method, uri) in [
            (Method::GET, format!("{COLLECTION}?limit=500")),
            (
                Method::GET,
                format!("{COLLECTION}?watch=true&resourceVersion=7"),
            ),
            (Method::GET, COLLECTION.to_string()),
            // Not a list or watch of the collection: one object, a subresource, another kind,
            // the same kind in another namespace, a write.
            (Method::GET, format!("{COLLECTION}/one")),
            (Method::GET, format!("{COLLECTION}/one/status")),
            (
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?watch=true".to_string(),
            ),
            (
                Method::GET,
                "/apis/example.dev/v1/namespaces/other/greetings".to_string(),
            ),
            (Method::POST, COLLECTION.to_string()),
            (Method::DELETE, COLLECTION.to_string()),
        ] {
            tower::ServiceExt::oneshot(&mut service, request(method, &uri))
                .await
                .unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        let encoded = "shardSelector=shardRange%28object.metadata.uid%2C+%270x0000000000000000%27%2C+%270x8000000000000000%27%29";
        assert_eq!(seen[0], format!("{COLLECTION}?limit=500&{encoded}"));
        assert_eq!(
            seen[1],
            format!("{COLLECTION}?watch=true&resourceVersion=7&{encoded}")
        );
        assert_eq!(seen[2], format!("{COLLECTION}?{encoded}"));
        for untouched in &seen[3..] {
            assert!(!untouched.contains("shardSelector"), "{untouched}");
        }
    }

    #[tokio::test]
    async fn a_changed_selection_applies_to_the_next_request_and_none_removes_it() {
        let selection = ShardSelection::default();
        let (seen, inner) = recorder();
        let mut service = ShardSelectorLayer::new(COLLECTION, selection.clone()).layer(inner);
        let send = async |service: &mut ShardSelectorService<_>| {
            tower::ServiceExt::oneshot(service, request(Method::GET, COLLECTION))
                .await
                .unwrap();
        };
        send(&mut service).await;
        selection.set(Some("a".into()));
        send(&mut service).await;
        selection.set(Some("b || c".into()));
        send(&mut service).await;
        selection.set(None);
        send(&mut service).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                COLLECTION.to_string(),
                format!("{COLLECTION}?shardSelector=a"),
                format!("{COLLECTION}?shardSelector=b+%7C%7C+c"),
                COLLECTION.to_string(),
            ]
        );
    }
}
