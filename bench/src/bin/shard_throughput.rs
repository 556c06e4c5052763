//! `kubeapp-bench-shards`: handler throughput of 1 against N sharded replicas on testenv.
//!
//! Each replica is this program run as an operator (`KUBEAPP_BENCH_SHARDS_OPERATOR=1`: the
//! simple `Operator` with `run --shard`), with one worker and a reconciler that sleeps
//! `--sleep-ms` and writes nothing (the opinionated wrapper adds its finalizer once, on the
//! first Add). For each replica count, in a namespace of its own:
//!
//! 1. `--objects` BenchObjects are created, the replicas started, and the warm-up awaited:
//!    every replica sees all members of the ring, the active shares add up to the whole hash space, every object
//!    was handled, and no handler call happened for a second;
//! 2. measured pass: a gate file holds every handler call while every object's spec is patched
//!    (32 at a time) and the replicas receive the changes (their `informer_events_total` stops
//!    growing for a second); then the gate is removed and the clock runs until the replicas'
//!    reconciler calls (`reconciler_process_duration_seconds_count`, summed over their
//!    /metrics) grew by the number of objects. The queues are full when the clock starts, so
//!    the figure is the handlers' throughput, not the rate at which this program can write.
//!
//! Prints objects per second for each count and the ratio to the first; asserts nothing about
//! speed.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Namespace;
use kube::CustomResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeapp::prelude::*;
use kubeapp::sdk::testenv::TestEnv;
use kubeapp_bench::kind::{BenchObject, BenchSpec, FINALIZER, MANIFEST_YAML};

/// The variable that makes this program an operator replica.
const OPERATOR_ENV: &str = "KUBEAPP_BENCH_SHARDS_OPERATOR";
/// The handler's sleep, for the replicas (milliseconds).
const SLEEP_ENV: &str = "KUBEAPP_BENCH_SHARDS_SLEEP_MS";
/// A file whose existence holds every handler call (the measured pass fills the queues first).
const GATE_ENV: &str = "KUBEAPP_BENCH_SHARDS_GATE";
/// How many writes run at once.
const CONCURRENCY: usize = 32;
/// How long each wait may take.
const TIMEOUT: Duration = Duration::from_secs(600);

/// Measures sharded throughput.
#[derive(Debug, clap::Parser)]
#[command(name = "kubeapp-bench-shards")]
struct Cli {
    /// Objects per run.
    #[arg(long, default_value_t = 3000)]
    objects: usize,
    /// Replica counts to measure, in order (the first is the baseline of the ratios).
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    replicas: Vec<usize>,
    /// What the handler sleeps per call (milliseconds).
    #[arg(long, default_value_t = 10)]
    sleep_ms: u64,
}

/// The replica's reconciler: holds while the gate file exists, then sleeps; writes nothing.
async fn apply(_: Arc<BenchObject>, _: Context) -> Result<ReconcileResult, ReconcileError> {
    if let Some(gate) = std::env::var_os(GATE_ENV) {
        while std::path::Path::new(&gate).exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let ms = std::env::var(SLEEP_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(10);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ReconcileResult::done())
}

async fn cleanup(_: Arc<BenchObject>, _: Context) -> Result<ReconcileResult, ReconcileError> {
    Ok(ReconcileResult::done())
}

/// This program as an operator replica (its command line is the simple Operator's).
async fn operator() -> std::process::ExitCode {
    Operator::new(MANIFEST_YAML)
        .crd::<BenchObject>()
        .app(|manifest| {
            AppConfig::from_manifest(manifest)
                .managed_kind(
                    ManagedKind::<BenchObject>::new()
                        .finalizer(FINALIZER)
                        .apply_cleanup_fn(apply, cleanup),
                )
                .controller(ControllerConfig::default().max_concurrent_workers(1))
        })
        .main()
        .await
}

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    if std::env::var_os(OPERATOR_ENV).is_some() {
        return Ok(operator().await);
    }
    let cli = Cli::parse();
    if cli.replicas.is_empty() || cli.replicas.contains(&0) {
        bail!("--replicas: counts of at least 1, e.g. 1,3");
    }
    let env = TestEnv::builder()
        .start()
        .await
        .context("starting testenv")?;
    env.install_crds([BenchObject::crd()])
        .await
        .context("installing the CRD")?;
    let client = env.client();
    let mut rates = Vec::new();
    for &replicas in &cli.replicas {
        let rate = measure(&cli, &env, &client, replicas).await?;
        rates.push((replicas, rate));
    }
    let base = rates[0].1;
    println!("replicas  objects/s  ratio (to {} replica(s))", rates[0].0);
    for (replicas, rate) in &rates {
        println!("{replicas:>8}  {rate:>9.1}  {:>5.2}x", rate / base);
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A free loopback port's address.
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?)
}

/// One run with `replicas` replicas; objects per second of the measured pass.
async fn measure(
    cli: &Cli,
    env: &TestEnv,
    client: &kube::Client,
    replicas: usize,
) -> anyhow::Result<f64> {
    let ns = format!("shards-{replicas}");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let api: Api<BenchObject> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..cli.objects).map(|i| format!("object-{i:05}")).collect();
    futures::stream::iter(names.iter().map(|name| {
        let api = api.clone();
        async move {
            let object = BenchObject::new(name, BenchSpec::default());
            api.create(&PostParams::default(), &object).await
        }
    }))
    .buffer_unordered(CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await
    .context("creating the objects")?;

    let binary = std::env::current_exe().context("this program's path")?;
    let gate = env.dir().join(format!("gate-{replicas}"));
    let mut children = Vec::new();
    let mut addrs = Vec::new();
    for index in 0..replicas {
        let addr = free_addr()?;
        children.push(spawn(
            &binary,
            env,
            &ns,
            &format!("replica-{index}"),
            addr,
            &gate,
            cli,
        )?);
        addrs.push(addr);
    }
    let result = async {
        let warm = Instant::now();
        warm_up(&addrs, replicas, cli.objects).await?;
        eprintln!(
            "{replicas} replica(s): warm after {:.1} s",
            warm.elapsed().as_secs_f64()
        );
        let base = calls(&addrs).await?;
        std::fs::write(&gate, b"held")
            .with_context(|| format!("creating the gate {}", gate.display()))?;
        let writing = Instant::now();
        futures::stream::iter(names.iter().map(|name| {
            let api = api.clone();
            async move {
                let patch = serde_json::json!({"spec": {"payload": "measured"}});
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
            }
        }))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .context("patching the objects")?;
        let written = writing.elapsed();
        quiet(&addrs, "informer_events_total").await?;
        std::fs::remove_file(&gate)
            .with_context(|| format!("removing the gate {}", gate.display()))?;
        let start = Instant::now();
        let target = base + cli.objects as u64;
        while calls(&addrs).await? < target {
            if start.elapsed() > TIMEOUT {
                bail!("the measured pass did not finish within {TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = start.elapsed();
        let rate = cli.objects as f64 / elapsed.as_secs_f64();
        println!(
            "{replicas} replica(s): {} updates handled in {:.2} s ({rate:.1} objects/s; the \
             patches took {:.2} s before)",
            cli.objects,
            elapsed.as_secs_f64(),
            written.as_secs_f64()
        );
        Ok(rate)
    }
    .await;
    for child in &mut children {
        stop(child);
    }
    result
}

/// Starts replica `name` of the ring of namespace `ns`.
fn spawn(
    binary: &PathBuf,
    env: &TestEnv,
    ns: &str,
    name: &str,
    metrics: SocketAddr,
    gate: &std::path::Path,
    cli: &Cli,
) -> anyhow::Result<Child> {
    Command::new(binary)
        .args(["run", "--shard", "--metrics-addr", &metrics.to_string()])
        .args(["--instance", name, "--leader-election-namespace", ns])
        .args(["--namespace", ns])
        .env(OPERATOR_ENV, "1")
        .env(SLEEP_ENV, cli.sleep_ms.to_string())
        .env(GATE_ENV, gate)
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

/// SIGTERM, then waits for the exit.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Waits until every replica sees `replicas` members, the active shares add up to the whole
/// hash space, every object
/// was handled and no call happened for a second.
async fn warm_up(addrs: &[SocketAddr], replicas: usize, objects: usize) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        if start.elapsed() > TIMEOUT {
            bail!("no warm ring of {replicas} within {TIMEOUT:?}");
        }
        let mut members_ok = true;
        let mut active = 0.0;
        let mut total = 0;
        for addr in addrs {
            let text = scrape(*addr).await.unwrap_or_default();
            members_ok &= sample(&text, "shard_members") == Some(replicas as f64);
            active += sample(&text, "shard_active_range_width").unwrap_or(0.0);
            total += sum(&text, "reconciler_process_duration_seconds_count") as u64;
        }
        if total != last.0 {
            last = (total, Instant::now());
        }
        if members_ok
            && (active - 1.0).abs() < 1e-6
            && total >= objects as u64
            && last.1.elapsed() >= Duration::from_secs(1)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The replicas' reconciler calls so far.
async fn calls(addrs: &[SocketAddr]) -> anyhow::Result<u64> {
    total(addrs, "reconciler_process_duration_seconds_count").await
}

/// The sum of `metric` over the replicas.
async fn total(addrs: &[SocketAddr], metric: &str) -> anyhow::Result<u64> {
    let mut total = 0.0;
    for addr in addrs {
        let text = scrape(*addr)
            .await
            .with_context(|| format!("scraping http://{addr}/metrics"))?;
        total += sum(&text, metric);
    }
    Ok(total as u64)
}

/// Waits until `metric`, summed over the replicas, did not change for a second.
async fn quiet(addrs: &[SocketAddr], metric: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last = (total(addrs, metric).await?, Instant::now());
    while last.1.elapsed() < Duration::from_secs(1) {
        if start.elapsed() > TIMEOUT {
            bail!("{metric} kept changing for {TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = total(addrs, metric).await?;
        if now != last.0 {
            last = (now, Instant::now());
        }
    }
    Ok(())
}

/// The value of the first sample of `name` (any labels).
fn sample(text: &str, name: &str) -> Option<f64> {
    samples(text, name).next()
}

/// The sum of every sample of `name` (any labels).
fn sum(text: &str, name: &str) -> f64 {
    samples(text, name).sum()
}

fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = f64> + 'a {
    text.lines()
        .filter(move |line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
}

/// `GET /metrics` over HTTP/1.0.
async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .context("an HTTP response")?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_match_the_name_exactly_and_sum_over_labels() {
        let text = "# HELP x\nshard_members 3\nshard_members_other 9\n\
                    reconciler_process_duration_seconds_count{kind=\"a\"} 2\n\
                    reconciler_process_duration_seconds_count{kind=\"b\"} 5\n";
        assert_eq!(sample(text, "shard_members"), Some(3.0));
        assert!((sum(text, "reconciler_process_duration_seconds_count") - 7.0).abs() < 1e-9);
        assert_eq!(sample(text, "missing"), None);
    }
}
