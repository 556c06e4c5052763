//! One member's Lease in the ring and its view of the others: renew its own Lease (with the
//! membership it acknowledges), list the ring's Leases with a consistent read, and judge which
//! members are live by the local monotonic clock (as leader election does).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use tokio::time::Instant;

use super::handoff::MemberAck;

/// The label naming a Lease's ring.
pub const RING_LABEL: &str = "sharding.kubeapp.dev/ring";
/// The annotation holding the membership a member acknowledged (identities, comma-separated).
pub const ACK_ANNOTATION: &str = "sharding.kubeapp.dev/acknowledged";

/// The ring's Leases, as one member reads and writes them.
pub(crate) struct RingLeases {
    pub(crate) api: Api<Lease>,
    pub(crate) ring: String,
    pub(crate) identity: String,
    pub(crate) lease_name: String,
    pub(crate) duration: Duration,
}

/// What a member last saw of each other member's Lease, and when (monotonic).
#[derive(Default)]
pub(crate) struct Liveness {
    seen: HashMap<String, (Option<String>, Instant)>,
}

/// The live members and their acknowledgements, from one consistent list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Others {
    pub(crate) acks: Vec<MemberAck>,
}

impl Liveness {
    /// The other members whose Lease changed less than its duration ago (by our clock; a Lease
    /// seen for the first time counts from now), with their acknowledgements.
    pub(crate) fn observe(&mut self, leases: &[Lease], own: &str, now: Instant) -> Others {
        let mut acks = Vec::new();
        let mut present = Vec::new();
        for lease in leases {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            if name == own {
                continue;
            }
            present.push(name.clone());
            let version = lease.metadata.resource_version.clone();
            let entry = self
                .seen
                .entry(name)
                .or_insert_with(|| (version.clone(), now));
            if entry.0 != version {
                *entry = (version, now);
            }
            let spec = lease.spec.as_ref();
            let Some(holder) = spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty())
            else {
                continue;
            };
            let duration = Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            );
            if now.saturating_duration_since(entry.1) >= duration {
                continue;
            }
            let acknowledged = lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ACK_ANNOTATION))
                .map(|list| parse_members(list));
            acks.push(MemberAck {
                identity: holder,
                acknowledged,
            });
        }
        self.seen.retain(|name, _| present.contains(name));
        acks.sort_by(|a, b| a.identity.cmp(&b.identity));
        Others { acks }
    }
}

/// A comma-separated membership, as written in [`ACK_ANNOTATION`].
pub(crate) fn parse_members(list: &str) -> Vec<String> {
    let mut members: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect();
    members.sort();
    members.dedup();
    members
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl RingLeases {
    /// Creates or renews our Lease, recording `acknowledged`. `own` is the Lease as last
    /// written (None: read it first). A conflict (our copy was stale) is retried once.
    pub(crate) async fn renew(
        &self,
        own: &mut Option<Lease>,
        acknowledged: Option<&[String]>,
    ) -> Result<(), kube::Error> {
        for attempt in 0..2 {
            let mut lease = match own.take() {
                Some(lease) => lease,
                None => match self.api.get_opt(&self.lease_name).await? {
                    Some(lease) => lease,
                    None => Lease {
                        metadata: ObjectMeta {
                            name: Some(self.lease_name.clone()),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    },
                },
            };
            lease
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(RING_LABEL.into(), self.ring.clone());
            let annotations = lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            match acknowledged {
                Some(members) => {
                    annotations.insert(ACK_ANNOTATION.into(), members.join(","));
                }
                None => {
                    annotations.remove(ACK_ANNOTATION);
                }
            }
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            let now = MicroTime(Timestamp::now());
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                spec.holder_identity = Some(self.identity.clone());
                spec.acquire_time = Some(now.clone());
            }
            spec.lease_duration_seconds = Some(seconds(self.duration));
            spec.renew_time = Some(now);
            let written = if lease.metadata.resource_version.is_some() {
                self.api
                    .replace(&self.lease_name, &PostParams::default(), &lease)
                    .await
            } else {
                self.api.create(&PostParams::default(), &lease).await
            };
            match written {
                Ok(written) => {
                    *own = Some(written);
                    return Ok(());
                }
                // Our copy was stale, or the Lease was deleted or created meanwhile: read again.
                Err(kube::Error::Api(status))
                    if attempt == 0 && matches!(status.code, 404 | 409) => {}
                Err(error) => return Err(error),
            }
        }
        Err(kube::Error::Api(
            kube::core::Status::failure("the ring Lease kept changing under us", "Conflict")
                .with_code(409)
                .boxed(),
        ))
    }

    /// Every Lease of the ring, read consistently (no `resourceVersion`: a quorum read).
    pub(crate) async fn list(&self) -> Result<Vec<Lease>, kube::Error> {
        let params = ListParams::default().labels(&format!("{RING_LABEL}={}", self.ring));
        Ok(self.api.list(&params).await?.items)
    }

    /// Deletes our Lease (graceful leave: the others take our share at once).
    pub(crate) async fn delete(&self, own: Option<&Lease>) -> Result<(), kube::Error> {
        let mut params = DeleteParams::default();
        if let Some(uid) = own.and_then(|l| l.metadata.uid.clone()) {
            params = params.preconditions(Preconditions {
                uid: Some(uid),
                resource_version: None,
            });
        }
        match self.api.delete(&self.lease_name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn lease(name: &str, version: &str, holder: &str, ack: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                annotations: ack.map(|a| BTreeMap::from([(ACK_ANNOTATION.into(), a.into())])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_member_counts_until_its_lease_is_unchanged_for_its_duration() {
        let start = Instant::now();
        let mut liveness = Liveness::default();
        let leases = [
            lease("r-a", "1", "a", Some("a,b")),
            lease("r-b", "2", "b", None),
        ];
        let seen = liveness.observe(&leases, "r-a", start);
        assert_eq!(
            seen.acks,
            vec![MemberAck {
                identity: "b".into(),
                acknowledged: None
            }],
            "our own Lease is not among the others"
        );
        let later = start + Duration::from_secs(14);
        assert_eq!(liveness.observe(&leases, "r-a", later).acks.len(), 1);
        // Unchanged for 15 s: b is gone.
        let expired = start + Duration::from_secs(15);
        assert!(liveness.observe(&leases, "r-a", expired).acks.is_empty());
        // b renews (new resourceVersion): live again, with its acknowledgement.
        let renewed = [lease("r-b", "3", "b", Some("b,a"))];
        let back = liveness.observe(&renewed, "r-a", expired);
        assert_eq!(
            back.acks[0].acknowledged.as_deref(),
            Some(&["a".to_string(), "b".to_string()][..])
        );
    }

    #[test]
    fn a_released_lease_is_not_a_member() {
        let mut liveness = Liveness::default();
        let mut released = lease("r-b", "1", "", None);
        released.spec.as_mut().unwrap().holder_identity = None;
        assert!(
            liveness
                .observe(&[released], "r-a", Instant::now())
                .acks
                .is_empty()
        );
    }
}
