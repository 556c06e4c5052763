//! The kubeapp cache contender of `kubeapp-bench cache`: a store over kubeapp's shared informer
//! of the bench kind in `--namespace` (`Informers::store`, default options: what a Runner's
//! apps share when they cache a kind), and nothing else. Its object count and synced state are
//! on `/metrics` ([`kubeapp_bench::cache_contender`]).

use clap::Parser as _;
use kube::api::Api;
use kube::runtime::watcher;
use kubeapp::operator::{InformerOptions, Informers};
use kubeapp_bench::cache_contender::serve_cache_gauges;
use kubeapp_bench::contender_cli::{ContenderArgs, client_from, init_logs};
use kubeapp_bench::kind::BenchObject;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = ContenderArgs::parse();
    let client = client_from(&args.kubeconfig).await?;
    let informers = Informers::new();
    let store = informers.store(
        Api::<BenchObject>::namespaced(client, &args.namespace),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    serve_cache_gauges(args.metrics_port, || store.len(), || store.is_synced()).await
}
