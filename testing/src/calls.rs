//! The handler calls of one run, as each operator process reported them on `/debug/kubeapp`
//! (`calls`, kept when [`KEEP_CALLS`] are asked for), and the oracle's two checks on them:
//!
//! - **No going back.** Within one process, no handler call saw an object (by uid) at an older
//!   `resourceVersion` than an earlier call of that process did. A restarted process starts
//!   afresh: only a process's own history counts. Retries are not judged: a retry replays the
//!   failed call's object by design (kubeapp's contract, as the Go SDK's), also when a newer
//!   event for the object was handled meanwhile (a watcher's pending `add` is kept when an
//!   update arrives; the opinionated wrapper folds the update into it).
//! - **Every deletion seen.** Every object a handler saw that is gone at the end had a call for
//!   its deletion, in some process: a reconciler's `delete`, a watcher's delete, or any call
//!   that saw it marked for deletion (an opinionated handler's cleanup runs in the update that
//!   brings the `deletionTimestamp`).
//!
//! `resourceVersion`s are compared as numbers, as etcd-backed apiservers assign them; the
//! Kubernetes API calls them opaque, so a version that is not a number is not compared.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kubeapp_sdk::diagnostics::HandlerCall;

/// How many calls the harness asks an operator process to keep (its report must fit the
/// 16 MiB a report may take; the harness reads it after every phase).
pub(crate) const KEEP_CALLS: usize = 8192;

/// The calls of one run, by process (from 1) and number.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallHistory {
    processes: BTreeMap<usize, BTreeMap<u64, HandlerCall>>,
}

impl CallHistory {
    /// Adds what process `process` reported (calls already added are kept once).
    pub(crate) fn add(&mut self, process: usize, calls: Vec<HandlerCall>) {
        let known = self.processes.entry(process).or_default();
        for call in calls {
            known.insert(call.seq, call);
        }
    }

    /// Whether any process reported a call.
    pub(crate) fn recorded(&self) -> bool {
        self.processes.values().any(|calls| !calls.is_empty())
    }

    /// Calls that saw an object older than an earlier call of the same process did, one line
    /// each.
    pub(crate) fn went_back(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (process, calls) in &self.processes {
            let mut newest: BTreeMap<&str, (u64, &HandlerCall)> = BTreeMap::new();
            for call in calls.values().filter(|call| call.attempt == 0) {
                let (Some(uid), Some(version)) = (
                    call.uid.as_deref(),
                    call.resource_version.as_deref().and_then(number),
                ) else {
                    continue;
                };
                match newest.get(uid) {
                    Some((seen, earlier)) if version < *seen => found.push(format!(
                        "process {process}: call #{} ({} {} of {}) saw resourceVersion {version} \
                         after call #{} saw {seen}",
                        call.seq,
                        call.handler,
                        call.action,
                        object(call),
                        earlier.seq
                    )),
                    Some((seen, _)) if version == *seen => {}
                    _ => {
                        newest.insert(uid, (version, call));
                    }
                }
            }
        }
        found
    }

    /// Objects a handler saw (of the kinds in `present`, by plural) that are gone at the end and
    /// whose deletion no handler call saw, one line each. `present` holds the uids each kind
    /// has at the end.
    pub(crate) fn deletions_unseen(
        &self,
        present: &BTreeMap<String, BTreeSet<String>>,
    ) -> Vec<String> {
        let mut seen: BTreeMap<&str, &HandlerCall> = BTreeMap::new();
        let mut deleted: BTreeSet<&str> = BTreeSet::new();
        for call in self.processes.values().flat_map(BTreeMap::values) {
            let Some(uid) = call.uid.as_deref() else {
                continue;
            };
            if !present.contains_key(&call.kind) {
                continue;
            }
            seen.insert(uid, call);
            if call.action == "delete" || call.deleting {
                deleted.insert(uid);
            }
        }
        seen.into_iter()
            .filter(|(uid, call)| {
                !deleted.contains(uid)
                    && !present
                        .get(&call.kind)
                        .is_some_and(|uids| uids.contains(*uid))
            })
            .map(|(_, call)| {
                format!(
                    "{} was deleted, and no handler call saw its deletion (the last call: \
                     #{} {} {} in process {})",
                    object(call),
                    call.seq,
                    call.handler,
                    call.action,
                    self.process_of(call)
                )
            })
            .collect()
    }

    /// The last `count` calls of the run, one line each (process, number, handler, action,
    /// object, resourceVersion).
    pub(crate) fn last(&self, count: usize) -> Vec<String> {
        let all: Vec<(usize, &HandlerCall)> = self
            .processes
            .iter()
            .flat_map(|(process, calls)| calls.values().map(move |call| (*process, call)))
            .collect();
        all[all.len().saturating_sub(count)..]
            .iter()
            .map(|(process, call)| {
                let mut line = format!(
                    "process {process} #{} {} {} {}",
                    call.seq,
                    call.handler,
                    call.action,
                    object(call)
                );
                if let Some(version) = &call.resource_version {
                    let _ = write!(line, " at {version}");
                }
                if call.attempt > 0 {
                    let _ = write!(line, " (retry {})", call.attempt);
                }
                line
            })
            .collect()
    }

    fn process_of(&self, call: &HandlerCall) -> usize {
        self.processes
            .iter()
            .find(|(_, calls)| calls.get(&call.seq) == Some(call))
            .map_or(0, |(process, _)| *process)
    }
}

/// `kind namespace/name`.
fn object(call: &HandlerCall) -> String {
    match &call.namespace {
        Some(namespace) => format!("{} {namespace}/{}", call.kind, call.name),
        None => format!("{} {}", call.kind, call.name),
    }
}

fn number(version: &str) -> Option<u64> {
    version.parse().ok()
}

/// The uids each of `resources` has in `namespace` now, by plural.
pub(crate) async fn present_uids(
    client: &kube::Client,
    namespace: &str,
    resources: &[(ApiResource, Option<String>)],
) -> Result<BTreeMap<String, BTreeSet<String>>, kube::Error> {
    let mut present: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (resource, _) in resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let uids = present.entry(resource.plural.clone()).or_default();
        for object in api.list(&ListParams::default()).await?.items {
            uids.extend(object.metadata.uid);
        }
    }
    Ok(present)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(seq: u64, uid: &str, version: &str, action: &str) -> HandlerCall {
        let mut call = HandlerCall::default();
        call.seq = seq;
        call.kind = "parents".into();
        call.handler = "reconciler[0]".into();
        call.action = action.into();
        call.namespace = Some("ns".into());
        call.name = format!("name-{uid}");
        call.uid = Some(uid.into());
        call.resource_version = Some(version.into());
        call
    }

    #[test]
    fn an_older_version_after_a_newer_one_in_one_process_is_found() {
        let mut history = CallHistory::default();
        history.add(
            1,
            vec![
                call(1, "a", "10", "create"),
                call(2, "a", "12", "update"),
                call(3, "b", "11", "create"),
                call(4, "a", "12", "update"),
            ],
        );
        assert!(history.went_back().is_empty(), "{:?}", history.went_back());
        let mut retry = call(5, "a", "10", "create");
        retry.attempt = 1;
        history.add(1, vec![retry]);
        assert!(
            history.went_back().is_empty(),
            "a retry replays its snapshot"
        );
        history.add(1, vec![call(6, "a", "11", "update")]);
        let found = history.went_back();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("call #6"), "{found:?}");
        assert!(found[0].contains("after call #2 saw 12"), "{found:?}");
        // A second process starts afresh.
        history.add(2, vec![call(1, "a", "11", "resync")]);
        assert_eq!(history.went_back().len(), 1);
    }

    #[test]
    fn a_gone_object_needs_a_call_for_its_deletion_in_some_process() {
        let mut history = CallHistory::default();
        history.add(
            1,
            vec![call(1, "a", "10", "create"), call(2, "b", "11", "create")],
        );
        let mut marked = call(2, "c", "12", "update");
        marked.deleting = true;
        history.add(2, vec![call(1, "b", "11", "delete"), marked]);
        let present = BTreeMap::from([("parents".to_owned(), BTreeSet::new())]);
        let unseen = history.deletions_unseen(&present);
        assert_eq!(unseen.len(), 1, "{unseen:?}");
        assert!(
            unseen[0].starts_with("parents ns/name-a was deleted"),
            "{unseen:?}"
        );
        let kept = BTreeMap::from([("parents".to_owned(), BTreeSet::from(["a".to_owned()]))]);
        assert!(history.deletions_unseen(&kept).is_empty());
        // Kinds the scenario does not observe are not judged.
        assert!(history.deletions_unseen(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn the_last_calls_name_their_process_and_version() {
        let mut history = CallHistory::default();
        history.add(1, vec![call(1, "a", "10", "create")]);
        history.add(
            2,
            vec![call(1, "a", "12", "resync"), call(2, "a", "13", "update")],
        );
        assert_eq!(
            history.last(2),
            [
                "process 2 #1 reconciler[0] resync parents ns/name-a at 12",
                "process 2 #2 reconciler[0] update parents ns/name-a at 13",
            ]
        );
        assert!(history.recorded());
    }
}
