//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! [`LeaderElector::run`] competes for one Lease until stopped; [`Leadership`] says, at any
//! instant, whether this process may act as the leader.
//!
//! - **Observation on the local monotonic clock.** A candidate remembers when the Lease's
//!   `resourceVersion` last changed; another holder's claim counts until the Lease has been
//!   unchanged for its whole `leaseDurationSeconds`. The Lease's `renewTime` is written for humans
//!   and never compared with this machine's wall clock (clock skew between nodes would break
//!   safety).
//! - **Optimistic concurrency.** Every acquire, renew and release is a `replace` carrying the
//!   `resourceVersion` that was read: of two candidates writing at once, one gets a 409 Conflict
//!   and stays a follower.
//! - **Stepping down at the renew deadline.** The leader renews every `retry_period`; when
//!   `renew_deadline` passes without a successful renew (errors, timeouts, a lost race), it stops
//!   being the leader, before the Lease can expire for the others (`renew_deadline` <
//!   `lease_duration`). [`Leadership::is_leader`] is computed from the last successful renew and
//!   the monotonic clock at the moment it is asked, not from a flag a task updates later: a
//!   process paused (SIGSTOP) past its deadline answers `false` as soon as it resumes, before any
//!   task of the elector has run.
//! - **Release on graceful shutdown.** Stopping the elector while leading clears the holder and
//!   sets a one-second duration (with the `resourceVersion` precondition).
//! - **Followers watch the Lease**, so a released Lease is taken at once, not at the next retry.
//! - **Labelled** [`ELECTION_LABEL`], so `kubeapp trace` finds it.
//!
//! Time is read from `tokio::time::Instant` (the monotonic clock; tests pause it to check the
//! step-down to the millisecond).
//!
//! There is no fencing: a handler call that was in flight when leadership ended may still
//! finish its write (Leases give no fencing token; client-go says the same). The defaults are
//! client-go's: 15 s lease duration, 10 s renew deadline, 2 s retry period.
//!
//! Why written here: the one crate on kube 5 (kube-lease-manager) keeps reporting leadership
//! when renewals fail and judges expiry from `renewTime` against the local wall clock; the crates
//! with the right semantics are on older kube majors, and a second kube major in the build is not
//! acceptable.

mod lease;
mod metrics;
mod timings;

pub use self::metrics::ElectionMetrics;
pub use self::timings::LeaseTimings;

/// The label on an election Lease (value `"true"`), set when a candidate creates or writes it, so
/// that tools (`kubeapp trace`) find the leader of a kubeapp operator without knowing its
/// Lease's name.
pub const ELECTION_LABEL: &str = "election.kubeapp.dev/lease";

use kubeapp_sdk::diagnostics::LeaderDiagnostics;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kubeapp_operator::gate::CallGate;
use kubeapp_sdk::error::ErrorChain;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use self::lease::{LeaseClient, Observed};

/// How one candidate competes; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (one per elected group, e.g. `{app}-leader`).
    pub name: String,
    /// This candidate's identity, unique among the candidates (the pod name).
    pub identity: String,
    /// How long a claim counts, when the leader steps down, how often it renews.
    pub timings: LeaseTimings,
}

impl ElectionConfig {
    /// The Lease `namespace/name`, competed for as `identity`, with client-go's timings.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
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

    /// Checks that the names are set and the [timings](LeaseTimings::validate) are consistent.
    ///
    /// # Errors
    ///
    /// [`ElectionError::Config`] naming the setting at fault.
    pub fn validate(&self) -> Result<(), ElectionError> {
        if self.name.is_empty() || self.namespace.is_empty() {
            return Err(ElectionError::Config(
                "the Lease needs a namespace and a name".into(),
            ));
        }
        if self.identity.is_empty() {
            return Err(ElectionError::Config(
                "the candidate needs an identity (e.g. the pod name)".into(),
            ));
        }
        self.timings.validate().map_err(ElectionError::Config)
    }
}

/// Why an election could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionError {
    /// The configuration is inconsistent.
    #[error("leader election: {0}")]
    Config(String),
    /// The Lease could not be read or written (retried by the elector; returned only from
    /// single calls).
    #[error("leader election: the Lease")]
    Api(#[source] kube::Error),
}

/// Whether this process is the leader, asked at any moment; cheap to clone.
///
/// Leadership comes in **periods**: a period starts when a renew succeeds while not leading
/// (also when the last deadline passed unnoticed, e.g. in a process paused by SIGSTOP) and
/// ends at the first deadline that passes without a renew. A handle [pinned](Self::pinned) to a
/// period answers `false` for ever once that period ended, even after leadership is regained:
/// work started under one period (a controller term, a shard's view of the ring) must never
/// go on under the next, because others may have acted in between.
#[derive(Clone, Debug)]
pub struct Leadership {
    /// Leading until this instant (monotonic), if leading, and the current period.
    validity: Arc<Mutex<Validity>>,
    changes: watch::Receiver<bool>,
    /// The period this handle is pinned to, if any.
    period: Option<u64>,
    /// The Lease competed for (an elector's handles; a shard ring's validity has none).
    lease: Option<Arc<LeaseIdentity>>,
}

/// The Lease an elector competes for, and as whom (for [`Leadership::diagnostics`]).
#[derive(Debug)]
struct LeaseIdentity {
    namespace: String,
    name: String,
    identity: String,
    /// The Lease's holder as the elector last read or wrote it.
    holder: Arc<Mutex<Option<String>>>,
}

/// The shared state behind every [`Leadership`] handle of one elector or shard ring.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Validity {
    /// Valid until this instant (monotonic), if valid.
    until: Option<Instant>,
    /// Counts the periods of validity: a renew that finds the previous deadline passed (or none)
    /// starts a new one.
    period: u64,
}

impl Validity {
    /// Records a successful renew valid until `until`, or the end of validity (`None`); returns
    /// whether it started a new period.
    fn renew(&mut self, until: Option<Instant>, now: Instant) -> bool {
        let new_period = until.is_some() && self.until.is_none_or(|previous| previous <= now);
        if new_period {
            self.period += 1;
        }
        self.until = until;
        new_period
    }
}

impl Leadership {
    /// A leadership read from `validity` and told of changes by `changes` (a shard ring's own
    /// Lease validity has the same shape).
    pub(crate) fn from_parts(
        validity: Arc<Mutex<Validity>>,
        changes: watch::Receiver<bool>,
    ) -> Self {
        Self {
            validity,
            changes,
            period: None,
            lease: None,
        }
    }

    /// The number of the current or last period of leadership (0: never led): the term
    /// `/debug/kubeapp` reports.
    pub fn term(&self) -> u64 {
        self.read().period
    }

    /// This replica's leader state for the Runner's `/debug/kubeapp`.
    pub fn diagnostics(&self) -> LeaderDiagnostics {
        let mut report = LeaderDiagnostics::default();
        if let Some(lease) = &self.lease {
            report.lease_namespace.clone_from(&lease.namespace);
            report.lease_name.clone_from(&lease.name);
            report.identity.clone_from(&lease.identity);
            report.holder = lease
                .holder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
        }
        report.leading = self.is_leader();
        report.term = self.term();
        report
    }

    fn read(&self) -> Validity {
        *self.validity.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this process holds the Lease now: a renew succeeded less than the renew deadline
    /// ago, by the monotonic clock (and, for a [pinned](Self::pinned) handle, within the period
    /// it is pinned to).
    pub fn is_leader(&self) -> bool {
        let validity = self.read();
        self.period.is_none_or(|period| period == validity.period)
            && validity.until.is_some_and(|until| Instant::now() < until)
    }

    /// Until when (monotonic) this process leads, if it does: the last successful renew plus the
    /// renew deadline (`None` for a pinned handle whose period ended).
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        let validity = self.read();
        if self.period.is_some_and(|period| period != validity.period) {
            return None;
        }
        validity.until
    }

    /// This handle pinned to the current period of leadership (see the [type docs](Self)): it
    /// answers `false` once that period ends, whatever happens later. Pin while leading; a handle
    /// pinned while not leading is pinned to the period that ended last and never leads.
    #[must_use]
    pub fn pinned(&self) -> Self {
        Self {
            period: Some(self.read().period),
            ..self.clone()
        }
    }

    /// Resolves when the elector next reports a change (gained or lost).
    pub async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            // The elector is gone: nothing changes any more (returning would make a waiting
            // loop spin).
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once this process leads.
    pub(crate) async fn until_leading(&mut self) {
        while !self.is_leader() {
            self.changed().await;
        }
    }
}

/// A controller term's [`CallGate`]: a handler call starts only while
/// [`is_leader`](Leadership::is_leader) (a lock and a clock read, no allocation).
impl CallGate for Leadership {
    fn may_call(&self) -> bool {
        self.is_leader()
    }
}

/// One candidate; see the [module docs](self).
///
/// Run it next to a controller that acts only while this process leads (what an operator
/// binary's `--leader-elect` does):
///
/// ```no_run
/// # async fn demo(client: kube::Client, controller: kubeapp_operator::InformerController)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_ha::RunInTerms as _;
/// use kubeapp_ha::election::{ElectionConfig, LeaderElector};
/// use kubeapp_operator::CancellationToken;
///
/// let identity = std::env::var("POD_NAME")?;
/// let elector = LeaderElector::new(client, ElectionConfig::new("shop", "shop-operator-leader", identity))?;
/// let leadership = elector.leadership();
/// let stop = CancellationToken::new(); // cancelled on SIGTERM
/// let election_stop = CancellationToken::new();
/// let election = tokio::spawn(elector.run(election_stop.clone()));
/// // Handlers run only while this replica holds the Lease; each term starts from a fresh list.
/// controller.run_while_leading(stop.clone(), leadership).await?;
/// // Only now, with the handlers stopped, release the Lease (a standby takes over at once).
/// election_stop.cancel();
/// election.await?;
/// # Ok(())
/// # }
/// ```
pub struct LeaderElector {
    config: ElectionConfig,
    client: LeaseClient,
    validity: Arc<Mutex<Validity>>,
    changes: watch::Sender<bool>,
    status: Option<prometheus::IntGauge>,
    /// The Lease's holder as last read or written, for [`Leadership::diagnostics`].
    holder: Arc<Mutex<Option<String>>>,
}

impl LeaderElector {
    /// A candidate for `config`'s Lease, using `client`.
    ///
    /// # Errors
    ///
    /// [`ElectionError::Config`] for inconsistent settings.
    pub fn new(client: kube::Client, config: ElectionConfig) -> Result<Self, ElectionError> {
        config.validate()?;
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        Ok(Self {
            client: LeaseClient {
                api,
                name: config.name.clone(),
                identity: config.identity.clone(),
                duration: config.timings.lease_duration,
            },
            config,
            validity: Arc::default(),
            changes: watch::Sender::new(false),
            status: None,
            holder: Arc::default(),
        })
    }

    /// Reports leadership as `leader_election_master_status{name}` (1 while leading, else 0;
    /// client-go's metric name) in `metrics` (the set of a registry:
    /// `registry.set::<ElectionMetrics>()?`).
    #[must_use]
    pub fn report_to(mut self, metrics: &ElectionMetrics) -> Self {
        let status = metrics
            .master_status
            .with_label_values(&[self.config.name.as_str()]);
        status.set(0);
        self.status = Some(status);
        self
    }

    /// Whether this candidate leads, now and later.
    pub fn leadership(&self) -> Leadership {
        let mut leadership =
            Leadership::from_parts(Arc::clone(&self.validity), self.changes.subscribe());
        leadership.lease = Some(Arc::new(LeaseIdentity {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            identity: self.config.identity.clone(),
            holder: Arc::clone(&self.holder),
        }));
        leadership
    }

    /// Records the holder `observed` last saw.
    fn note_holder(&self, observed: &Observed) {
        let holder = observed.holder().map(str::to_string);
        *self.holder.lock().unwrap_or_else(PoisonError::into_inner) = holder;
    }

    fn set(&self, until: Option<Instant>) {
        if let Some(status) = &self.status {
            status.set(i64::from(until.is_some()));
        }
        publish_validity(&self.validity, &self.changes, until);
    }

    /// Competes until `stop` is cancelled; releases the Lease then if it holds it.
    pub async fn run(self, stop: CancellationToken) {
        let lease_changed = Arc::new(tokio::sync::Notify::new());
        let watch_task = tokio::spawn(watch_lease(
            self.client.api.clone(),
            self.config.name.clone(),
            Arc::clone(&lease_changed),
            stop.clone(),
        ));
        let mut observed = Observed::default();
        loop {
            // Follower: retry every period, or at once when the Lease changes. Validity counts
            // from when a write was sent (conservative: the server stored it later).
            let mut renewed;
            loop {
                renewed = Instant::now();
                let attempt = self.client.acquire_or_renew(&mut observed).await;
                self.note_holder(&observed);
                match attempt {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(error = %ErrorChain(&error), "leader election: acquiring failed")
                    }
                }
                tokio::select! {
                    () = stop.cancelled() => {
                        watch_task.abort();
                        return;
                    }
                    () = tokio::time::sleep(self.config.timings.retry_period) => {}
                    () = lease_changed.notified() => {}
                }
            }
            self.set(Some(renewed + self.config.timings.renew_deadline));
            tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
            // Leader: renew every period; step down at the deadline.
            loop {
                tokio::select! {
                    () = stop.cancelled() => {
                        self.set(None);
                        if let Err(error) = self.client.release().await {
                            tracing::warn!(
                                error = %ErrorChain(&error),
                                "leader election: releasing the Lease failed"
                            );
                        }
                        watch_task.abort();
                        return;
                    }
                    () = tokio::time::sleep(self.config.timings.retry_period) => {}
                }
                let deadline = renewed + self.config.timings.renew_deadline;
                let sent = Instant::now();
                let attempt =
                    tokio::time::timeout_at(deadline, self.client.acquire_or_renew(&mut observed))
                        .await;
                self.note_holder(&observed);
                match attempt {
                    Ok(Ok(true)) => {
                        renewed = sent;
                        self.set(Some(renewed + self.config.timings.renew_deadline));
                    }
                    Ok(Ok(false)) => tracing::warn!("leader election: the Lease was taken over"),
                    Ok(Err(error)) => {
                        tracing::warn!(error = %ErrorChain(&error), "leader election: renewing failed")
                    }
                    Err(_) => tracing::warn!("leader election: renewing timed out"),
                }
                // Not renewed within the deadline: stop leading before the Lease can expire for
                // the others.
                if Instant::now() >= renewed + self.config.timings.renew_deadline {
                    self.set(None);
                    tracing::warn!(identity = %self.config.identity, "stepped down: no renew within the renew deadline");
                    break;
                }
            }
        }
    }
}

/// Records that a claim is valid until `until` (or not at all) where a [`Leadership`] reads it,
/// and tells its watchers when validity starts or ends (the leader elector and a shard ring's
/// own Lease share this).
pub(crate) fn publish_validity(
    slot: &Mutex<Validity>,
    changes: &watch::Sender<bool>,
    until: Option<Instant>,
) {
    let new_period = slot
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .renew(until, Instant::now());
    // A new period is a change even when "valid" was never published false: a process paused
    // past its deadline may renew before anything noticed the lapse, and whoever saw the lapse
    // by the clock waits for this (a renew within the period wakes nobody).
    changes.send_if_modified(|valid| {
        let now = until.is_some();
        let changed = *valid != now || new_period;
        *valid = now;
        changed
    });
}

/// A `/readyz` check that passes only while this replica leads (opt in: a follower is otherwise
/// ready, as it serves webhooks and keeps its caches warm).
pub struct LeadershipReady(pub Leadership);

#[async_trait::async_trait]
impl kubeapp_sdk::app::HealthCheck for LeadershipReady {
    fn name(&self) -> String {
        "leader".into()
    }

    async fn check(&self) -> Result<(), String> {
        if self.0.is_leader() {
            Ok(())
        } else {
            Err("not the leader".into())
        }
    }
}

/// Notifies `changed` on every change of the Lease `name` (a follower then tries at once).
async fn watch_lease(
    api: Api<Lease>,
    name: String,
    changed: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // With kube-runtime's backoff: a watch that keeps failing (no RBAC for it, say) must not
    // spin.
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => match event {
                Some(Ok(_)) => changed.notify_one(),
                Some(Err(error)) => tracing::debug!(%error, "leader election: watching the Lease"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests;
