//! The kube-runtime cache contender of `kubeapp-bench cache`: kube-runtime's `reflector` over a
//! `watcher` of the bench kind in `--namespace` (default `watcher::Config`, default backoff) into
//! a reflector `Store`, and nothing else: how a kube-runtime operator caches a kind. Its object
//! count and synced state are on `/metrics` ([`kubeapp_bench::cache_contender`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser as _;
use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kubeapp_bench::cache_contender::serve_cache_gauges;
use kubeapp_bench::contender_cli::{ContenderArgs, client_from, init_logs};
use kubeapp_bench::kind::BenchObject;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = ContenderArgs::parse();
    let client = client_from(&args.kubeconfig).await?;
    let api = Api::<BenchObject>::namespaced(client, &args.namespace);
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(stream.for_each(|event| async move {
        if let Err(error) = event {
            tracing::warn!(%error, "the watch failed; resuming");
        }
    }));
    let synced = Arc::new(AtomicBool::new(false));
    let ready = reader.clone();
    let flag = Arc::clone(&synced);
    tokio::spawn(async move {
        if ready.wait_until_ready().await.is_ok() {
            flag.store(true, Ordering::Release);
        }
    });
    serve_cache_gauges(
        args.metrics_port,
        || reader.len(),
        || synced.load(Ordering::Acquire),
    )
    .await
}
