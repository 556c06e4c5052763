//! A lane's pending retries and requeues, and the rules that keep them: event order per handler,
//! no kept retry overwritten, and a bound per handler and object.
//!
//! - **Watchers** are edge-triggered: every failed event keeps its own retry. When the dequeue
//!   policy keeps an older retry and the newer event fails too, both wait, and they run in event
//!   order: only the oldest retry of a handler is eligible, and a retry that fails again keeps its
//!   place at the front.
//! - **Reconcilers** are level-triggered: a newer failure or requeue merges into the handler's
//!   pending request (the action merged as queued requests merge, the newest object and state,
//!   the earlier due time, so a kept retry is neither dropped nor postponed). Only what cannot
//!   merge (a new incarnation after a Delete) waits as a second request.
//! - **Failing since**: a retry after an error carries when its handler began failing for the
//!   object (the first failure of the run of failures it continues, kept across retries, merges
//!   and a newer event's retry), so the oldest failure is known without a clock per retry; a
//!   reconciler's success clears it on the request it keeps (the object no longer fails).
//! - **Bound**: a handler keeps at most [`MAX_RETRIES_PER_HANDLER`] retries per object. A retry past
//!   that is dropped, logged as an error and counted as given up (the caller does both).
//!
//! A worker that takes an item of a lane takes the lane's [`Retries`] with it and hands them back
//! when the item is done (see [`lanes`](super::lanes)), so dispatch changes them without locks.

use tokio::time::Instant;

use super::lanes::HandlerId;
use crate::action::ReconcileAction;
use crate::handler::HandlerError;
use crate::object::SharedObject;
use crate::reconciler::ReconcileRequest;
use crate::store::InformerEvent;

/// Retries one handler keeps for one object at most; more means the handler fails on every
/// event of a busy object, and keeping them all would grow without bound.
pub(crate) const MAX_RETRIES_PER_HANDLER: usize = 16;

/// What a retry re-runs.
#[derive(Clone)]
pub(super) enum RetryWork {
    Watch(InformerEvent),
    Reconcile(ReconcileRequest),
}

impl RetryWork {
    pub(super) fn action(&self) -> ReconcileAction {
        match self {
            Self::Watch(event) => event.action(),
            Self::Reconcile(request) => request.action,
        }
    }

    pub(super) fn object(&self) -> &SharedObject {
        match self {
            Self::Watch(event) => event.object(),
            Self::Reconcile(request) => &request.object,
        }
    }
}

/// A pending retry (after an error) or requeue (after `requeue_after`) of one handler.
pub(super) struct RetryEntry {
    pub(super) due: Instant,
    /// The attempt number the retry runs as (0 for a requeue after a success).
    pub(super) attempt: u32,
    pub(super) work: RetryWork,
    /// The error that caused it; `None` for a plain requeue.
    pub(super) error: Option<HandlerError>,
    /// When the handler began failing for the object, without a success since: set for a retry
    /// after an error (see the [module docs](self)); `None` for a plain requeue.
    pub(super) failing_since: Option<Instant>,
}

/// One pending retry and its handler.
pub(super) struct Pending {
    pub(super) handler: HandlerId,
    pub(super) entry: RetryEntry,
}

/// How [`Retries::add_new`] stored a retry.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Added {
    /// As a new pending retry.
    Stored,
    /// Merged into the handler's pending reconcile request.
    Merged,
    /// Not at all: the handler already keeps [`MAX_RETRIES_PER_HANDLER`] retries of this object.
    Full,
}

/// The pending retries of one lane, in event order per handler. See the [module docs](self).
#[derive(Default)]
pub(super) struct Retries {
    entries: Vec<Pending>,
}

impl Retries {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// When the longest-failing of the pending retries began failing; `None` when none follows
    /// an error (the object is not failing).
    pub(super) fn failing_since(&self) -> Option<Instant> {
        self.entries
            .iter()
            .filter_map(|pending| pending.entry.failing_since)
            .min()
    }

    /// When `handler` began failing for the object, if one of its pending retries follows an
    /// error.
    pub(super) fn failing_since_of(&self, handler: HandlerId) -> Option<Instant> {
        self.entries
            .iter()
            .filter(|pending| pending.handler == handler)
            .filter_map(|pending| pending.entry.failing_since)
            .min()
    }

    /// `handler` succeeded for the object: its pending requests no longer count as failing
    /// (for a reconciler, whose kept request runs with the newest object; a watcher's kept
    /// retries are of older events, which still failed).
    pub(super) fn recovered(&mut self, handler: HandlerId) {
        for pending in &mut self.entries {
            if pending.handler == handler {
                pending.entry.failing_since = None;
            }
        }
    }

    /// Whether entry `index` is the oldest of its handler (the only one that may run).
    fn eligible(&self, index: usize) -> bool {
        let handler = self.entries[index].handler;
        !self.entries[..index].iter().any(|p| p.handler == handler)
    }

    /// The position of the first eligible retry that is due at `now`.
    pub(super) fn due_at(&self, now: Instant) -> Option<usize> {
        (0..self.entries.len()).find(|&i| self.entries[i].entry.due <= now && self.eligible(i))
    }

    /// When the next eligible retry is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        (0..self.entries.len())
            .filter(|&i| self.eligible(i))
            .map(|i| self.entries[i].entry.due)
            .min()
    }

    /// Takes the retry at `index` (from [`due_at`](Self::due_at)) out to run it.
    pub(super) fn take(&mut self, index: usize) -> Pending {
        self.entries.remove(index)
    }

    /// Stores the retry of a new event's failed (or requeued) call; see the [module docs](self).
    pub(super) fn add_new(&mut self, handler: HandlerId, entry: RetryEntry) -> Added {
        let mut kept = 0;
        let mut last = None;
        for (index, pending) in self.entries.iter().enumerate() {
            if pending.handler == handler {
                kept += 1;
                last = Some(index);
            }
        }
        if let (Some(index), RetryWork::Reconcile(_)) = (last, &entry.work) {
            let pending = &mut self.entries[index].entry;
            if let Some(action) = pending.work.action().merged_with(entry.work.action()) {
                merge_reconcile(pending, entry, action);
                return Added::Merged;
            }
        }
        if kept >= MAX_RETRIES_PER_HANDLER {
            return Added::Full;
        }
        self.entries.push(Pending { handler, entry });
        Added::Stored
    }

    /// Stores the next attempt of a retry that failed again (or requeued): before the handler's
    /// other retries, where the one that ran was.
    pub(super) fn add_again(&mut self, handler: HandlerId, entry: RetryEntry) {
        self.entries.insert(0, Pending { handler, entry });
    }

    /// Asks `drop_it` about each pending retry of `handler` and removes those it drops; returns
    /// how many it removed, and when the longest-failing of them began failing.
    pub(super) fn dequeue(
        &mut self,
        handler: HandlerId,
        mut drop_it: impl FnMut(&RetryEntry) -> bool,
    ) -> (usize, Option<Instant>) {
        let before = self.entries.len();
        let mut failing_since: Option<Instant> = None;
        self.entries.retain(|pending| {
            if pending.handler != handler || !drop_it(&pending.entry) {
                return true;
            }
            if let Some(since) = pending.entry.failing_since {
                failing_since = Some(failing_since.map_or(since, |earlier| earlier.min(since)));
            }
            false
        });
        (before - self.entries.len(), failing_since)
    }

    /// A newer event of the object reached reconciler `handler`, and its pending request was
    /// kept: the request runs with the newest object (level-triggered), its action merged.
    pub(super) fn refresh_reconcile(
        &mut self,
        handler: HandlerId,
        action: ReconcileAction,
        object: &SharedObject,
    ) {
        let Some(pending) = self.entries.iter_mut().rev().find(|p| p.handler == handler) else {
            return;
        };
        if let RetryWork::Reconcile(request) = &mut pending.entry.work
            && let Some(merged) = request.action.merged_with(action)
        {
            request.action = merged;
            request.object = SharedObject::clone(object);
        }
    }

    /// How many retries wait.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Merges a newer reconcile retry into the pending one: the newest request with the merged
/// action; the earlier due time, with its attempt and error, so merging never postpones a retry.
/// Failing as the newer call says (a requeue after a success is not failing), since the earlier
/// of the two.
fn merge_reconcile(pending: &mut RetryEntry, newer: RetryEntry, action: ReconcileAction) {
    let RetryWork::Reconcile(mut request) = newer.work else {
        return;
    };
    request.action = action;
    pending.work = RetryWork::Reconcile(request);
    pending.failing_since = newer.failing_since.map(|since| {
        pending
            .failing_since
            .map_or(since, |earlier| earlier.min(since))
    });
    if newer.due < pending.due {
        pending.due = newer.due;
        pending.attempt = newer.attempt;
        pending.error = newer.error;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::share;
    use crate::reconciler::ReconcileState;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    fn cm(rv: u32) -> SharedObject {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.resource_version = Some(rv.to_string());
        share(cm)
    }

    fn watch(rv: u32, due: Instant) -> RetryEntry {
        RetryEntry {
            due,
            attempt: 1,
            work: RetryWork::Watch(InformerEvent::Add(cm(rv))),
            error: None,
            failing_since: None,
        }
    }

    fn reconcile(action: ReconcileAction, rv: u32, due: Instant) -> RetryEntry {
        RetryEntry {
            due,
            attempt: 1,
            work: RetryWork::Reconcile(ReconcileRequest {
                action,
                object: cm(rv),
                state: ReconcileState::new(),
                cause: None,
            }),
            error: None,
            failing_since: None,
        }
    }

    fn rv(entry: &RetryEntry) -> String {
        entry
            .work
            .object()
            .metadata()
            .resource_version
            .clone()
            .unwrap_or_default()
    }

    #[test]
    fn watcher_retries_run_in_event_order_and_are_capped() {
        let now = Instant::now();
        let w = HandlerId::Watcher(0);
        let mut retries = Retries::default();
        assert_eq!(
            retries.add_new(w, watch(1, now + Duration::from_secs(80))),
            Added::Stored
        );
        assert_eq!(retries.add_new(w, watch(2, now)), Added::Stored);
        // The newer retry is due first but waits for the older one.
        assert_eq!(retries.due_at(now), None);
        assert_eq!(retries.next_due(), Some(now + Duration::from_secs(80)));
        let first = retries.due_at(now + Duration::from_secs(80)).expect("due");
        assert_eq!(rv(&retries.take(first).entry), "1");
        assert_eq!(rv(&retries.take(0).entry), "2");
        for n in 0..MAX_RETRIES_PER_HANDLER {
            assert_eq!(
                retries.add_new(w, watch(3, now)),
                Added::Stored,
                "retry {n}"
            );
        }
        assert_eq!(retries.add_new(w, watch(4, now)), Added::Full);
        assert_eq!(
            retries.add_new(HandlerId::Watcher(1), watch(4, now)),
            Added::Stored,
            "the bound is per handler"
        );
    }

    #[test]
    fn a_reconcile_retry_merges_into_the_kept_one_without_postponing_it() {
        let now = Instant::now();
        let r = HandlerId::Reconciler(0);
        let mut retries = Retries::default();
        let early = now + Duration::from_secs(5);
        retries.add_new(r, reconcile(ReconcileAction::Created, 1, early));
        let late = now + Duration::from_secs(60);
        assert_eq!(
            retries.add_new(r, reconcile(ReconcileAction::Updated, 2, late)),
            Added::Merged
        );
        assert_eq!(retries.len(), 1);
        let pending = retries.take(0).entry;
        assert_eq!(pending.due, early);
        assert_eq!(pending.work.action(), ReconcileAction::Created);
        assert_eq!(rv(&pending), "2");
    }

    #[test]
    fn failing_since_survives_merges_and_dequeues_and_a_reconciler_success_clears_it() {
        let now = Instant::now();
        let (r, w) = (HandlerId::Reconciler(0), HandlerId::Watcher(0));
        let failed = |mut entry: RetryEntry, since: Instant| {
            entry.failing_since = Some(since);
            entry
        };
        let mut retries = Retries::default();
        assert_eq!(retries.failing_since(), None);
        let first = now + Duration::from_secs(1);
        retries.add_new(
            r,
            failed(reconcile(ReconcileAction::Created, 1, now), first),
        );
        // A later failure merges in: still failing since the first.
        let later = reconcile(ReconcileAction::Updated, 2, now);
        retries.add_new(r, failed(later, now + Duration::from_secs(9)));
        assert_eq!(retries.failing_since_of(r), Some(first));
        // A plain requeue after a success merges in: no longer failing.
        retries.add_new(r, reconcile(ReconcileAction::Updated, 3, now));
        assert_eq!(retries.failing_since(), None);
        retries.add_new(
            r,
            failed(reconcile(ReconcileAction::Updated, 4, now), first),
        );
        retries.recovered(r);
        assert_eq!(retries.failing_since(), None);
        // A watcher's retries keep theirs; a dequeue reports what it dropped.
        retries.add_new(w, failed(watch(5, now), now));
        retries.add_new(w, failed(watch(6, now), first));
        assert_eq!(retries.failing_since(), Some(now));
        retries.recovered(HandlerId::Watcher(1));
        assert_eq!(retries.failing_since_of(w), Some(now));
        assert_eq!(retries.dequeue(w, |_| true), (2, Some(now)));
        assert_eq!(retries.failing_since(), None);
    }

    #[test]
    fn a_new_incarnation_after_a_delete_waits_as_a_second_request() {
        let now = Instant::now();
        let r = HandlerId::Reconciler(0);
        let mut retries = Retries::default();
        retries.add_new(r, reconcile(ReconcileAction::Deleted, 1, now));
        assert_eq!(
            retries.add_new(r, reconcile(ReconcileAction::Created, 2, now)),
            Added::Stored
        );
        retries.refresh_reconcile(r, ReconcileAction::Updated, &cm(3));
        assert_eq!(rv(&retries.take(0).entry), "1");
        let created = retries.take(0).entry;
        assert_eq!(
            (created.work.action(), rv(&created)),
            (ReconcileAction::Created, "3".into())
        );
    }
}
