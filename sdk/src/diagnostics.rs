//! What an operator process reports about itself on `/debug/kubeapp`: its informers, its kinds'
//! queues and failures, and its leader and shard state.
//!
//! These are plain data, serialized as JSON by the Runner's diagnostics endpoint and read back by
//! `kubeapp trace --diagnostics`; the runtime crates fill them in (the informers and kinds from the
//! operator crate, leadership and shards from the HA crate through [`App::diagnostics`]). The
//! shape is stable within a minor version: fields are only added.
//!
//! ```
//! use kubeapp_sdk::diagnostics::{Diagnostics, InformerDiagnostics};
//!
//! let mut informer = InformerDiagnostics::default();
//! informer.kind = "ConfigMap".into();
//! informer.api_version = "v1".into();
//! informer.synced = true;
//! informer.objects = 2;
//! informer.checksum = "3f1c0e2a9b7d5e41".into();
//! let mut report = Diagnostics::default();
//! report.informers.push(informer);
//! let json = serde_json::to_string(&report).unwrap();
//! let back: Diagnostics = serde_json::from_str(&json).unwrap();
//! assert_eq!(back, report);
//! ```
//!
//! [`App::diagnostics`]: crate::app::App::diagnostics

use serde::{Deserialize, Serialize};

/// The whole report of one operator process; see the [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Diagnostics {
    /// Every shared informer the process runs (one list+watch each).
    #[serde(default)]
    pub informers: Vec<InformerDiagnostics>,
    /// Every kind a controller handles: its queue and its failures.
    #[serde(default)]
    pub kinds: Vec<KindDiagnostics>,
    /// Each app's leader and shard state.
    #[serde(default)]
    pub apps: Vec<AppDiagnostics>,
}

/// One shared informer: its cache and its watch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InformerDiagnostics {
    /// The kind it lists and watches.
    pub kind: String,
    /// Its `group/version` (`v1` for the core group).
    pub api_version: String,
    /// The namespace it watches; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Whether its first complete list was delivered.
    pub synced: bool,
    /// The objects in its cache.
    pub objects: u64,
    /// A digest of the cached `(uid, resourceVersion)` set, independent of order: two replicas
    /// caching the same objects at the same versions show the same value (16 hex digits).
    pub checksum: String,
    /// Seconds since the informer last handed an event on (a change or a resync); `None`
    /// before the first.
    pub last_event_age_seconds: Option<f64>,
    /// How often it listed again after its first sync (watch expired, reconnect, drift).
    pub relists: u64,
    /// How many list or watch requests failed.
    pub watch_errors: u64,
}

/// One kind a controller handles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct KindDiagnostics {
    /// The kind, as the metrics label it (the plural resource name, e.g. `greetings`).
    pub kind: String,
    /// Events queued for its handlers and not yet handled.
    pub queue_depth: i64,
    /// Objects waiting for a retry.
    pub retries_pending: i64,
    /// Objects whose last handler call failed.
    pub objects_failing: u64,
    /// Seconds since the longest-failing object first failed; `None` when none fails.
    pub oldest_failure_age_seconds: Option<f64>,
    /// Handler calls given up after their last retry.
    pub retries_given_up: u64,
    /// Seconds the oldest object ready for a handler call has waited for a worker (`None`: none
    /// waits). Growing while `queue_depth` stays up means the workers cannot keep up.
    #[serde(default)]
    pub oldest_queued_age_seconds: Option<f64>,
}

/// One app's leader and shard state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AppDiagnostics {
    /// The app's name.
    pub app: String,
    /// Its leader election, if it runs one.
    pub leader: Option<LeaderDiagnostics>,
    /// Its shard membership, if it is sharded.
    pub shard: Option<ShardDiagnostics>,
}

impl AppDiagnostics {
    /// The report of an app named `app` with no leader election and no sharding.
    pub fn named(app: impl Into<String>) -> Self {
        Self {
            app: app.into(),
            ..Self::default()
        }
    }
}

/// A replica's view of its leader election.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LeaderDiagnostics {
    /// The Lease's namespace.
    pub lease_namespace: String,
    /// The Lease's name.
    pub lease_name: String,
    /// This replica's identity.
    pub identity: String,
    /// Whether this replica leads now (its Lease renewed within the renew deadline).
    pub leading: bool,
    /// The number of this replica's current or last term (0: never led).
    pub term: u64,
    /// The Lease's holder as this replica last read or wrote it (`None`: not read yet, or the
    /// Lease is free). On a standby, the replica that leads.
    #[serde(default)]
    pub holder: Option<String>,
}

/// A replica's view of its shard ring.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ShardDiagnostics {
    /// This replica's identity.
    pub identity: String,
    /// Whether its own member Lease is valid now.
    pub member: bool,
    /// The live members as last read, sorted.
    pub members: Vec<String>,
    /// The slots those members assign to this replica (the ring's `owned_by`).
    pub owned_slots: Vec<u32>,
    /// The members this replica acknowledged last, if any.
    pub acknowledged: Option<Vec<String>>,
    /// The slots its running controller term acts on now: the owned slots that their previous
    /// owners handed over (empty between terms). Equal to `owned_slots` once the ring settled.
    #[serde(default)]
    pub active_slots: Vec<u32>,
}
