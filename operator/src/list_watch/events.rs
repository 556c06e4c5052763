//! The informer's event loop: raw watch traffic through decoding, the cache (see `cache.rs`) and
//! the resync timer, as a stream of [`InformerEvent`]s; each new undecodable state is logged and
//! counted here, once (see the [module docs](super#objects-that-do-not-deserialize)).

use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use kube::api::ApiResource;
use kube::runtime::watcher::Event;

use super::cache::{InformerCache, Observed};
use super::drift::{DriftChecker, Step};
use super::watch_errors::WatchErrorLog;
use super::{Decode, InformerEvent, ListWatchOptions, RawEvents, SyncedFlag};
use crate::list_scope::{ListScope, Listed, ListedObject};
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
        raw, options, decode, kind, synced, metrics, shared, scope, None, None,
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
    drift: Option<DriftChecker>,
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
        drift,
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
    /// The cache's checks against the apiserver (informers built from a client).
    drift: Option<DriftChecker>,
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
            let drift = &mut self.drift;
            let drift_step = async move {
                match drift {
                    Some(checker) => checker.next().await,
                    None => std::future::pending().await,
                }
            };
            let mut drifted = None;
            let next = tokio::select! {
                raw = self.raw.next() => Some(raw),
                () = resync => None,
                step = drift_step => {
                    drifted = Some(step);
                    None
                }
            };
            if let Some(step) = drifted {
                self.drift_step(step);
                continue;
            }
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
                    self.synced.activity().watch_error();
                    self.watch_errors.report(&self.kind, &error);
                }
                Some(Ok(event)) => {
                    self.metrics.watch_events.inc();
                    let observed = self.observe(event);
                    self.drift_observe(&observed);
                    if matches!(observed, Observed::ListDone) {
                        self.watch_errors.listed();
                    }
                    if matches!(observed, Observed::ListStart { .. }) && self.synced.is_synced() {
                        self.synced.activity().relist();
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

    /// Tells a pending drift check what the watch delivered.
    fn drift_observe(&mut self, observed: &Observed) {
        let Some(checker) = &mut self.drift else {
            return;
        };
        match observed {
            Observed::ListStart { .. } => checker.cancel(),
            Observed::Deleted { key, object } => {
                let version = object.as_ref().and_then(super::drift::cached_version);
                checker.deleted(key, version);
            }
            Observed::Object { .. } | Observed::ListDone => {}
        }
    }

    /// Runs one step of the drift check (see `drift.rs`).
    fn drift_step(&mut self, step: Step) {
        let Some(checker) = &mut self.drift else {
            return;
        };
        match step {
            Step::Due => {
                if self.synced.is_synced() && !self.cache.is_listing() {
                    checker.start();
                }
            }
            Step::Listed(Ok(listed)) => {
                self.metrics.drift_checks.inc();
                if !checker.listed(listed, self.cache.versions().into_iter()) {
                    tracing::debug!(kind = %self.kind, "drift check skipped: a resourceVersion is not a number");
                }
            }
            Step::Listed(Err(error)) => {
                checker.cancel();
                tracing::warn!(kind = %self.kind, %error, "drift check: the list failed; next check in one period");
            }
            Step::Compare => {
                let cache = &self.cache;
                let drift = checker.compare(|key| cache.version_of(key));
                if drift.is_empty() {
                    return;
                }
                self.metrics.cache_drift.inc();
                let names = |keys: &[crate::object::ObjectKey]| {
                    keys.iter()
                        .take(5)
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                tracing::warn!(
                    kind = %self.kind,
                    missing = drift.missing.len(),
                    stale = drift.stale.len(),
                    extra = drift.extra.len(),
                    missing_names = %names(&drift.missing),
                    stale_names = %names(&drift.stale),
                    extra_names = %names(&drift.extra),
                    "the informer's cache drifted from the apiserver (the watch did not deliver); re-listing"
                );
                self.raw = checker.relist_watch();
            }
        }
    }

    fn observe(&self, event: Event<ListedObject>) -> Observed {
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

    fn decode(&self, object: ListedObject) -> (ObjectKey, Option<SharedObject>) {
        let mut object = match object.0 {
            Listed::Read { key, object } => return (key, Some(object)),
            Listed::Dynamic(object) => *object,
        };
        let key = ObjectKey::of(&object);
        if !self.options.keep_managed_fields {
            object.metadata.managed_fields = None;
        }
        if let Some(transform) = &self.options.transform {
            transform(&mut object);
        }
        match self.decode.convert(object) {
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
