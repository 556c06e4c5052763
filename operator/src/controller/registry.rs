//! The handlers of a kind and what `KindHandle`s registered: handler numbers, adding and
//! removing handlers while the controller runs, and replaying the cache to a handler added then.
//!
//! Handlers are kept as an immutable [`Handlers`] list, replaced as a whole on each change, so a
//! worker reads them without a lock per event (it re-reads them when `handlers_version` moved).
//! Each handler has a stable number (never reused), which its pending retries refer to, and a
//! `since`: events pushed into the lanes before it (sequence numbers below `since`) skip it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::kind_runtime::{KindRuntime, Running, State};
use super::lanes::{HandlerId, PushExtra};
use crate::informers::{Fanout, Subscriber};
use crate::reconciler::DynReconciler;
use crate::store::InformerEvent;
use crate::watcher::DynWatcher;

/// What one `HandlerHandle` registered: a handler or a trigger, and the informer uses that keep
/// their watches open until it is removed.
pub(crate) struct Registration {
    /// The handler it added, if any.
    pub handler: Option<HandlerId>,
    /// The trigger it subscribed to a related kind's informer, if any.
    pub trigger: Option<(Arc<Fanout>, Subscriber)>,
    /// Held, never read: dropping the registration releases the informers it used.
    pub _keep_alive: Vec<Arc<dyn Send + Sync>>,
}

/// One registered handler: its number, the first push it sees, and the handler.
pub(crate) struct Entry<H: ?Sized> {
    /// The handler's number within its kind (watchers and reconcilers counted apart).
    pub id: usize,
    /// Events pushed before the handler was added (sequence numbers below this) skip it.
    pub since: u64,
    /// The handler, erased.
    pub handler: Arc<H>,
}

impl<H: ?Sized> Clone for Entry<H> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            since: self.since,
            handler: Arc::clone(&self.handler),
        }
    }
}

/// The handlers of a kind; replaced as a whole when one is added or removed.
#[derive(Default)]
pub(crate) struct Handlers {
    /// In registration order.
    pub watchers: Vec<Entry<dyn DynWatcher>>,
    /// In registration order.
    pub reconcilers: Vec<Entry<dyn DynReconciler>>,
}

impl Handlers {
    /// The watcher numbered `id`, unless it was removed.
    pub(crate) fn watcher(&self, id: usize) -> Option<&Entry<dyn DynWatcher>> {
        self.watchers.iter().find(|entry| entry.id == id)
    }

    /// The reconciler numbered `id`, unless it was removed.
    pub(crate) fn reconciler(&self, id: usize) -> Option<&Entry<dyn DynReconciler>> {
        self.reconcilers.iter().find(|entry| entry.id == id)
    }
}

fn set_since<H: ?Sized>(entries: &mut [Entry<H>], id: usize, since: u64) {
    for entry in entries.iter_mut().filter(|entry| entry.id == id) {
        entry.since = since;
    }
}

impl KindRuntime {
    /// Keeps `registration` until [`unregister`](Self::unregister) is called with the token.
    pub(crate) fn register(&self, registration: Registration) -> u64 {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        self.registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token, registration);
        token
    }

    /// Removes what `token` registered: its handler, its trigger's subscription, its informer uses.
    pub(crate) fn unregister(&self, token: u64) {
        let registration = self
            .registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&token);
        if let Some(registration) = registration {
            if let Some(handler) = registration.handler {
                self.remove_handler(handler);
            }
            if let Some((fanout, subscriber)) = &registration.trigger {
                fanout.unsubscribe(subscriber);
            }
        }
    }

    /// The triggers registered (to subscribe when the controller starts).
    pub(crate) fn triggers(&self) -> Vec<(Arc<Fanout>, Subscriber)> {
        self.registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter_map(|registration| registration.trigger.clone())
            .collect()
    }

    pub(crate) fn add_watcher(self: &Arc<Self>, watcher: Arc<dyn DynWatcher>) -> HandlerId {
        let id = self.next_id(true);
        self.add_handler(HandlerId::Watcher(id), |handlers, since| {
            handlers.watchers.push(Entry {
                id,
                since,
                handler: watcher,
            });
        })
    }

    pub(crate) fn add_reconciler(
        self: &Arc<Self>,
        reconciler: Arc<dyn DynReconciler>,
    ) -> HandlerId {
        let id = self.next_id(false);
        self.add_handler(HandlerId::Reconciler(id), |handlers, since| {
            handlers.reconcilers.push(Entry {
                id,
                since,
                handler: reconciler,
            });
        })
    }

    fn next_id(&self, watcher: bool) -> usize {
        let mut ids = self.next_ids.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = if watcher { &mut ids.0 } else { &mut ids.1 };
        *slot += 1;
        *slot - 1
    }

    /// Adds a handler. Before the controller runs, or for a kind without a shared cache, it sees
    /// every event pushed from now on (the cache arrives as Adds when the run subscribes). While
    /// the controller runs, it skips what is queued already and gets every cached object as an
    /// Add for itself instead: at once when the cache has been delivered to the lanes
    /// (`live`), else when it has (`mark_live`), so it never gets the cache twice.
    fn add_handler(
        self: &Arc<Self>,
        id: HandlerId,
        add: impl FnOnce(&mut Handlers, u64),
    ) -> HandlerId {
        let run = self.running();
        let mut state = self.state();
        match run {
            Some(run) if self.cache.get().is_some() => {
                if state.live {
                    self.replace_handlers(|handlers| add(handlers, state.lanes.next_seq()));
                    self.replay(&mut state, &run, id);
                } else {
                    // Nothing until `mark_live` replays the cache for it.
                    self.replace_handlers(|handlers| add(handlers, u64::MAX));
                    state.awaiting_replay.push(id);
                }
            }
            _ => self.replace_handlers(|handlers| add(handlers, 0)),
        }
        id
    }

    /// The kind's shared informer delivered its cache to the lanes: handlers added meanwhile
    /// start from here, with the cache replayed for each of them.
    pub(crate) fn mark_live(self: &Arc<Self>, run: &Arc<Running>) {
        let mut state = self.state();
        state.live = true;
        let waiting = std::mem::take(&mut state.awaiting_replay);
        for id in waiting {
            let since = state.lanes.next_seq();
            self.replace_handlers(|handlers| match id {
                HandlerId::Watcher(id) => set_since(&mut handlers.watchers, id, since),
                HandlerId::Reconciler(id) => set_since(&mut handlers.reconcilers, id, since),
            });
            self.replay(&mut state, run, id);
        }
    }

    /// Pushes every cached object as an Add for handler `id` alone, under the lanes' lock, so
    /// nothing queued later overtakes it.
    fn replay(self: &Arc<Self>, state: &mut State, run: &Arc<Running>, id: HandlerId) {
        let Some(cache) = self.cache.get() else {
            return;
        };
        let for_watchers = matches!(id, HandlerId::Watcher(_));
        for object in cache.snapshot() {
            let extra = PushExtra {
                only: Some(id),
                ..PushExtra::default()
            };
            let pushed = state
                .lanes
                .push_with(InformerEvent::Add(object), for_watchers, extra);
            state.counts.pushed(pushed.merged_away > 0);
            if pushed.became_ready {
                self.work_became_ready(state, run);
            }
        }
    }

    /// Removes a handler: it gets no new calls, and its pending retries are dropped when due.
    pub(crate) fn remove_handler(&self, id: HandlerId) {
        self.replace_handlers(|handlers| match id {
            HandlerId::Watcher(id) => handlers.watchers.retain(|entry| entry.id != id),
            HandlerId::Reconciler(id) => handlers.reconcilers.retain(|entry| entry.id != id),
        });
    }

    fn replace_handlers(&self, change: impl FnOnce(&mut Handlers)) {
        let mut slot = self
            .handlers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = Handlers {
            watchers: slot.watchers.clone(),
            reconcilers: slot.reconcilers.clone(),
        };
        change(&mut next);
        self.has_watchers
            .store(!next.watchers.is_empty(), Ordering::Release);
        *slot = Arc::new(next);
        self.handlers_version.fetch_add(1, Ordering::Release);
    }
}
