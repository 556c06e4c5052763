//! kubeapp quick start: one command from a fresh clone to a running operator.
//!
//! It starts a local kube-apiserver + etcd (kubeapp's `testenv`), makes development
//! certificates, installs the reconciler example's CRD and webhook configurations from the
//! example binary's own `crd` and `manifests --webhook-url` output, runs the example operator
//! against it as a child process, applies a sample Template, and prints the Template's
//! reconciled status, the rendered ConfigMap, the Template read back as `v2`, a refusal by the
//! validator and the metrics URL. Then it waits: Ctrl-C (SIGINT) or SIGTERM stops the operator
//! (one SIGTERM, graceful), then the control plane, and removes their directory.
//!
//! Output: progress lines on stdout, each starting with a fixed word (`control plane:`,
//! `export KUBECONFIG=`, `operator:`, `status:`, `metrics:`, `ready:`, ...); the operator's logs
//! on stderr. Exit status 0 after a clean stop, 1 on any failure (the message on stderr),
//! 2 on a usage error.

mod certs;
mod cli;
mod cluster;
mod http;
mod operator;
mod signals;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser as _;
use kube::ResourceExt;
use kubeapp::sdk::testenv::TestEnv;

use crate::certs::DevCerts;
use crate::cli::Cli;
use crate::operator::{OperatorBinary, RunningOperator};
use crate::signals::Signals;

/// The reconciler example's sample Template, built in.
pub const SAMPLE: &str = include_str!("../../reconciler/samples/template.yaml");

// One thread: the operator's parent-death signal is tied to the thread that forks it.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match quickstart(cli).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Everything; `Ok(true)` after a clean stop.
async fn quickstart(cli: Cli) -> anyhow::Result<bool> {
    let mut signals = Signals::install()?;
    let binary = OperatorBinary::locate(cli.operator.clone())?;
    let (sample_origin, sample_yaml) = match &cli.sample {
        Some(path) => (
            path.display().to_string(),
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the sample {}", path.display()))?,
        ),
        None => (
            "examples/reconciler/samples/template.yaml".to_string(),
            SAMPLE.to_string(),
        ),
    };
    let (sample_ns, sample) = cluster::parse_sample(&sample_yaml, &sample_origin)?;

    println!("kubeapp quick start: a local control plane running the reconciler example");
    let env = tokio::select! {
        env = TestEnv::builder().start_timeout(cli.timeout).start() => {
            env.context("starting kube-apiserver and etcd")?
        }
        name = signals.next() => {
            println!("{name}: stopped before the control plane was up");
            return Ok(true);
        }
    };
    println!(
        "control plane: {} (kube-apiserver pid {}, etcd pid {}, files in {})",
        env.server_url(),
        env.apiserver_pid().unwrap_or_default(),
        env.etcd_pid(),
        env.dir().display()
    );
    println!("export KUBECONFIG={}", env.kubeconfig_path().display());

    let mut operator: Option<RunningOperator> = None;
    let setup = Setup {
        cli: &cli,
        env: &env,
        binary: &binary,
        sample: &sample,
        sample_ns: &sample_ns,
        sample_origin: &sample_origin,
    };
    let mut clean = true;
    let outcome = tokio::select! {
        outcome = setup.run(&mut operator) => Some(outcome),
        name = signals.next() => {
            println!("{name}: stopping");
            None
        }
    };
    match outcome {
        Some(Ok(())) => {
            println!("ready: press Ctrl-C to stop the operator and the control plane");
            if let Some(running) = operator.as_mut() {
                tokio::select! {
                    name = signals.next() => {
                        println!("{name}: stopping the operator and the control plane");
                    }
                    status = running.wait() => {
                        eprintln!("error: the operator exited on its own ({}); stopping", status?);
                        clean = false;
                    }
                }
            }
        }
        Some(Err(err)) => {
            eprintln!("error: {err:#}");
            clean = false;
        }
        None => {}
    }

    if let Some(running) = operator {
        let pid = running.pid();
        let status = running.stop(cli.timeout, &mut signals).await?;
        if status.success() {
            println!("operator stopped (pid {pid}, {status})");
        } else {
            eprintln!("error: the operator (pid {pid}) ended with {status}");
            clean = false;
        }
    }
    let dir = env.dir().to_path_buf();
    env.stop();
    if dir.exists() {
        eprintln!("error: {} was not removed", dir.display());
        clean = false;
    } else {
        println!("control plane stopped, {} removed", dir.display());
    }
    Ok(clean)
}

/// The steps between the control plane's start and `ready:`.
struct Setup<'a> {
    cli: &'a Cli,
    env: &'a TestEnv,
    binary: &'a OperatorBinary,
    sample: &'a kube::api::DynamicObject,
    sample_ns: &'a str,
    sample_origin: &'a str,
}

impl Setup<'_> {
    /// Installs, starts the operator (into `operator`, so the caller can stop it whatever
    /// happens), and shows the sample's result.
    async fn run(&self, operator: &mut Option<RunningOperator>) -> anyhow::Result<()> {
        let webhook_addr = free_addr(self.cli.webhook_addr)?;
        let metrics_addr = free_addr(self.cli.metrics_addr)?;
        // The apiserver calls the webhook on a concrete address.
        let webhook_ip = match webhook_addr.ip() {
            ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            ip => ip,
        };
        let webhook_url = format!(
            "https://{}",
            SocketAddr::new(webhook_ip, webhook_addr.port())
        );
        let certs = DevCerts::write(&self.env.dir().join("webhook-tls"), webhook_ip)?;
        println!(
            "certificates: {} (ca.crt, tls.crt, tls.key)",
            certs.dir.display()
        );

        let target = [
            "--webhook-url".as_ref(),
            webhook_url.as_ref(),
            "--webhook-ca-file".as_ref(),
            certs.ca_file.as_os_str(),
        ];
        let crd_yaml = self
            .binary
            .output(&[&["crd".as_ref()], &target[..]].concat())
            .await?;
        let crds = self
            .env
            .install_crds_yaml(&crd_yaml)
            .await
            .context("installing the CRD")?;
        for crd in &crds {
            println!(
                "installed: CustomResourceDefinition {} (conversion webhook {webhook_url}/convert)",
                crd.name_any()
            );
        }
        let webhooks_yaml = self
            .binary
            .output(&[&["manifests".as_ref()], &target[..]].concat())
            .await?;
        let client = self.env.client();
        for applied in cluster::apply_webhook_configurations(&client, &webhooks_yaml).await? {
            println!("installed: {applied}");
        }

        let running = operator.insert(self.binary.spawn_run(
            self.env.kubeconfig_path(),
            metrics_addr,
            webhook_addr,
            &certs,
        )?);
        println!(
            "operator: pid {}, {} run --metrics-addr {metrics_addr} --webhook-addr {webhook_addr} \
             (logs on stderr)",
            running.pid(),
            self.binary.path().display()
        );
        let pid = running.pid();
        tokio::select! {
            shown = self.show(metrics_addr) => shown,
            status = running.wait() => {
                bail!("the operator (pid {pid}) exited during start-up ({}); its log is above", status?)
            }
        }
    }

    /// Waits for the operator and its webhooks, applies the sample and prints the results.
    async fn show(&self, metrics_addr: SocketAddr) -> anyhow::Result<()> {
        let timeout = self.cli.timeout;
        let readyz = format!("http://{metrics_addr}/readyz");
        cluster::poll(&format!("{readyz} answers 200"), timeout, || async {
            Ok(http::get(metrics_addr, "/readyz")
                .await
                .filter(|(status, _)| *status == 200)
                .map(drop))
        })
        .await?;
        let client = self.env.client();
        let refusal = cluster::wait_for_webhooks(&client, self.sample_ns, timeout).await?;
        println!("webhooks: live (validation, mutation, conversion)");

        let name = self.sample.name_any();
        let ns = self.sample_ns;
        cluster::apply_sample(&client, ns, self.sample).await?;
        println!("applied: Template {ns}/{name} from {}", self.sample_origin);
        let v1 = cluster::templates(&client, ns, "v1");
        let template = cluster::poll(
            &format!("Template {ns}/{name} is reconciled"),
            timeout,
            || async { Ok(v1.get(&name).await.ok().filter(cluster::reconciled)) },
        )
        .await?;
        println!(
            "status: Template {ns}/{name} {}",
            cluster::status_line(&template)
        );
        let labels = template
            .labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        println!("labels: Template {ns}/{name} {labels} (set by the mutating webhook)");
        let config_map = cluster::config_map(&client, ns, &name)
            .await?
            .with_context(|| format!("ConfigMap {ns}/{name} is missing after reconciliation"))?;
        println!("configmap: {ns}/{name}");
        for (key, value) in config_map.data.unwrap_or_default() {
            println!("  {key}: {value}");
        }
        let as_v2 = cluster::templates(&client, ns, "v2")
            .get(&name)
            .await
            .with_context(|| format!("reading Template {ns}/{name} as v2"))?;
        println!(
            "v2: Template {ns}/{name} spec.entries {} (converted by the conversion webhook)",
            cluster::entries_line(&as_v2)
        );
        println!("validation: a Template without data is refused: {refusal}");
        println!("metrics: http://{metrics_addr}/metrics");
        Ok(())
    }
}

/// `addr`, or with port 0 a free port on its IP (bound and released at once).
fn free_addr(addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    if addr.port() != 0 {
        return Ok(addr);
    }
    TcpListener::bind(addr)
        .and_then(|listener| listener.local_addr())
        .with_context(|| format!("finding a free port on {}", addr.ip()))
}
