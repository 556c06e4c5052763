//! One candidate's view of the Lease and its writes: observe with the local monotonic clock,
//! acquire or renew with a `resourceVersion` precondition, release.

use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

use super::{ELECTION_LABEL, ElectionError};

/// What this candidate last saw of the Lease, and when (monotonic).
#[derive(Clone, Debug, Default)]
pub(crate) struct Observed {
    /// The Lease's `resourceVersion` when last seen.
    version: Option<String>,
    /// The holder then.
    holder: Option<String>,
    /// The lease duration then.
    duration: Duration,
    /// When (local monotonic clock) the `resourceVersion` last changed.
    since: Option<Instant>,
}

impl Observed {
    fn observe(&mut self, lease: &Lease, now: Instant) {
        let version = lease.metadata.resource_version.clone();
        if version != self.version {
            self.version = version;
            self.since = Some(now);
        }
        let spec = lease.spec.as_ref();
        self.holder = spec
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty());
        self.duration = Duration::from_secs(
            spec.and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(0),
        );
    }

    /// The holder as last seen (`None`: not seen yet, or the Lease is free).
    pub(crate) fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Whether another holder's claim may still be valid: its Lease changed less than its
    /// duration ago, by our clock (never by comparing its `renewTime` with our wall clock).
    fn held_by_other(&self, identity: &str, now: Instant) -> bool {
        match (&self.holder, self.since) {
            (Some(holder), Some(since)) if holder != identity => {
                now.saturating_duration_since(since) < self.duration
            }
            _ => false,
        }
    }
}

/// The Lease, its name, and who we are.
pub(crate) struct LeaseClient {
    pub(crate) api: Api<Lease>,
    pub(crate) name: String,
    pub(crate) identity: String,
    pub(crate) duration: Duration,
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl LeaseClient {
    /// Creates, takes over (expired or released) or renews the Lease; `Ok(true)` when we hold it
    /// after the call, `Ok(false)` when another holder's claim is still valid or another
    /// candidate's write won (a 409 Conflict on our `resourceVersion`).
    pub(crate) async fn acquire_or_renew(
        &self,
        observed: &mut Observed,
    ) -> Result<bool, ElectionError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(ElectionError::Api)?;
        let now = Instant::now();
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    labels: Some([(ELECTION_LABEL.to_string(), "true".to_string())].into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds(self.duration)),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    observed.observe(&created, Instant::now());
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(ElectionError::Api(error)),
            };
        };
        observed.observe(&lease, now);
        if observed.held_by_other(&self.identity, now) {
            return Ok(false);
        }
        // A Lease created before the label (or by another tool) gets it with our next write.
        lease
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(ELECTION_LABEL.to_string(), "true".to_string());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !ours {
            spec.acquire_time = Some(now_micro());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.lease_duration_seconds = Some(seconds(self.duration));
        spec.renew_time = Some(now_micro());
        // `replace` carries the resourceVersion we read: a concurrent writer makes it a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                observed.observe(&written, Instant::now());
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(ElectionError::Api(error)),
        }
    }

    /// Gives the Lease up if we hold it: no holder, a one-second duration, so a watching
    /// candidate takes it at once.
    pub(crate) async fn release(&self) -> Result<(), ElectionError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(ElectionError::Api)?
        else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            // Someone else wrote it meanwhile: it is not ours to release any more.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(ElectionError::Api(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(version: &str, holder: Option<&str>, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn another_holder_counts_until_its_lease_is_unchanged_for_a_whole_duration() {
        let start = Instant::now();
        let mut observed = Observed::default();
        observed.observe(&lease("1", Some("a"), 15), start);
        assert!(observed.held_by_other("b", start + Duration::from_secs(14)));
        assert!(!observed.held_by_other("b", start + Duration::from_secs(15)));
        assert!(
            !observed.held_by_other("a", start),
            "our own claim is not another's"
        );
        // A renew (new resourceVersion) restarts the clock, whatever its renewTime says.
        observed.observe(&lease("2", Some("a"), 15), start + Duration::from_secs(10));
        assert!(observed.held_by_other("b", start + Duration::from_secs(20)));
        // The same version seen again does not.
        observed.observe(&lease("2", Some("a"), 15), start + Duration::from_secs(20));
        assert!(!observed.held_by_other("b", start + Duration::from_secs(25)));
    }

    #[test]
    fn a_released_lease_is_held_by_nobody() {
        let start = Instant::now();
        let mut observed = Observed::default();
        observed.observe(&lease("3", None, 1), start);
        assert!(!observed.held_by_other("b", start));
        observed.observe(&lease("4", Some(""), 15), start);
        assert!(!observed.held_by_other("b", start));
    }
}
