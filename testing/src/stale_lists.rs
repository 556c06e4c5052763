//! Lists answered from a lagging cache: what an apiserver in an HA control plane whose watch
//! cache lags behind etcd answers a list that does not ask for the latest state. Sieve (OSDI
//! '22) calls a restarted operator that reads such a list "time travel": it acts on objects
//! already deleted, or on old specs.
//!
//! Which lists a cache may answer, as the apiserver decides: a list with a non-empty
//! `resourceVersion` (`0`: "any", kube-runtime's `ListSemantic::Any`; or a version with
//! `resourceVersionMatch=NotOlderThan`, or a version alone). A list without one (kube-runtime's
//! default `ListSemantic::MostRecent`) is a consistent read from etcd and is never stale.

use std::collections::HashMap;

use bytes::Bytes;

use crate::request::ResourceKey;

/// Whether a list with `query` must be answered at the latest state (no `resourceVersion`, or
/// an empty one).
pub(crate) fn is_consistent(query: Option<&str>) -> bool {
    !query.unwrap_or_default().split('&').any(|pair| {
        pair.split_once('=')
            .is_some_and(|(key, value)| key == "resourceVersion" && !value.is_empty())
    })
}

/// The stale lists a proxy serves, by resource and namespace, and what it counted.
#[derive(Debug, Default)]
pub(crate) struct StaleLists {
    /// The list bodies taken when each was armed.
    snapshots: HashMap<(ResourceKey, Option<String>), Bytes>,
    /// Lists answered from a snapshot.
    pub(crate) served: u64,
    /// Lists of an armed resource that asked for the latest state (forwarded).
    pub(crate) consistent: u64,
}

impl StaleLists {
    /// Answers lists of `resource` in `namespace` that a cache may answer with `body`.
    pub(crate) fn arm(&mut self, resource: ResourceKey, namespace: Option<String>, body: Bytes) {
        self.snapshots.insert((resource, namespace), body);
    }

    /// The stale answer to a list of `resource` in `namespace` with `query`, if one is armed
    /// and the list lets a cache answer it; counts the list either way.
    pub(crate) fn answer(
        &mut self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        query: Option<&str>,
    ) -> Option<Bytes> {
        let key = (resource.clone(), namespace.map(str::to_owned));
        let body = self.snapshots.get(&key)?.clone();
        if is_consistent(query) {
            self.consistent += 1;
            None
        } else {
            self.served += 1;
            Some(body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_at_a_resource_version_may_be_stale_and_one_without_may_not() {
        assert!(is_consistent(None));
        assert!(is_consistent(Some("limit=500")));
        assert!(is_consistent(Some("resourceVersion=&limit=500")));
        assert!(!is_consistent(Some("resourceVersion=0")));
        assert!(!is_consistent(Some(
            "limit=500&resourceVersion=123&resourceVersionMatch=NotOlderThan"
        )));
    }

    #[test]
    fn only_armed_resources_are_answered_and_every_list_of_them_is_counted() {
        let configmaps = ResourceKey::new("", "configmaps");
        let mut lists = StaleLists::default();
        assert_eq!(
            lists.answer(&configmaps, Some("a"), Some("resourceVersion=0")),
            None
        );
        lists.arm(
            configmaps.clone(),
            Some("a".into()),
            Bytes::from_static(b"{}"),
        );
        assert_eq!(
            lists.answer(&configmaps, Some("a"), Some("resourceVersion=0")),
            Some(Bytes::from_static(b"{}"))
        );
        assert_eq!(lists.answer(&configmaps, Some("a"), None), None);
        assert_eq!(
            lists.answer(&configmaps, Some("b"), Some("resourceVersion=0")),
            None
        );
        assert_eq!((lists.served, lists.consistent), (1, 1));
    }
}
