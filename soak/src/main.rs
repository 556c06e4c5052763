//! `kubeapp-soak`: the load-and-churn soak of kubeapp's opinionated wrappers at any size. See
//! the crate docs of `kubeapp_soak` and `docs/soak.md`.
//!
//! Exit codes: 0 when no round of any wrapper lost anything, 1 on any loss (the losses, up to
//! `--list` per kind, and the totals are printed) or when the soak could not run, 2 on a usage
//! error.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser as _;
use kubeapp_sdk::error::ErrorChain;
use kubeapp_soak::operator::OperatorSettings;
use kubeapp_soak::workload::WorkloadSettings;
use kubeapp_soak::{FaultSettings, ScenarioSettings, SoakEnv, SoakError, Wrapper};

/// Creates, updates and deletes many objects under an opinionated wrapper on a local
/// kube-apiserver + etcd, with apiserver restarts and forced 409s, and reports every object whose
/// newest spec or delete never reached a handler.
#[derive(Debug, clap::Parser)]
#[command(name = "kubeapp-soak", version)]
struct Cli {
    /// Objects created per round.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    objects: u32,
    /// Rounds per wrapper (each round creates new objects; the operator keeps running).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Keep starting rounds until this many seconds have passed (per wrapper; at least --rounds).
    #[arg(long, default_value_t = 0)]
    duration_secs: u64,
    /// The wrappers to soak, one after the other, each on a fresh control plane (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Wrapper::Watcher, Wrapper::Reconciler])]
    wrappers: Vec<Wrapper>,
    /// Every object whose index is a multiple of this gets spec updates (0: none).
    #[arg(long, default_value_t = 3)]
    update_every: usize,
    /// Spec updates per updated object.
    #[arg(long, default_value_t = 2)]
    updates_per_object: u32,
    /// Every object whose index is a multiple of this is deleted (0: none).
    #[arg(long, default_value_t = 5)]
    delete_every: usize,
    /// How long the handlers' add / Created work, in milliseconds.
    #[arg(long, default_value_t = 30)]
    add_delay_ms: u64,
    /// The controller's worker count.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    create_concurrency: u16,
    /// Objects whose updates and deletes are in flight at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    churn_concurrency: u16,
    /// Restart kube-apiserver every this many seconds while the workload runs (0: never).
    #[arg(long, default_value_t = 60)]
    restart_every_secs: u64,
    /// Annotation writes per second that force 409s on the wrappers' finalizer patches (0: none).
    #[arg(long, default_value_t = 50)]
    conflict_writes_per_sec: u32,
    /// How long the handlers may take after a round's workload to see everything, in seconds.
    #[arg(long, default_value_t = 300)]
    check_deadline_secs: u64,
    /// Seed of the conflict writer.
    #[arg(long, default_value_t = 12)]
    seed: u64,
    /// Lost objects listed per kind of loss.
    #[arg(long, default_value_t = 50)]
    list: usize,
}

impl Cli {
    fn settings(&self, wrapper: Wrapper) -> ScenarioSettings {
        ScenarioSettings {
            operator: OperatorSettings {
                wrapper,
                workers: usize::from(self.workers),
                add_delay: Duration::from_millis(self.add_delay_ms),
                ..OperatorSettings::default()
            },
            workload: WorkloadSettings {
                objects: self.objects as usize,
                create_concurrency: usize::from(self.create_concurrency),
                churn_concurrency: usize::from(self.churn_concurrency),
                update_every: self.update_every,
                updates_per_object: self.updates_per_object,
                delete_every: self.delete_every,
                ..WorkloadSettings::default()
            },
            faults: FaultSettings {
                restart_every: (self.restart_every_secs > 0)
                    .then(|| Duration::from_secs(self.restart_every_secs)),
                conflict_writes_per_second: self.conflict_writes_per_sec,
                seed: self.seed,
            },
            check_deadline: Duration::from_secs(self.check_deadline_secs),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                // The control plane's start polls readiness and logs each early 500 as an error.
                tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off")
            }),
        )
        .init();
    let cli = Cli::parse();
    let mut lost = 0;
    for wrapper in cli.wrappers.clone() {
        match soak(&cli, wrapper).await {
            Ok(n) => lost += n,
            Err(error) => {
                eprintln!("error: {wrapper}: {}", ErrorChain(&error));
                return ExitCode::FAILURE;
            }
        }
    }
    if lost == 0 {
        println!("no loss");
        ExitCode::SUCCESS
    } else {
        println!("LOST {lost} objects (see above)");
        ExitCode::FAILURE
    }
}

/// Soaks one wrapper on a fresh control plane; returns how many objects were lost.
async fn soak(cli: &Cli, wrapper: Wrapper) -> Result<usize, SoakError> {
    let mut settings = cli.settings(wrapper);
    let started = Instant::now();
    println!("{wrapper}: starting a control plane and the operator");
    let env = SoakEnv::start(&settings.operator).await?;
    let mut lost = 0;
    let mut round = 0;
    let result = loop {
        if round >= cli.rounds && started.elapsed() >= Duration::from_secs(cli.duration_secs) {
            break Ok(lost);
        }
        round += 1;
        settings.workload.name_prefix = format!("r{round}-");
        println!(
            "{wrapper} round {round}: {} objects; {} spec updates of each index divisible by {}; \
             deletes of each index divisible by {}",
            settings.workload.objects,
            settings.workload.updates_per_object,
            settings.workload.update_every,
            settings.workload.delete_every
        );
        let outcome = match env.round(&settings).await {
            Ok(outcome) => outcome,
            Err(error) => break Err(error),
        };
        println!(
            "{wrapper} round {round}: workload {:.1?} (creates {:.1?}): {} created, {} updates, {} deleted; \
             {} apiserver restarts, {} conflict writes, {} finalizer conflicts so far; checked in {:.1?}",
            outcome.ledger.total_time,
            outcome.ledger.create_time,
            outcome.ledger.uids.len(),
            outcome.ledger.updates,
            outcome.ledger.deleted.len(),
            outcome.restarts,
            outcome.pokes,
            env.operator.conflicts(),
            outcome.converge_time,
        );
        print!("{}", outcome.report.display(cli.list));
        lost += outcome.report.loss_count();
        print!(
            "shared informer, plain reconciler: {}",
            outcome.shadow_report.display(cli.list)
        );
        lost += outcome.shadow_report.loss_count();
    };
    let calls: Vec<String> = env
        .recorder
        .call_counts()
        .iter()
        .map(|(call, n)| format!("{call:?} {n}"))
        .collect();
    println!("{wrapper}: handler calls: {}", calls.join(", "));
    env.stop().await;
    result
}
