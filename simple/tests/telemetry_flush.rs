//! A Runner handed the telemetry guard flushes the last spans when it stops: an in-process OTLP
//! HTTP receiver has them by the time `run_until` returns.

use std::net::SocketAddr;

use kubeapp_runner::{Runner, RunnerConfig};
use kubeapp_simple::telemetry::{self, Otlp, OtlpProtocol, TelemetryConfig};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tokio::sync::mpsc;

/// An OTLP/HTTP receiver on loopback; sends the span names of every export request.
async fn receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Vec<String>>) {
    use axum::body::Bytes;
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let tx = tx.clone();
            async move {
                if let Ok(request) = ExportTraceServiceRequest::decode(body) {
                    let names = request
                        .resource_spans
                        .iter()
                        .flat_map(|rs| &rs.scope_spans)
                        .flat_map(|ss| &ss.spans)
                        .map(|span| span.name.clone())
                        .collect();
                    let _ = tx.send(names);
                }
                ExportTraceServiceResponse::default().encode_to_vec()
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

// Multi-threaded: a guard dropped without a flush shuts its provider down from `Drop`, which
// blocks its thread until the batch task (on this runtime) answers; with one thread that would
// hang instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_given_the_guard_flushes_the_last_spans_before_it_returns() {
    let (addr, mut rx) = receiver().await;
    let config = TelemetryConfig::new("flush-test")
        .filter("info")
        .otlp(Otlp::Endpoint {
            url: format!("http://{addr}"),
            protocol: OtlpProtocol::HttpProtobuf,
        });
    let (subscriber, guard) = telemetry::subscriber(&config).expect("subscriber");
    {
        let _default = tracing::subscriber::set_default(subscriber);
        tracing::info_span!("last-span-before-shutdown").in_scope(|| tracing::info!("work"));
    }
    let mut runner =
        Runner::new(RunnerConfig::default().metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0))))
            .expect("runner");
    guard.flush_on_shutdown(&mut runner);
    runner.run_until(async {}).await.expect("clean stop");

    // Already there: the flush completed before `run_until` returned (the batch delay is 5 s).
    let mut names = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        names.extend(batch);
    }
    assert_eq!(names, ["last-span-before-shutdown"]);
}
