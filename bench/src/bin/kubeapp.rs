//! The kubeapp contender: a `kubeapp::simple::SimpleApp` with one managed kind whose reconciler runs
//! behind the opinionated wrapper (the default: it adds the finalizer `bench.kubeapp.dev/finalizer`), run in
//! the `Runner` as a real operator would be. The logic: when `status.observedGeneration`
//! differs from `metadata.generation`, merge-patch the status subresource so they are equal. The
//! status write is noted as the operator's own (`Context::note_own_write`), so its watch event
//! starts no second reconcile, as the SDK's own status writer does by itself.
//!
//! Diagnostic only (never set by the tool): `KUBEAPP_BENCH_CONFLICT_BASE_DELAY_MS` replaces the
//! wrapper's wait before re-reading after a conflicting finalizer patch (default 50 ms), to show
//! how much of the run that wait costs.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeapp::operator::opinionated::ConflictRetry;
use kubeapp::operator::{
    Context, ControllerConfig, OpinionatedOptions, ReconcileAction, ReconcileError,
    ReconcileRequest, ReconcileResult, WrittenPart,
};
use kubeapp::runner::{Runner, RunnerConfig};
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{AppConfig, ManagedKind, SimpleApp};
use kubeapp_bench::call_log;
use kubeapp_bench::contender_cli::{ContenderArgs, client_from, init_logs};
use kubeapp_bench::kind::{APP_NAME, BenchObject, FINALIZER, MANIFEST_YAML, status_patch};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logs();
    let args = ContenderArgs::parse();
    call_log::init(args.call_log.as_deref())?;
    let client = client_from(&args.kubeconfig).await?;
    let manifest = ManifestData::from_yaml(MANIFEST_YAML).context("the bench manifest")?;
    let objects = ManagedKind::<BenchObject>::new()
        .namespace(&args.namespace)
        .finalizer(FINALIZER)
        .reconcile_fn(reconcile);
    let config = AppConfig::new(APP_NAME)
        .manifest(manifest)
        .managed_kind(objects)
        .controller(ControllerConfig::default().max_concurrent_workers(args.workers));
    let config = match conflict_base_delay()? {
        Some(base_delay) => config.opinionated_options(
            OpinionatedOptions::default().conflict_retry(ConflictRetry {
                base_delay,
                ..ConflictRetry::default()
            }),
        ),
        None => config,
    };
    let app = SimpleApp::new(config, client).context("building the app")?;
    let metrics_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.metrics_port));
    Runner::new(RunnerConfig::default().metrics_addr(metrics_addr))
        .context("configuring the runner")?
        .with_app(Arc::new(app))
        .run()
        .await
        .context("running the operator")
}

/// The diagnostic override of the conflict wait, if set.
fn conflict_base_delay() -> anyhow::Result<Option<Duration>> {
    match std::env::var("KUBEAPP_BENCH_CONFLICT_BASE_DELAY_MS") {
        Ok(ms) => {
            let ms: u64 = ms
                .parse()
                .with_context(|| format!("KUBEAPP_BENCH_CONFLICT_BASE_DELAY_MS={ms:?}"))?;
            Ok(Some(Duration::from_millis(ms)))
        }
        Err(_) => Ok(None),
    }
}

async fn reconcile(
    request: ReconcileRequest<BenchObject>,
    ctx: Context,
) -> Result<ReconcileResult, ReconcileError> {
    let object = &request.object;
    call_log::record(
        object.metadata.name.as_deref().unwrap_or_default(),
        object.metadata.generation.unwrap_or_default(),
    );
    if request.action == ReconcileAction::Deleted || object.is_reconciled() {
        return Ok(ReconcileResult::done());
    }
    let generation = object.metadata.generation.unwrap_or_default();
    let api: Api<BenchObject> = Api::namespaced(
        ctx.client().clone(),
        object.namespace().as_deref().unwrap_or_default(),
    );
    let written = api
        .patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status_patch(generation)),
        )
        .await
        .map_err(ReconcileError::new)?;
    ctx.note_own_write(&written, WrittenPart::Status);
    Ok(ReconcileResult::done())
}
