//! Starting kube-controller-manager, kube-scheduler and kwok against the test apiserver, each with
//! its own client certificate, and waiting until each is healthy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;

use super::ClusterOptions;
use crate::testenv::TestEnvError;
use crate::testenv::kubeconfig;
use crate::testenv::process::ManagedProcess;
use crate::testenv::startup::{Files, free_port, wait_ready};

/// The controllers left out: cloud-provider ones (no cloud) and node IPAM (kwok gives pods their
/// IPs). Everything else runs, node lifecycle and pod GC included, so a NotReady node has effects.
const DISABLED_CONTROLLERS: [&str; 4] = [
    "cloud-node-lifecycle-controller",
    "node-ipam-controller",
    "node-route-controller",
    "service-lb-controller",
];
/// The annotation kwok is told to manage nodes by; testenv's nodes carry it.
pub(crate) const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// The three processes of the cluster mode, stopped when dropped (kwok first, so no status is
/// written by a fake kubelet while the controllers stop).
#[derive(Debug)]
pub(crate) struct Components {
    pub(crate) kwok: ManagedProcess,
    pub(crate) scheduler: ManagedProcess,
    pub(crate) controller_manager: ManagedProcess,
}

/// Where each binary is.
#[derive(Debug)]
pub(crate) struct ClusterBinaries {
    pub(crate) controller_manager: PathBuf,
    pub(crate) scheduler: PathBuf,
    pub(crate) kwok: PathBuf,
}

/// What the components need from the running control plane.
pub(crate) struct ControlPlane<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) files: &'a Files,
    pub(crate) server: String,
    pub(crate) admin: &'a kube::Client,
    pub(crate) timeout: Duration,
}

/// Starts the three processes, then waits until the controller-manager and the scheduler are
/// healthy (kwok's nodes are awaited by the caller, once it has created them).
pub(crate) async fn start_components(
    binaries: &ClusterBinaries,
    plane: &ControlPlane<'_>,
    options: &ClusterOptions,
) -> Result<Components, TestEnvError> {
    let dir = plane.dir;
    let file = |name: &str| dir.join(name).display().to_string();

    let kcm_port = free_port(dir)?;
    let kcm_kubeconfig = identity_kubeconfig(
        plane,
        "kube-controller-manager",
        "system:kube-controller-manager",
        &[],
    )?;
    let mut kcm_args = serving_args(&kcm_kubeconfig, kcm_port, &file);
    kcm_args.extend([
        format!("--service-account-private-key-file={}", file("sa.key")),
        format!("--root-ca-file={}", file("serving-ca.crt")),
        "--use-service-account-credentials=true".into(),
        format!(
            "--controllers=*,{}",
            DISABLED_CONTROLLERS
                .iter()
                .map(|c| format!("-{c}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
        "--cluster-name=kubeapp-testenv".into(),
    ]);
    let controller_manager = ManagedProcess::start(
        "kube-controller-manager",
        &binaries.controller_manager,
        &kcm_args,
        dir.join("kube-controller-manager.log"),
    )?;

    let scheduler_port = free_port(dir)?;
    let scheduler_kubeconfig =
        identity_kubeconfig(plane, "kube-scheduler", "system:kube-scheduler", &[])?;
    let scheduler_args = serving_args(&scheduler_kubeconfig, scheduler_port, &file);
    let scheduler = ManagedProcess::start(
        "kube-scheduler",
        &binaries.scheduler,
        &scheduler_args,
        dir.join("kube-scheduler.log"),
    )?;

    let kwok = start_kwok(binaries, plane, options)?;

    let mut components = Components {
        kwok,
        scheduler,
        controller_manager,
    };
    let healthz = |port| async move { healthz(plane, port).await };
    wait_ready(
        &mut components.scheduler,
        plane.timeout,
        &scheduler_port,
        |port| healthz(*port),
    )
    .await?;
    wait_ready(
        &mut components.controller_manager,
        plane.timeout,
        &kcm_port,
        |port| async move {
            healthz(*port).await?;
            // The ServiceAccount controller's first act: proof the controllers run, not only serve.
            kube::Api::<ServiceAccount>::namespaced(plane.admin.clone(), "default")
                .get("default")
                .await
                .map(drop)
                .map_err(|e| format!("GET serviceaccount default/default: {e}"))
        },
    )
    .await?;
    Ok(components)
}

/// kwok: the Stage documents written beside it, nodes selected by [`KWOK_NODE_ANNOTATION`], and
/// its work directory inside the environment's (so a user's `~/.kwok/kwok.yaml` is not read).
fn start_kwok(
    binaries: &ClusterBinaries,
    plane: &ControlPlane<'_>,
    options: &ClusterOptions,
) -> Result<ManagedProcess, TestEnvError> {
    let dir = plane.dir;
    let stages = dir.join("kwok-stages.yaml");
    std::fs::write(&stages, options.stages()).map_err(|source| TestEnvError::Io {
        action: "writing",
        path: stages.clone(),
        source,
    })?;
    let workdir = dir.join("kwok");
    std::fs::create_dir_all(&workdir).map_err(|source| TestEnvError::Io {
        action: "creating",
        path: workdir.clone(),
        source,
    })?;
    // kwok writes node and pod status and deletes pods: the rights of a kubelet on every node.
    let kubeconfig = identity_kubeconfig(plane, "kwok", "kubeapp-kwok", &["system:masters"])?;
    let (key, value) = KWOK_NODE_ANNOTATION;
    let args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--config={}", stages.display()),
        format!("--manage-nodes-with-annotation-selector={key}={value}"),
        "--node-lease-duration-seconds=40".into(),
    ];
    ManagedProcess::start_with_env(
        "kwok",
        &binaries.kwok,
        &args,
        &[("KWOK_WORKDIR", workdir.as_path())],
        dir.join("kwok.log"),
    )
}

/// The flags the controller-manager and the scheduler share: their identity (also used to
/// delegate authentication and authorization of their own HTTPS endpoint to the apiserver), the
/// loopback port they serve `/healthz` on with testenv's serving certificate, no leader election.
fn serving_args(kubeconfig: &Path, port: u16, file: &dyn Fn(&str) -> String) -> Vec<String> {
    let kubeconfig = kubeconfig.display();
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", file("serving.crt")),
        format!("--tls-private-key-file={}", file("serving.key")),
        "--leader-elect=false".into(),
    ]
}

/// A kubeconfig file for `user` in `groups`, authenticated by a client certificate.
fn identity_kubeconfig(
    plane: &ControlPlane<'_>,
    name: &str,
    user: &str,
    groups: &[&str],
) -> Result<PathBuf, TestEnvError> {
    let cert = plane.files.client_ca.issue_client(user, groups)?;
    let config =
        kubeconfig::for_client_cert(&plane.server, &plane.files.serving_ca_pem, user, &cert)?;
    let path = plane.dir.join(format!("{name}.kubeconfig"));
    kubeconfig::write(&config, &path)?;
    Ok(path)
}

/// `GET https://127.0.0.1:<port>/healthz` (always allowed, checked against testenv's serving CA).
async fn healthz(plane: &ControlPlane<'_>, port: u16) -> Result<(), String> {
    let url = format!("https://127.0.0.1:{port}");
    let config = kubeconfig::for_client_cert(
        &url,
        &plane.files.serving_ca_pem,
        "probe",
        &plane.files.admin,
    )
    .map_err(|e| e.to_string())?;
    let client = kubeconfig::client(&config, "probe")
        .await
        .map_err(|e| e.to_string())?;
    let request = http::Request::get("/healthz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let body = client
        .request_text(request)
        .await
        .map_err(|e| format!("GET {url}/healthz: {e}"))?;
    if body.trim() == "ok" {
        Ok(())
    } else {
        Err(format!("GET {url}/healthz: {}", body.trim()))
    }
}
