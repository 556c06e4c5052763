//! Which control plane `kubeapp run` starts: the cluster mode (controllers, scheduler, kwok's fake
//! nodes: Deployments roll out for real) when its binaries are cached, otherwise kube-apiserver +
//! etcd alone, saying how to get the rest, so a first run never waits for minutes of Go builds.

use std::time::Duration;

use kubeapp::sdk::testenv::cluster::CLUSTER_BINARIES;
use kubeapp::sdk::testenv::{ClusterOptions, TestEnv, TestEnvBuilder, TestEnvError, binaries};

/// `kubeapp run`'s control-plane flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// How many fake nodes (kwok) run in the cluster mode.
    #[arg(long, default_value = "1", value_name = "N")]
    pub nodes: usize,
    /// Run kube-apiserver and etcd only (no controllers, no scheduler, no nodes).
    #[arg(long)]
    pub plain: bool,
}

/// The control plane to start, and the line that says which (`control plane:` follows it).
pub fn builder(args: &ClusterArgs, timeout: Duration) -> (TestEnvBuilder, String) {
    let plain = TestEnv::builder().start_timeout(timeout);
    if args.plain {
        return (
            plain,
            "mode: plain (--plain): kube-apiserver and etcd only".into(),
        );
    }
    match binaries::check_available(&CLUSTER_BINARIES) {
        Ok(()) => (
            plain.cluster_with(ClusterOptions::default().nodes(args.nodes.max(1))),
            format!(
                "mode: cluster: kube-controller-manager, kube-scheduler and {} kwok node(s) \
                 (pods are simulated: no container runs)",
                args.nodes.max(1)
            ),
        ),
        Err(error) => (
            plain,
            format!(
                "mode: plain: kube-apiserver and etcd only, so Deployments never become available \
                 and nothing is garbage-collected. The cluster mode needs binaries not built yet \
                 ({}); `kubeapp testenv install` builds them (minutes, once), then \
                 `kubeapp run` uses it",
                missing(&error)
            ),
        ),
    }
}

/// What is missing, shortly: the binary and where it was looked for.
fn missing(error: &TestEnvError) -> String {
    match error {
        TestEnvError::BinaryNotFound { binary, searched } => format!(
            "{binary} is in none of {}",
            searched
                .iter()
                .map(|dir| dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// The line naming the cluster mode's processes, when it runs.
pub fn describe(env: &TestEnv) -> Option<String> {
    let [controller_manager, scheduler, kwok] = env.cluster_pids()?;
    Some(format!(
        "cluster: nodes {} (kube-controller-manager pid {controller_manager}, kube-scheduler pid \
         {scheduler}, kwok pid {kwok})",
        env.node_names().join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_is_chosen_when_asked() {
        let args = ClusterArgs {
            nodes: 3,
            plain: true,
        };
        let (_, line) = builder(&args, Duration::from_secs(1));
        assert!(line.starts_with("mode: plain (--plain)"), "{line}");
    }
}
