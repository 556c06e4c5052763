//! `kubeapp-bench`: the end-to-end benchmark of kubeapp against raw kube-runtime,
//! grafana-app-sdk and a plain-client floor; `kubeapp-bench cache`: the memory and sync time of a
//! cache of many objects (kubeapp's store against kube-runtime's reflector). See the crate docs
//! of `kubeapp_bench` and `docs/performance/end-to-end.md`.
//!
//! Exit codes: 0 when every run of every contender succeeded (the table is on stdout, the JSON in
//! `--json`), 1 on any failure (the message goes to stderr), 2 on a usage error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use kubeapp_bench::cache::{CACHE_CONTENDERS, CacheSettings, run_cache};
use kubeapp_bench::cache_contender::CacheObject;
use kubeapp_bench::cache_report::CacheReport;
use kubeapp_bench::contender::{Contender, rust_binary_in};
use kubeapp_bench::gobuild;
use kubeapp_bench::identity::IdentityKind;
use kubeapp_bench::latency::{self, LATENCY_CONTENDERS, LatencySettings, run_latency};
use kubeapp_bench::report::{Machine, Report, Settings, Summary};
use kubeapp_bench::run::{RunSettings, run_once};

/// Measures operators end to end on a real kube-apiserver + etcd (one fresh control plane per run).
#[derive(Debug, clap::Parser)]
#[command(
    name = "kubeapp-bench",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    e2e: E2eArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Caches many objects (small bench objects, or Pods with a full spec and status) in
    /// kubeapp's shared-informer store and in kube-runtime's reflector store (as it comes, and
    /// with managedFields stripped), one after the other on one control plane: time to sync, RSS,
    /// bytes per object, and the peak RSS of a forced re-list (kube-apiserver restarted, watches
    /// resume with 410 Gone).
    Cache(CacheArgs),
    /// Per-object latency under steady churn: from an update's answer to the start of the
    /// contender's first reconcile call that saw it (p50, p99, max), kubeapp and kube-runtime,
    /// alternating, one fresh control plane per run.
    Latency(LatencyArgs),
}

/// The flags of `kubeapp-bench latency`.
#[derive(Debug, clap::Args)]
struct LatencyArgs {
    /// Objects created before the contender starts, updated round robin.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    objects: u32,
    /// Updates per second (keep it below what the apiserver takes with the contenders' status
    /// writes on top).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rate: u32,
    /// Seconds of churn per run.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    duration_secs: u64,
    /// Objects each contender handles at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
    /// Runs per contender; the contenders alternate.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Seconds the initial reconcile, and the wait for the last calls, may take each.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Where to write the JSON report.
    #[arg(long, default_value = "kubeapp-bench-latency.json")]
    json: PathBuf,
    /// Where the contender binaries are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where runs keep their files (default: a temporary directory).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep each run's files (call log, `updates.log`, contender log) in `--work-dir`.
    #[arg(long)]
    keep_files: bool,
}

/// The flags of `kubeapp-bench cache`.
#[derive(Debug, clap::Args)]
struct CacheArgs {
    /// The kind created and cached: `bench` (the bench kind, a 32-byte payload) or `pod` (Pods
    /// with a full spec and a status the tool writes, 7.4 KB of JSON each, 4.2 KB without
    /// managedFields).
    #[arg(long, value_enum, default_value_t = CacheObject::Bench)]
    object: CacheObject,
    /// Objects created once and cached by each contender.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    objects: u32,
    /// Creates the tool keeps in flight at once.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..))]
    create_concurrency: u16,
    /// Seconds a contender is left alone before its RSS is read.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// Seconds a sync or a re-list may take.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Where to write the JSON report.
    #[arg(long, default_value = "kubeapp-bench-cache.json")]
    json: PathBuf,
    /// Run only this contender (repeatable; default: all of kubeapp, kubeapp-projection,
    /// kube-runtime, kube-runtime-stripped, in that order).
    #[arg(long = "contender", value_parser = clap::builder::PossibleValuesParser::new(CACHE_CONTENDERS.map(|(name, _)| name)))]
    contenders: Vec<String>,
    /// Where the contender binaries are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where the run keeps its files (default: a temporary directory, removed at the end).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// How many times each contender runs on the same objects, alternating (the order is
    /// reversed every other round); the ratios are of each contender's medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=50))]
    rounds: u16,
}

/// The flags of the end-to-end benchmark (no subcommand).
#[derive(Debug, clap::Args)]
struct E2eArgs {
    /// Objects created and reconciled per run.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    objects: u32,
    /// Objects each contender handles at once (its worker concurrency).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
    /// Creates the tool keeps in flight at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    create_concurrency: u16,
    /// The contenders, in order (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = Contender::ALL.to_vec())]
    contenders: Vec<Contender>,
    /// Runs per contender; the table shows medians. Rounds interleave the contenders.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Where to write the JSON report.
    #[arg(long, default_value = "kubeapp-bench.json")]
    json: PathBuf,
    /// Seconds one run may take to reconcile every object.
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
    /// Where the Rust contender binaries are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// A built grafana-app-sdk contender to use instead of building bench/go-operator.
    #[arg(long)]
    go_operator: Option<PathBuf>,
    /// The Go module of the grafana-app-sdk contender.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/go-operator"))]
    go_module_dir: PathBuf,
    /// Where runs keep their files (default: a temporary directory).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the files (audit logs, contender logs) of successful runs too.
    #[arg(long)]
    keep_files: bool,
    /// Who the contenders connect as: `admin` (`system:masters`, exempt from API priority and
    /// fairness) or `service-account` (a ServiceAccount with a Role on the bench kind and a
    /// TokenRequest token; a "real cluster" figure).
    #[arg(long, value_enum, default_value_t = IdentityKind::Admin)]
    identity: IdentityKind,
    /// Run etcd with fsync on, as a real cluster does (test control planes skip it); a "real
    /// cluster" figure.
    #[arg(long)]
    etcd_fsync: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The control plane's start polls readiness and logs each early 500 as an error.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off")
                }),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Cache(args)) => run_cache_mode(args).await,
        Some(Command::Latency(args)) => run_latency_mode(args).await,
        None => run(cli.e2e).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_cache_mode(args: CacheArgs) -> anyhow::Result<()> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => own_dir()?,
    };
    let mut bins = Vec::new();
    for (name, binary) in CACHE_CONTENDERS {
        if args.contenders.is_empty() || args.contenders.iter().any(|c| c == name) {
            bins.push((name, rust_binary_in(&bin_dir, binary)?));
        }
    }
    let temp;
    let work_dir = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("kubeapp-bench-cache-")
                .tempdir()
                .context("creating a work directory")?;
            temp.path().to_path_buf()
        }
    };
    let settings = CacheSettings {
        object: args.object,
        objects: args.objects as usize,
        create_concurrency: usize::from(args.create_concurrency),
        settle: Duration::from_secs(args.settle_secs),
        timeout: Duration::from_secs(args.timeout_secs),
        work_dir,
        rounds: usize::from(args.rounds),
    };
    let run = run_cache(&bins, &settings).await?;
    let report = CacheReport::new(
        Machine::detect(),
        settings.object,
        run.object_size,
        run.create_seconds,
        run.results,
    );
    print!("{}", report.table());
    let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
    std::fs::write(&args.json, json + "\n")
        .with_context(|| format!("writing {}", args.json.display()))?;
    eprintln!("JSON report: {}", args.json.display());
    Ok(())
}

async fn run_latency_mode(args: LatencyArgs) -> anyhow::Result<()> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => own_dir()?,
    };
    let mut bins = Vec::new();
    for contender in LATENCY_CONTENDERS {
        let name = contender.rust_binary().context("a Rust contender")?;
        bins.push((contender, rust_binary_in(&bin_dir, name)?));
    }
    let temp;
    let work_dir = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("kubeapp-bench-latency-")
                .tempdir()
                .context("creating a work directory")?;
            temp.path().to_path_buf()
        }
    };
    let settings = LatencySettings {
        objects: args.objects as usize,
        rate: args.rate,
        duration: Duration::from_secs(args.duration_secs),
        workers: usize::from(args.workers),
        timeout: Duration::from_secs(args.timeout_secs),
        work_dir,
        keep_files: args.keep_files,
    };
    let mut results = Vec::new();
    for round in 1..=args.rounds {
        for (contender, binary) in &bins {
            let label = format!("{contender}-{round}");
            eprintln!("latency: {label}");
            results.push(run_latency(*contender, binary, &label, &settings).await?);
        }
    }
    print!("{}", latency::table(&results));
    let json = serde_json::json!({
        "machine": Machine::detect(),
        "objects": settings.objects,
        "rate": settings.rate,
        "durationSeconds": args.duration_secs,
        "workers": settings.workers,
        "runs": results,
    });
    let json = serde_json::to_string_pretty(&json).context("serialising the report")?;
    std::fs::write(&args.json, json + "\n")
        .with_context(|| format!("writing {}", args.json.display()))?;
    eprintln!("JSON report: {}", args.json.display());
    Ok(())
}

/// The directory of this program (where cargo puts the contender binaries too).
fn own_dir() -> anyhow::Result<PathBuf> {
    std::env::current_exe()
        .context("finding this program's path")?
        .parent()
        .map(Path::to_path_buf)
        .context("this program's directory")
}

async fn run(cli: E2eArgs) -> anyhow::Result<()> {
    let binaries = binaries(&cli).await?;
    let temp;
    let work_dir = match &cli.work_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("kubeapp-bench-")
                .tempdir()
                .context("creating a work directory")?;
            temp.path().to_path_buf()
        }
    };
    let settings = RunSettings {
        objects: cli.objects as usize,
        workers: usize::from(cli.workers),
        create_concurrency: usize::from(cli.create_concurrency),
        timeout: Duration::from_secs(cli.timeout_secs),
        work_dir: work_dir.clone(),
        // A temporary work dir goes away with the tool; keep failed runs' files in a named one.
        keep_files: cli.keep_files,
        identity: cli.identity,
        etcd_fsync: cli.etcd_fsync,
    };
    let mut runs: BTreeMap<Contender, Vec<_>> = BTreeMap::new();
    for round in 0..cli.rounds {
        for (contender, binary) in &binaries {
            eprintln!(
                "round {}/{}: {contender}, {} objects ...",
                round + 1,
                cli.rounds,
                cli.objects
            );
            let label = format!("{contender}-{round}");
            let result = match run_once(*contender, binary, &label, &settings).await {
                Ok(result) => result,
                Err(err) => {
                    if let Some(temp) = temp_dir_to_keep(&cli, &work_dir, &label) {
                        eprintln!("the failed run's files were copied to {}", temp.display());
                    }
                    return Err(err.into());
                }
            };
            eprintln!(
                "  {:.2} s, {:.0} events/s, peak RSS {:.1} MiB, {:.2} requests/object, {} reconciles/object",
                result.seconds,
                result.events_per_second,
                result.peak_rss_mib,
                result.requests_per_object,
                result
                    .reconciles_per_object
                    .map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}"))
            );
            runs.entry(*contender).or_default().push(result);
        }
    }
    let summaries = cli
        .contenders
        .iter()
        .filter_map(|c| runs.remove(c).map(|r| Summary::of(c.name(), r)))
        .collect();
    let report = Report::new(
        Machine::detect(),
        Settings {
            objects: cli.objects as usize,
            workers: usize::from(cli.workers),
            create_concurrency: usize::from(cli.create_concurrency),
            rounds: usize::from(cli.rounds),
            identity: cli.identity,
            etcd_fsync: cli.etcd_fsync,
        },
        summaries,
    );
    print!("{}", report.table());
    let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
    std::fs::write(&cli.json, json + "\n")
        .with_context(|| format!("writing {}", cli.json.display()))?;
    eprintln!("JSON report: {}", cli.json.display());
    Ok(())
}

/// Every contender's program, resolved before the first run so a missing one fails at once.
async fn binaries(cli: &E2eArgs) -> anyhow::Result<Vec<(Contender, PathBuf)>> {
    let bin_dir = match &cli.bin_dir {
        Some(dir) => dir.clone(),
        None => own_dir()?,
    };
    let mut binaries = Vec::new();
    for &contender in &cli.contenders {
        if binaries.iter().any(|(c, _)| *c == contender) {
            anyhow::bail!("--contenders names {contender} twice");
        }
        let binary = match (contender.rust_binary(), &cli.go_operator) {
            (Some(name), _) => rust_binary_in(&bin_dir, name)?,
            (None, Some(path)) if path.is_file() => path.clone(),
            (None, Some(path)) => anyhow::bail!("--go-operator {} is not a file", path.display()),
            (None, None) => gobuild::operator_binary(&cli.go_module_dir).await?,
        };
        binaries.push((contender, binary));
    }
    Ok(binaries)
}

/// With a temporary work dir, a failed run's files would vanish with the tool: copy them to a
/// directory that stays, and say where.
fn temp_dir_to_keep(cli: &E2eArgs, work_dir: &Path, label: &str) -> Option<PathBuf> {
    if cli.work_dir.is_some() {
        return None;
    }
    let keep = std::env::temp_dir().join(format!("kubeapp-bench-failed-{label}"));
    let from = work_dir.join(label);
    std::fs::create_dir_all(&keep).ok()?;
    for entry in std::fs::read_dir(&from).ok()?.flatten() {
        let _ = std::fs::copy(entry.path(), keep.join(entry.file_name()));
    }
    Some(keep)
}
