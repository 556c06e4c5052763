//! The raw kube-runtime contender: `kube_runtime::Controller` with the same concurrency as the
//! others and its `finalizer` helper (which adds `bench.kubeapp.dev/finalizer` before the first
//! apply), and the same logic: when `status.observedGeneration` differs from
//! `metadata.generation`, merge-patch the status subresource so they are equal. It counts its
//! reconcile calls on `/metrics` (`--metrics-port`), as the tool reads every contender's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser as _;
use futures::StreamExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::finalizer::{self, Event, finalizer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use kubeapp_bench::call_log;
use kubeapp_bench::contender_cli::{ContenderArgs, client_from, init_logs};
use kubeapp_bench::contender_metrics::ContenderMetrics;
use kubeapp_bench::kind::{BenchObject, FINALIZER, status_patch};

struct Context {
    client: Client,
    errors: AtomicU64,
    metrics: ContenderMetrics,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = ContenderArgs::parse();
    call_log::init(args.call_log.as_deref())?;
    let client = client_from(&args.kubeconfig).await?;
    let api: Api<BenchObject> = Api::namespaced(client.clone(), &args.namespace);
    let concurrency = u16::try_from(args.workers).unwrap_or(u16::MAX);
    let metrics = ContenderMetrics::new()?;
    metrics.serve(args.metrics_port).await?;
    let context = Arc::new(Context {
        client,
        errors: AtomicU64::new(0),
        metrics,
    });
    Controller::new(api, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(concurrency))
        .shutdown_on_signal()
        .run(reconcile, error_policy, context.clone())
        .for_each(|_| async {})
        .await;
    eprintln!(
        "reconcile errors: {}",
        context.errors.load(Ordering::Relaxed)
    );
    Ok(())
}

async fn reconcile(
    object: Arc<BenchObject>,
    context: Arc<Context>,
) -> Result<Action, finalizer::Error<kube::Error>> {
    context.metrics.reconciled();
    call_log::record(
        object.metadata.name.as_deref().unwrap_or_default(),
        object.metadata.generation.unwrap_or_default(),
    );
    let api: Api<BenchObject> = Api::namespaced(
        context.client.clone(),
        object.namespace().as_deref().unwrap_or_default(),
    );
    finalizer(&api, FINALIZER, object, |event| async {
        match event {
            Event::Apply(object) => {
                if !object.is_reconciled() {
                    let generation = object.metadata.generation.unwrap_or_default();
                    api.patch_status(
                        &object.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(status_patch(generation)),
                    )
                    .await?;
                }
                Ok(Action::await_change())
            }
            Event::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
}

fn error_policy(
    object: Arc<BenchObject>,
    error: &finalizer::Error<kube::Error>,
    context: Arc<Context>,
) -> Action {
    context.errors.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(name = %object.name_any(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(1))
}
