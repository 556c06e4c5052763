//! One shared informer: one list+watch, its cache, and the subscribers its events fan out to.
//!
//! The informer's task pulls an event, writes it into the cache, then hands it to every
//! subscriber in turn (a controller's kind, a trigger), awaiting each: a subscriber that cannot
//! take more (a kind whose watcher backlog is full) pauses the whole informer, and with it the
//! watch (the same backpressure as a private informer, now shared by everyone who uses it).
//!
//! A new subscriber gets every cached object as an Add before any later event: subscribing and
//! delivering take the same (async) lock, so no event slips between the snapshot and the
//! subscription, and none is delivered twice. The task holds that lock across a run of events that
//! are ready one after another (at most 64, so a joining subscriber waits for at most that many),
//! and releases it before it waits for the stream: a lock round trip per event was a measurable
//! part of the typed path's cost (see `docs/performance/dispatch-and-memory.md`, issue #18).
//!
//! Lifetime: [`SharedInformer`] is the informer's "use". Kind handles, handler handles, stores and
//! triggers hold one; when the last is dropped, the task stops (and with it the watch). The
//! registry holds only a weak reference.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::ApiResource;
use tokio_util::sync::CancellationToken;

use super::{InformerKey, Registry};
use crate::list_scope::ListScope;
use crate::list_watch::Informer;
use crate::metrics::KindMetrics;
use crate::store::InformerEvent;
use crate::store::SharedCache;

/// What a shared informer hands its events to: a controller's kind (events enter its lanes) or a
/// related-object trigger (events become reconciles of other objects). The informer owns this
/// trait and the layers above implement it, so the informer never imports what subscribes.
pub(crate) trait Subscribe: Send + Sync {
    /// Hands `event` over if that needs no waiting (the common case, with no future built);
    /// [`Offer::Full`] when the subscriber's backlog is full.
    fn offer(&self, event: InformerEvent) -> Offer;

    /// [`offer`](Self::offer) by reference: a subscriber that only reads the event (a trigger)
    /// takes it without a copy; the default hands over a copy (two reference counts at most).
    fn offer_ref(&self, event: &InformerEvent) -> Offer {
        self.offer(event.clone())
    }

    /// Whether delivering to it makes the informer wait once the subscriber is behind (a kind
    /// whose backlog of events for watchers is bounded); the default does not.
    fn pauses_informer(&self) -> bool {
        false
    }

    /// Whether `other` is the same subscription made anew (a kind unsubscribes with a
    /// subscriber built again from the same runtime and run); the default: never (the same
    /// `Arc` always is, see [`Subscriber::is_same`]).
    fn is_same(&self, other: &dyn Subscribe) -> bool {
        let _ = other;
        false
    }

    /// The subscriber as `Any`, for [`is_same`](Self::is_same).
    fn as_any(&self) -> &dyn Any;
}

/// What a subscriber did with an event offered without waiting.
pub(crate) enum Offer {
    /// Taken (queued, handled, or not for this subscriber).
    Taken,
    /// The subscriber is gone for good.
    Gone,
    /// The subscriber's backlog is full: this future waits for room and hands the event over,
    /// resolving to false when the subscriber is gone for good.
    Full(BoxFuture<'static, bool>),
}

impl Offer {
    /// [`Offer::Taken`] when `taken`, else [`Offer::Gone`].
    pub(crate) fn taken_or_gone(taken: bool) -> Self {
        if taken { Self::Taken } else { Self::Gone }
    }
}

/// One subscription of a shared informer. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Subscriber(Arc<dyn Subscribe>);

impl Subscriber {
    /// The subscription of `subscriber`.
    pub(crate) fn new(subscriber: Arc<dyn Subscribe>) -> Self {
        Self(subscriber)
    }

    /// Hands `event` over, waiting for room if need be; false when the subscriber is gone for
    /// good.
    async fn deliver(&self, event: &InformerEvent) -> bool {
        Self::settle(self.0.offer_ref(event)).await
    }

    /// The same, handing over the event itself.
    async fn deliver_owned(&self, event: InformerEvent) -> bool {
        Self::settle(self.0.offer(event)).await
    }

    async fn settle(offer: Offer) -> bool {
        match offer {
            Offer::Taken => true,
            Offer::Gone => false,
            Offer::Full(room) => room.await,
        }
    }

    fn offer(&self, event: InformerEvent) -> Offer {
        self.0.offer(event)
    }

    fn offer_ref(&self, event: &InformerEvent) -> Offer {
        self.0.offer_ref(event)
    }

    fn pauses_informer(&self) -> bool {
        self.0.pauses_informer()
    }

    /// The same `Arc`, or the same subscription made anew.
    fn is_same(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0)) || self.0.is_same(&*other.0)
    }
}

/// The part of a shared informer its task needs: the cache and the subscribers.
pub(crate) struct Fanout {
    pub(crate) cache: Arc<SharedCache>,
    pub(crate) resource: ApiResource,
    pub(crate) max_concurrent_workers: Option<usize>,
    subscribers: Mutex<Arc<Vec<Subscriber>>>,
    /// Bumped on every change of `subscribers`, so the informer's task re-reads the list only
    /// then (see [`SubscriberList`]).
    subscribers_version: AtomicU64,
    /// How many subscribers there are (a ready-made stream waits for its first one).
    subscribed: tokio::sync::watch::Sender<usize>,
    /// Held while an event is applied and delivered, and while a subscriber joins.
    delivery: tokio::sync::Mutex<()>,
    /// What the informer lists and watches in (`None` for a ready-made stream, which cannot be
    /// listed again); see [`crate::list_scope`].
    pub(crate) scope: Option<Arc<dyn ListScope>>,
}

impl Fanout {
    fn subscribers(&self) -> Arc<Vec<Subscriber>> {
        Arc::clone(
            &self
                .subscribers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn change(&self, f: impl FnOnce(&mut Vec<Subscriber>)) {
        let mut slot = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = Vec::clone(&slot);
        f(&mut next);
        self.subscribed.send_replace(next.len());
        *slot = Arc::new(next);
        self.subscribers_version.fetch_add(1, Ordering::AcqRel);
    }

    /// Resolves once someone subscribed.
    async fn first_subscriber(&self) {
        let mut count = self.subscribed.subscribe();
        let _ = count.wait_for(|n| *n > 0).await;
    }

    /// Adds `subscriber`; it first gets every cached object as an Add.
    pub(crate) async fn subscribe(&self, subscriber: Subscriber) {
        let _delivering = self.delivery.lock().await;
        let snapshot = self.cache.snapshot();
        self.change(|subscribers| subscribers.push(subscriber.clone()));
        for object in snapshot {
            if !subscriber.deliver(&InformerEvent::Add(object)).await {
                break;
            }
        }
    }

    /// Delivers to `subscriber`, as Adds, every cached object `wanted` picks (e.g. a sharded
    /// term's newly active slots), under the delivery lock: events before are in the cache, events after
    /// follow in order.
    pub(crate) async fn deliver_cached(
        &self,
        subscriber: &Subscriber,
        wanted: &(dyn Fn(&crate::object::SharedObject) -> bool + Sync),
    ) {
        let _delivering = self.delivery.lock().await;
        for object in self.cache.snapshot() {
            if wanted(&object) && !subscriber.deliver(&InformerEvent::Add(object)).await {
                break;
            }
        }
    }

    /// Removes `subscriber` (events already delivered stay delivered).
    pub(crate) fn unsubscribe(&self, subscriber: &Subscriber) {
        self.change(|subscribers| subscribers.retain(|s| !s.is_same(subscriber)));
    }

    /// Applies one event to the cache and offers it to every subscriber in turn, without
    /// waiting; the caller holds the delivery lock. When a subscriber's backlog is full, returns
    /// the rest of the delivery (that subscriber and the ones after it), which the caller awaits
    /// with [`finish_publish`](Self::finish_publish) before the next event. A future per event
    /// and per subscriber was a measurable part of the typed path (docs/performance/dispatch-and-memory.md).
    fn publish_now(&self, event: InformerEvent, list: &mut SubscriberList) -> Option<Backlogged> {
        self.cache.apply(&event);
        let subscribers: &Arc<Vec<Subscriber>> = list.current(self);
        let mut gone = Vec::new();
        let mut backlogged = None;
        let mut event = Some(event);
        for (at, subscriber) in subscribers.iter().enumerate() {
            // The last subscriber gets the event itself, the others a copy.
            let offered = if at + 1 == subscribers.len() {
                event.take().map(|event| subscriber.offer(event))
            } else {
                event.as_ref().map(|event| subscriber.offer_ref(event))
            };
            match offered {
                None | Some(Offer::Taken) => {}
                Some(Offer::Gone) => gone.push(subscriber.clone()),
                Some(Offer::Full(room)) => {
                    backlogged = Some(Backlogged {
                        subscribers: Arc::clone(subscribers),
                        at,
                        room,
                        event: event.take(),
                    });
                    break;
                }
            }
        }
        // Checked first: dropping even an empty vector's iterator was a measurable part of the
        // fan-out.
        if !gone.is_empty() {
            for subscriber in gone {
                self.unsubscribe(&subscriber);
            }
        }
        backlogged
    }

    /// Waits for room at the subscriber that was full, then delivers the event to the ones
    /// after it (waiting for each as need be).
    async fn finish_publish(&self, backlogged: Backlogged) {
        let Backlogged {
            subscribers,
            at,
            room,
            event,
        } = backlogged;
        let mut gone = Vec::new();
        if !room.await {
            gone.push(subscribers[at].clone());
        }
        if let Some(event) = event {
            let rest = &subscribers[at + 1..];
            if let Some((last, others)) = rest.split_last() {
                for subscriber in others {
                    if !subscriber.deliver(&event).await {
                        gone.push(subscriber.clone());
                    }
                }
                if !last.deliver_owned(event).await {
                    gone.push(last.clone());
                }
            }
        }
        for subscriber in gone {
            self.unsubscribe(&subscriber);
        }
    }
}

/// The rest of an event's delivery after a subscriber was full (see [`Fanout::publish_now`]).
struct Backlogged {
    /// The list the event was being delivered to.
    subscribers: Arc<Vec<Subscriber>>,
    /// The subscriber that was full.
    at: usize,
    /// Its wait for room, which hands it the event.
    room: BoxFuture<'static, bool>,
    /// The event for the subscribers after it (`None` when it was the last).
    event: Option<InformerEvent>,
}

/// The informer task's copy of the subscriber list, re-read only when it changed (a read takes
/// the list's lock and a reference count, once per event otherwise), and lent to each event's
/// delivery.
#[derive(Default)]
struct SubscriberList {
    version: Option<u64>,
    list: Arc<Vec<Subscriber>>,
}

impl SubscriberList {
    fn current(&mut self, fanout: &Fanout) -> &Arc<Vec<Subscriber>> {
        // The version is read before the list: a change in between bumps it again, and the next
        // event reads the list anew.
        let version = fanout.subscribers_version.load(Ordering::Acquire);
        if self.version != Some(version) {
            self.list = fanout.subscribers();
            self.version = Some(version);
        }
        &self.list
    }

    /// Whether one of the subscribers the last event went to [pauses the informer](Subscriber::pauses_informer).
    fn pauses_informer(&self) -> bool {
        self.list.iter().any(Subscriber::pauses_informer)
    }
}

/// At most this many events are published under one hold of the delivery lock (see
/// [`SharedInformer::ensure_started`]): how long a joining subscriber may wait for it.
const EVENTS_PER_HOLD: usize = 64;

/// One list+watch shared by everyone in the process who asked for its key; see the
/// [module docs](self). Dropping the last `Arc` stops it.
pub(crate) struct SharedInformer {
    pub(crate) fanout: Arc<Fanout>,
    key: InformerKey,
    registry: Weak<Registry>,
    stop: CancellationToken,
    /// The informer until its task starts (it needs a Tokio runtime).
    pending: Mutex<Option<(Informer, KindMetrics)>>,
    started: AtomicBool,
    /// A ready-made stream cannot be listed again: it is not read before a controller's kind
    /// subscribed, so no event ends up only in a cache nobody was told about.
    wait_for_subscriber: bool,
}

impl SharedInformer {
    pub(super) fn new(
        key: InformerKey,
        registry: Weak<Registry>,
        informer: Informer,
        metrics: KindMetrics,
        resource: ApiResource,
        max_concurrent_workers: Option<usize>,
        scope: Option<Arc<dyn ListScope>>,
    ) -> Self {
        let cache = Arc::new(SharedCache::new(informer.synced()));
        Self {
            fanout: Arc::new(Fanout {
                cache,
                resource,
                max_concurrent_workers,
                subscribers: Mutex::default(),
                subscribers_version: AtomicU64::new(0),
                subscribed: tokio::sync::watch::Sender::new(0),
                delivery: tokio::sync::Mutex::new(()),
                scope,
            }),
            key,
            registry,
            stop: CancellationToken::new(),
            pending: Mutex::new(Some((informer, metrics))),
            started: AtomicBool::new(false),
            wait_for_subscriber: false,
        }
    }

    /// The same over a ready-made stream: read only once someone subscribed.
    pub(super) fn over_stream(mut self) -> Self {
        self.wait_for_subscriber = true;
        self
    }

    /// Starts the informer's task if it has not started and a Tokio runtime is at hand (else
    /// the next call from within one starts it).
    pub(crate) fn ensure_started(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some((informer, metrics)) = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        self.started.store(true, Ordering::Release);
        if let Some(registry) = self.registry.upgrade() {
            registry.opened.fetch_add(1, Ordering::AcqRel);
        }
        let fanout = Arc::clone(&self.fanout);
        let stop = self.stop.clone();
        let registry = self.registry.clone();
        let kind = self.fanout.resource.kind.clone();
        let wait_for_subscriber = self.wait_for_subscriber;
        runtime.spawn(async move {
            let stopped_before_start = wait_for_subscriber
                && tokio::select! {
                    () = fanout.first_subscriber() => false,
                    () = stop.cancelled() => true,
                };
            if !stopped_before_start {
                let mut events = informer.into_shared_events(metrics, Arc::clone(&fanout.cache));
                let mut subscribers = SubscriberList::default();
                // Events ready one after another are published under one hold of the delivery
                // lock (up to `EVENTS_PER_HOLD`; a lock and an unlock per event otherwise). It
                // is released before waiting for the stream, so a subscriber joins between
                // events, never in the middle of one.
                let mut held = None;
                let mut in_hold = 0;
                // Whether an event was published since the informer last recorded its activity:
                // recorded when the stream runs dry (once per batch of ready events, not per
                // event: a clock read per event was measurable on the dispatch path).
                let mut unrecorded = false;
                loop {
                    let next = match events.next().now_or_never() {
                        Some(next) => next,
                        None => {
                            held = None;
                            if std::mem::take(&mut unrecorded) {
                                fanout.cache.synced.activity().event();
                            }
                            tokio::select! {
                                biased;
                                next = events.next() => next,
                                () = stop.cancelled() => None,
                            }
                        }
                    };
                    let Some(event) = next else {
                        break;
                    };
                    if held.is_none() {
                        held = Some(fanout.delivery.lock().await);
                        in_hold = 0;
                    }
                    unrecorded = true;
                    if let Some(backlogged) = fanout.publish_now(event, &mut subscribers) {
                        fanout.finish_publish(backlogged).await;
                    }
                    in_hold += 1;
                    if in_hold == EVENTS_PER_HOLD {
                        held = None;
                    }
                    // A stream that is always ready, feeding only subscribers that never make
                    // it wait (kinds without watchers, triggers), would otherwise keep this
                    // thread to itself: the lock taken once per event used to spend the task's
                    // budget, now this does. Not when a kind with watchers takes the events: it
                    // makes the informer wait when its backlog is full, as a private informer's
                    // intake does. Yielding every 128 events there let the workers drain each
                    // small batch and park, then woke one per event of the next batch: 1.5x the
                    // instructions per event at 100 workers (docs/performance/dispatch-and-memory.md).
                    if !subscribers.pauses_informer() {
                        tokio::task::consume_budget().await;
                    }
                }
                drop(held);
            }
            tracing::debug!(%kind, "shared informer stopped");
            if let Some(registry) = registry.upgrade() {
                registry.opened.fetch_sub(1, Ordering::AcqRel);
            }
        });
    }
}

impl Drop for SharedInformer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(registry) = self.registry.upgrade() {
            registry.forget(&self.key);
        }
    }
}
