//! Drift detection: at a low rate, an informer compares its cache with a fresh, consistent list
//! of the apiserver and re-lists when they disagree for longer than the watch needs to deliver.
//!
//! # Why
//!
//! A watch can stop delivering without closing (a proxy or load balancer that keeps the
//! connection and drops the stream, a server-side bug): every client library has such reports
//! (kube-rs#1844, JOSDK#1727, fabric8#4781, ...). The informer then serves a cache that is
//! silently stale: nothing errors, nothing re-lists.
//!
//! # How
//!
//! Every [`DriftCheck::period`] (10 minutes by default), while the informer is synced and not
//! listing:
//!
//! 1. a **metadata-only, consistent list** (no `resourceVersion` parameter: a quorum read from
//!    etcd, never the watch cache's possibly stale `resourceVersion="0"` answer), paged by 500,
//!    with the informer's namespace and selectors (and, under a [`ListScope`] range, only the
//!    objects in the range). It answers at some `resourceVersion` L.
//! 2. When it returns, the informer notes which cached objects the list lacks. It then gives the
//!    watch [`DriftCheck::grace`] (60 s by default) to deliver whatever happened up to L, noting
//!    the deletes it delivers meanwhile.
//! 3. Then each listed object must be cached at the listed `resourceVersion` or a newer one, or
//!    have been deleted by a delete at least as new; and each object the list lacked, cached then
//!    at a `resourceVersion` not above L, must be gone from the cache. Anything else is drift: it
//!    is counted (`informer_cache_drift_total{kind}`), logged with counts and up to five names
//!    per class, and the informer re-lists (a new list+watch: the cache diff then reports what was
//!    missed as Add, Update and Delete events, as after any re-list).
//!
//! `resourceVersion`s are compared as numbers only per object and against the list's own
//! version, which the apiserver guarantees are comparable (etcd revisions; KEP-5504 made it
//! part of the API). A version that is not a number disables the check for that round.
//!
//! **Why not a list at exactly the cache's own `resourceVersion`?** Such a list shows the server
//! as it was when the cache last heard from the watch; a watch that stopped delivering leaves a
//! cache that agrees with that past perfectly, so the failure this check is for would never be
//! seen. kube-runtime's watcher also does not surface bookmarks, so a quiet kind's cache has no
//! known `resourceVersion` to list at.
//!
//! **Cost.** One metadata list of the kind per period: for 20,000 ConfigMaps about 8 MB of JSON
//! and one paged etcd range read per check (measured figures: `docs/performance/drift.md`).
//! `InformerOptions::drift_check` sets the period or turns it off.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta};
use kube::runtime::watcher;
use tokio::time::Instant;

use super::RawEvents;
use crate::list_scope::{ListRange, ListScope, Lister};
use crate::object::{ObjectKey, SharedObject, share};

/// How often an informer checks its cache against the apiserver, and how long it gives the
/// watch to catch up; see [drift detection](super#drift-detection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DriftCheck {
    /// Time between two checks.
    pub period: Duration,
    /// How long the watch has to deliver what the list saw.
    pub grace: Duration,
}

impl Default for DriftCheck {
    /// Every 10 minutes, with 60 s for the watch to catch up.
    fn default() -> Self {
        Self {
            period: Duration::from_secs(600),
            grace: Duration::from_secs(60),
        }
    }
}

/// What the informer needs to list again and to check: the list+watch it was built from.
pub(crate) struct Relist {
    pub(crate) api: Api<DynamicObject>,
    pub(crate) resource: kube::api::ApiResource,
    pub(crate) config: watcher::Config,
    pub(crate) scope: Arc<dyn ListScope>,
    /// Starts each list+watch, reading objects into the informer's type.
    pub(crate) lister: Lister,
}

impl Relist {
    /// A new list+watch (the informer drops its old one).
    pub(crate) fn watch(&self) -> RawEvents {
        Arc::clone(&self.scope).watch(
            self.api.clone(),
            &self.resource,
            self.config.clone(),
            self.lister.clone(),
        )
    }

    /// The consistent metadata list, paged.
    fn list(&self) -> BoxFuture<'static, Result<Listed, kube::Error>> {
        let api = self.api.clone();
        let mut params = ListParams::default().limit(500);
        if let Some(labels) = &self.config.label_selector {
            params = params.labels(labels);
        }
        if let Some(fields) = &self.config.field_selector {
            params = params.fields(fields);
        }
        let range = self.scope.list_range();
        Box::pin(async move {
            let mut listed = Listed::default();
            loop {
                let page = api.list_metadata(&params).await?;
                if listed.version.is_none() {
                    listed.version = page.metadata.resource_version.as_deref().map(number);
                }
                for object in page.items {
                    if let Some(range) = &range
                        && !in_range(range, &object.metadata)
                    {
                        continue;
                    }
                    let key = ObjectKey {
                        namespace: object.metadata.namespace.clone(),
                        name: object.metadata.name.clone().unwrap_or_default(),
                    };
                    listed
                        .objects
                        .insert(key, number(version(&object.metadata)));
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => return Ok(listed),
                }
            }
        })
    }
}

fn in_range(range: &ListRange, metadata: &ObjectMeta) -> bool {
    let probe = DynamicObject {
        types: None,
        metadata: metadata.clone(),
        data: serde_json::Value::Null,
    };
    range(&share(probe))
}

fn version(metadata: &ObjectMeta) -> &str {
    metadata.resource_version.as_deref().unwrap_or("")
}

/// A `resourceVersion` as a number; `None` when it is not one.
fn number(version: &str) -> Option<u64> {
    version.parse().ok()
}

/// The version of a cached object.
pub(crate) fn cached_version(object: &SharedObject) -> Option<u64> {
    number(version(object.metadata()))
}

/// A consistent list: its `resourceVersion` and each object's.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    version: Option<Option<u64>>,
    objects: HashMap<ObjectKey, Option<u64>>,
}

/// Where a check is.
enum Phase {
    /// Waiting for the next period.
    Idle,
    /// The list is on its way; deletes the watch delivers meanwhile are noted already (the
    /// list may have seen the object before its delete).
    Listing(
        BoxFuture<'static, Result<Listed, kube::Error>>,
        HashMap<ObjectKey, u64>,
    ),
    /// The watch has until `deadline` to deliver what the list saw.
    Waiting(Box<Pending>),
}

/// A listed state the cache must reach by `deadline`.
struct Pending {
    list_version: u64,
    /// The listed objects and their versions.
    listed: HashMap<ObjectKey, u64>,
    /// The cached objects the list lacked when it returned, and their versions then.
    unlisted: Vec<(ObjectKey, u64)>,
    /// Deletes the watch delivered since, by key: the deleted state's version.
    deleted: HashMap<ObjectKey, u64>,
    deadline: Instant,
}

/// What the checker's timer or list produced.
pub(crate) enum Step {
    /// A period went by: start a check if the informer is ready for one.
    Due,
    /// The list returned.
    Listed(Result<Listed, kube::Error>),
    /// The grace period is over: compare.
    Compare,
}

/// Objects the cache got wrong, by class.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Drift {
    /// Listed, not cached (and not deleted since).
    pub(crate) missing: Vec<ObjectKey>,
    /// Cached at an older version than listed, still.
    pub(crate) stale: Vec<ObjectKey>,
    /// Cached, not listed, and still cached at the same version (a missed delete).
    pub(crate) extra: Vec<ObjectKey>,
}

impl Drift {
    pub(crate) fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.stale.is_empty() && self.extra.is_empty()
    }
}

/// One informer's drift checks.
pub(crate) struct DriftChecker {
    check: DriftCheck,
    relist: Arc<Relist>,
    timer: tokio::time::Interval,
    phase: Phase,
}

impl DriftChecker {
    pub(crate) fn new(check: DriftCheck, relist: Arc<Relist>) -> Self {
        let mut timer =
            tokio::time::interval_at(Instant::now() + check.period, check.period.max(MIN_PERIOD));
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            check,
            relist,
            timer,
            phase: Phase::Idle,
        }
    }

    /// Waits for the next step (cancel-safe: the list future and the deadline are kept).
    pub(crate) async fn next(&mut self) -> Step {
        match &mut self.phase {
            Phase::Idle => {
                self.timer.tick().await;
                Step::Due
            }
            Phase::Listing(list, _) => {
                let result = list.await;
                Step::Listed(result)
            }
            Phase::Waiting(pending) => {
                tokio::time::sleep_until(pending.deadline).await;
                Step::Compare
            }
        }
    }

    /// A new list+watch, replacing the informer's (the checker's own state is idle after a
    /// comparison).
    pub(crate) fn relist_watch(&self) -> RawEvents {
        self.relist.watch()
    }

    /// Starts a check.
    pub(crate) fn start(&mut self) {
        self.phase = Phase::Listing(self.relist.list(), HashMap::new());
    }

    /// The list returned with `listed`; `cached` are the cache's objects and versions now.
    /// Returns false when the versions are not numbers (no check this round).
    pub(crate) fn listed(
        &mut self,
        listed: Listed,
        cached: impl Iterator<Item = (ObjectKey, Option<u64>)>,
    ) -> bool {
        let deleted = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Listing(_, deleted) => deleted,
            _ => HashMap::new(),
        };
        let Some(Some(list_version)) = listed.version else {
            return false;
        };
        let mut numbered = HashMap::with_capacity(listed.objects.len());
        for (key, version) in listed.objects {
            let Some(version) = version else {
                return false;
            };
            numbered.insert(key, version);
        }
        let mut unlisted = Vec::new();
        for (key, version) in cached {
            if numbered.contains_key(&key) {
                continue;
            }
            let Some(version) = version else {
                return false;
            };
            unlisted.push((key, version));
        }
        self.phase = Phase::Waiting(Box::new(Pending {
            list_version,
            listed: numbered,
            unlisted,
            deleted,
            deadline: Instant::now() + self.check.grace,
        }));
        true
    }

    /// The watch delivered the delete of `key` at `version`.
    pub(crate) fn deleted(&mut self, key: &ObjectKey, version: Option<u64>) {
        let Some(version) = version else {
            return;
        };
        match &mut self.phase {
            Phase::Listing(_, deleted) => {
                deleted.insert(key.clone(), version);
            }
            Phase::Waiting(pending) => {
                pending.deleted.insert(key.clone(), version);
            }
            Phase::Idle => {}
        }
    }

    /// The informer lists again: whatever a check was waiting for, the list settles it.
    pub(crate) fn cancel(&mut self) {
        self.phase = Phase::Idle;
    }

    /// Compares the pending check with the cache (`version_of` a key: its cached version, `None`
    /// when not cached) and ends it.
    pub(crate) fn compare(&mut self, version_of: impl Fn(&ObjectKey) -> Option<u64>) -> Drift {
        let Phase::Waiting(pending) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return Drift::default();
        };
        compare(&pending, version_of)
    }
}

/// Ticks closer than this would keep the apiserver listing; tests use short periods, never 0.
const MIN_PERIOD: Duration = Duration::from_millis(100);

fn compare(pending: &Pending, version_of: impl Fn(&ObjectKey) -> Option<u64>) -> Drift {
    let mut drift = Drift::default();
    for (key, &listed) in &pending.listed {
        match version_of(key) {
            Some(cached) if cached >= listed => {}
            Some(_) => drift.stale.push(key.clone()),
            None if pending.deleted.get(key).is_some_and(|&d| d >= listed) => {}
            None => drift.missing.push(key.clone()),
        }
    }
    for (key, version) in &pending.unlisted {
        // Created after the list's version: the list could not have it.
        if *version > pending.list_version {
            continue;
        }
        if version_of(key) == Some(*version) {
            drift.extra.push(key.clone());
        }
    }
    for class in [&mut drift.missing, &mut drift.stale, &mut drift.extra] {
        class.sort();
    }
    drift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn pending(
        listed: &[(&str, u64)],
        unlisted: &[(&str, u64)],
        deleted: &[(&str, u64)],
    ) -> Pending {
        Pending {
            list_version: 100,
            listed: listed.iter().map(|(n, v)| (key(n), *v)).collect(),
            unlisted: unlisted.iter().map(|(n, v)| (key(n), *v)).collect(),
            deleted: deleted.iter().map(|(n, v)| (key(n), *v)).collect(),
            deadline: Instant::now(),
        }
    }

    fn cache(entries: &[(&str, u64)]) -> impl Fn(&ObjectKey) -> Option<u64> {
        let map: HashMap<ObjectKey, u64> = entries.iter().map(|(n, v)| (key(n), *v)).collect();
        move |k| map.get(k).copied()
    }

    #[test]
    fn a_cache_that_caught_up_or_moved_past_the_list_has_no_drift() {
        let check = pending(&[("a", 10), ("b", 20)], &[("c", 30)], &[("b", 21)]);
        // a newer than listed, b deleted after the list, c deleted (gone from the cache).
        assert!(compare(&check, cache(&[("a", 15)])).is_empty());
        // c created after the list (version above the list's) and still there: not drift.
        let created = pending(&[], &[("c", 150)], &[]);
        assert!(compare(&created, cache(&[("c", 150)])).is_empty());
    }

    #[test]
    fn missed_creates_updates_and_deletes_are_drift() {
        let check = pending(&[("new", 50), ("changed", 60)], &[("gone", 40)], &[]);
        let drift = compare(&check, cache(&[("changed", 55), ("gone", 40)]));
        assert_eq!(
            drift,
            Drift {
                missing: vec![key("new")],
                stale: vec![key("changed")],
                extra: vec![key("gone")],
            }
        );
        // A delete older than the listed state does not explain its absence.
        let old_delete = pending(&[("x", 70)], &[], &[("x", 65)]);
        assert_eq!(compare(&old_delete, cache(&[])).missing, vec![key("x")]);
    }

    #[tokio::test]
    async fn versions_that_are_not_numbers_skip_the_round() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client (no request is sent)");
        let resource = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let relist = Arc::new(Relist {
            api: Api::all_with(client, &resource),
            resource,
            config: watcher::Config::default(),
            scope: Arc::new(crate::list_scope::PlainWatch),
            lister: Lister::dynamic(),
        });
        let mut checker = DriftChecker::new(DriftCheck::default(), relist);
        let good = Listed {
            version: Some(Some(5)),
            objects: [(key("a"), Some(3))].into(),
        };
        assert!(checker.listed(good, [(key("b"), Some(4))].into_iter()));
        assert!(matches!(checker.phase, Phase::Waiting(_)));
        checker.cancel();
        let opaque_list = Listed {
            version: Some(None),
            objects: HashMap::new(),
        };
        assert!(!checker.listed(opaque_list, std::iter::empty()));
        let opaque_object = Listed {
            version: Some(Some(5)),
            objects: [(key("a"), None)].into(),
        };
        assert!(!checker.listed(opaque_object, std::iter::empty()));
        assert!(matches!(checker.phase, Phase::Idle));

        // A delete the watch delivers while the list is on its way explains the absence of an
        // object the list still saw (found at 20,000 objects under churn: reported as missing).
        checker.phase = Phase::Listing(Box::pin(futures::future::pending()), HashMap::new());
        checker.deleted(&key("gone"), Some(60));
        let listed = Listed {
            version: Some(Some(50)),
            objects: [(key("gone"), Some(40))].into(),
        };
        assert!(checker.listed(listed, std::iter::empty()));
        assert!(checker.compare(|_| None).is_empty());
    }
}
