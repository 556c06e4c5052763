//! The informer's event loop: raw watch traffic through decoding, the cache (see `cache.rs`) and
//! the resync timer, as a stream of [`InformerEvent`]s; each new undecodable state is logged and
//! counted here, once (see the [module docs](super#objects-that-do-not-deserialize)).

use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::Event;

use super::cache::{InformerCache, Observed};
use super::watch_errors::WatchErrorLog;
use super::{Decode, InformerEvent, ListWatchOptions, RawEvents, SyncedFlag};
use crate::list_scope::ListScope;
use crate::metrics::KindMetrics;
use crate::object::{ObjectKey, SharedObject, as_undecodable, share};
use crate::store::cache::SharedCache;

/// Turns raw watch traffic into informer events through the cache (see the module docs).
#[allow(clippy::too_many_arguments)] // One call site per informer constructor.
pub(super) fn informer_events(
    raw: RawEvents,
    options: ListWatchOptions,
    decode: Decode,
    kind: String,
    synced: SyncedFlag,
    metrics: KindMetrics,
    shared: Option<Arc<SharedCache>>,
    scope: Option<Arc<dyn ListScope>>,
) -> BoxStream<'static, InformerEvent> {
    informer_events_served(
        raw, options, decode, kind, synced, metrics, shared, scope, None,
    )
}

/// [`informer_events`] of a list+watch of `served`: its failures name the resource (a missing
/// CRD once per outage).
#[allow(clippy::too_many_arguments)] // Two call sites.
pub(super) fn informer_events_served(
    raw: RawEvents,
    options: ListWatchOptions,
    decode: Decode,
    kind: String,
    synced: SyncedFlag,
    metrics: KindMetrics,
    shared: Option<Arc<SharedCache>>,
    scope: Option<Arc<dyn ListScope>>,
    served: Option<ApiResource>,
) -> BoxStream<'static, InformerEvent> {
    let resync = options.resync_interval.map(|period| {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        // After backpressure, one resync now and the next a full period later: missed ticks do not
        // replay as back-to-back full resyncs.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    let state = InformerState {
        raw,
        cache: shared.map_or_else(InformerCache::default, InformerCache::shared),
        ready: std::collections::VecDeque::new(),
        out: Vec::new(),
        resync,
        decode,
        options,
        kind,
        synced,
        metrics,
        scope,
        watch_errors: WatchErrorLog::new(served),
    };
    futures::stream::unfold(state, InformerState::next_event).boxed()
}

struct InformerState {
    raw: RawEvents,
    cache: InformerCache,
    ready: std::collections::VecDeque<InformerEvent>,
    /// Scratch buffer for the events one observation implies (kept to reuse its allocation).
    out: Vec<InformerEvent>,
    resync: Option<tokio::time::Interval>,
    decode: Decode,
    options: ListWatchOptions,
    kind: String,
    synced: SyncedFlag,
    metrics: KindMetrics,
    /// The range each list covers is asked here when it starts.
    scope: Option<Arc<dyn ListScope>>,
    /// What failed lists and watches were reported as (a missing CRD once, see the module).
    watch_errors: WatchErrorLog,
}

impl InformerState {
    async fn next_event(mut self) -> Option<(InformerEvent, Self)> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some((event, self));
            }
            let resync_timer = &mut self.resync;
            let resync = async move {
                match resync_timer {
                    Some(interval) => {
                        interval.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let next = tokio::select! {
                raw = self.raw.next() => Some(raw),
                () = resync => None,
            };
            let Some(raw) = next else {
                self.cache.resync(&mut self.out);
                self.ready.extend(self.out.drain(..));
                continue;
            };
            match raw {
                // kube-runtime's watcher never ends on its own; the informer ends with it.
                None => return None,
                Some(Err(error)) => {
                    self.metrics.watch_errors.inc();
                    self.watch_errors.report(&self.kind, &error);
                }
                Some(Ok(event)) => {
                    self.metrics.watch_events.inc();
                    let observed = self.observe(event);
                    if matches!(observed, Observed::ListDone) {
                        self.watch_errors.listed();
                    }
                    if matches!(observed, Observed::ListStart { .. }) && self.synced.is_synced() {
                        tracing::info!(
                            kind = %self.kind,
                            "re-listing (watch expired or reconnected); missed deletes follow as Delete"
                        );
                    }
                    if self.cache.apply(observed, &mut self.out) && !self.synced.is_synced() {
                        self.synced.set();
                        self.metrics.informer_synced.set(1);
                        tracing::info!(kind = %self.kind, "informer synced");
                    }
                    for event in &self.out {
                        self.report_undecodable(event);
                    }
                    self.ready.extend(self.out.drain(..));
                }
            }
        }
    }

    fn observe(&self, event: Event<DynamicObject>) -> Observed {
        match event {
            Event::Init => Observed::ListStart {
                within: self.scope.as_ref().and_then(|scope| scope.list_range()),
            },
            Event::InitDone => Observed::ListDone,
            Event::InitApply(object) => {
                let (key, object) = self.decode(object);
                Observed::Object {
                    key,
                    object,
                    listed: true,
                }
            }
            Event::Apply(object) => {
                let (key, object) = self.decode(object);
                Observed::Object {
                    key,
                    object,
                    listed: false,
                }
            }
            Event::Delete(object) => {
                let (key, object) = self.decode(object);
                Observed::Deleted { key, object }
            }
        }
    }

    fn decode(&self, mut object: DynamicObject) -> (ObjectKey, Option<SharedObject>) {
        let key = ObjectKey::of(&object);
        if !self.options.keep_managed_fields {
            object.metadata.managed_fields = None;
        }
        if let Some(transform) = &self.options.transform {
            transform(&mut object);
        }
        match (self.decode)(object) {
            Ok(decoded) => (key, Some(decoded)),
            Err(undecodable) => (key, Some(share(undecodable))),
        }
    }

    /// Logs and counts a new undecodable state, once: when the cache reports it as an Add or
    /// Update (a re-list repeating it produces no event; a resync or delete is no new state).
    fn report_undecodable(&self, event: &InformerEvent) {
        let (InformerEvent::Add(object) | InformerEvent::Update { new: object, .. }) = event else {
            if let InformerEvent::Delete(object) = event
                && let Some(undecodable) = as_undecodable(object)
            {
                tracing::debug!(
                    kind = %self.kind,
                    %undecodable,
                    last_decodable = undecodable.last_decodable().is_some(),
                    "object deleted while it does not deserialize"
                );
            }
            return;
        };
        let Some(undecodable) = as_undecodable(object) else {
            return;
        };
        self.metrics.decode_errors.inc();
        let meta = &undecodable.raw().metadata;
        tracing::error!(
            kind = %self.kind,
            namespace = meta.namespace.as_deref().unwrap_or(""),
            name = meta.name.as_deref().unwrap_or(""),
            resource_version = meta.resource_version.as_deref().unwrap_or(""),
            error = undecodable.error(),
            last_decodable = undecodable.last_decodable().is_some(),
            "object does not deserialize; typed handlers keep its last decodable state until it decodes again"
        );
    }
}
