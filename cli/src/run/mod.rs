//! `kubeapp run`: the project on a local control plane, until Ctrl-C.
//!
//! 1. builds the project's binary (`cargo build`);
//! 2. starts kube-apiserver + etcd (testenv; binaries from `kubeapp testenv install`), with the
//!    cluster mode's controllers, scheduler and `--nodes` fake nodes when their binaries are
//!    cached (see [`cluster`]; `--plain` for the apiserver alone);
//! 3. when the manifest declares webhooks or conversion: development certificates, and the
//!    webhooks pointed at the operator on loopback;
//! 4. installs the CRDs (the binary's `crd`) and the webhook configurations (`manifests
//!    --webhook-url`);
//! 5. runs the operator (`<binary> run`) with the control plane's kubeconfig, waits for its
//!    `/readyz`; `samples/refused/*.yaml` are applied by dry run until refused, then the
//!    samples (`samples/*.yaml`, or `--sample`) are applied and shown once reconciled (status, labels set for them, other versions, owned
//!    objects: see [`show`]);
//! 6. prints the `KUBECONFIG` export and the metrics URL, and waits: Ctrl-C (SIGINT) or SIGTERM
//!    stops the operator (one SIGTERM, graceful), then the control plane, and removes its files.
//!
//! Progress lines go to stdout, each starting with a fixed word (`control plane:`,
//! `mode:`, `cluster:`, `export KUBECONFIG=`, `installed:`, `operator:`, `refused:`, `applied:`, `status:`, `labels:`,
//! `<version>:`, `owned:`, `metrics:`, `ready:`,
//! `stopped:`); the operator's logs go to stderr.

mod certs;
pub(crate) mod child;
mod cluster;
mod show;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use kubeapp::sdk::error::ErrorChain;
use kubeapp::sdk::testenv::TestEnv;
use tokio::signal::unix::{SignalKind, signal};

use self::certs::DevCerts;
use self::child::RunningOperator;
use crate::binary::{BinaryError, OperatorBinary};
use crate::objects::{self, ObjectsError};
use crate::project::{Project, ProjectError};

/// The settings of `kubeapp run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The project's directory.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Where the operator serves /metrics, /livez and /readyz (port 0: a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub metrics_addr: SocketAddr,
    /// Where the operator serves its webhooks, when it has any (port 0: a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub webhook_addr: SocketAddr,
    /// A YAML file of objects to apply once the operator is ready (repeatable; default: every
    /// samples/*.yaml of the project).
    #[arg(long, value_name = "PATH")]
    pub sample: Vec<PathBuf>,
    /// Apply no samples.
    #[arg(long, conflicts_with = "sample")]
    pub no_samples: bool,
    /// How long to wait for each sample to be reconciled before showing it as not reconciled
    /// (seconds).
    #[arg(long, default_value = "10", value_name = "SECONDS")]
    pub sample_timeout: u64,
    /// How long each step may take: the control plane's start, the operator's readiness, its
    /// shutdown (seconds).
    #[arg(long, default_value = "90", value_name = "SECONDS")]
    pub timeout: u64,
    /// The cluster mode's flags (`--nodes`, `--plain`).
    #[command(flatten)]
    pub cluster: cluster::ClusterArgs,
}

/// Why `run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The project cannot be read.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// Its binary cannot be built or run.
    #[error(transparent)]
    Binary(#[from] BinaryError),
    /// The control plane did not start.
    #[error("starting kube-apiserver and etcd: {0} (kubeapp testenv install builds them)")]
    ControlPlane(String),
    /// CRDs, webhooks or samples could not be installed.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    /// The CRDs could not be installed.
    #[error("installing the CRDs: {0}")]
    Crds(String),
    /// The certificates could not be made.
    #[error("development certificates: {0}")]
    Certs(String),
    /// The operator could not be started, or waited for.
    #[error("the operator {binary}")]
    Operator {
        /// Its binary.
        binary: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The operator exited before it was asked to.
    #[error("the operator exited on its own ({0}); its log is above")]
    OperatorExited(String),
    /// Something was not ready in time.
    #[error("timed out after {0:?} waiting until {1}")]
    Timeout(Duration, String),
    /// A sample could not be read.
    #[error("{path}")]
    Sample {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed, or a port found.
    #[error("{0}")]
    System(String),
}

/// `addr`, or with port 0 a free port on its IP.
pub(crate) fn free_addr(addr: SocketAddr) -> Result<SocketAddr, RunError> {
    if addr.port() != 0 {
        return Ok(addr);
    }
    TcpListener::bind(addr)
        .and_then(|listener| listener.local_addr())
        .map_err(|e| RunError::System(format!("finding a free port on {}: {e}", addr.ip())))
}

/// `GET path` over HTTP/1.0: the status, if anything answers.
pub(crate) async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        response.split(' ').nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

/// `kubeapp run`; `Ok(true)` after a clean stop.
///
/// # Errors
///
/// See [`RunError`].
pub async fn run(args: &RunArgs) -> Result<bool, RunError> {
    let system = |what: &str, e: std::io::Error| RunError::System(format!("{what}: {e}"));
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| system("handling SIGINT", e))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| system("handling SIGTERM", e))?;
    let project = Project::load(&args.dir)?;
    let manifest = project.manifest()?;
    let binary = OperatorBinary::build(&project)?;
    let timeout = Duration::from_secs(args.timeout);

    println!("kubeapp run: {} on a local control plane", project.name);
    let (builder, mode) = cluster::builder(&args.cluster, timeout);
    println!("{mode}");
    let env = tokio::select! {
        env = builder.start() => {
            env.map_err(|e| RunError::ControlPlane(ErrorChain(&e).to_string()))?
        }
        _ = interrupt.recv() => return Ok(true),
        _ = terminate.recv() => return Ok(true),
    };
    println!(
        "control plane: {} (kube-apiserver pid {}, etcd pid {}, files in {})",
        env.server_url(),
        env.apiserver_pid().unwrap_or_default(),
        env.etcd_pid(),
        env.dir().display()
    );
    if let Some(line) = cluster::describe(&env) {
        println!("{line}");
    }
    println!("export KUBECONFIG={}", env.kubeconfig_path().display());

    let mut operator: Option<RunningOperator> = None;
    let mut clean = true;
    let started = tokio::select! {
        started = start(args, &project, &manifest, &binary, &env, &mut operator) => Some(started),
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
    };
    match started {
        Some(Ok(())) => {
            println!("ready: press Ctrl-C to stop the operator and the control plane");
            if let Some(running) = operator.as_mut() {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                    status = running.wait() => {
                        let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                        eprintln!("error: {}", RunError::OperatorExited(status));
                        clean = false;
                    }
                }
            }
        }
        Some(Err(error)) => {
            eprintln!("error: {}", ErrorChain(&error));
            clean = false;
        }
        None => {}
    }

    if let Some(running) = operator {
        let pid = running.pid();
        match running.stop(timeout).await {
            Ok(status) if status.success() => println!("stopped: operator (pid {pid})"),
            Ok(status) => {
                eprintln!("error: the operator (pid {pid}) ended with {status}");
                clean = false;
            }
            Err(error) => {
                eprintln!(
                    "error: stopping the operator (pid {pid}): {}",
                    ErrorChain(&error)
                );
                clean = false;
            }
        }
    }
    let dir = env.dir().to_path_buf();
    env.stop();
    if dir.exists() {
        eprintln!("error: {} was not removed", dir.display());
        clean = false;
    } else {
        println!("stopped: control plane, {} removed", dir.display());
    }
    Ok(clean)
}

/// Steps 3 to 5: installs, starts the operator into `operator` (so the caller stops it
/// whatever happens), applies the samples.
async fn start(
    args: &RunArgs,
    project: &Project,
    manifest: &kubeapp::sdk::manifest::ManifestData,
    binary: &OperatorBinary,
    env: &TestEnv,
    operator: &mut Option<RunningOperator>,
) -> Result<(), RunError> {
    let timeout = Duration::from_secs(args.timeout);
    let metrics_addr = free_addr(args.metrics_addr)?;
    let converts = manifest
        .kinds()
        .iter()
        .any(|kind| kind.conversion && kind.versions.len() > 1);
    let has_webhooks = converts || !manifest.declared_webhooks().is_empty();
    let mut target: Vec<String> = Vec::new();
    let mut webhooks = None;
    if has_webhooks {
        let addr = free_addr(args.webhook_addr)?;
        let ip = match addr.ip() {
            ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            ip => ip,
        };
        let url = format!("https://{}", SocketAddr::new(ip, addr.port()));
        let certs_dir = env.dir().join("webhook-tls");
        let certs = DevCerts::write(&certs_dir, ip)?;
        println!(
            "certificates: {} (ca.crt, tls.crt, tls.key)",
            certs_dir.display()
        );
        target = vec![
            "--webhook-url".into(),
            url,
            "--webhook-ca-file".into(),
            certs.ca_file.display().to_string(),
        ];
        webhooks = Some((addr, certs));
    }

    let crd_yaml = binary.output(&[&["crd".to_string()][..], &target[..]].concat())?;
    let crds = env
        .install_crds_yaml(&crd_yaml)
        .await
        .map_err(|e| RunError::Crds(ErrorChain(&e).to_string()))?;
    for crd in &crds {
        let conversion = match (&crd.spec.conversion, target.get(1)) {
            (Some(conversion), Some(url)) if conversion.strategy == "Webhook" => {
                format!(" (conversion webhook {url}/convert)")
            }
            _ => String::new(),
        };
        println!(
            "installed: CustomResourceDefinition {}{conversion}",
            crd.metadata.name.as_deref().unwrap_or_default()
        );
    }
    let client = env.client();
    if !manifest.declared_webhooks().is_empty() {
        let yaml = binary.output(&[&["manifests".to_string()][..], &target[..]].concat())?;
        let origin = format!("{} manifests --webhook-url", binary.path().display());
        for (index, doc) in objects::parse_documents(&yaml, &origin)?.iter().enumerate() {
            let applied = objects::apply(&client, doc, &origin, index + 1, false).await?;
            println!("installed: {applied}");
        }
    }

    let running = operator.insert(child::spawn(
        binary.path(),
        env.kubeconfig_path(),
        metrics_addr,
        webhooks.as_ref().map(|(addr, certs)| (*addr, certs)),
    )?);
    let pid = running.pid();
    let webhook_flag = webhooks
        .as_ref()
        .map(|(addr, _)| format!(" --webhook-addr {addr}"))
        .unwrap_or_default();
    println!(
        "operator: pid {pid}, {} run --metrics-addr {metrics_addr}{webhook_flag} (logs on stderr)",
        binary.path().display()
    );
    let ready = async {
        let deadline = tokio::time::Instant::now() + timeout;
        while http_status(metrics_addr, "/readyz").await != Some(200) {
            if tokio::time::Instant::now() >= deadline {
                return Err(RunError::Timeout(
                    timeout,
                    format!("http://{metrics_addr}/readyz answers 200"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    };
    tokio::select! {
        ready = ready => ready?,
        status = running.wait() => {
            let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            return Err(RunError::OperatorExited(status));
        }
    }

    let (samples, refused) = match (args.no_samples, args.sample.is_empty()) {
        (true, _) => (Vec::new(), Vec::new()),
        (false, true) => (
            child::samples(&project.dir),
            show::refused_files(&project.dir),
        ),
        (false, false) => (args.sample.clone(), Vec::new()),
    };
    // The refusals first: they also prove the webhooks are called before the samples go in.
    show::refused_samples(&client, &refused, timeout).await?;
    let mut applied = Vec::new();
    for path in samples {
        let yaml = std::fs::read_to_string(&path).map_err(|source| RunError::Sample {
            path: path.clone(),
            source,
        })?;
        let origin = path.display().to_string();
        for (index, doc) in objects::parse_documents(&yaml, &origin)?.iter().enumerate() {
            let object = objects::apply_object(&client, doc, &origin, index + 1, false).await?;
            println!("applied: {} from {origin}", object.line);
            applied.push(object);
        }
    }
    let mut cluster = show::Cluster::new(&client, &crds, env.cluster_pids().is_some());
    for object in &applied {
        cluster
            .show(object, Duration::from_secs(args.sample_timeout))
            .await?;
    }
    println!("metrics: http://{metrics_addr}/metrics");
    Ok(())
}
