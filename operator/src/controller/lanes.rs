//! Per-object lanes: each object's queued events and pending retries, and the queue of lanes that
//! have work for a worker.
//!
//! Every object with pending work has a [`Lane`]: its queued events, its pending retries (see
//! [`pending`](super::pending)), a timer while it waits for one, and an `active` flag, set while
//! the lane waits in the ready queue or a worker holds it. A lane is in the ready queue at most once and held by at most one worker, which takes
//! one item (the oldest queued event, else a due retry), dispatches it, and hands the lane back
//! ([`Lanes::finish`]): to the back of the ready queue if it has more runnable work, else idle (and
//! released, if no retry waits). That is what keeps one object's work in order and never
//! concurrent, while different objects run side by side.
//!
//! A worker takes the lane's retries along with the item and hands them back in
//! [`Lanes::finish`], so dispatch works on them without the lock and never calls back. An idle lane
//! with waiting retries has one entry in the kind's timer queue (`tokio_util`'s `DelayQueue`), for
//! the earliest retry that may run; it is re-set whenever the lane goes idle, so a dropped or
//! replaced retry leaves no timer (and no task) behind.
//!
//! Everything here is synchronous and runs under the kind's lock; the tasks around it live in
//! [`kind_runtime`](super::kind_runtime). Lanes sit in a slab whose slots are reused with their queue's allocation,
//! and the index from object to slot hashes an object's key once per event (a released lane is
//! found by its stored hash and slot), so the steady state allocates nothing per event.

use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use super::durations::Instant as ClockInstant;
use super::pending::{Pending, Retries};
use crate::action::ReconcileAction;
use crate::action::TriggerCause;
use crate::object::SharedObject;
use crate::own_writes::EchoCheck;
use crate::queue_wait::WaitingSince;
use crate::store::InformerEvent;

/// Which handler of a kind: watchers and reconcilers by registration number (0 for the first
/// watcher, 1 for the second, ...; a removed handler's number is not reused).
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
    /// The event, for watchers; `None` when no watcher was registered as it arrived, or for a
    /// triggered reconcile. Not kept for a reconcile alone, so that an update waiting behind
    /// other objects' work does not keep its old object alive (the reconcile request holds the
    /// new one, the echo candidates what their check needs).
    pub(super) event: Option<InformerEvent>,
    /// The event's own action (the reconcile request's may be a merged one).
    pub(super) action: ReconcileAction,
    /// The reconcile request this event carries, `None` once a newer event took it over.
    pub(super) reconcile: Option<(ReconcileAction, SharedObject)>,
    /// Why a triggered reconcile runs (`None` for informer events).
    pub(super) cause: Option<TriggerCause>,
    /// Pushed in this order within the kind: a handler added at run time skips what was queued
    /// before it (it gets the cache replayed instead).
    pub(super) seq: u64,
    /// For one handler only (the cache replayed to a handler added at run time).
    pub(super) only: Option<HandlerId>,
    /// The updates merged into the reconcile request, for the own-writes check at dispatch.
    pub(super) echo: EchoCandidates,
    /// When the oldest change this item's calls cover was received: its own event's, or an
    /// older one's whose reconcile request it took over (the `informer_event_wait_seconds`
    /// histogram's start).
    pub(super) received: ClockInstant,
}

impl Queued {
    /// Whether watchers get this event.
    pub(super) fn for_watchers(&self) -> bool {
        self.event.is_some()
    }

    /// The event's object: its newest state (`None` only for a watcher-less event whose
    /// reconcile request a newer event took over, which is never queued).
    pub(super) fn object(&self) -> Option<&SharedObject> {
        match &self.event {
            Some(event) => Some(event.object()),
            None => self.reconcile.as_ref().map(|(_, object)| object),
        }
    }
}

/// An update's old and new object.
type UpdatePair = EchoCheck;

/// The events merged into a waiting reconcile request, as far as the
/// [own-writes](crate::own_writes) check needs them: the request is skipped at dispatch only when
/// every one of them is the echo of the controller's own write. The `u32` of each variant with
/// updates counts those already found to be echoes as they were queued (they keep no objects);
/// the pairs are the updates still to check, oldest first.
#[derive(Default)]
pub(super) enum EchoCandidates {
    /// Some event in it cannot be an echo (an Add, Delete, Resync, a trigger other than a child's
    /// creation by this kind's handler, an update whose
    /// recorded write showed more than the write, or echoes are reconciled by configuration).
    #[default]
    No,
    /// Only updates found to be echoes as they were queued.
    Confirmed(u32),
    /// One update left to check.
    One(u32, UpdatePair),
    /// Several updates left to check.
    Many(u32, Vec<UpdatePair>),
}

impl EchoCandidates {
    /// The candidates of one update, with the own-writes check made as it was queued, if any.
    fn of_update(pair: UpdatePair, found: Option<bool>) -> Self {
        match found {
            Some(true) => Self::Confirmed(1),
            Some(false) => Self::No,
            None => Self::One(0, pair),
        }
    }

    /// The request's candidates once `newer` merged into it.
    fn merged(self, newer: Self) -> Self {
        let (confirmed, mut unchecked) = match self {
            Self::No => return Self::No,
            Self::Confirmed(confirmed) => (confirmed, Vec::new()),
            Self::One(confirmed, pair) => (confirmed, vec![pair]),
            Self::Many(confirmed, updates) => (confirmed, updates),
        };
        let confirmed = confirmed.saturating_add(match newer {
            Self::No => return Self::No,
            Self::Confirmed(more) => more,
            Self::One(more, pair) => {
                unchecked.push(pair);
                more
            }
            Self::Many(more, pairs) => {
                unchecked.extend(pairs);
                more
            }
        });
        match unchecked.len() {
            0 => Self::Confirmed(confirmed),
            1 => match unchecked.pop() {
                Some(pair) => Self::One(confirmed, pair),
                None => Self::Confirmed(confirmed),
            },
            _ => Self::Many(confirmed, unchecked),
        }
    }

    /// Whether the request may be an echo at all (every event merged into it is an update).
    pub(super) fn possible(&self) -> bool {
        !matches!(self, Self::No)
    }

    /// How many updates were found to be echoes as they were queued.
    pub(super) fn confirmed(&self) -> u32 {
        match self {
            Self::No => 0,
            Self::Confirmed(confirmed) | Self::One(confirmed, _) | Self::Many(confirmed, _) => {
                *confirmed
            }
        }
    }

    /// The updates left to check at dispatch.
    pub(super) fn unchecked(&self) -> &[UpdatePair] {
        match self {
            Self::No | Self::Confirmed(_) => &[],
            Self::One(_, pair) => std::slice::from_ref(pair),
            Self::Many(_, updates) => updates,
        }
    }
}

/// How a push differs from a plain informer event.
#[derive(Default)]
pub(super) struct PushExtra {
    pub(super) cause: Option<TriggerCause>,
    pub(super) only: Option<HandlerId>,
    /// For an update: what the own-writes check found as it was queued (`None`: not made, or
    /// no record yet; see [`OwnWrites::check_now`](crate::own_writes::OwnWrites::check_now)).
    pub(super) echo_found: Option<bool>,
    /// For a triggered request: the Add of a related object that may be the echo of a creation
    /// by a handler of this kind, not recorded yet as it was queued (checked at dispatch).
    pub(super) creation: Option<SharedObject>,
    /// When the event was received (offered by the informer), if read before the push (an event
    /// that waited for room in the backlog); `None`: now.
    pub(super) received: Option<ClockInstant>,
}

/// One object's pending work.
#[derive(Default)]
struct Lane {
    /// `None` while the slot is free.
    key: Option<LaneKey>,
    /// The hash of `key` in the index.
    hash: u64,
    queue: VecDeque<Queued>,
    /// Empty while a worker holds the lane: the retries travel with the taken item.
    retries: Retries,
    /// The lane's entry in the timer queue and when it fires: set while the lane is idle with
    /// retries waiting, for the earliest one that may run.
    timer: Option<(delay_queue::Key, Instant)>,
    /// In the ready queue or held by a worker.
    active: bool,
}

impl Lane {
    fn runnable(&self) -> bool {
        !self.queue.is_empty()
            || (!self.retries.is_empty() && self.retries.due_at(Instant::now()).is_some())
    }
}

/// One item a worker took from a lane.
pub(super) enum Work {
    Event(Queued),
    Retry(Pending),
}

/// A lane held by a worker, with the item to dispatch.
pub(super) struct Taken {
    pub(super) slot: usize,
    pub(super) key: LaneKey,
    pub(super) work: Work,
    /// The lane's other pending retries, taken along: dispatch applies the dequeue policy to them
    /// and adds new ones, and [`Lanes::finish`] puts them back.
    pub(super) retries: Retries,
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
    /// The ready lanes, each with when it joined (so the head is the one waiting longest).
    ready: VecDeque<(usize, Instant)>,
    /// Where the head's stamp is published (see [`queue_wait`](crate::queue_wait)).
    waiting: Option<Arc<WaitingSince>>,
    /// One timer per idle lane with waiting retries (made on first use, in the runtime).
    timers: Option<DelayQueue<LaneKey>>,
    /// Events for watchers pushed and not yet handled: what `max_pending_events` bounds. Events
    /// without watcher work do not count: they merge, so they are bounded by the objects.
    pub(super) backlog: usize,
    /// The sequence number of the next push.
    next_seq: u64,
    /// Whether reconcile requests keep their updates for the own-writes check.
    track_echoes: bool,
}

impl Lanes {
    /// Empty lanes; `track_echoes`: keep each reconcile request's updates for the own-writes
    /// check (false when the controller reconciles its own writes).
    pub(super) fn tracking_echoes(track_echoes: bool) -> Self {
        Self {
            track_echoes,
            ..Self::default()
        }
    }

    /// Publishes since when the oldest ready lane waits into `waiting`.
    pub(super) fn reporting_waits(mut self, waiting: Arc<WaitingSince>) -> Self {
        self.waiting = Some(waiting);
        self
    }

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
    #[cfg(test)]
    pub(super) fn push(&mut self, event: InformerEvent, for_watchers: bool) -> Pushed {
        self.push_with(event, for_watchers, PushExtra::default())
    }

    /// The next push's sequence number (what a handler added now starts from).
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// [`push`](Self::push) with a trigger cause or a single target handler. A push for one
    /// handler never merges (it is that handler's own replay).
    pub(super) fn push_with(
        &mut self,
        event: InformerEvent,
        for_watchers: bool,
        extra: PushExtra,
    ) -> Pushed {
        let action = event.action();
        let object = SharedObject::clone(event.object());
        let slot = self.slot_of(LaneKey::of(&object));
        let seq = self.next_seq;
        self.next_seq += 1;
        let lane = &mut self.slots[slot];
        let mut reconcile = (action, object);
        let mut echo = match &event {
            InformerEvent::Update { old, new }
                if self.track_echoes && extra.cause.is_none() && extra.only.is_none() =>
            {
                let pair = EchoCheck::Update(SharedObject::clone(old), SharedObject::clone(new));
                EchoCandidates::of_update(pair, extra.echo_found)
            }
            InformerEvent::Resync(_) if self.track_echoes && extra.only.is_none() => {
                match extra.creation {
                    Some(child) => EchoCandidates::of_update(EchoCheck::Creation(child), None),
                    None => EchoCandidates::No,
                }
            }
            _ => EchoCandidates::No,
        };
        let mut cause = extra.cause;
        let mut received = extra.received.unwrap_or_else(ClockInstant::now);
        let mut merged_away = 0;
        // Level-triggered merge: the newest event takes over the reconcile request of the last
        // waiting event of the same object, unless a Delete separates them.
        let position = if extra.only.is_some() {
            None
        } else {
            lane.queue
                .iter()
                .rposition(|q| q.reconcile.is_some() && q.only.is_none())
        };
        if let Some(position) = position {
            let waiting = &mut lane.queue[position];
            if let Some((waiting_action, _)) = &waiting.reconcile
                && let Some(merged) = waiting_action.merged_with(action)
            {
                waiting.reconcile = None;
                reconcile.0 = merged;
                cause = cause.or_else(|| waiting.cause.take());
                received = received.min(waiting.received);
                echo = std::mem::take(&mut waiting.echo).merged(echo);
                if !waiting.for_watchers() {
                    lane.queue.remove(position);
                    merged_away = 1;
                }
            }
        }
        if lane.queue.capacity() == 0 {
            // Most lanes hold one event at a time, and a slot keeps its queue's allocation: room
            // for exactly one, where a growing `VecDeque` starts at four (a 20,000-object
            // benchmark peaked with 14,000 lanes waiting: 8.6 MiB of queues before, 2.1 after).
            lane.queue.reserve_exact(1);
        }
        lane.queue.push_back(Queued {
            event: for_watchers.then_some(event),
            action,
            reconcile: Some(reconcile),
            cause,
            seq,
            only: extra.only,
            echo,
            received,
        });
        if for_watchers {
            self.backlog += 1;
        }
        let became_ready = !lane.active;
        if became_ready {
            let was_empty = self.ready.is_empty();
            lane.active = true;
            self.ready.push_back((slot, Instant::now()));
            if was_empty {
                self.publish_waiting();
            }
        }
        Pushed {
            became_ready,
            merged_away,
        }
    }

    /// The next item of the first ready lane: its oldest queued event, else a due retry. The
    /// lane stays held (active, out of the ready queue) until [`finish`](Self::finish).
    pub(super) fn take(&mut self) -> Option<Taken> {
        let taken = self.take_ready();
        self.publish_waiting();
        taken
    }

    fn take_ready(&mut self) -> Option<Taken> {
        while let Some((slot, _)) = self.ready.pop_front() {
            let lane = &mut self.slots[slot];
            let work = if let Some(queued) = lane.queue.pop_front() {
                Some(Work::Event(queued))
            } else if !lane.retries.is_empty()
                && let Some(index) = lane.retries.due_at(Instant::now())
            {
                Some(Work::Retry(lane.retries.take(index)))
            } else {
                None
            };
            let Some(work) = work else {
                // Nothing runnable after all (a retry not due yet): idle until its timer fires.
                lane.active = false;
                self.arm(slot);
                self.release_if_empty(slot);
                continue;
            };
            // A lane in the ready queue always has its key.
            let Some(key) = lane.key.clone() else {
                continue;
            };
            let retries = std::mem::take(&mut lane.retries);
            return Some(Taken {
                slot,
                key,
                work,
                retries,
            });
        }
        None
    }

    /// Hands a held lane back after its item was dispatched, with its retries; `counted` says
    /// whether the item was an event for watchers (which leaves the backlog now).
    pub(super) fn finish(&mut self, slot: usize, counted: bool, retries: Retries) {
        if counted {
            self.backlog -= 1;
        }
        let Some(lane) = self.slots.get_mut(slot) else {
            return;
        };
        lane.retries = retries;
        if lane.runnable() {
            self.ready.push_back((slot, Instant::now()));
            if self.ready.len() == 1 {
                self.publish_waiting();
            }
        } else {
            lane.active = false;
            self.arm(slot);
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

    /// Sets an idle lane's timer to when its next retry may run (none without retries). One
    /// entry per lane in one queue per kind: a dropped or replaced retry leaves nothing behind.
    fn arm(&mut self, slot: usize) {
        let lane = &mut self.slots[slot];
        let next = if lane.retries.is_empty() {
            None
        } else {
            lane.retries.next_due()
        };
        if lane.timer.map(|(_, at)| at) == next {
            return;
        }
        let timers = self.timers.get_or_insert_with(DelayQueue::new);
        if let Some((timer, _)) = lane.timer.take() {
            // Under the kind's lock a lane's timer is cleared when it fires, so it is live here.
            timers.remove(&timer);
        }
        if let (Some(due), Some(key)) = (next, &lane.key) {
            lane.timer = Some((timers.insert_at(key.clone(), due), due));
        }
    }

    /// Fires due timers: each idle lane whose retry is due goes back to the ready queue. Returns
    /// how many lanes became ready (a worker must be woken for each), or `Pending` (the task is
    /// woken when a timer is due or an earlier one is set).
    pub(super) fn poll_timers(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        let mut became_ready = 0;
        loop {
            // Made here at the latest, so that the task's waker is registered before any insert.
            let timers = self.timers.get_or_insert_with(DelayQueue::new);
            let Poll::Ready(Some(expired)) = timers.poll_expired(cx) else {
                // An empty queue keeps the waker too: inserting wakes it.
                break;
            };
            let timer = expired.key();
            let key = expired.into_inner();
            let hash = self.hasher.hash_one(&key);
            let slots = &self.slots;
            let Some(&slot) = self
                .index
                .find(hash, |&slot| slots[slot].key.as_ref() == Some(&key))
            else {
                continue;
            };
            let lane = &mut self.slots[slot];
            if lane.timer.map(|(live, _)| live) != Some(timer) {
                continue;
            }
            lane.timer = None;
            if lane.active {
                // Held or ready: its holder re-arms the timer when it hands the lane back.
                continue;
            }
            if lane.runnable() {
                lane.active = true;
                self.ready.push_back((slot, Instant::now()));
                became_ready += 1;
            } else {
                self.arm(slot);
            }
        }
        if became_ready > 0 {
            self.publish_waiting();
            Poll::Ready(became_ready)
        } else {
            Poll::Pending
        }
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

    /// Drops every queued event and pending retry (the controller stopped); sequence numbers
    /// keep counting up.
    pub(super) fn clear(&mut self) {
        let (next_seq, track_echoes) = (self.next_seq, self.track_echoes);
        let waiting = self.waiting.take();
        *self = Self::default();
        (self.next_seq, self.track_echoes, self.waiting) = (next_seq, track_echoes, waiting);
        self.publish_waiting();
    }

    /// Publishes since when the head of the ready queue waits, if anyone reads it.
    fn publish_waiting(&self) {
        if let Some(waiting) = &self.waiting {
            waiting.set(self.ready.front().map(|&(_, since)| since));
        }
    }
}

#[cfg(test)]
mod tests;
