//! Sharding: several replicas split the objects of the managed kinds between them, coordinated
//! through Leases on the apiserver, with no central sharder, webhook or label writes.
//!
//! # How it works
//!
//! - **Membership.** Each replica holds its own Lease `{ring}-{identity}` in one namespace,
//!   labelled `sharding.kubeapp.dev/ring={ring}`, renewed every retry period with
//!   leader-election semantics: a `resourceVersion` precondition on every write, the others judge
//!   it live while its Lease keeps changing within its duration by *their* monotonic clock, and it
//!   stops acting itself when the renew deadline passes without a successful renew (before the
//!   others may count it gone). On a graceful stop it deletes its Lease, so the others take its
//!   share at once.
//! - **Assignment.** The live members, sorted, determine who owns which part of the space of
//!   64-bit FNV-1a hashes of `metadata.uid` (the apiserver's sharded list-and-watch hash): see
//!   [`assignment`]. Every replica computes the same answer.
//! - **Handoff without double ownership.** A replica publishes on its Lease (annotation
//!   `sharding.kubeapp.dev/acknowledged`) the membership it acts under. When it sees the
//!   membership change, it first ends its controller term (no new handler call, contexts
//!   cancelled, in-flight calls drained up to the grace period), then acknowledges the new
//!   membership, then reads the ring's Leases again (a consistent list) and acts only on slots
//!   that no other live member owns under *its* acknowledgement (see [`handoff`]). Slots still
//!   held by a previous owner become active as that owner acknowledges, or when its Lease expires.
//!   Slots that become active mid-term are delivered from the informer cache as Adds (under the
//!   informer's delivery lock, so no event of them is lost or reordered), so the opinionated
//!   wrappers run `sync` (or the delete handler, for an object deleted meanwhile that still holds
//!   their finalizer).
//! - **Forgetting, not deleting.** Events of objects outside the active slots are dropped before
//!   they reach the controller's lanes; an object leaving a replica's share is never reported as
//!   deleted. Triggered reconciles (owned objects, mapped objects) follow their owner's slot.
//!   Stores, inputs and related objects are not sharded: a handler sees all of them (except a
//!   store sharing the sharded kind's own informer, see below).
//! - **No fencing.** As with leader election, a handler call in flight when a replica was paused
//!   (SIGSTOP) past its Lease may still finish its write after another replica took the slot;
//!   every handler call checks the replica's own Lease validity before it starts.
//!
//! # Server-side selection
//!
//! Where the apiserver has the `ShardedListAndWatch` feature gate (Kubernetes 1.36, alpha), each
//! replica's informers of the sharded kinds (made with [`shard_scopes`] as their registry's list
//! scopes, [`Informers::list_in`](kubeapp_operator::Informers::list_in); a simple App does it when
//! sharded) list and watch only the replica's *owned* slots
//! (`shardSelector=shardRange(object.metadata.uid, ..) || ..`, added to their requests by
//! [`selector_layer::ShardSelectorLayer`], as kube's parameters have no field for it), so a
//! replica caches only its share. At each term the controller asks for its owned slots; the
//! informer then lists and watches again with the new selector and forgets (never reports as
//! deleted) the cached objects outside the new range; an object inside it that the new list
//! lacks was deleted and is reported so. Whether the apiserver honours the selector is probed
//! once per informer (`server_side`); if not (or the informers were made without shard
//! scopes), the informer watches every object and the
//! client-side filter above shards alone (it stays on in both cases). A store that shares the
//! sharded kind's informer sees the same share. Metrics: `shard_server_side_selector`,
//! `shard_cached_objects{kind}`. Facts and figures: `docs/high-availability.md`.
//!
//! Leader election is the special case of one slot set and N candidates; use
//! [`election`](crate::election) for it (it needs one Lease, not one per replica).
//!
//! Why written here: no crate on kube 5 offers Lease-coordinated sharding (see
//! `docs/high-availability.md`).

pub mod assignment;
pub(crate) mod gate;
pub mod handoff;
mod metrics;
mod ring;
mod scoped;
pub mod selector_layer;
pub(crate) mod server_side;
pub(crate) mod term;

use kubeapp_sdk::diagnostics::ShardDiagnostics;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::assignment::SlotSet;
use crate::election::{Leadership, LeaseTimings, Validity};

pub use self::handoff::MemberAck;
pub use self::metrics::{CachedObjects, ShardMetrics};
pub use self::ring::{ACK_ANNOTATION, RING_LABEL};
use self::ring::{Liveness, RingLeases};
pub use self::server_side::shard_scopes;

/// One replica's place in a ring; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct ShardingConfig {
    /// The namespace of the ring's Leases.
    pub namespace: String,
    /// The ring's name (e.g. `{app}-shards`): the Leases' label value and name prefix.
    pub ring: String,
    /// This replica's identity, unique in the ring (the pod name).
    pub identity: String,
    /// How long a member counts for the others after its last renew, when it stops acting
    /// without a renew, how often it renews and re-reads the ring.
    pub timings: LeaseTimings,
}

impl ShardingConfig {
    /// Member `identity` of ring `ring` in `namespace`, with client-go's timings.
    pub fn new(
        namespace: impl Into<String>,
        ring: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            ring: ring.into(),
            identity: identity.into(),
            timings: LeaseTimings::default(),
        }
    }

    /// Sets the timings.
    #[must_use]
    pub fn with_timings(mut self, timings: LeaseTimings) -> Self {
        self.timings = timings;
        self
    }

    /// The name of this member's Lease.
    pub fn lease_name(&self) -> String {
        format!("{}-{}", self.ring, self.identity)
    }

    /// Checks the names and the [timings](LeaseTimings::validate).
    ///
    /// # Errors
    ///
    /// [`ShardingError::Config`] naming the setting at fault.
    pub fn validate(&self) -> Result<(), ShardingError> {
        if self.ring.is_empty() || self.namespace.is_empty() {
            return Err(ShardingError::Config(
                "the ring needs a namespace and a name".into(),
            ));
        }
        if self.identity.is_empty() {
            return Err(ShardingError::Config(
                "the member needs an identity (e.g. the pod name)".into(),
            ));
        }
        if self.identity.contains(',') {
            return Err(ShardingError::Config(format!(
                "the identity {:?} may not contain a comma",
                self.identity
            )));
        }
        self.timings.validate().map_err(ShardingError::Config)
    }
}

/// Why sharding could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// The configuration is inconsistent.
    #[error("sharding: {0}")]
    Config(String),
}

/// What a member knows of the ring after its last consistent read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingState {
    /// The live members, sorted, this replica included while its own Lease is valid.
    pub members: Vec<String>,
    /// The other live members and what they acknowledged.
    pub others: Vec<MemberAck>,
    /// What this replica had acknowledged (written) before the read, in its current period of
    /// validity.
    pub acknowledged: Option<Vec<String>>,
    /// The number of that acknowledgement (each request to acknowledge gets the next number; 0:
    /// none written in this period of validity). The read started after its write completed.
    pub read_after: u64,
}

/// A request to publish `members` as this replica's acknowledgement.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AckRequest {
    /// Numbers the requests, so a read can be matched to the write it followed rather than to
    /// a value that happens to be the same.
    number: u64,
    members: Vec<String>,
}

/// A replica's membership, shared with its controller: cheap to clone.
#[derive(Clone)]
pub struct Membership {
    identity: String,
    validity: Leadership,
    state: watch::Receiver<RingState>,
    ack: Arc<watch::Sender<Option<AckRequest>>>,
    metrics: Option<ShardMetrics>,
    /// The slots the running term acts on (empty between terms), shared by every handle of
    /// one ring member, for the diagnostics.
    active: Arc<Mutex<SlotSet>>,
}

impl Membership {
    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica's own Lease is valid now (renewed within the renew deadline, by the
    /// monotonic clock).
    pub(crate) fn is_member(&self) -> bool {
        self.validity.is_leader()
    }

    /// The validity of this replica's own Lease as a [`Leadership`] (the controller gates every
    /// handler call on it).
    pub fn validity(&self) -> Leadership {
        self.validity.clone()
    }

    /// This replica's shard state for the Runner's `/debug/kubeapp`: the ring as last read and
    /// the slots it assigns to this replica.
    pub fn diagnostics(&self) -> ShardDiagnostics {
        let state = self.state();
        let mut report = ShardDiagnostics::default();
        report.identity.clone_from(&self.identity);
        report.member = self.is_member();
        report.owned_slots = assignment::owned_by(&state.members, &self.identity)
            .iter()
            .filter_map(|slot| u32::try_from(slot).ok())
            .collect();
        report.active_slots = self
            .active_slots()
            .iter()
            .filter_map(|slot| u32::try_from(slot).ok())
            .collect();
        report.members = state.members;
        report.acknowledged = state.acknowledged;
        report
    }

    /// The slots the running controller term acts on now: its owned slots that previous owners
    /// handed over (empty between terms, and before the controller runs).
    pub fn active_slots(&self) -> SlotSet {
        *self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the running term's active slots (the controller's `follow_ring`).
    pub(crate) fn set_active_slots(&self, slots: SlotSet) {
        *self.active.lock().unwrap_or_else(PoisonError::into_inner) = slots;
    }

    /// The ring as last read.
    pub fn state(&self) -> RingState {
        self.state.borrow().clone()
    }

    /// Resolves when the ring state or this replica's validity may have changed.
    pub async fn changed(&mut self) {
        // Both on this handle's own receivers, so a change is seen once (a clone's receiver
        // would report the same change again on every call).
        tokio::select! {
            read = self.state.changed() => {
                if read.is_err() {
                    // The ring stopped: nothing changes any more.
                    std::future::pending::<()>().await;
                }
            }
            () = self.validity.changed() => {}
        }
    }

    /// Publishes `members` as this replica's acknowledgement; resolves with the first read of
    /// the ring that started after that very request was written (matched by number, never by
    /// an equal value written earlier, e.g. before a partition).
    pub(crate) async fn acknowledge(&mut self, members: Vec<String>) -> RingState {
        let mut number = 0;
        self.ack.send_modify(|request| {
            number = request.as_ref().map_or(0, |r| r.number) + 1;
            *request = Some(AckRequest { number, members });
        });
        let read = self
            .state
            .wait_for(|state| state.read_after >= number)
            .await
            .map(|state| state.clone());
        match read {
            Ok(state) => state,
            // The ring stopped: nothing will be read again, so no term may start (acting on an
            // unread ring could overlap others); the controller is stopped with it.
            Err(_) => std::future::pending().await,
        }
    }

    /// The collectors, if the ring reports metrics.
    pub(crate) fn metrics(&self) -> Option<&ShardMetrics> {
        self.metrics.as_ref()
    }
}

/// One member of a ring: keeps its Lease, reads the others'; see the [module docs](self).
///
/// Every replica runs one with its own identity; the controller then acts only on this
/// replica's share of the objects (what an operator binary's `--shard` does):
///
/// ```no_run
/// # async fn demo(client: kube::Client, controller: kubeapp_operator::InformerController)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_ha::RunInTerms as _;
/// use kubeapp_ha::sharding::{ShardRing, ShardingConfig};
/// use kubeapp_operator::CancellationToken;
///
/// let identity = std::env::var("POD_NAME")?;
/// let ring = ShardRing::new(client, ShardingConfig::new("shop", "shop-operator-shards", identity))?;
/// let membership = ring.membership();
/// let stop = CancellationToken::new();
/// let ring_stop = CancellationToken::new();
/// let ring_task = tokio::spawn(ring.run(ring_stop.clone()));
/// controller.run_sharded(stop.clone(), membership).await?;
/// // Stop the ring after the controller: its Lease is deleted, the others take the share.
/// ring_stop.cancel();
/// ring_task.await?;
/// # Ok(())
/// # }
/// ```
pub struct ShardRing {
    config: ShardingConfig,
    leases: RingLeases,
    validity_state: Arc<Mutex<Validity>>,
    validity: watch::Sender<bool>,
    state: watch::Sender<RingState>,
    ack: Arc<watch::Sender<Option<AckRequest>>>,
    metrics: Option<ShardMetrics>,
    active: Arc<Mutex<SlotSet>>,
}

impl ShardRing {
    /// A member of `config`'s ring, using `client`.
    ///
    /// # Errors
    ///
    /// [`ShardingError::Config`] for inconsistent settings.
    pub fn new(client: kube::Client, config: ShardingConfig) -> Result<Self, ShardingError> {
        config.validate()?;
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        Ok(Self {
            leases: RingLeases {
                api,
                ring: config.ring.clone(),
                identity: config.identity.clone(),
                lease_name: config.lease_name(),
                duration: config.timings.lease_duration,
            },
            config,
            validity_state: Arc::default(),
            validity: watch::Sender::new(false),
            state: watch::Sender::new(RingState::default()),
            ack: Arc::new(watch::Sender::new(None)),
            metrics: None,
            active: Arc::default(),
        })
    }

    /// Reports the sharding metrics into `metrics` (the set of a registry:
    /// `registry.set::<ShardMetrics>()?`).
    #[must_use]
    pub fn report_to(mut self, metrics: &ShardMetrics) -> Self {
        self.metrics = Some(metrics.clone());
        self
    }

    /// This replica's membership, for its controller.
    pub fn membership(&self) -> Membership {
        Membership {
            identity: self.config.identity.clone(),
            validity: Leadership::from_parts(
                Arc::clone(&self.validity_state),
                self.validity.subscribe(),
            ),
            state: self.state.subscribe(),
            ack: Arc::clone(&self.ack),
            metrics: self.metrics.clone(),
            active: Arc::clone(&self.active),
        }
    }

    fn set_valid(&self, until: Option<Instant>) {
        crate::election::publish_validity(&self.validity_state, &self.validity, until);
    }

    /// Renews this replica's Lease and reads the ring until `stop`; then deletes the Lease (stop
    /// the controller first: deleting hands the share over at once).
    ///
    /// Each turn renews (on the retry period, or at once for a new acknowledgement) and then
    /// lists the ring, so every list starts after the renew before it completed. When the own
    /// Lease lapses (no renew within the renew deadline) the view of the ring is dropped
    /// (published empty, no acknowledgement): nothing read before the lapse may decide anything
    /// after it, as the others may have taken this replica's share meanwhile.
    pub async fn run(self, stop: CancellationToken) {
        let ring_changed = Arc::new(tokio::sync::Notify::new());
        let watch_task = tokio::spawn(watch_ring(
            self.leases.api.clone(),
            self.config.ring.clone(),
            Arc::clone(&ring_changed),
            stop.clone(),
        ));
        let timings = self.config.timings;
        let mut ack_changes = self.ack.subscribe();
        let mut own: Option<Lease> = None;
        let mut liveness = Liveness::default();
        let mut renewed: Option<Instant> = None;
        // The acknowledgement written in the current period of validity.
        let mut written: Option<AckRequest> = None;
        let mut renew_due = true;
        let mut last_attempt = Instant::now();
        loop {
            // Renew on the retry period or for a new acknowledgement; other members' changes
            // only make us read the ring again (renewing on them would echo between members).
            if renew_due {
                let ack = ack_changes.borrow_and_update().clone();
                let sent = Instant::now();
                let sent_wall = std::time::SystemTime::now();
                last_attempt = sent;
                let deadline = renewed.map_or(sent + timings.renew_deadline, |r| {
                    r + timings.renew_deadline
                });
                match tokio::time::timeout_at(
                    deadline.max(sent + timings.retry_period),
                    self.leases
                        .renew(&mut own, ack.as_ref().map(|a| a.members.as_slice())),
                )
                .await
                {
                    Ok(Ok(())) => {
                        renewed = Some(sent);
                        written = ack;
                        self.set_valid(Some(sent + timings.renew_deadline));
                        // When the renew was sent (wall clock, microseconds): with the renew
                        // deadline, when this replica stops acting if no renew follows; the
                        // fault tests put every replica's validity on one timeline with it.
                        let sent_at_us = sent_wall
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
                        tracing::debug!(sent_at_us, "sharding: own Lease renewed");
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(%error, "sharding: renewing the ring Lease failed");
                    }
                    Err(_) => tracing::warn!("sharding: renewing the ring Lease timed out"),
                }
                renew_due = false;
            }
            if renewed.is_none_or(|r| Instant::now() >= r + timings.renew_deadline) {
                if renewed.is_some() {
                    tracing::warn!(identity = %self.config.identity, "sharding: no renew within the renew deadline; not acting, the view of the ring is dropped");
                }
                renewed = None;
                written = None;
                self.set_valid(None);
                self.publish(RingState::default());
            }
            // Bounded like a renew: a list hanging on a dead connection must not hold the next
            // renew back.
            match tokio::time::timeout(timings.retry_period, self.leases.list()).await {
                Ok(Ok(leases)) => {
                    let others = liveness.observe(&leases, &self.leases.lease_name, Instant::now());
                    let mut members: Vec<String> =
                        others.acks.iter().map(|m| m.identity.clone()).collect();
                    if self.validity.borrow().to_owned() {
                        members.push(self.config.identity.clone());
                    }
                    members.sort();
                    members.dedup();
                    if let Some(metrics) = &self.metrics {
                        metrics
                            .members
                            .set(i64::try_from(members.len()).unwrap_or(i64::MAX));
                    }
                    self.publish(RingState {
                        members,
                        others: others.acks,
                        acknowledged: written.as_ref().map(|a| a.members.clone()),
                        read_after: written.as_ref().map_or(0, |a| a.number),
                    });
                }
                Ok(Err(error)) => tracing::warn!(%error, "sharding: listing the ring failed"),
                Err(_) => tracing::warn!("sharding: listing the ring timed out"),
            }
            let next_renew = last_attempt + timings.retry_period;
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(next_renew) => renew_due = true,
                () = ring_changed.notified() => {}
                _ = ack_changes.changed() => renew_due = true,
            }
        }
        watch_task.abort();
        self.set_valid(None);
        self.publish(RingState::default());
        if let Err(error) = self.leases.delete(own.as_ref()).await {
            tracing::warn!(%error, "sharding: deleting the ring Lease failed");
        }
    }

    /// Publishes `state` to the controller (a wake-up only when it differs).
    fn publish(&self, state: RingState) {
        self.state.send_if_modified(|current| {
            let changed = *current != state;
            *current = state;
            changed
        });
    }
}

/// Notifies `changed` on every change of the ring's Leases.
async fn watch_ring(
    api: Api<Lease>,
    ring: String,
    changed: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) {
    let config = watcher::Config::default().labels(&format!("{RING_LABEL}={ring}"));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => match event {
                Some(Ok(_)) => changed.notify_one(),
                Some(Err(error)) => tracing::debug!(%error, "sharding: watching the ring"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod config_tests {
    use std::time::Duration;

    use super::{LeaseTimings, ShardingConfig, ShardingError};

    fn problem(config: &ShardingConfig) -> String {
        match config.validate() {
            Err(ShardingError::Config(problem)) => problem,
            Ok(()) => panic!("{config:?} was accepted"),
        }
    }

    #[test]
    fn names_identity_and_timings_are_checked_each_with_its_own_message() {
        assert!(
            ShardingConfig::new("ns", "shop-shards", "pod-0")
                .validate()
                .is_ok()
        );
        assert!(problem(&ShardingConfig::new("ns", "", "pod-0")).contains("namespace and a name"));
        assert!(problem(&ShardingConfig::new("ns", "ring", "")).contains("identity"));
        assert!(problem(&ShardingConfig::new("ns", "ring", "a,b")).contains("comma"));
        let inverted = LeaseTimings::new(
            Duration::from_secs(4),
            Duration::from_secs(6),
            Duration::from_secs(1),
        );
        let config = ShardingConfig::new("ns", "ring", "pod-0").with_timings(inverted);
        assert!(problem(&config).contains("renew deadline"));
    }
}
