//! The stripped kube-runtime cache contender of `kubeapp-bench cache`: the same reflector as
//! `kubeapp-bench-cache-kube-runtime`, with `managedFields` dropped from every object before it
//! reaches the `Store` (`WatchStreamExt::modify`, as kube-runtime's reflector docs advise; the
//! field is set to `None`, which frees its `Vec` too). The fair peer of kubeapp's store, which
//! drops `managedFields` by default.

use clap::Parser as _;
use kubeapp_bench::cache_contender::{CacheContenderArgs, Strip, cache_with_reflector};
use kubeapp_bench::contender_cli::init_logs;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    cache_with_reflector(&CacheContenderArgs::parse(), Strip::ManagedFields).await
}
