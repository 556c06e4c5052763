//! The floor: the same writes as the operators, with nothing around them. One plain watch
//! (resumed from the last resourceVersion when the server ends it), no cache, no queue; for each
//! object it sees being added, with at most `--workers` objects at once: a merge patch that sets
//! the finalizer list to `[bench.kubeapp.dev/finalizer]`, then a merge patch of the status
//! subresource setting `observedGeneration` to the generation. It ignores every other event:
//! the floor knows what it wrote, so it needs no second look. A failed write is logged (the tool
//! sees it in the apiserver's audit log and fails the run). Each object it handles counts as one
//! reconcile on `/metrics` (`--metrics-port`).

use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use futures::TryStreamExt as _;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use kubeapp_bench::contender_cli::{ContenderArgs, client_from, init_logs};
use kubeapp_bench::contender_metrics::ContenderMetrics;
use kubeapp_bench::kind::{BenchObject, FINALIZER, status_patch};
use tokio::sync::Semaphore;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = ContenderArgs::parse();
    let client = client_from(&args.kubeconfig).await?;
    let api: Api<BenchObject> = Api::namespaced(client, &args.namespace);
    let metrics = ContenderMetrics::new()?;
    metrics.serve(args.metrics_port).await?;
    let workers = Arc::new(Semaphore::new(args.workers.max(1)));
    // "0": start from any version, with an ADDED event for every object that exists already.
    let mut version = "0".to_string();
    loop {
        let stream = api
            .watch(&WatchParams::default().timeout(290), &version)
            .await
            .context("opening the watch")?;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.try_next().await.context("reading the watch")? {
            match event {
                WatchEvent::Added(object) => {
                    version = object.resource_version().unwrap_or(version);
                    let permit = Arc::clone(&workers)
                        .acquire_owned()
                        .await
                        .context("the worker semaphore closed")?;
                    let api = api.clone();
                    metrics.reconciled();
                    tokio::spawn(async move {
                        if let Err(error) = reconcile(&api, &object).await {
                            tracing::warn!(name = %object.name_any(), %error, "writes failed");
                        }
                        drop(permit);
                    });
                }
                WatchEvent::Modified(object) | WatchEvent::Deleted(object) => {
                    version = object.resource_version().unwrap_or(version);
                }
                WatchEvent::Bookmark(bookmark) => version = bookmark.metadata.resource_version,
                WatchEvent::Error(error) => anyhow::bail!("the watch failed: {error}"),
            }
        }
    }
}

async fn reconcile(api: &Api<BenchObject>, object: &BenchObject) -> Result<(), kube::Error> {
    let name = object.name_any();
    let params = PatchParams::default();
    let finalizers = serde_json::json!({ "metadata": { "finalizers": [FINALIZER] } });
    api.patch(&name, &params, &Patch::Merge(finalizers)).await?;
    let generation = object.metadata.generation.unwrap_or_default();
    api.patch_status(&name, &params, &Patch::Merge(status_patch(generation)))
        .await?;
    Ok(())
}
