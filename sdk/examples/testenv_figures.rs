//! Measures the test control plane: start-up time, and the resident memory of etcd and
//! kube-apiserver at rest; then the same for the cluster mode (one fake node), with the resident
//! memory of kube-controller-manager, kube-scheduler and kwok. Figures for the README; run with
//! `cargo run --release -p kubeapp-sdk --features testenv --example testenv_figures`.

use std::time::{Duration, Instant};

use kubeapp_sdk::testenv::TestEnv;

/// Resident set size of `pid` in MiB, from /proc.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let runs = 3;
    let mut starts = Vec::new();
    for _ in 0..runs {
        let began = Instant::now();
        let env = TestEnv::start().await?;
        starts.push(began.elapsed());
        // "At rest": give the apiserver's start-up controllers time to settle first.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let etcd = rss_mib(env.etcd_pid()).unwrap_or(f64::NAN);
        let api = env.apiserver_pid().and_then(rss_mib).unwrap_or(f64::NAN);
        println!(
            "start {:.2} s   etcd RSS {etcd:.0} MiB   kube-apiserver RSS {api:.0} MiB",
            starts.last().map_or(0.0, Duration::as_secs_f64)
        );
    }
    let mean = starts.iter().map(Duration::as_secs_f64).sum::<f64>() / f64::from(runs);
    println!("mean start over {runs} runs: {mean:.2} s");

    let mut starts = Vec::new();
    for _ in 0..runs {
        let began = Instant::now();
        let env = TestEnv::builder().cluster().start().await?;
        starts.push(began.elapsed());
        tokio::time::sleep(Duration::from_secs(10)).await;
        let rss = |pid: Option<u32>| pid.and_then(rss_mib).unwrap_or(f64::NAN);
        let [controller_manager, scheduler, kwok] = env.cluster_pids().unwrap_or_default();
        println!(
            "cluster mode: start {:.2} s   etcd RSS {:.0} MiB   kube-apiserver {:.0} MiB   \
             kube-controller-manager {:.0} MiB   kube-scheduler {:.0} MiB   kwok {:.0} MiB",
            starts.last().map_or(0.0, Duration::as_secs_f64),
            rss(Some(env.etcd_pid())),
            rss(env.apiserver_pid()),
            rss(Some(controller_manager)),
            rss(Some(scheduler)),
            rss(Some(kwok)),
        );
    }
    let mean = starts.iter().map(Duration::as_secs_f64).sum::<f64>() / f64::from(runs);
    println!("cluster mode: mean start over {runs} runs: {mean:.2} s");
    Ok(())
}
