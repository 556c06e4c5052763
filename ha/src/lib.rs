//! # kubeapp-ha
//!
//! High availability for an [`InformerController`]: leader election ([`election`]) and
//! Lease-coordinated sharding ([`sharding`]), run as terms of the controller.
//!
//! The core (`kubeapp-operator`) knows nothing of Leases. It owns the seams this crate plugs
//! into: a [`CallGate`](kubeapp_operator::gate::CallGate) asked before every handler call and an
//! [`EventFilter`](kubeapp_operator::gate::EventFilter) asked for every event
//! ([`gate`](kubeapp_operator::gate)), a [`Term`](kubeapp_operator::controller::Term) run by
//! [`InformerController::run_term`], and the [`ListScope`](kubeapp_operator::list_scope::ListScope)
//! a shared informer lists in. Here, [`Leadership`](election::Leadership) is a call gate, a
//! shard's active slots an event filter, and the shard scope (`sharding::shard_scopes`) a list
//! scope that asks the apiserver for the replica's share only.
//!
//! [`RunInTerms`] runs a controller in those terms:
//!
//! - [`run_while_leading`](RunInTerms::run_while_leading) (the protocol: module [`leading`]): one
//!   term per period of leadership;
//! - [`run_sharded`](RunInTerms::run_sharded) (the protocol: module [`sharded`]): one term per
//!   acknowledged membership of a shard ring, on this replica's share of the objects.
//!
//! ```no_run
//! use kubeapp_ha::RunInTerms as _;
//! use kubeapp_ha::election::{ElectionConfig, LeaderElector};
//! use kubeapp_operator::{CancellationToken, ControllerConfig, InformerController};
//!
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let controller = InformerController::new(ControllerConfig::default());
//! // ... register kinds and handlers ...
//! let elector = LeaderElector::new(client, ElectionConfig::new("ns", "my-app-leader", "pod-a"))?;
//! let leadership = elector.leadership();
//! let stop = CancellationToken::new();
//! let elector_task = tokio::spawn(elector.run(stop.child_token()));
//! controller.run_while_leading(stop, leadership).await?;
//! let _ = elector_task.await;
//! # Ok(())
//! # }
//! ```
//!
//! The modules are layered (`layers.toml`, section `[ha]`): [`election`] at the bottom, then
//! [`sharding`] (membership on one Lease per replica, built on election's validity) and
//! [`leading`], then [`sharded`].
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod election;
pub mod leading;
pub mod sharded;
pub mod sharding;

use kubeapp_operator::{CancellationToken, ControllerError, InformerController};

/// Runs an [`InformerController`] in terms of leadership or shard membership: bring it into
/// scope (`use kubeapp_ha::RunInTerms as _;`, or the facade's prelude) and call it on the
/// controller.
pub trait RunInTerms {
    /// Runs the controller in terms, one per period of leadership, until `stop`; see
    /// [`leading`].
    ///
    /// # Errors
    ///
    /// [`ControllerError::NotRestartable`] when a kind was added with `add_informer`;
    /// [`ControllerError::AlreadyRan`] when the controller runs or ran.
    fn run_while_leading(
        &self,
        stop: CancellationToken,
        leadership: election::Leadership,
    ) -> impl Future<Output = Result<(), ControllerError>> + Send;

    /// Runs the controller on this replica's share of a shard ring until `stop`; see
    /// [`sharded`]. Run the ring ([`ShardRing::run`](sharding::ShardRing::run)) alongside and
    /// stop it after this returns.
    ///
    /// # Errors
    ///
    /// [`ControllerError::NotRestartable`] when a kind was added with `add_informer`;
    /// [`ControllerError::AlreadyRan`] when the controller runs or ran.
    fn run_sharded(
        &self,
        stop: CancellationToken,
        membership: sharding::Membership,
    ) -> impl Future<Output = Result<(), ControllerError>> + Send;
}

impl RunInTerms for InformerController {
    fn run_while_leading(
        &self,
        stop: CancellationToken,
        leadership: election::Leadership,
    ) -> impl Future<Output = Result<(), ControllerError>> + Send {
        leading::run_while_leading(self, stop, leadership)
    }

    fn run_sharded(
        &self,
        stop: CancellationToken,
        membership: sharding::Membership,
    ) -> impl Future<Output = Result<(), ControllerError>> + Send {
        sharded::run_sharded(self, stop, membership)
    }
}
