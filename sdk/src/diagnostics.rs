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

use std::hash::Hasher as _;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// The process's most recent handler calls, oldest first, when it keeps them
    /// ([`RECORD_CALLS_ENV`], [`record_handler_calls`]; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<HandlerCall>,
}

/// The environment variable that makes an operator process keep its recent handler calls for
/// `/debug/kubeapp`: how many to keep (e.g. `65536`). Off when unset: a record costs a lock and
/// a few small strings per call, which a production operator need not pay.
pub const RECORD_CALLS_ENV: &str = "KUBEAPP_RECORD_CALLS";

/// Set by [`record_handler_calls`]; 0 when not.
static RECORD_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Makes every controller made from now on in this process keep its last `keep` handler calls
/// for `/debug/kubeapp` (as [`RECORD_CALLS_ENV`] does; this wins over it). kubeapp's fault
/// harness calls it, for operators that run in the test process.
pub fn record_handler_calls(keep: usize) {
    RECORD_CALLS.store(keep, Ordering::Relaxed);
}

/// How many handler calls a controller made now keeps: [`record_handler_calls`]'s value, else
/// [`RECORD_CALLS_ENV`]'s, else 0 (none).
pub fn handler_calls_to_keep() -> usize {
    match RECORD_CALLS.load(Ordering::Relaxed) {
        0 => std::env::var(RECORD_CALLS_ENV)
            .ok()
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0),
        keep => keep,
    }
}

/// One handler call: which handler, for what, and the object version it was given. A fault
/// test reads them to check that no call saw an object older than an earlier call did, and that
/// every deleted object's deletion reached a handler.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HandlerCall {
    /// Its number in the process, from 1 (a gap: older calls were dropped before a read).
    pub seq: u64,
    /// The kind, as the metrics label it (the plural resource name).
    pub kind: String,
    /// Which handler of the kind (e.g. `reconciler[0]`).
    pub handler: String,
    /// What it was called for: `create`, `update`, `delete` or `resync` (a reconciler's
    /// action, or the watcher call: add, update, delete, resync).
    pub action: String,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The object's uid.
    pub uid: Option<String>,
    /// The object's `resourceVersion` as the call saw it.
    pub resource_version: Option<String>,
    /// Whether the object was marked for deletion (a `deletionTimestamp`): the call saw its
    /// deletion, as an opinionated handler's cleanup does in an update.
    #[serde(default)]
    pub deleting: bool,
    /// 0 for a first call, n for the n-th retry (a retry replays the failed call's object, by
    /// design, even when a newer event for it was handled meanwhile).
    #[serde(default)]
    pub attempt: u32,
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
    /// Its resource's plural name (e.g. `configmaps`).
    #[serde(default)]
    pub plural: String,
    /// The label selector it lists and watches with, if any.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// The field selector it lists and watches with, if any.
    #[serde(default)]
    pub field_selector: Option<String>,
    /// Whether it lists and watches the apiserver itself (`false` for one fed by a stream):
    /// only then is its cache comparable with a list.
    #[serde(default)]
    pub listed: bool,
    /// Whether its first complete list was delivered.
    pub synced: bool,
    /// The objects in its cache.
    pub objects: u64,
    /// A digest of the cached `(uid, resourceVersion)` set, independent of order: two replicas
    /// caching the same objects at the same versions show the same value (16 hex digits).
    /// [`cache_checksum`] computes it for any set, e.g. a list from the apiserver.
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
    /// Work in progress: events being dispatched plus handler calls running (a retry's call
    /// runs outside any event). Zero when no worker is busy with the kind.
    #[serde(default)]
    pub in_flight: i64,
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

/// The digest [`InformerDiagnostics::checksum`] shows, of a set of `(uid, resourceVersion)`
/// pairs: the same for the same set in any order, in every build and on every machine (16 hex
/// digits). A per-object hash (FNV-1a, then splitmix64's finalizer, so that sums of similar
/// inputs do not cancel out) summed: a quick comparison for humans and tools, not a
/// cryptographic one.
///
/// ```
/// use kubeapp_sdk::diagnostics::cache_checksum;
///
/// let cache = cache_checksum([("uid-a", "41"), ("uid-b", "42")]);
/// assert_eq!(cache, cache_checksum([("uid-b", "42"), ("uid-a", "41")]));
/// assert_ne!(cache, cache_checksum([("uid-a", "41"), ("uid-b", "43")]));
/// ```
pub fn cache_checksum<'a>(objects: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let sum = objects
        .into_iter()
        .fold(0u64, |sum, (uid, resource_version)| {
            sum.wrapping_add(object_hash(uid, resource_version))
        });
    format!("{sum:016x}")
}

/// One object's hash: FNV-1a over `uid`, a separator, `resource_version`, then mixed.
fn object_hash(uid: &str, resource_version: &str) -> u64 {
    // `write` feeds the bytes alone (the `Hash` impls of str would add a terminator of their own).
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(uid.as_bytes());
    hasher.write(&[0]);
    hasher.write(resource_version.as_bytes());
    let fnv = hasher.finish();
    let mut z = fnv;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::object_hash;

    #[test]
    fn the_hash_is_fixed_and_tells_uid_from_version() {
        // Fixed by definition: the same in every build and on every replica.
        assert_eq!(object_hash("", ""), object_hash("", ""));
        // Pinned: processes and tools built apart compare digests.
        assert_eq!(object_hash("uid", "1"), 0x3876_034f_a4e0_3bf2);
        assert_ne!(object_hash("a", "1"), object_hash("a", "2"));
        assert_ne!(object_hash("a1", ""), object_hash("a", "1"));
    }
}
