//! The kubeapp projection cache contender of `kubeapp-bench cache`: a store over kubeapp's shared
//! informer of a *projection* of the `--object` kind in `--namespace`
//! (`Informers::projection_store`), caching only what a typical handler reads: for Pods, the
//! metadata, `spec.nodeName`, `status.phase` and the conditions ([`PodPlacement`]); for the bench
//! kind, the metadata only ([`BenchMetadata`]). `managedFields` dropped, as in every kubeapp
//! cache. Its object count and synced state are on `/metrics`
//! ([`kubeapp_bench::cache_contender`]).

use clap::Parser as _;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::Api;
use kube::runtime::watcher;
use kubeapp::operator::projection::Projection;
use kubeapp::operator::{InformerOptions, Informers};
use kubeapp_bench::cache_contender::{CacheContenderArgs, CacheObject, serve_cache_gauges};
use kubeapp_bench::contender_cli::{client_from, init_logs};
use kubeapp_bench::kind::BenchObject;
use serde::{Deserialize, Serialize};

/// What a Pod-placing handler reads of a Pod.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct PodPlacement {
    spec: Placement,
    status: Health,
}

/// `spec.nodeName`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct Placement {
    node_name: Option<String>,
}

/// `status.phase` and `status.conditions`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Health {
    phase: Option<String>,
    conditions: Vec<PodCondition>,
}

impl Projection for PodPlacement {
    type Of = Pod;
}

/// Nothing but the metadata of a bench object (what a handler keyed on names and labels reads).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct BenchMetadata {}

impl Projection for BenchMetadata {
    type Of = BenchObject;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = CacheContenderArgs::parse();
    let client = client_from(&args.contender.kubeconfig).await?;
    match args.object {
        CacheObject::Bench => cache::<BenchMetadata>(client, &args).await,
        CacheObject::Pod => cache::<PodPlacement>(client, &args).await,
    }
}

/// Caches the projection `P` in `--namespace` and serves the gauges until the process is stopped.
async fn cache<P>(client: kube::Client, args: &CacheContenderArgs) -> anyhow::Result<()>
where
    P: Projection,
    P::Of: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
{
    let informers = Informers::new();
    let store = informers.projection_store::<P>(
        Api::namespaced(client, &args.contender.namespace),
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
