//! The cluster mode: real controllers, a scheduler and fake nodes beside kube-apiserver and etcd.
//!
//! [`TestEnvBuilder::cluster`](super::TestEnvBuilder::cluster) starts, after etcd and
//! kube-apiserver:
//!
//! - **kube-controller-manager** with every controller except the cloud and IPAM ones: garbage
//!   collection through owner references, namespace deletion, Deployments, ReplicaSets,
//!   StatefulSets, Jobs, EndpointSlices, ServiceAccounts and their tokens, node lifecycle and pod
//!   GC among them. It signs tokens with the apiserver's service-account key and authenticates as
//!   `system:kube-controller-manager` (each controller then with its own service account).
//! - **kube-scheduler**, as `system:kube-scheduler`.
//! - **kwok** with [`ClusterOptions::nodes`] fake nodes: it plays the kubelets. Pods scheduled to
//!   a node go `Pending` -> `Running` -> `Ready` (after [`ClusterOptions::pod_ready_after`], or the
//!   duration in the pod's annotation [`READY_AFTER_ANNOTATION`]); a pod labelled
//!   [`POD_BEHAVIOUR_LABEL`]`=`[`NEVER_READY`] runs but never becomes ready; a Job's pods succeed;
//!   a deleted pod goes away. [`TestEnv::set_node_ready`](super::TestEnv::set_node_ready) makes a
//!   node report `Ready=False` (and back).
//!
//! Start-up waits until the controller-manager and the scheduler answer `/healthz`, the
//! ServiceAccount controller has made namespace `default`'s ServiceAccount, and every node is
//! Ready.
//!
//! # What it is not
//!
//! No container runs: pods are status only, their IPs are invented by kwok, Services route
//! nowhere, probes and images are never looked at. There is no kubelet API (logs, exec,
//! port-forward), no kube-proxy, no DNS, no cloud provider, no persistent volumes.
//!
//! # Binaries
//!
//! `kube-controller-manager`, `kube-scheduler` and `kwok` are looked up like kube-apiserver and
//! etcd (see [`binaries`](super::binaries)); `testbin/build.sh` and `kubeapp testenv install`
//! build all five.

mod components;
mod nodes;

use std::time::Duration;

pub(crate) use self::components::{ClusterBinaries, Components, ControlPlane, start_components};
pub(crate) use self::nodes::{create_nodes, nodes_ready};

/// The label that selects a fake pod's behaviour; its only value today is [`NEVER_READY`].
pub const POD_BEHAVIOUR_LABEL: &str = "kubeapp.dev/pod";
/// [`POD_BEHAVIOUR_LABEL`]'s value for a pod that runs but never becomes ready (a failing
/// readiness probe, as far as the cluster can tell).
pub const NEVER_READY: &str = "never-ready";
/// A pod annotation holding how long the pod takes to become Running and Ready once scheduled,
/// as a Go duration (`"3s"`, `"500ms"`); it overrides [`ClusterOptions::pod_ready_after`].
pub const READY_AFTER_ANNOTATION: &str = "kubeapp.dev/ready-after";
/// The node label that makes a fake node report `Ready=False` while it is `"true"`.
pub const NODE_NOT_READY_LABEL: &str = "kubeapp.dev/node-not-ready";
/// The binaries the cluster mode runs beside kube-apiserver and etcd.
pub const CLUSTER_BINARIES: [&str; 3] = ["kube-controller-manager", "kube-scheduler", "kwok"];

/// How long a node may take to change its Ready condition when asked to.
pub(crate) const NODE_TIMEOUT: Duration = Duration::from_secs(30);

/// The Stage documents kwok plays, with `@READY_AFTER_MS@` still to be filled in.
const STAGES: &str = include_str!("stages.yaml");

/// How the cluster mode's fake nodes and pods behave; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// How many fake nodes kwok runs (default 1).
    pub nodes: usize,
    /// How long a scheduled pod takes to become Running and Ready (default 0: at once).
    pub pod_ready_after: Duration,
    /// Each node's CPU capacity and allocatable, as a Kubernetes quantity (default `"32"`).
    pub node_cpu: String,
    /// Each node's memory capacity and allocatable (default `"256Gi"`).
    pub node_memory: String,
    /// How many pods each node takes (default 110, a kubelet's default).
    pub node_pods: u32,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            nodes: 1,
            pod_ready_after: Duration::ZERO,
            node_cpu: "32".into(),
            node_memory: "256Gi".into(),
            node_pods: 110,
        }
    }
}

impl ClusterOptions {
    /// These options with `nodes` fake nodes.
    #[must_use]
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// These options with pods becoming Running and Ready `after` being scheduled.
    #[must_use]
    pub fn pod_ready_after(mut self, after: Duration) -> Self {
        self.pod_ready_after = after;
        self
    }

    /// kwok's Stage documents for these options.
    pub(crate) fn stages(&self) -> String {
        STAGES.replace(
            "@READY_AFTER_MS@",
            &self.pod_ready_after.as_millis().to_string(),
        )
    }

    /// The fake nodes' names, `kwok-node-0` onwards.
    pub(crate) fn node_names(&self) -> Vec<String> {
        (0..self.nodes).map(|i| format!("kwok-node-{i}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_carry_the_ready_delay_and_every_documented_stage() {
        let options = ClusterOptions {
            pod_ready_after: Duration::from_millis(1500),
            ..ClusterOptions::default()
        };
        let stages = options.stages();
        assert!(stages.contains("durationMilliseconds: 1500"), "{stages}");
        assert!(!stages.contains("@READY_AFTER_MS@"));
        for name in [
            "node-initialize",
            "node-heartbeat",
            "node-not-ready",
            "pod-ready",
            "pod-never-ready",
            "pod-complete",
            "pod-delete",
        ] {
            assert!(stages.contains(&format!("name: {name}\n")), "{name}");
        }
        for needle in [
            POD_BEHAVIOUR_LABEL,
            NEVER_READY,
            READY_AFTER_ANNOTATION,
            NODE_NOT_READY_LABEL,
        ] {
            assert!(stages.contains(needle), "{needle}");
        }
    }
}

/// A running cluster mode: its processes and the options it was started with.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) components: Components,
    pub(crate) options: ClusterOptions,
}
