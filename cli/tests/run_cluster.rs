//! `kubeapp run` in the cluster mode (its default once kube-controller-manager, kube-scheduler and
//! kwok are cached, as `scripts/test` makes sure): on the components example with a `WebApp`
//! sample, the sample's Deployment is shown Available (rolled out by the real controllers on a
//! kwok node, nothing written by hand), the sample `Ready=True`; SIGINT stops the operator and all
//! five control-plane processes and removes the directory.

mod support;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{KUBEAPP, cargo_lock, checkout, target_dir};

const SAMPLE: &str = "apiVersion: webapps.kubeapp.dev/v1
kind: WebApp
metadata:
  name: shop
  namespace: default
spec:
  image: nginx:1.27
  page: <h1>shop</h1>
  expose: true
  host: shop.example.com
  minAvailable: 1
";

/// `kubeapp run`, killed if the test fails before it stops it (its control plane and operator
/// then die with it: parent-death signal).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The numbers after each `" pid "` in `line`.
fn pids(line: &str) -> Vec<u32> {
    line.split(" pid ")
        .skip(1)
        .filter_map(|rest| rest.split([',', ' ', ')']).next()?.parse().ok())
        .collect()
}

#[test]
fn kubeapp_run_rolls_the_components_sample_out_on_fake_nodes_and_stops_everything() {
    let parent = tempfile::tempdir().expect("temp dir");
    let sample = parent.path().join("shop.yaml");
    std::fs::write(&sample, SAMPLE).expect("write the sample");
    let _one_build = cargo_lock();
    let log = parent.path().join("run.log");
    let mut run = Running(
        Command::new(KUBEAPP)
            .args(["run", "--nodes", "2", "--sample"])
            .arg(&sample)
            .arg("--dir")
            .arg(checkout().join("examples/components"))
            .env("CARGO_TARGET_DIR", target_dir())
            .env("CARGO_NET_OFFLINE", "true")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start kubeapp run"),
    );
    let (lines, received) = mpsc::channel();
    let stdout = run.0.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut next_until = |prefix: &str| loop {
        let line = received
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("no {prefix:?} line; so far {seen:#?}\n{}", read(&log)));
        seen.push(line.clone());
        if line.starts_with(prefix) {
            return line;
        }
    };
    let mode = next_until("mode: ");
    assert!(
        mode.starts_with("mode: cluster"),
        "the cluster mode is the default once its binaries are cached: {mode}"
    );
    let plane = next_until("control plane: ");
    let dir = plane
        .rsplit("files in ")
        .next()
        .and_then(|rest| rest.strip_suffix(')'))
        .expect("the directory")
        .to_string();
    let cluster = next_until("cluster: ");
    assert!(
        cluster.contains("kwok-node-0, kwok-node-1"),
        "--nodes 2: {cluster}"
    );
    let mut processes = pids(&plane);
    processes.extend(pids(&cluster));
    assert_eq!(processes.len(), 5, "{plane}\n{cluster}");
    let operator = next_until("operator: pid ");
    processes.extend(pids(&format!(" {operator}")));
    let status = next_until("status: WebApp default/shop");
    assert!(status.contains("Ready=True"), "{status}");
    next_until("owned: Deployment default/shop");
    let rollout = next_until("  ");
    assert_eq!(
        rollout.trim(),
        "Available=True (MinimumReplicasAvailable), 1/1 replicas ready",
        "the Deployment rolled out with no manual step"
    );
    next_until("ready: ");

    let interrupted = Command::new("kill")
        .args(["-INT", &run.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(interrupted.success());
    let exit = run.0.wait().expect("kubeapp run exits");
    assert!(exit.success(), "{exit}; stdout {seen:#?}\n{}", read(&log));
    let rest: Vec<String> = received.try_iter().collect();
    assert!(
        rest.iter().any(|l| l.starts_with("stopped: control plane")),
        "{rest:?}"
    );
    assert!(!Path::new(&dir).exists(), "{dir} is left behind");
    assert_eq!(
        processes.len(),
        6,
        "five control-plane processes and the operator"
    );
    for pid in processes {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || read(Path::new(&format!("/proc/{pid}/stat"))).contains(") Z "),
            "process {pid} outlived kubeapp run"
        );
    }
}
