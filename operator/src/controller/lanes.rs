//! Per-object lanes: each object's queued events and pending retries, and the queue of lanes that
//! have work for a worker.
//!
//! Every object with pending work has a [`Lane`]: its queued events, its pending retries (at most
//! one per handler) and an `active` flag, set while the lane waits in the ready queue or a worker
//! holds it. A lane is in the ready queue at most once and held by at most one worker, which takes
//! one item (the oldest queued event, else a due retry), dispatches it, and hands the lane back
//! ([`Lanes::finish`]): to the back of the ready queue if it has more runnable work, else idle (and
//! released, if no retry waits). That is what keeps one object's work in order and never
//! concurrent, while different objects run side by side.
//!
//! Everything here is synchronous and runs under the kind's lock; the tasks around it live in
//! [`kind`](super::kind). Lanes sit in a slab whose slots are reused with their queue's allocation,
//! and the index from object to slot hashes an object's key once per event (a released lane is
//! found by its stored hash and slot), so the steady state allocates nothing per event.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use tokio::time::Instant;

use crate::handler::HandlerError;
use crate::informer::InformerEvent;
use crate::object::SharedObject;
use crate::reconciler::{ReconcileAction, ReconcileRequest};

/// Which handler of a kind: watchers and reconcilers by registration index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum HandlerId {
    Watcher(usize),
    Reconciler(usize),
}

impl fmt::Display for HandlerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Watcher(i) => write!(f, "watcher[{i}]"),
            Self::Reconciler(i) => write!(f, "reconciler[{i}]"),
        }
    }
}

/// The identity of an object within its kind (namespace and name), read from one of its states:
/// making or cloning a key copies no strings.
#[derive(Clone)]
pub(crate) struct LaneKey(SharedObject);

impl LaneKey {
    pub(crate) fn of(object: &SharedObject) -> Self {
        Self(SharedObject::clone(object))
    }

    /// The namespace, `None` for cluster-scoped objects.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.0.metadata().namespace.as_deref()
    }

    /// The name (`""` for an object without one, which the API server never sends).
    pub(crate) fn name(&self) -> &str {
        self.0.metadata().name.as_deref().unwrap_or("")
    }
}

impl PartialEq for LaneKey {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.namespace() == other.namespace()
    }
}

impl Eq for LaneKey {}

impl Hash for LaneKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.namespace().hash(state);
        self.name().hash(state);
    }
}

impl fmt::Display for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace() {
            Some(ns) => write!(f, "{ns}/{}", self.name()),
            None => f.write_str(self.name()),
        }
    }
}

impl fmt::Debug for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An event waiting in a lane.
pub(super) struct Queued {
    pub(super) event: InformerEvent,
    /// False when no watcher was registered as it arrived.
    pub(super) for_watchers: bool,
    /// The reconcile request this event carries, `None` once a newer event took it over.
    pub(super) reconcile: Option<(ReconcileAction, SharedObject)>,
}

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
}

/// One object's pending work.
#[derive(Default)]
struct Lane {
    /// `None` while the slot is free.
    key: Option<LaneKey>,
    /// The hash of `key` in the index.
    hash: u64,
    queue: VecDeque<Queued>,
    retries: BTreeMap<HandlerId, RetryEntry>,
    /// In the ready queue or held by a worker.
    active: bool,
}

impl Lane {
    fn due_retry(&self) -> Option<HandlerId> {
        if self.retries.is_empty() {
            return None;
        }
        let now = Instant::now();
        self.retries
            .iter()
            .find(|(_, entry)| entry.due <= now)
            .map(|(handler, _)| *handler)
    }

    fn runnable(&self) -> bool {
        !self.queue.is_empty() || self.due_retry().is_some()
    }
}

/// One item a worker took from a lane.
pub(super) enum Work {
    Event(Queued),
    Retry(HandlerId, RetryEntry),
}

/// A lane held by a worker, with the item to dispatch.
pub(super) struct Taken {
    pub(super) slot: usize,
    pub(super) key: LaneKey,
    pub(super) work: Work,
    /// Whether the lane had retries pending when the item was taken. Only the holder adds
    /// retries, so when it had none, no new event can meet a pending retry of its handlers.
    pub(super) had_retries: bool,
}

/// What [`Lanes::push`] did with an event.
pub(super) struct Pushed {
    /// The lane went from idle to ready: a worker must be woken (or started) for it.
    pub(super) became_ready: bool,
    /// How many waiting events the push merged away (0 or 1; never one for watchers).
    pub(super) merged_away: usize,
}

/// Hashes lane keys (namespace and name strings) quickly, seeded per process.
type KeyHasher = foldhash::fast::RandomState;

/// Every lane of a kind, and the ready queue. See the [module docs](self).
#[derive(Default)]
pub(super) struct Lanes {
    slots: Vec<Lane>,
    free: Vec<usize>,
    /// The slots of the lanes in use, by the hash of their key.
    index: hashbrown::HashTable<usize>,
    hasher: KeyHasher,
    ready: VecDeque<usize>,
    /// Events for watchers pushed and not yet handled: what `max_pending_events` bounds. Events
    /// without watcher work do not count: they merge, so they are bounded by the objects.
    pub(super) backlog: usize,
}

impl Lanes {
    /// The slot of `key`'s lane, made when missing.
    fn slot_of(&mut self, key: LaneKey) -> usize {
        let hash = self.hasher.hash_one(&key);
        let Self {
            slots, free, index, ..
        } = self;
        if let Some(&slot) = index.find(hash, |&slot| slots[slot].key.as_ref() == Some(&key)) {
            return slot;
        }
        let slot = match free.pop() {
            Some(slot) => slot,
            None => {
                slots.push(Lane::default());
                slots.len() - 1
            }
        };
        slots[slot].key = Some(key);
        slots[slot].hash = hash;
        index.insert_unique(hash, slot, |&slot| slots[slot].hash);
        slot
    }

    /// Queues `event` in its object's lane, merging it with the waiting reconcile request (see
    /// the [controller docs](super)).
    pub(super) fn push(&mut self, event: InformerEvent, for_watchers: bool) -> Pushed {
        let action = event.action();
        let object = SharedObject::clone(event.object());
        let slot = self.slot_of(LaneKey::of(&object));
        let lane = &mut self.slots[slot];
        let mut reconcile = (action, object);
        let mut merged_away = 0;
        // Level-triggered merge: the newest event takes over the reconcile request of the last
        // waiting event of the same object, unless a Delete separates them.
        if let Some(position) = lane.queue.iter().rposition(|q| q.reconcile.is_some()) {
            let waiting = &mut lane.queue[position];
            if let Some((waiting_action, _)) = &waiting.reconcile
                && let Some(merged) = waiting_action.merged_with(action)
            {
                waiting.reconcile = None;
                reconcile.0 = merged;
                if !waiting.for_watchers {
                    lane.queue.remove(position);
                    merged_away = 1;
                }
            }
        }
        lane.queue.push_back(Queued {
            event,
            for_watchers,
            reconcile: Some(reconcile),
        });
        if for_watchers {
            self.backlog += 1;
        }
        let became_ready = !lane.active;
        if became_ready {
            lane.active = true;
            self.ready.push_back(slot);
        }
        Pushed {
            became_ready,
            merged_away,
        }
    }

    /// The next item of the first ready lane: its oldest queued event, else a due retry. The
    /// lane stays held (active, out of the ready queue) until [`finish`](Self::finish).
    pub(super) fn take(&mut self) -> Option<Taken> {
        while let Some(slot) = self.ready.pop_front() {
            let lane = &mut self.slots[slot];
            let had_retries = !lane.retries.is_empty();
            let work = if let Some(queued) = lane.queue.pop_front() {
                Some(Work::Event(queued))
            } else if let Some(handler) = lane.due_retry()
                && let Some(entry) = lane.retries.remove(&handler)
            {
                Some(Work::Retry(handler, entry))
            } else {
                None
            };
            let Some(work) = work else {
                // Nothing runnable after all (a retry not due yet): idle until woken.
                lane.active = false;
                self.release_if_empty(slot);
                continue;
            };
            // A lane in the ready queue always has its key.
            let Some(key) = lane.key.clone() else {
                continue;
            };
            return Some(Taken {
                slot,
                key,
                work,
                had_retries,
            });
        }
        None
    }

    /// Hands a held lane back after its item was dispatched; `counted` says whether the item was
    /// an event for watchers (which leaves the backlog now).
    pub(super) fn finish(&mut self, slot: usize, counted: bool) {
        if counted {
            self.backlog -= 1;
        }
        let Some(lane) = self.slots.get_mut(slot) else {
            return;
        };
        if lane.runnable() {
            self.ready.push_back(slot);
        } else {
            lane.active = false;
            self.release_if_empty(slot);
        }
    }

    /// Frees an idle lane's slot when nothing waits in it; the queue keeps its allocation for
    /// the slot's next object.
    fn release_if_empty(&mut self, slot: usize) {
        let lane = &mut self.slots[slot];
        if lane.active || !lane.queue.is_empty() || !lane.retries.is_empty() {
            return;
        }
        if lane.key.take().is_some() {
            if let Ok(entry) = self.index.find_entry(lane.hash, |&used| used == slot) {
                entry.remove();
            }
            self.free.push(slot);
        }
    }

    /// Puts an idle lane with due work back in the ready queue (a retry timer fired). Returns
    /// true when it did: a worker must be woken for it.
    pub(super) fn wake(&mut self, key: &LaneKey) -> bool {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let Some(&slot) = self
            .index
            .find(hash, |&slot| slots[slot].key.as_ref() == Some(key))
        else {
            return false;
        };
        let lane = &mut self.slots[slot];
        if lane.active || !lane.runnable() {
            return false;
        }
        lane.active = true;
        self.ready.push_back(slot);
        true
    }

    /// Stores a retry of a held lane; returns whether it replaced one of the same handler.
    pub(super) fn insert_retry(
        &mut self,
        slot: usize,
        handler: HandlerId,
        entry: RetryEntry,
    ) -> bool {
        self.slots[slot].retries.insert(handler, entry).is_some()
    }

    /// Takes the pending retry of `handler` out of a held lane.
    pub(super) fn take_retry(&mut self, slot: usize, handler: HandlerId) -> Option<RetryEntry> {
        self.slots.get_mut(slot)?.retries.remove(&handler)
    }

    /// Events waiting in lanes (not counting the ones being dispatched).
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.slots.iter().map(|lane| lane.queue.len()).sum()
    }

    /// Lanes in use (holding work or waiting retries).
    #[cfg(test)]
    pub(super) fn in_use(&self) -> usize {
        self.index.len()
    }

    /// Drops every queued event and pending retry (the controller stopped).
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::share;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, rv: u32) -> SharedObject {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.resource_version = Some(rv.to_string());
        share(cm)
    }

    fn rv(work: &Work) -> String {
        match work {
            Work::Event(queued) => queued
                .event
                .object()
                .metadata()
                .resource_version
                .clone()
                .unwrap_or_default(),
            Work::Retry(..) => "retry".into(),
        }
    }

    #[test]
    fn a_lane_is_held_by_one_taker_and_keeps_its_order() {
        let mut lanes = Lanes::default();
        assert!(
            lanes
                .push(InformerEvent::Add(cm("a", 1)), true)
                .became_ready
        );
        assert!(
            !lanes
                .push(InformerEvent::Add(cm("a", 2)), true)
                .became_ready
        );
        assert!(
            lanes
                .push(InformerEvent::Add(cm("b", 3)), true)
                .became_ready
        );
        let first = lanes.take().expect("a");
        assert_eq!(
            (first.key.to_string(), rv(&first.work)),
            ("ns/a".into(), "1".into())
        );
        // `a` is held: the next taker gets `b`, not `a`'s second event.
        let second = lanes.take().expect("b");
        assert_eq!(rv(&second.work), "3");
        assert!(lanes.take().is_none());
        lanes.finish(first.slot, true);
        let third = lanes.take().expect("a again");
        assert_eq!(rv(&third.work), "2");
        assert_eq!(lanes.backlog, 2, "events for watchers count until handled");
        lanes.finish(third.slot, true);
        lanes.finish(second.slot, true);
        assert_eq!((lanes.backlog, lanes.queued(), lanes.in_use()), (0, 0, 0));
    }

    #[test]
    fn released_slots_are_reused_for_other_objects() {
        let mut lanes = Lanes::default();
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            lanes.push(InformerEvent::Add(cm(name, 1)), false);
            let taken = lanes.take().expect("work");
            assert_eq!(taken.slot, 0, "object {i} reuses slot 0");
            lanes.finish(taken.slot, false);
        }
        assert_eq!(lanes.slots.len(), 1);
    }

    #[test]
    fn waiting_reconcile_only_events_merge_and_stay_out_of_the_backlog() {
        let mut lanes = Lanes::default();
        lanes.push(InformerEvent::Add(cm("a", 1)), false);
        let pushed = lanes.push(
            InformerEvent::Update {
                old: cm("a", 1),
                new: cm("a", 2),
            },
            false,
        );
        assert_eq!(pushed.merged_away, 1);
        assert_eq!((lanes.backlog, lanes.queued()), (0, 1));
        let taken = lanes.take().expect("the merged request");
        let Work::Event(queued) = &taken.work else {
            panic!("an event")
        };
        let (action, object) = queued.reconcile.as_ref().expect("a reconcile");
        assert_eq!(*action, ReconcileAction::Created);
        assert_eq!(object.metadata().resource_version.as_deref(), Some("2"));
    }
}
