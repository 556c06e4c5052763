//! Own writes: the resourceVersions this controller's writes produced, so that their watch events
//! (the "echo" of a write) do not start another reconcile.
//!
//! A reconciler that writes its object's status, or an opinionated wrapper that puts its
//! finalizer on, changes the object; the watch then reports that change like any other. Running
//! the reconciler again for it costs a call (and, for a reconciler that reads before it writes,
//! requests) and tells it nothing it did not know: it made the change. Every write the SDK makes
//! to an object of the kind ([`StatusWriter`](crate::apply::StatusWriter), the opinionated
//! wrappers' finalizer patches) records the `resourceVersion` the apiserver returned, together
//! with [what it wrote](WrittenPart); a handler that writes with its own client records its write
//! with [`DynContext::note_own_write`](crate::handler::DynContext::note_own_write) (or
//! [`Context::note_own_write`](crate::context::Context::note_own_write)).
//!
//! # The rule
//!
//! An update event is an echo, and reaches no reconciler, when both hold:
//!
//! - its new object's `resourceVersion` is one this controller recorded for that object (UID);
//! - the new object differs from the old one only in what that write changes: `status` for a
//!   status write, `metadata.finalizers` for a finalizer patch (always apart from
//!   `metadata.resourceVersion` and `metadata.managedFields`).
//!
//! The first condition alone would be enough for events straight from a watch, which reports
//! every resourceVersion of an object one by one: a change by anyone else has a resourceVersion
//! of its own and reconciles as usual, also when it is a status write. The second condition
//! covers the informer's re-list after a broken watch, which can fold someone else's change and
//! our write into one update whose new resourceVersion is ours: such an update is an echo only
//! when everything it shows changed is what we wrote. (Two writes folded together, someone's
//! status and ours, still look like ours: that needs a re-list between them and is the one case
//! where a foreign status change is not delivered as its own reconcile; its next change is.)
//!
//! Waiting reconcile requests merge (see the [controller docs](crate::controller)), and the request
//! is skipped only when every event merged into it is an echo. An update is checked as it is
//! queued when its write's record is already there (the usual case: the write's response comes
//! back before its watch event has travelled through the informer), so a queued echo keeps no
//! object versions alive while it waits behind other objects' work; the others are checked when a
//! worker takes the request. That is always after the write's response was recorded: the call
//! that made the write finished before the lane's next item is taken, even when the watch event
//! arrived before the response did. Add, Delete and Resync requests are never echoes, and
//! watchers get every event as before.
//!
//! # Children a handler created
//!
//! An `owns` or `watches` trigger reconciles the owner when a related object changes. The Add
//! event of a child that a handler of the owner's kind created with
//! [`Context::apply`](crate::Context::apply) is the echo of that handler's own write: the
//! applier records the child's UID and the resourceVersion the apiserver returned, and the
//! trigger queues nothing for an Add of exactly that version (checked as the event arrives and,
//! when the apply's response came back after the watch event, again at dispatch, like an update).
//! A later change of the child, by anyone, is a version of its own and triggers as usual; so does
//! every update (a re-list may fold someone else's change into an update whose version is ours,
//! and an applied object's content cannot be compared as cheaply as a status). At most
//! [`MAX_CHILD_CREATIONS`] creations are remembered per kind, oldest dropped first (their echo then
//! triggers, the safe side).
//!
//! Kinds without `metadata.generation` (ConfigMap, Secret, ...) follow the same rule: their
//! content is compared, not a generation. The check serializes the two objects, which it only
//! does for events whose resourceVersion is recorded (the echoes themselves).
//!
//! To have every event reconciled, own writes included, set
//! [`ControllerConfig::reconcile_own_writes`](crate::ControllerConfig::reconcile_own_writes).
//! Skipped echoes are counted in `reconciler_own_write_events_skipped_total{kind}`.
//!
//! Memory: at most [`MAX_PER_OBJECT`] resourceVersions per object, dropped when their echo is
//! seen or the object's Delete event is dispatched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::object::{KubeObject, SharedObject};
use crate::store::SharedCache;

/// The most resourceVersions remembered per object; older ones are dropped first (their echo
/// then reconciles, which is the safe side).
pub const MAX_PER_OBJECT: usize = 8;

/// The most creations of related objects (children) remembered per kind; the oldest are dropped
/// first (their echo then triggers a reconcile, the safe side). A record whose echo arrived
/// before the write's response is never consumed: the bound keeps such records from piling up.
pub const MAX_CHILD_CREATIONS: usize = 4096;

/// What a recorded write changed: the part of the object its echo may differ in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrittenPart {
    /// The `status` (a write through the status subresource).
    Status,
    /// `metadata.finalizers`.
    Finalizers,
}

/// The writes of one controller's kind (shared by its workers and writers; cheap to clone).
#[derive(Clone, Default)]
pub(crate) struct OwnWrites {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// By object UID: the resourceVersions our writes returned, oldest first.
    writes: Mutex<HashMap<String, Vec<(String, WrittenPart)>>>,
    /// How many objects `writes` holds, stored under its lock: lets the check of an update as
    /// it is queued skip the lock while nothing is recorded (a stale read only defers the check
    /// to dispatch).
    recorded: AtomicUsize,
    /// `(group, kind)` of the objects that belong here; writes of other kinds are not recorded.
    kind: OnceLock<(String, String)>,
    /// The kind's informer cache, for [`OwnWrites::seen_by_cache`].
    cache: OnceLock<Arc<SharedCache>>,
    /// Set while the kind's intake waits for room in a full backlog: the informer feeding the
    /// cache waits with it, so [`OwnWrites::seen_by_cache`] does not wait.
    intake_paused: AtomicBool,
    /// Objects of other kinds that a handler of this kind created with `Context::apply`, as
    /// `(uid, resourceVersion)`: the `owns`/`watches` trigger skips their Add events.
    created: Mutex<ChildCreations>,
    /// How many records `created` holds (read without its lock while it is empty).
    created_count: AtomicUsize,
}

/// One event a waiting reconcile request may be the echo of, checked at dispatch.
pub(crate) enum EchoCheck {
    /// An update of the kind's object, from `.0` to `.1`.
    Update(SharedObject, SharedObject),
    /// The Add of a related object (a child) that triggered the request.
    Creation(SharedObject),
}

/// Creations of related objects, oldest first (see [`OwnWrites::record_creation`]).
#[derive(Default)]
struct ChildCreations {
    set: std::collections::HashSet<(String, String)>,
    order: std::collections::VecDeque<(String, String)>,
}

impl std::fmt::Debug for OwnWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnWrites")
            .field("objects", &self.lock().len())
            .finish()
    }
}

impl OwnWrites {
    /// Records only writes to objects of `group` / `kind` from now on (a status written to
    /// another kind's object through the same applier would never see its echo here).
    pub(crate) fn set_kind(&self, group: &str, kind: &str) {
        let _ = self.inner.kind.set((group.to_string(), kind.to_string()));
    }

    /// The informer cache of the kind's objects (set once, when the kind is attached).
    pub(crate) fn set_cache(&self, cache: Arc<SharedCache>) {
        let _ = self.inner.cache.set(cache);
    }

    /// Marks whether the kind's intake is waiting for room (see [`OwnWrites::seen_by_cache`]).
    pub(crate) fn set_intake_paused(&self, paused: bool) {
        self.inner.intake_paused.store(paused, Ordering::Relaxed);
    }

    /// Waits, at most `limit`, until the kind's informer cache has seen the newest write
    /// recorded for object `uid`; true when it has (or nothing is recorded, or there is no
    /// cache). Returns false at once while the kind's intake waits for room: the informer that
    /// feeds the cache waits with it, and a worker waiting here would free no room (with every
    /// worker waiting, each would sit out the whole limit). The opinionated reconciler calls it before the finalizer patch that follows a
    /// reconciler's write: the apiserver applies a patch to its watch cache's copy of the object
    /// first, and a copy older than the object in etcd costs a failed compare-and-swap and a
    /// second application of the patch. The watch that feeds our cache is served from that
    /// watch cache, so once our cache has seen the version, the apiserver's has too. A record
    /// already consumed by its echo needs no wait.
    pub(crate) async fn seen_by_cache(&self, uid: &str, limit: Duration) -> bool {
        let Some(cache) = self.inner.cache.get() else {
            return true;
        };
        if self.inner.intake_paused.load(Ordering::Relaxed) {
            return false;
        }
        let newest = self.lock().get(uid).and_then(|list| {
            list.iter()
                .filter_map(|(rv, _)| rv.parse::<u64>().ok())
                .max()
        });
        let Some(wanted) = newest else {
            return true;
        };
        cache.wait_for_version(wanted, limit).await.is_ok()
    }

    /// Whether writes to objects of `group` / `kind` are recorded here.
    pub(crate) fn accepts(&self, group: &str, kind: &str) -> bool {
        self.inner
            .kind
            .get()
            .is_none_or(|(g, k)| g == group && k == kind)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(String, WrittenPart)>>> {
        self.inner
            .writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that a write of `part` produced the object whose metadata is `written` (as the
    /// apiserver returned it). Objects without a UID or resourceVersion are not recorded.
    pub(crate) fn record(&self, written: &ObjectMeta, part: WrittenPart) {
        let (Some(uid), Some(rv)) = (&written.uid, &written.resource_version) else {
            return;
        };
        let mut writes = self.lock();
        let list = writes.entry(uid.clone()).or_default();
        if list.len() >= MAX_PER_OBJECT {
            list.remove(0);
        }
        list.push((rv.clone(), part));
        self.inner.recorded.store(writes.len(), Ordering::Relaxed);
    }

    /// The part written at `rv` of object `uid`, if this controller's write produced it; the
    /// record is consumed.
    fn take(&self, uid: &str, rv: &str) -> Option<WrittenPart> {
        let mut writes = self.lock();
        let list = writes.get_mut(uid)?;
        let position = list.iter().position(|(written, _)| written == rv)?;
        let (_, part) = list.remove(position);
        if list.is_empty() {
            writes.remove(uid);
            self.inner.recorded.store(writes.len(), Ordering::Relaxed);
        }
        Some(part)
    }

    /// Forgets every write to object `uid` (it is gone).
    pub(crate) fn forget(&self, uid: &str) {
        let mut writes = self.lock();
        writes.remove(uid);
        self.inner.recorded.store(writes.len(), Ordering::Relaxed);
    }

    /// Records that a handler of this kind applied an object of another kind and the apiserver
    /// answered with `written`. An Add event of exactly that object and version is the echo of
    /// our write (the object as we left it: a later change by anyone has a version of its own),
    /// and the trigger of an `owns`/`watches` relation skips it
    /// ([`take_creation`](Self::take_creation)). Updates are not skipped: a re-list can fold
    /// someone else's change into an update whose version is ours.
    pub(crate) fn record_creation(&self, written: &ObjectMeta) {
        let (Some(uid), Some(rv)) = (&written.uid, &written.resource_version) else {
            return;
        };
        let mut created = self
            .inner
            .created
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (uid.clone(), rv.clone());
        if created.set.insert(key.clone()) {
            created.order.push_back(key);
        }
        // `order` may still hold consumed keys (removed from `set` only): dropping them here
        // keeps a take O(1).
        while created.order.len() > MAX_CHILD_CREATIONS {
            if let Some(oldest) = created.order.pop_front() {
                created.set.remove(&oldest);
            }
        }
        self.inner
            .created_count
            .store(created.set.len(), Ordering::Relaxed);
    }

    /// Whether the Add event of a related object at `meta`'s version is the echo of a write
    /// recorded by [`record_creation`](Self::record_creation); the record is consumed.
    pub(crate) fn take_creation(&self, meta: &ObjectMeta) -> bool {
        if self.inner.created_count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let (Some(uid), Some(rv)) = (&meta.uid, &meta.resource_version) else {
            return false;
        };
        let mut created = self
            .inner
            .created
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (uid.clone(), rv.clone());
        if !created.set.remove(&key) {
            return false;
        }
        if created.set.is_empty() {
            created.order.clear();
        }
        self.inner
            .created_count
            .store(created.set.len(), Ordering::Relaxed);
        true
    }

    /// How many objects have writes recorded (for tests).
    #[cfg(test)]
    pub(crate) fn objects(&self) -> usize {
        self.lock().len()
    }

    /// Whether every event in `checks` is the echo of a recorded write (see the
    /// [module docs](self)): an update of the kind's object, or the Add of a child a handler of
    /// the kind created; an empty list is not. Records found are consumed either way.
    pub(crate) fn all_echoes(&self, checks: &[EchoCheck]) -> bool {
        // Nothing recorded: no lock. The writes this check must see were recorded by an earlier
        // call of the same lane, which finished before this item was taken (the kind's lock
        // orders the two), so the counts are not stale for them.
        if checks.is_empty()
            || (self.inner.recorded.load(Ordering::Relaxed) == 0
                && self.inner.created_count.load(Ordering::Relaxed) == 0)
        {
            return false;
        }
        let mut all = true;
        for check in checks {
            all &= match check {
                EchoCheck::Update(old, new) => {
                    self.check(old.as_ref(), new.as_ref()).unwrap_or(false)
                }
                EchoCheck::Creation(child) => self.take_creation(child.metadata()),
            };
        }
        all
    }

    /// The check of one update from `old` to `new`, made as it is queued: `Some(echo)` when
    /// its new resourceVersion was recorded (the record is consumed), `None` when no write of
    /// it is recorded yet (it may still come: check again at dispatch).
    pub(crate) fn check_now(&self, old: &dyn KubeObject, new: &dyn KubeObject) -> Option<bool> {
        if self.inner.recorded.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.check(old, new)
    }

    /// Whether the update is an echo (see the [module docs](self)); `None` when no write of its
    /// new resourceVersion is recorded.
    fn check(&self, old: &dyn KubeObject, new: &dyn KubeObject) -> Option<bool> {
        let meta = new.metadata();
        let (Some(uid), Some(rv)) = (meta.uid.as_deref(), meta.resource_version.as_deref()) else {
            return Some(false);
        };
        if old.metadata().uid.as_deref() != Some(uid) {
            return Some(false);
        }
        let part = self.take(uid, rv)?;
        Some(differs_only_in(old, new, part))
    }
}

/// Whether `new` equals `old` apart from `part` and the bookkeeping every write changes.
fn differs_only_in(old: &dyn KubeObject, new: &dyn KubeObject, part: WrittenPart) -> bool {
    match (comparable(old, part), comparable(new, part)) {
        (Ok(old), Ok(new)) => old == new,
        (Err(error), _) | (_, Err(error)) => {
            // Never expected (the objects were deserialized from JSON); not an echo, so the
            // change is reconciled rather than lost.
            tracing::warn!(%error, "object not serializable for comparison; reconciled");
            false
        }
    }
}

/// The object as JSON without `part` and the bookkeeping fields.
fn comparable(object: &dyn KubeObject, part: WrittenPart) -> serde_json::Result<serde_json::Value> {
    let mut json = object.to_json()?;
    if let Some(map) = json.as_object_mut() {
        if part == WrittenPart::Status {
            map.remove("status");
        }
        if let Some(meta) = map
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
            if part == WrittenPart::Finalizers {
                meta.remove("finalizers");
            }
        }
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::share;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(rv: &str, finalizers: &[&str], value: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.uid = Some("u1".into());
        cm.metadata.resource_version = Some(rv.into());
        cm.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_string()).collect());
        cm.data = Some([("k".to_string(), value.to_string())].into());
        cm
    }

    fn pair(old: ConfigMap, new: ConfigMap) -> EchoCheck {
        EchoCheck::Update(share(old), share(new))
    }

    fn objects(old: ConfigMap, new: ConfigMap) -> (SharedObject, SharedObject) {
        (share(old), share(new))
    }

    #[test]
    fn an_update_to_a_recorded_version_that_only_changes_the_written_part_is_an_echo() {
        let own = OwnWrites::default();
        let written = cm("2", &["ours"], "a");
        own.record(&written.metadata, WrittenPart::Finalizers);
        assert!(own.all_echoes(&[pair(cm("1", &[], "a"), written.clone())]));
        assert_eq!(own.objects(), 0, "the record is consumed");
        // The same event again is not an echo any more.
        assert!(!own.all_echoes(&[pair(cm("1", &[], "a"), written)]));
    }

    #[test]
    fn a_foreign_version_or_a_folded_foreign_change_is_not_an_echo() {
        let own = OwnWrites::default();
        own.record(&cm("2", &["ours"], "a").metadata, WrittenPart::Finalizers);
        // Someone else's write: a resourceVersion we did not record.
        assert!(!own.all_echoes(&[pair(cm("1", &[], "a"), cm("3", &["ours"], "a"))]));
        // A re-list folded a data change into our version: the content tells.
        own.record(&cm("4", &["ours"], "b").metadata, WrittenPart::Finalizers);
        assert!(!own.all_echoes(&[pair(cm("1", &[], "a"), cm("4", &["ours"], "b"))]));
        // A status write's echo may not change finalizers.
        own.record(&cm("5", &["x"], "a").metadata, WrittenPart::Status);
        assert!(!own.all_echoes(&[pair(cm("1", &[], "a"), cm("5", &["x"], "a"))]));
    }

    #[test]
    fn a_merged_request_is_skipped_only_when_every_event_in_it_is_an_echo() {
        let own = OwnWrites::default();
        own.record(&cm("2", &["ours"], "a").metadata, WrittenPart::Finalizers);
        let echo = pair(cm("1", &[], "a"), cm("2", &["ours"], "a"));
        let foreign = pair(cm("2", &["ours"], "a"), cm("3", &["ours"], "b"));
        assert!(!own.all_echoes(&[echo, foreign]));
        assert!(!own.all_echoes(&[]));
    }

    #[test]
    fn the_check_at_queueing_decides_only_what_is_recorded_and_consumes_it() {
        let own = OwnWrites::default();
        let (old, new) = objects(cm("1", &[], "a"), cm("2", &["ours"], "a"));
        assert_eq!(
            own.check_now(old.as_ref(), new.as_ref()),
            None,
            "nothing recorded"
        );
        own.record(&cm("9", &[], "a").metadata, WrittenPart::Finalizers);
        assert_eq!(
            own.check_now(old.as_ref(), new.as_ref()),
            None,
            "another version recorded: the write may still come"
        );
        own.record(&cm("2", &["ours"], "a").metadata, WrittenPart::Finalizers);
        assert_eq!(own.check_now(old.as_ref(), new.as_ref()), Some(true));
        assert_eq!(
            own.check_now(old.as_ref(), new.as_ref()),
            None,
            "consumed: the dispatch check finds nothing either"
        );
        own.record(&cm("3", &["ours"], "b").metadata, WrittenPart::Finalizers);
        let (old, new) = objects(cm("2", &["ours"], "a"), cm("3", &["ours"], "b"));
        assert_eq!(
            own.check_now(old.as_ref(), new.as_ref()),
            Some(false),
            "recorded, but the data changed too"
        );
        own.forget("u1");
        assert_eq!(own.objects(), 0);
        assert_eq!(own.inner.recorded.load(Ordering::Relaxed), 0);
    }

    // Virtual time: a wait that should not happen shows as time passed, with no wall-clock
    // bound in the test.
    #[tokio::test(start_paused = true)]
    async fn the_cache_wait_ends_when_the_cache_sees_the_newest_write_and_never_while_paused() {
        use crate::store::{InformerEvent, SyncedFlag};
        let own = OwnWrites::default();
        let short = Duration::from_millis(20);
        assert!(own.seen_by_cache("u1", short).await, "no cache: no wait");
        let cache = Arc::new(SharedCache::new(SyncedFlag::new(false)));
        own.set_cache(Arc::clone(&cache));
        assert!(own.seen_by_cache("u1", short).await, "nothing recorded");
        own.record(&cm("4", &[], "a").metadata, WrittenPart::Status);
        own.record(&cm("7", &[], "a").metadata, WrittenPart::Status);
        cache.apply(&InformerEvent::Add(share(cm("4", &[], "a"))));
        assert!(!own.seen_by_cache("u1", short).await, "7 not seen yet");
        let waiting = {
            let own = own.clone();
            tokio::spawn(async move { own.seen_by_cache("u1", Duration::from_secs(30)).await })
        };
        cache.apply(&InformerEvent::Update {
            old: share(cm("4", &[], "a")),
            new: share(cm("7", &[], "a")),
        });
        assert!(waiting.await.expect("the wait"), "woken by the cache");
        own.record(&cm("9", &[], "a").metadata, WrittenPart::Status);
        own.set_intake_paused(true);
        let started = tokio::time::Instant::now();
        assert!(!own.seen_by_cache("u1", Duration::from_secs(30)).await);
        assert_eq!(started.elapsed(), Duration::ZERO, "paused: no wait");
    }

    #[test]
    fn writes_of_other_kinds_are_not_accepted_and_old_records_are_bounded() {
        let own = OwnWrites::default();
        own.set_kind("example.dev", "Widget");
        assert!(own.accepts("example.dev", "Widget"));
        assert!(!own.accepts("", "ConfigMap"));
        for rv in 0..(MAX_PER_OBJECT + 3) {
            own.record(&cm(&rv.to_string(), &[], "a").metadata, WrittenPart::Status);
        }
        assert_eq!(own.lock().get("u1").map(Vec::len), Some(MAX_PER_OBJECT));
        own.forget("u1");
        assert_eq!(own.objects(), 0);
    }
}
