//! `kubeapp-bench`: the end-to-end benchmark of kubeapp against raw kube-runtime,
//! grafana-app-sdk and a plain-client floor. See the crate docs of `kubeapp_bench` and
//! `BENCHMARKS-e2e.md`.
//!
//! Exit codes: 0 when every run of every contender succeeded (the table is on stdout, the JSON in
//! `--json`), 1 on any failure (the message goes to stderr), 2 on a usage error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use kubeapp_bench::contender::{Contender, rust_binary_in};
use kubeapp_bench::gobuild;
use kubeapp_bench::report::{Machine, Report, Settings, Summary};
use kubeapp_bench::run::{RunSettings, run_once};

/// Measures operators end to end on a real kube-apiserver + etcd (one fresh control plane per run).
#[derive(Debug, clap::Parser)]
#[command(name = "kubeapp-bench", version)]
struct Cli {
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
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
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
                "  {:.2} s, {:.0} events/s, peak RSS {:.1} MiB, {:.2} requests/object",
                result.seconds,
                result.events_per_second,
                result.peak_rss_mib,
                result.requests_per_object
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
async fn binaries(cli: &Cli) -> anyhow::Result<Vec<(Contender, PathBuf)>> {
    let bin_dir = match &cli.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .context("finding this program's path")?
            .parent()
            .map(Path::to_path_buf)
            .context("this program's directory")?,
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
fn temp_dir_to_keep(cli: &Cli, work_dir: &Path, label: &str) -> Option<PathBuf> {
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
