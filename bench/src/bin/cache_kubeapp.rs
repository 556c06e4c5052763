//! The kubeapp cache contender of `kubeapp-bench cache`: a store over kubeapp's shared informer
//! of the `--object` kind (the bench kind or Pods) in `--namespace` (`Informers::store`, default
//! options: what a Runner's apps share when they cache a kind; `managedFields` dropped), and
//! nothing else. Its object count and synced state are on `/metrics`
//! ([`kubeapp_bench::cache_contender`]).

use clap::Parser as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kubeapp::operator::{InformerOptions, Informers, Kind};
use kubeapp_bench::cache_contender::{CacheContenderArgs, CacheObject, serve_cache_gauges};
use kubeapp_bench::contender_cli::{client_from, init_logs};
use kubeapp_bench::kind::BenchObject;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = CacheContenderArgs::parse();
    let client = client_from(&args.contender.kubeconfig).await?;
    match args.object {
        CacheObject::Bench => cache::<BenchObject>(client, &args).await,
        CacheObject::Pod => cache::<Pod>(client, &args).await,
    }
}

/// Caches `K` in `--namespace` and serves the gauges until the process is stopped.
async fn cache<K>(client: kube::Client, args: &CacheContenderArgs) -> anyhow::Result<()>
where
    K: Kind + kube::Resource<Scope = kube::core::NamespaceResourceScope>,
{
    let informers = Informers::new();
    let store = informers.store(
        Api::<K>::namespaced(client, &args.contender.namespace),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    serve_cache_gauges(
        args.contender.metrics_port,
        || store.len(),
        || store.is_synced(),
    )
    .await
}
