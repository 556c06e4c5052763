//! `kubeapp-bench-takeover`: how long a standby replica takes to lead after the leader is killed
//! (SIGKILL: the Lease must expire) or stopped (SIGTERM: the Lease is released), on testenv.
//!
//! Runs `--replicas` copies of `examples/minimal` with `--leader-elect` (client-go's default
//! timings: 15 s lease, 10 s renew deadline, 2 s retry), then `--rounds` times each: signal the
//! Lease holder, measure until another replica holds the Lease (read every 50 ms), restart the
//! signalled one. Prints every measurement and the medians; asserts nothing about speed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeapp::sdk::testenv::TestEnv;

/// Measures leader takeover times.
#[derive(Debug, clap::Parser)]
#[command(name = "kubeapp-bench-takeover")]
struct Cli {
    /// Replicas running at once.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Takeovers measured per signal.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The minimal example's binary (default: next to this program).
    #[arg(long)]
    binary: Option<PathBuf>,
}

fn spawn(binary: &PathBuf, env: &TestEnv, ns: &str, name: &str) -> anyhow::Result<Child> {
    Command::new(binary)
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--leader-elect"])
        .args(["--instance", name, "--leader-election-namespace", ns])
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("greeter-leader")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let binary = match cli.binary {
        Some(binary) => binary,
        None => std::env::current_exe()?.with_file_name(format!(
            "kubeapp-example-minimal{}",
            std::env::consts::EXE_SUFFIX
        )),
    };
    let env = TestEnv::start().await.context("starting testenv")?;
    let crd = Command::new(&binary).arg("crd").output()?;
    env.install_crds_yaml(&String::from_utf8(crd.stdout)?)
        .await?;
    let ns = env.create_namespace("takeover").await?;
    let leases: Api<Lease> = Api::namespaced(env.client(), &ns);
    let mut replicas: Vec<(String, Child)> = Vec::new();
    for i in 0..cli.replicas {
        let name = format!("replica-{i}");
        replicas.push((name.clone(), spawn(&binary, &env, &ns, &name)?));
    }
    let mut results: Vec<(&str, Vec<Duration>)> =
        vec![("SIGKILL", Vec::new()), ("SIGTERM", Vec::new())];
    for round in 0..cli.rounds {
        for (signal, times) in &mut results {
            let deadline = Instant::now() + Duration::from_secs(120);
            let leader = loop {
                if let Some(leader) = holder(&leases).await {
                    break leader;
                }
                anyhow::ensure!(Instant::now() < deadline, "no leader within 2 minutes");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let index = replicas
                .iter()
                .position(|(name, _)| *name == leader)
                .context("the leader is one of ours")?;
            let pid = replicas[index].1.id();
            let sent = Instant::now();
            Command::new("/usr/bin/kill")
                .args([
                    &format!("-{}", signal.trim_start_matches("SIG")),
                    &pid.to_string(),
                ])
                .status()?;
            loop {
                if holder(&leases).await.is_some_and(|h| h != leader) {
                    break;
                }
                anyhow::ensure!(Instant::now() < deadline, "no takeover within 2 minutes");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let took = sent.elapsed();
            println!("round {round}: {signal} of {leader}: taken over after {took:?}");
            times.push(took);
            let _ = replicas[index].1.wait();
            let name = replicas[index].0.clone();
            replicas[index].1 = spawn(&binary, &env, &ns, &name)?;
        }
    }
    for (signal, times) in results {
        println!(
            "{signal}: median {:?} over {} takeovers",
            median(times),
            cli.rounds
        );
    }
    for (_, mut child) in replicas {
        let _ = child.kill();
        let _ = child.wait();
    }
    Ok(())
}
