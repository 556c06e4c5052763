//! `kubeapp-bench-phases`: how many phase transitions per second the phase scheduler sustains
//! against a real kube-apiserver + etcd (testenv), with no-op workers.
//!
//! `--objects N` objects of a test kind walk First -> Second -> Third -> Done (three transitions
//! each, each a status write and an Event); the figure is transitions / time from the first create
//! to the last object seen in `Done`. Creates run `--create-concurrency` at a time, the scheduler
//! with `--workers` objects at once. A measurement, not a test: it prints, it asserts nothing
//! about speed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser as _;
use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt};
use kubeapp::operator::{CancellationToken, ControllerConfig, InformerController, InformerOptions};
use kubeapp::phases::{Phase, PhaseMachine, Transition};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "bench.kubeapp.dev",
    version = "v1",
    kind = "Walker",
    namespaced,
    status = "WalkerStatus"
)]
struct WalkerSpec {
    id: u32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WalkerStatus {
    phase: Option<String>,
    observed_generation: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    First,
    Second,
    Third,
    Done,
}

impl Phase for Step {
    const ALL: &'static [Self] = &[Step::First, Step::Second, Step::Third, Step::Done];
    const INITIAL: Self = Step::First;
    fn name(&self) -> &'static str {
        match self {
            Step::First => "First",
            Step::Second => "Second",
            Step::Third => "Third",
            Step::Done => "Done",
        }
    }
    fn is_final(&self) -> bool {
        matches!(self, Step::Done)
    }
}

/// Measures phase transitions per second on testenv.
#[derive(Debug, clap::Parser)]
#[command(name = "kubeapp-bench-phases")]
struct Cli {
    /// Objects that walk the phases.
    #[arg(long, default_value_t = 1000)]
    objects: u32,
    /// Objects the scheduler works at once.
    #[arg(long, default_value_t = 10)]
    workers: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 10)]
    create_concurrency: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let env = TestEnv::start().await.context("starting testenv")?;
    env.install_crds_yaml(&serde_json::to_string(&Walker::crd())?)
        .await
        .context("installing the CRD")?;
    let ns = env.create_namespace("phases").await?;
    let client = env.client();
    let scheduler = PhaseMachine::<Walker, Step>::new()
        .worker(Step::First, |_w, _c| async {
            Ok(Transition::to(Step::Second))
        })
        .worker(Step::Second, |_w, _c| async {
            Ok(Transition::to(Step::Third))
        })
        .worker(Step::Third, |_w, _c| async {
            Ok(Transition::to(Step::Done))
        })
        .build()?;
    let controller = InformerController::new(
        ControllerConfig::default()
            .name("phases-bench")
            .max_concurrent_workers(cli.workers),
    );
    let walkers: Api<Walker> = Api::namespaced(client.clone(), &ns);
    let handle = controller.kind(
        walkers.clone(),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let _scheduler = handle.reconcile(scheduler);
    let stop = CancellationToken::new();
    tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });

    let done = Arc::new(tokio::sync::Notify::new());
    let watch = tokio::spawn({
        let (walkers, done, objects) = (walkers.clone(), Arc::clone(&done), cli.objects as usize);
        async move {
            let mut finished = std::collections::HashSet::new();
            let mut events = watcher::watcher(walkers, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = events.next().await {
                if let watcher::Event::Apply(w) | watcher::Event::InitApply(w) = event
                    && w.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Done")
                {
                    finished.insert(w.spec.id);
                    if finished.len() == objects {
                        done.notify_one();
                        return;
                    }
                }
            }
        }
    });

    let started = Instant::now();
    futures::stream::iter(0..cli.objects)
        .map(|id| {
            let walkers = walkers.clone();
            async move {
                walkers
                    .create(
                        &PostParams::default(),
                        &Walker::new(&format!("w{id}"), WalkerSpec { id }),
                    )
                    .await
            }
        })
        .buffer_unordered(cli.create_concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .context("creating the objects")?;
    tokio::time::timeout(Duration::from_secs(1800), done.notified())
        .await
        .context("every object reaches Done within 30 minutes")?;
    let elapsed = started.elapsed();
    let transitions = u64::from(cli.objects) * 3;
    println!(
        "{} objects, {transitions} transitions in {:.2} s: {:.0} transitions/s ({} workers, {} creates in flight)",
        cli.objects,
        elapsed.as_secs_f64(),
        transitions as f64 / elapsed.as_secs_f64(),
        cli.workers,
        cli.create_concurrency
    );
    stop.cancel();
    watch.abort();
    Ok(())
}
