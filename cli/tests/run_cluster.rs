//! `kubeapp run` in the cluster mode (its default once kube-controller-manager, kube-scheduler and
//! kwok are cached, as `scripts/test` makes sure):
//!
//! - on the components example with a `WebApp` sample, the sample's Deployment is shown Available
//!   (rolled out by the real controllers on a kwok node, nothing written by hand), the sample
//!   `Ready=True`; SIGINT stops the operator and all five control-plane processes and removes the
//!   directory;
//! - on a new project of the components template, as generated (its `config` component still
//!   the stub) and with its generated sample, the template's `web` Deployment is shown Available,
//!   the stub's failure named in the sample's status, and the operator's RBAC covers
//!   Deployments; SIGINT stops it cleanly.

mod support;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{KUBEAPP, cargo_lock, checkout, init, target_dir};

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

/// `kubeapp run args` (with the suite's target directory, offline), its stdout read line by line
/// and its stderr written to `log`.
struct Run {
    child: Running,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    log: PathBuf,
}

impl Run {
    fn start(args: &[&std::ffi::OsStr], log: PathBuf) -> Self {
        let mut child = Running(
            Command::new(KUBEAPP)
                .arg("run")
                .args(args)
                .env("CARGO_TARGET_DIR", target_dir())
                .env("CARGO_NET_OFFLINE", "true")
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).expect("log file"))
                .spawn()
                .expect("start kubeapp run"),
        );
        let (send, lines) = mpsc::channel();
        let stdout = child.0.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
            log,
        }
    }

    /// The next line that starts with `prefix`; fails at the `ready:` line (nothing more is
    /// printed before Ctrl-C) or after five minutes without a line.
    fn next_until(&mut self, prefix: &str) -> String {
        loop {
            let Ok(line) = self.lines.recv_timeout(Duration::from_secs(300)) else {
                panic!(
                    "no {prefix:?} line; so far {:#?}\n{}",
                    self.seen,
                    read(&self.log)
                );
            };
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
            assert!(
                !line.starts_with("ready: "),
                "no {prefix:?} line before {line:?}; so far {:#?}\n{}",
                self.seen,
                read(&self.log)
            );
        }
    }

    /// SIGINT; asserts that `kubeapp run` exits successfully having stopped the control plane;
    /// returns the lines printed after the last one read.
    fn interrupt(mut self) -> Vec<String> {
        let interrupted = Command::new("kill")
            .args(["-INT", &self.child.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(interrupted.success());
        let exit = self.child.0.wait().expect("kubeapp run exits");
        assert!(
            exit.success(),
            "{exit}; stdout {:#?}\n{}",
            self.seen,
            read(&self.log)
        );
        let rest: Vec<String> = self.lines.try_iter().collect();
        assert!(
            rest.iter().any(|l| l.starts_with("stopped: control plane")),
            "{rest:?}"
        );
        rest
    }
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
    let example = checkout().join("examples/components");
    let mut run = Run::start(
        &[
            "--nodes".as_ref(),
            "2".as_ref(),
            "--sample".as_ref(),
            sample.as_os_str(),
            "--dir".as_ref(),
            example.as_os_str(),
        ],
        parent.path().join("run.log"),
    );
    let mode = run.next_until("mode: ");
    assert!(
        mode.starts_with("mode: cluster"),
        "the cluster mode is the default once its binaries are cached: {mode}"
    );
    let plane = run.next_until("control plane: ");
    let dir = plane
        .rsplit("files in ")
        .next()
        .and_then(|rest| rest.strip_suffix(')'))
        .expect("the directory")
        .to_string();
    let cluster = run.next_until("cluster: ");
    assert!(
        cluster.contains("kwok-node-0, kwok-node-1"),
        "--nodes 2: {cluster}"
    );
    let mut processes = pids(&plane);
    processes.extend(pids(&cluster));
    assert_eq!(processes.len(), 5, "{plane}\n{cluster}");
    let operator = run.next_until("operator: pid ");
    processes.extend(pids(&format!(" {operator}")));
    let status = run.next_until("status: WebApp default/shop");
    assert!(status.contains("Ready=True"), "{status}");
    run.next_until("owned: Deployment default/shop");
    let rollout = run.next_until("  ");
    assert_eq!(
        rollout.trim(),
        "Available=True (MinimumReplicasAvailable), 1/1 replicas ready",
        "the Deployment rolled out with no manual step"
    );
    run.next_until("ready: ");

    run.interrupt();
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

#[test]
fn kubeapp_run_rolls_the_components_templates_deployment_out_before_the_first_edit() {
    let parent = tempfile::tempdir().expect("temp dir");
    let project = init(parent.path(), "template-run", "components", "WebApp");
    let _one_build = cargo_lock();
    let mut run = Run::start(
        &["--dir".as_ref(), project.as_os_str()],
        parent.path().join("run.log"),
    );
    let mode = run.next_until("mode: ");
    assert!(mode.starts_with("mode: cluster"), "{mode}");
    let operator = run.next_until("operator: pid ");
    let binary = operator
        .split_once(", ")
        .and_then(|(_, rest)| rest.split_once(" run --metrics-addr"))
        .map(|(binary, _)| binary.to_string())
        .unwrap_or_else(|| panic!("the operator's binary in {operator:?}"));
    run.next_until("applied: WebApp default/example-web-app");
    let status = run.next_until("status: WebApp default/example-web-app");
    assert!(
        status.contains("failed: config"),
        "the config component is still the stub: {status}"
    );
    run.next_until("owned: Deployment default/example-web-app");
    let rollout = run.next_until("  ");
    assert_eq!(
        rollout.trim(),
        "Available=True (MinimumReplicasAvailable), 1/1 replicas ready",
        "the template's web Deployment rolled out with no manual step"
    );
    run.next_until("ready: ");
    run.interrupt();

    let rbac = Command::new(&binary).arg("rbac").output().expect("rbac");
    let rbac = String::from_utf8_lossy(&rbac.stdout);
    assert!(
        rbac.contains("- apps") && rbac.contains("- deployments"),
        "the operator may manage the Deployments it owns:\n{rbac}"
    );
}
