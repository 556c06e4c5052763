//! `telemetry` exports spans to a real OTLP endpoint: an in-process receiver that speaks OTLP over
//! HTTP/protobuf (an axum server) or gRPC (a tonic server) on loopback, decoding what arrives.

use std::net::SocketAddr;
use std::time::Duration;

use kubeapp_simple::telemetry::{self, Otlp, OtlpProtocol, TelemetryConfig};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tokio::sync::mpsc;

/// What the receiver saw: (service.name, span names) per export request.
type Received = (Option<String>, Vec<String>);

fn summarize(request: &ExportTraceServiceRequest) -> Received {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let mut service = None;
    let mut names = Vec::new();
    for rs in &request.resource_spans {
        for attr in rs.resource.iter().flat_map(|r| &r.attributes) {
            if let (true, Some(Value::StringValue(s))) = (
                attr.key == "service.name",
                attr.value.as_ref().and_then(|v| v.value.as_ref()),
            ) {
                service = Some(s.clone());
            }
        }
        for ss in &rs.scope_spans {
            names.extend(ss.spans.iter().map(|s| s.name.clone()));
        }
    }
    (service, names)
}

async fn http_receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Received>) {
    use axum::body::Bytes;
    use axum::http::StatusCode;
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let tx = tx.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(request) => {
                        let _ = tx.send(summarize(&request));
                        (
                            StatusCode::OK,
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                    Err(err) => (StatusCode::BAD_REQUEST, err.to_string().into_bytes()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

struct GrpcReceiver(mpsc::UnboundedSender<Received>);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.0.send(summarize(request.get_ref()));
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn grpc_receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Received>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(GrpcReceiver(tx)))
            .serve_with_incoming(incoming),
    );
    (addr, rx)
}

/// Emits a parent span with a child and an event, then flushes through `shutdown`.
async fn emit_spans(url: String, protocol: OtlpProtocol) {
    let config = TelemetryConfig::new("otlp-test-operator")
        .filter("info")
        .otlp(Otlp::Endpoint { url, protocol });
    let (subscriber, guard) = telemetry::subscriber(&config).expect("subscriber");
    assert!(guard.exports_spans());
    {
        let _default = tracing::subscriber::set_default(subscriber);
        let parent = tracing::info_span!("informer-event-add", kind = "Widget");
        let _entered = parent.enter();
        let child = tracing::info_span!("controller-event-reconcile");
        child.in_scope(|| tracing::info!("reconciled"));
    }
    guard.shutdown().await.expect("flush on shutdown");
}

async fn collect_names(
    rx: &mut mpsc::UnboundedReceiver<Received>,
) -> (Option<String>, Vec<String>) {
    let (service, mut names) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("an export request within 20 s")
        .expect("receiver open");
    // Everything was flushed before shutdown returned; take any further batches already there.
    while let Ok((_, more)) = rx.try_recv() {
        names.extend(more);
    }
    names.sort();
    (service, names)
}

#[tokio::test]
async fn spans_reach_an_otlp_http_receiver() {
    let (addr, mut rx) = http_receiver().await;
    // A base URL: telemetry adds /v1/traces.
    emit_spans(format!("http://{addr}"), OtlpProtocol::HttpProtobuf).await;
    let (service, names) = collect_names(&mut rx).await;
    assert_eq!(service.as_deref(), Some("otlp-test-operator"));
    assert_eq!(names, ["controller-event-reconcile", "informer-event-add"]);
}

#[tokio::test]
async fn spans_reach_an_otlp_grpc_receiver() {
    let (addr, mut rx) = grpc_receiver().await;
    emit_spans(format!("http://{addr}"), OtlpProtocol::Grpc).await;
    let (service, names) = collect_names(&mut rx).await;
    assert_eq!(service.as_deref(), Some("otlp-test-operator"));
    assert_eq!(names, ["controller-event-reconcile", "informer-event-add"]);
}

#[tokio::test]
async fn without_otlp_configuration_nothing_is_exported() {
    let (subscriber, guard) =
        telemetry::subscriber(&TelemetryConfig::new("quiet").otlp(Otlp::Disabled))
            .expect("subscriber");
    drop(subscriber);
    assert!(!guard.exports_spans());
    guard.shutdown().await.expect("nothing to flush");
}
