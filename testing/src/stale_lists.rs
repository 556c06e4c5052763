//! Lists answered from a lagging cache: what an apiserver in an HA control plane whose watch
//! cache lags behind etcd answers a list that does not ask for the latest state. Sieve (OSDI
//! '22) calls a restarted operator that reads such a list "time travel": it acts on objects
//! already deleted, or on old specs.
//!
//! Which lists a cache may answer, as the apiserver decides: a list with a non-empty
//! `resourceVersion` (`0`: "any", kube-runtime's `ListSemantic::Any`; or a version with
//! `resourceVersionMatch=NotOlderThan`, or a version alone). A list without one (kube-runtime's
//! default `ListSemantic::MostRecent`) is a consistent read from etcd and is never stale.
//!
//! The stale answer is the list as it was when armed, so it stands only for lists it can be
//! the answer to: not one at an exact version (`resourceVersionMatch=Exact`), not one at a
//! version newer than the snapshot's (the apiserver never answers older than asked), not one
//! with a selector, not one in another form (`Accept: ...;as=Table`, metadata only). Those go
//! to the apiserver, as if the cache had caught up.

use std::collections::HashMap;

use bytes::Bytes;

use crate::request::ResourceKey;

/// What a list's query lets a lagging cache answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListRead {
    /// No `resourceVersion` (or an empty one): the latest state, read from etcd.
    Consistent,
    /// A state not older than this version (`0`: any state).
    NotOlderThan(u64),
    /// A list the stale answer cannot stand for: at an exact version, with a selector, or at a
    /// version that is not a number.
    Other,
}

impl ListRead {
    /// What a list with `query` asks for.
    pub(crate) fn of(query: Option<&str>) -> Self {
        let mut version = None;
        let mut exact = false;
        let mut selected = false;
        for pair in query.unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if value.is_empty() {
                continue;
            }
            match key {
                "resourceVersion" => version = Some(value),
                "resourceVersionMatch" => exact = value != "NotOlderThan",
                "labelSelector" | "fieldSelector" => selected = true,
                _ => {}
            }
        }
        match version {
            None => Self::Consistent,
            Some(_) if exact || selected => Self::Other,
            Some(version) => version.parse().map_or(Self::Other, Self::NotOlderThan),
        }
    }
}

/// Whether an `Accept` header lets a plain list answer (not a Table, not metadata only).
pub(crate) fn accepts_plain_list(accept: Option<&str>) -> bool {
    !accept.is_some_and(|accept| accept.contains(";as="))
}

/// The list of one resource as it was when armed.
#[derive(Debug, Clone)]
struct Snapshot {
    body: Bytes,
    /// The list's `metadata.resourceVersion`, when it is a number.
    version: Option<u64>,
}

/// The stale lists a proxy serves, by resource and namespace, and what it counted.
#[derive(Debug, Default)]
pub(crate) struct StaleLists {
    /// The list bodies taken when each was armed.
    snapshots: HashMap<(ResourceKey, Option<String>), Snapshot>,
    /// Lists answered from a snapshot.
    pub(crate) served: u64,
    /// Lists of an armed resource that asked for the latest state (forwarded).
    pub(crate) consistent: u64,
}

impl StaleLists {
    /// Answers lists of `resource` in `namespace` that a cache may answer with `body`, a list
    /// as the apiserver answered it.
    pub(crate) fn arm(&mut self, resource: ResourceKey, namespace: Option<String>, body: Bytes) {
        let version = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|list| {
                list.pointer("/metadata/resourceVersion")?
                    .as_str()?
                    .parse()
                    .ok()
            });
        self.snapshots
            .insert((resource, namespace), Snapshot { body, version });
    }

    /// The stale answer to a list of `resource` in `namespace` with `query`, if one is armed
    /// and the list lets a cache answer it with the snapshot; counts consistent lists and the
    /// ones answered stale.
    pub(crate) fn answer(
        &mut self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        query: Option<&str>,
        accept: Option<&str>,
    ) -> Option<Bytes> {
        let key = (resource.clone(), namespace.map(str::to_owned));
        let snapshot = self.snapshots.get(&key)?;
        match ListRead::of(query) {
            ListRead::Consistent => {
                self.consistent += 1;
                None
            }
            ListRead::NotOlderThan(asked)
                if accepts_plain_list(accept)
                    && (asked == 0 || snapshot.version.is_some_and(|at| asked <= at)) =>
            {
                let body = snapshot.body.clone();
                self.served += 1;
                Some(body)
            }
            read => {
                tracing::debug!(
                    %resource, ?namespace, ?query, ?read,
                    "a list the stale snapshot cannot answer goes to the apiserver"
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_at_a_resource_version_may_be_stale_and_one_without_may_not() {
        assert_eq!(ListRead::of(None), ListRead::Consistent);
        assert_eq!(ListRead::of(Some("limit=500")), ListRead::Consistent);
        assert_eq!(
            ListRead::of(Some("resourceVersion=&limit=500")),
            ListRead::Consistent
        );
        assert_eq!(
            ListRead::of(Some("resourceVersion=0")),
            ListRead::NotOlderThan(0)
        );
        assert_eq!(
            ListRead::of(Some(
                "limit=500&resourceVersion=123&resourceVersionMatch=NotOlderThan"
            )),
            ListRead::NotOlderThan(123)
        );
        assert_eq!(
            ListRead::of(Some("resourceVersion=123")),
            ListRead::NotOlderThan(123)
        );
        assert_eq!(
            ListRead::of(Some("resourceVersion=123&resourceVersionMatch=Exact")),
            ListRead::Other
        );
        assert_eq!(
            ListRead::of(Some("labelSelector=app%3Dweb&resourceVersion=0")),
            ListRead::Other
        );
        assert_eq!(
            ListRead::of(Some("labelSelector=&resourceVersion=0")),
            ListRead::NotOlderThan(0)
        );
    }

    #[test]
    fn only_armed_resources_are_answered_and_every_list_of_them_is_counted() {
        let configmaps = ResourceKey::new("", "configmaps");
        let mut lists = StaleLists::default();
        assert_eq!(
            lists.answer(&configmaps, Some("a"), Some("resourceVersion=0"), None),
            None
        );
        lists.arm(
            configmaps.clone(),
            Some("a".into()),
            Bytes::from_static(b"{}"),
        );
        assert_eq!(
            lists.answer(&configmaps, Some("a"), Some("resourceVersion=0"), None),
            Some(Bytes::from_static(b"{}"))
        );
        assert_eq!(lists.answer(&configmaps, Some("a"), None, None), None);
        assert_eq!(
            lists.answer(&configmaps, Some("b"), Some("resourceVersion=0"), None),
            None
        );
        assert_eq!((lists.served, lists.consistent), (1, 1));
    }

    #[test]
    fn the_snapshot_never_answers_a_list_it_cannot_be_the_answer_to() {
        let configmaps = ResourceKey::new("", "configmaps");
        let body = Bytes::from_static(
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"100"},"items":[]}"#,
        );
        let mut lists = StaleLists::default();
        lists.arm(configmaps.clone(), Some("a".into()), body.clone());
        let mut answer = |query: &str, accept: Option<&str>| {
            lists.answer(&configmaps, Some("a"), Some(query), accept)
        };
        // Not older than 100, or than an older version: the snapshot (at 100) will do.
        assert_eq!(answer("resourceVersion=100", None), Some(body.clone()));
        assert_eq!(
            answer(
                "resourceVersion=50&resourceVersionMatch=NotOlderThan",
                Some("application/json")
            ),
            Some(body.clone())
        );
        // Newer than the snapshot: the apiserver never answers older than asked.
        assert_eq!(answer("resourceVersion=101", None), None);
        // An exact version, a selector, a Table or metadata only: not what the snapshot is.
        assert_eq!(
            answer("resourceVersion=100&resourceVersionMatch=Exact", None),
            None
        );
        assert_eq!(answer("resourceVersion=0&fieldSelector=a%3Db", None), None);
        assert_eq!(
            answer(
                "resourceVersion=0",
                Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
            ),
            None
        );
        assert_eq!((lists.served, lists.consistent), (2, 0));
    }
}
