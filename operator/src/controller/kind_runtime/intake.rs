//! How events enter a kind's lanes: the private informer's intake loop, and the queuing of one
//! event (at once when the backlog has room, else after waiting for it) that the intake and a
//! shared informer's fan-out both use.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use futures::stream::BoxStream;

use super::{KindRuntime, Running, State};
use crate::controller::durations::Instant;
use crate::controller::lanes::PushExtra;
use crate::store::InformerEvent;

/// What [`KindRuntime::try_enqueue`] did with an event.
pub(crate) enum Enqueue {
    /// It is in its lane.
    Queued,
    /// The controller is stopping: dropped.
    Stopped,
    /// The backlog of events for watchers is full: wait with
    /// [`KindRuntime::enqueue_when_room`].
    Full(WaitingEvent),
}

/// An event waiting for room in a kind's backlog, with what its own-writes check found as it
/// was first offered (the check consumes a recorded write, so it is not made twice).
pub(crate) struct WaitingEvent {
    event: InformerEvent,
    echo_found: Option<bool>,
    /// When it was offered: the start of its wait (`informer_event_wait_seconds`), room included.
    received: Instant,
}

impl KindRuntime {
    /// Pulls `events` into the lanes until the stream ends or the controller stops.
    pub(crate) async fn intake(
        self: Arc<Self>,
        mut events: BoxStream<'static, InformerEvent>,
        run: Arc<Running>,
    ) {
        let stopped = run.stop.cancelled();
        tokio::pin!(stopped);
        loop {
            // The stream first: while it has events ready, the stop future is not polled (each
            // poll of it takes a lock); `enqueue` checks the stop for every event.
            let next = tokio::select! {
                biased;
                next = events.next() => next,
                () = &mut stopped => None,
            };
            let Some(event) = next else {
                break;
            };
            if !self.enqueue(event, &run).await {
                break;
            }
            if !self.has_watchers.load(Ordering::Relaxed) {
                // Events without watcher work never wait for room: an informer with events always
                // ready would otherwise keep this thread to itself.
                tokio::task::consume_budget().await;
            }
        }
        tracing::debug!(kind = %self.name, "informer intake ended");
    }

    /// Queues `event` in its object's lane (an event for watchers once the backlog has room).
    /// Returns false when the controller stopped meanwhile (the event is dropped).
    pub(crate) async fn enqueue(
        self: &Arc<Self>,
        event: InformerEvent,
        run: &Arc<Running>,
    ) -> bool {
        match self.try_enqueue(event, run) {
            Enqueue::Queued => true,
            Enqueue::Stopped => false,
            Enqueue::Full(waiting) => self.enqueue_when_room(waiting, run).await,
        }
    }

    /// Queues `event` at once if the backlog has room (or the event is not for watchers); hands
    /// it back, with what was decided about it, when it must wait for room. A shared informer
    /// calls this for every subscriber of an event without building a future per call, and awaits
    /// [`enqueue_when_room`](Self::enqueue_when_room) only for one that is full.
    pub(crate) fn try_enqueue(
        self: &Arc<Self>,
        event: InformerEvent,
        run: &Arc<Running>,
    ) -> Enqueue {
        // Before the lock: the check may compare the two objects. Made once per event: a check
        // that finds a recorded write consumes the record.
        let echo_found = match &event {
            InformerEvent::Update { old, new } if !self.config.reconciles_own_writes() => {
                self.own_writes.check_now(old.as_ref(), new.as_ref())
            }
            _ => None,
        };
        let waiting = WaitingEvent {
            event,
            echo_found,
            received: Instant::now(),
        };
        if run.stop_seen() {
            return Enqueue::Stopped;
        }
        match self.push_if_room(waiting, run) {
            Ok(()) => Enqueue::Queued,
            Err(waiting) => Enqueue::Full(waiting),
        }
    }

    /// Pushes the event if the backlog has room (or it is not for watchers); hands it back when
    /// it has to wait.
    fn push_if_room(
        self: &Arc<Self>,
        waiting: WaitingEvent,
        run: &Arc<Running>,
    ) -> Result<(), WaitingEvent> {
        let mut state = self.state();
        if !self.has_room(&state) {
            return Err(waiting);
        }
        self.push_locked(&mut state, waiting, run);
        Ok(())
    }

    /// Whether an event may enter the lanes now: not for watchers, or the backlog has room.
    fn has_room(&self, state: &State) -> bool {
        !self.has_watchers.load(Ordering::Acquire)
            || state.lanes.backlog < self.config.max_pending_events
    }

    fn push_locked(self: &Arc<Self>, state: &mut State, waiting: WaitingEvent, run: &Arc<Running>) {
        let WaitingEvent {
            event,
            echo_found,
            received,
        } = waiting;
        let for_watchers = self.has_watchers.load(Ordering::Acquire);
        state.counts.event(event.action());
        let extra = PushExtra {
            echo_found,
            received: Some(received),
            ..PushExtra::default()
        };
        let pushed = state.lanes.push_with(event, for_watchers, extra);
        state.counts.pushed(pushed.merged_away > 0);
        if pushed.became_ready {
            self.work_became_ready(state, run);
        }
    }

    /// Waits for room in the backlog, then queues the event [`try_enqueue`](Self::try_enqueue)
    /// handed back. Returns false when the controller stopped meanwhile (the event is dropped).
    pub(crate) async fn enqueue_when_room(
        self: &Arc<Self>,
        waiting: WaitingEvent,
        run: &Arc<Running>,
    ) -> bool {
        let mut waiting = Some(waiting);
        loop {
            if run.stop.is_cancelled() {
                return false;
            }
            let room = {
                let mut state = self.state();
                if self.has_room(&state) {
                    let Some(waiting) = waiting.take() else {
                        return false;
                    };
                    self.push_locked(&mut state, waiting, run);
                    return true;
                }
                state.intake_waiting = true;
                // Made under the lock, where workers free room and notify: a `notify_waiters`
                // from now on wakes it.
                self.room.notified()
            };
            // While intake waits, the informer (and its cache) waits with it: nobody should
            // wait for the cache meanwhile.
            self.own_writes.set_intake_paused(true);
            tokio::select! {
                () = room => {}
                () = run.stop.cancelled() => {
                    self.own_writes.set_intake_paused(false);
                    return false;
                }
            }
            self.own_writes.set_intake_paused(false);
        }
    }
}
