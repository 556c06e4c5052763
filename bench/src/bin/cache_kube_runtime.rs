//! The kube-runtime cache contender of `kubeapp-bench cache`: kube-runtime's `reflector` over a
//! `watcher` of the `--object` kind (the bench kind or Pods) in `--namespace` (default
//! `watcher::Config`, default backoff) into a reflector `Store`, objects stored as they come
//! (`managedFields` kept: the `Store`'s default), and nothing else: how a kube-runtime operator
//! caches a kind. Its object count and synced state are on `/metrics`
//! ([`kubeapp_bench::cache_contender`]). `kubeapp-bench-cache-kube-runtime-stripped` is the same
//! with `managedFields` dropped.

use clap::Parser as _;
use kubeapp_bench::cache_contender::{CacheContenderArgs, Strip, cache_with_reflector};
use kubeapp_bench::contender_cli::init_logs;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    cache_with_reflector(&CacheContenderArgs::parse(), Strip::Nothing).await
}
