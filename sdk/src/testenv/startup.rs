//! Starting etcd and kube-apiserver: key material, flags, free ports and readiness probes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::config::Kubeconfig;
use tracing::instrument::WithSubscriber as _;

use super::certs::{self, CertificateAuthority, IssuedCert};
use super::process::{self, ManagedProcess};
use super::{TestEnvError, kubeconfig};

/// How often readiness is probed while waiting.
const POLL: Duration = Duration::from_millis(100);
/// How many times a process is started on fresh ports when its port was taken meanwhile.
const PORT_ATTEMPTS: usize = 3;

/// Key material written once per environment and reused across apiserver restarts.
#[derive(Debug)]
pub(crate) struct Files {
    pub(crate) client_ca: CertificateAuthority,
    pub(crate) serving_ca_pem: String,
    pub(crate) admin: IssuedCert,
}

impl Files {
    pub(crate) fn write(dir: &Path) -> Result<Self, TestEnvError> {
        let serving_ca = CertificateAuthority::new("kubeapp-testenv-serving-ca")?;
        let serving = serving_ca.issue_serving(&["127.0.0.1", "localhost"])?;
        let client_ca = CertificateAuthority::new("kubeapp-testenv-client-ca")?;
        let admin = client_ca.issue_client("admin", &["system:masters"])?;
        let (sa_key, sa_pub) = certs::service_account_key()?;
        for (name, contents) in [
            ("serving.crt", serving.cert_pem.as_str()),
            ("serving.key", serving.key_pem.as_str()),
            ("client-ca.crt", client_ca.cert_pem().as_str()),
            // The cluster mode's controller-manager hands it to pods as the cluster's root CA.
            ("serving-ca.crt", serving_ca.cert_pem().as_str()),
            ("sa.key", sa_key.as_str()),
            ("sa.pub", sa_pub.as_str()),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, contents).map_err(|source| TestEnvError::Io {
                action: "writing",
                path,
                source,
            })?;
        }
        Ok(Self {
            serving_ca_pem: serving_ca.cert_pem(),
            client_ca,
            admin,
        })
    }
}

/// A started etcd and its client URL.
pub(crate) struct Etcd {
    pub(crate) process: ManagedProcess,
    pub(crate) url: String,
}

/// Starts etcd in `dir`. Without `fsync`, etcd runs with `--unsafe-no-fsync` (the default of a
/// test control plane: writes are not flushed to disk, which makes them much cheaper than on a
/// real cluster's etcd).
pub(crate) async fn start_etcd(
    binary: &Path,
    dir: &Path,
    timeout: Duration,
    fsync: bool,
) -> Result<Etcd, TestEnvError> {
    let log = dir.join("etcd.log");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (client_port, peer_port) = (free_port(dir)?, free_port(dir)?);
        let url = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut args = vec![
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=default={peer}"),
            "--log-level=warn".into(),
        ];
        if !fsync {
            args.push("--unsafe-no-fsync=true".into());
        }
        let mut process = ManagedProcess::start("etcd", binary, &args, log.clone())?;
        let probe = |_: &()| {
            let addr = format!("127.0.0.1:{client_port}");
            async move { etcd_health(&addr).await }
        };
        match wait_ready(&mut process, timeout, &(), probe).await {
            Ok(()) => return Ok(Etcd { process, url }),
            Err(err) if attempt < PORT_ATTEMPTS && is_port_clash(&err) => {
                tracing::warn!(
                    attempt,
                    "etcd port taken meanwhile; retrying on other ports"
                );
            }
            Err(err) => return Err(err),
        }
    }
}

/// `GET /health` over plain HTTP/1.0 (etcd serves it without TLS here).
async fn etcd_health(addr: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    if response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(format!(
            "GET /health: {}",
            response.lines().next().unwrap_or("")
        ))
    }
}

/// How kube-apiserver is started, kept for restarts.
#[derive(Debug)]
pub(crate) struct ApiServer {
    pub(crate) binary: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) port: u16,
    pub(crate) log: PathBuf,
    pub(crate) extra_args: Vec<String>,
    pub(crate) timeout: Duration,
}

impl ApiServer {
    pub(crate) fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn args_for(&self, etcd_url: &str, dir: &Path, port: u16) -> Vec<String> {
        let file = |name: &str| dir.join(name).display().to_string();
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--cert-dir={}", dir.display()),
            format!("--tls-cert-file={}", file("serving.crt")),
            format!("--tls-private-key-file={}", file("serving.key")),
            format!("--client-ca-file={}", file("client-ca.crt")),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer=https://127.0.0.1:{port}/"),
            format!("--service-account-key-file={}", file("sa.pub")),
            format!("--service-account-signing-key-file={}", file("sa.key")),
        ];
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// The first start: picks a port (again, if it was taken meanwhile) and builds the admin
    /// client and kubeconfig for it.
    pub(crate) async fn start_first(
        &mut self,
        etcd_url: &str,
        files: &Files,
        dir: &Path,
    ) -> Result<(ManagedProcess, kube::Client, Kubeconfig), TestEnvError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port(dir)?;
            self.port = port;
            self.args = self.args_for(etcd_url, dir, port);
            let kubeconfig = kubeconfig::for_client_cert(
                &self.url(),
                &files.serving_ca_pem,
                "admin",
                &files.admin,
            )?;
            let client = kubeconfig::client(&kubeconfig, "admin").await?;
            match self.spawn_and_wait(&client).await {
                Ok(process) => return Ok((process, client, kubeconfig)),
                Err(err) if attempt < PORT_ATTEMPTS && is_port_clash(&err) => {
                    tracing::warn!(attempt, "apiserver port taken meanwhile; retrying");
                }
                Err(err) => return Err(err),
            }
        }
    }

    pub(crate) async fn restart(
        &self,
        client: &kube::Client,
    ) -> Result<ManagedProcess, TestEnvError> {
        self.spawn_and_wait(client).await
    }

    async fn spawn_and_wait(&self, client: &kube::Client) -> Result<ManagedProcess, TestEnvError> {
        let mut process =
            ManagedProcess::start("kube-apiserver", &self.binary, &self.args, self.log.clone())?;
        wait_ready(&mut process, self.timeout, client, apiserver_ready).await?;
        Ok(process)
    }
}

/// Ready when `/readyz` answers `ok` and namespace `default` exists (the bootstrap controller
/// creates it shortly after the apiserver starts serving).
async fn apiserver_ready(client: &kube::Client) -> Result<(), String> {
    use k8s_openapi::api::core::v1::Namespace;
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let body = client
        .request_text(request)
        .await
        .map_err(|e| format!("GET /readyz: {e}"))?;
    if body.trim() != "ok" {
        return Err(format!("GET /readyz: {}", body.trim()));
    }
    kube::Api::<Namespace>::all(client.clone())
        .get("default")
        .await
        .map(|_| ())
        .map_err(|e| format!("GET namespace default: {e}"))
}

/// Polls `probe` until it succeeds, the process exits, or `timeout` passes.
pub(crate) async fn wait_ready<'a, T, F, Fut>(
    process: &mut ManagedProcess,
    timeout: Duration,
    arg: &'a T,
    probe: F,
) -> Result<(), TestEnvError>
where
    T: ?Sized,
    F: Fn(&'a T) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    loop {
        process.check_running()?;
        // Without the caller's subscriber: a process still starting answers 500 or refuses the
        // connection, which kube's client logs at ERROR on every poll (expected here; the last
        // reason is in the error if the process never gets ready).
        let quiet = probe(arg).with_subscriber(tracing::subscriber::NoSubscriber::default());
        let last = match tokio::time::timeout(POLL * 20, quiet).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(reason)) => reason,
            Err(_) => "probe timed out".to_string(),
        };
        if started.elapsed() > timeout {
            return Err(TestEnvError::NotReady {
                binary: process.binary(),
                waited: timeout,
                reason: last,
                log: process.log().to_path_buf(),
                tail: process::log_tail(process.log(), 40),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

fn is_port_clash(err: &TestEnvError) -> bool {
    matches!(err, TestEnvError::Exited { tail, .. } if tail.contains("address already in use"))
}

/// A loopback port that was free a moment ago (the OS picks it; another process may still take it
/// before ours binds, which the callers retry).
pub(crate) fn free_port(dir: &Path) -> Result<u16, TestEnvError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| TestEnvError::Io {
            action: "binding a loopback port for",
            path: dir.to_path_buf(),
            source,
        })
}
