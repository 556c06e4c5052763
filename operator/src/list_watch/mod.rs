//! Informers: list+watch of one kind, turned into Add, Update, Delete and Resync events.
//!
//! An [`Informer`] runs `kube_runtime::watcher` with its default backoff (exponential, 0.8 s to
//! 30 s with jitter), so watch errors never become a hot loop. The backoff starts over only when
//! data arrives (a list page or a watch event), so a list that keeps failing, e.g. without RBAC to
//! list the kind, is retried ever less often up to every 30 s (see [`list_scope`](crate::list_scope)'s
//! `backoff.rs`). Each failure is
//! counted and logged as a warning, except a `404` on the list (the kind's CRD is not installed):
//! that is one error line per outage naming the CRD and how to install it (see `watch_errors.rs`).
//! It keeps a cache of the last known state of every object and emits (see `events.rs` and
//! `cache.rs`):
//!
//! - every object of the initial list as [`InformerEvent::Add`]; the informer reports **synced**
//!   ([`SyncedFlag`]) once that list is complete;
//! - a watch event for a known object whose `resourceVersion` changed as
//!   [`InformerEvent::Update`] with the cached old state (except the first decodable state of an
//!   object that has not decoded before, an `Add`: see [below](#objects-that-do-not-deserialize));
//! - after a re-list (watch expired, HTTP 410, reconnect after the apiserver was down): objects
//!   absent from the new list as [`InformerEvent::Delete`] with their last known state (a delete
//!   missed during a disconnect is never dropped), changed objects as `Update`, new ones as `Add`;
//!   an object whose UID changed under the same name as `Delete(old)` then `Add(new)`; a re-list
//!   that covers only part of the kind (its [`ListScope`] gives a
//!   range, e.g. a shard of a sharded kind, see `kubeapp-ha`'s `sharding`) forgets, without an
//!   event, the absent objects outside that range (they left the replica's share; they were not
//!   deleted);
//! - with [`ListWatchOptions::resync_interval`], every cached object as [`InformerEvent::Resync`]
//!   on each tick (watchers see `update(obj, obj)`, reconcilers `Resynced`). Ticks missed while the
//!   consumer did not pull (backpressure) are not replayed: one resync, then a period later.
//!
//! # Objects that do not deserialize
//!
//! The informer reads each listed or watched object into the typed kind on its own, straight
//! from the response's bytes (see `read.rs`: one pass per object, as kube-runtime's typed
//! watcher; the object is read again as a `DynamicObject`, which always decodes, only when it
//! does not fit). An object that does not convert is delivered as an
//! [`Undecodable`] (the raw object, the serde error, and the incarnation's last decodable state)
//! through the normal event path: it is cached, diffed and resynced like any object, so a list
//! never fails for it and the informer and all other objects carry on. Each undecodable state is
//! logged (kind, namespace, name and the serde error) and counted
//! (`informer_decode_errors_total`) once, when the informer reports it as an Add or Update: a
//! re-list or resync repeating it, or its deletion, is not a new state. The cache keeps the last
//! decodable state inside the `Undecodable` (see `cache.rs`) and reports an object's first
//! decodable state as an Add, so that typed handlers see every object as the sequence of its
//! decodable states (see [`view`](crate::view)); the opinionated wrappers also read its metadata,
//! so a deletion it holds with their finalizer is never stuck silently (see
//! [`opinionated`](crate::opinionated#objects-that-do-not-decode)). The cost is a scan of each
//! object's text before it is read (to find where it ends, so it can be read again when it does
//! not fit), and, while an object is undecodable, its last decodable state kept alive in the
//! cache. Untyped kinds, synthetic streams ([`Informer::from_watch_stream`]) and an informer
//! with a transform of the raw object ([`ListWatchOptions::transform`], which must see the
//! `DynamicObject`) convert from a `DynamicObject` instead (see `decode.rs`).
//!
//! # Drift detection
//!
//! A watch can stop delivering without closing, leaving a cache that is silently stale. An
//! informer built from a client therefore checks its cache, every [`DriftCheck::period`] (10
//! minutes by default), against a metadata-only **consistent** list of the apiserver (a quorum
//! read, never `resourceVersion="0"`), gives the watch [`DriftCheck::grace`] (60 s) to deliver
//! what that list saw, and then requires every listed object to be cached at its listed
//! `resourceVersion` or newer (or deleted since), and every object the list lacked to be gone.
//! Anything else is drift: counted (`informer_cache_drift_total{kind}`; every check counts in
//! `informer_cache_drift_checks_total{kind}`), logged with counts and up to five names per
//! class, and the informer lists and watches again, so the cache diff delivers what was missed.
//! Turn it off or change the period with `ListWatchOptions::drift_check` or
//! [`InformerOptions::drift_check`](crate::InformerOptions::drift_check); the reasoning and the
//! cost are in `drift.rs`.
//!
//! # Memory
//!
//! Before caching, `metadata.managedFields` is dropped (about half of the metadata, never needed by
//! handlers) unless [`ListWatchOptions::keep_managed_fields`] is set, and then the optional
//! [`ListWatchOptions::transform`] runs. Objects are shared (`Arc`) between the cache, queued events
//! and handlers, never deep-copied.
//!
//! # Backpressure
//!
//! The informer is a stream: when its consumer (the controller) stops pulling, it stops reading the
//! watch, and the HTTP connection's flow control pushes back on the apiserver, which eventually
//! closes a watch that lags too far behind; the informer then re-lists and the cache diff above
//! reports what changed meanwhile.

mod cache;
mod decode;
mod drift;
mod events;
mod options;
mod read;
mod watch_errors;

use std::fmt;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

use crate::list_scope::{ListScope, ListedObject, Lister, PlainWatch, map_event};
use crate::metrics::{ControllerMetrics, KindMetrics};
use crate::object::{SharedObject, Undecodable, share};
use crate::projection::{Projected, Projection};
use crate::store::cache::SharedCache;
use crate::store::{InformerEvent, SyncedFlag};

pub use self::drift::DriftCheck;
use self::events::{informer_events, informer_events_served};
pub use self::options::{ListWatchOptions, Transform};

use kube::core::GroupVersionKind;

/// How an informer turns what it lists and watches into its objects: each object read from the
/// response's bytes (see `read.rs`), or, for untyped kinds, synthetic streams and a transform of
/// the raw object, converted from a `DynamicObject`; an object that does not fit becomes an
/// [`Undecodable`].
#[derive(Clone)]
pub(crate) struct Decode {
    /// Converts an object that arrives as a `DynamicObject`.
    dynamic: Arc<dyn Fn(DynamicObject) -> Result<SharedObject, Undecodable> + Send + Sync>,
    /// Makes the lister that reads each object from its bytes, given the kind and whether
    /// `managedFields` are kept; `None`: list and watch `DynamicObject`s.
    read: Option<Arc<dyn Fn(ApiResource, bool) -> Lister + Send + Sync>>,
}

impl Decode {
    /// A decoder of `DynamicObject`s only.
    fn dynamic_only(
        dynamic: impl Fn(DynamicObject) -> Result<SharedObject, Undecodable> + Send + Sync + 'static,
    ) -> Self {
        Self {
            dynamic: Arc::new(dynamic),
            read: None,
        }
    }

    /// `object`, which arrived as a `DynamicObject`, as the informer's object.
    pub(crate) fn convert(&self, object: DynamicObject) -> Result<SharedObject, Undecodable> {
        (self.dynamic)(object)
    }

    /// The lister of an informer of `resource` with `options`: reading each object from its
    /// bytes, unless there is no type to read or a transform of the raw object must see it
    /// first.
    fn lister(&self, resource: &ApiResource, options: &ListWatchOptions) -> Lister {
        match &self.read {
            Some(read) if options.transform.is_none() => {
                read(resource.clone(), options.keep_managed_fields)
            }
            _ => Lister::dynamic(),
        }
    }
}
/// Makes the informer's events; given a shared informer's cache, the informer keeps its states
/// there instead of in a map of its own.
type Source = Box<
    dyn FnOnce(KindMetrics, Option<Arc<SharedCache>>) -> BoxStream<'static, InformerEvent> + Send,
>;

/// A list+watch of one kind; see the [module docs](self). Add it to an
/// [`InformerController`](crate::InformerController), which drives it.
pub struct Informer {
    info: GroupVersionKind,
    synced: SyncedFlag,
    max_concurrent_workers: Option<usize>,
    source: Source,
}

impl Informer {
    /// An informer of the typed kind `K` (a derived custom resource or a k8s-openapi type).
    pub fn new<K>(client: Client, options: ListWatchOptions) -> Self
    where
        K: kube::Resource
            + DeserializeOwned
            + serde::Serialize
            + Clone
            + fmt::Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default,
    {
        let resource = ApiResource::erase::<K>(&K::DynamicType::default());
        Self::watching(
            client,
            resource,
            options,
            typed_decoder::<K>(),
            Arc::new(PlainWatch),
        )
    }

    /// An informer of an untyped kind; handlers get `DynamicObject`s.
    pub fn dynamic(client: Client, resource: ApiResource, options: ListWatchOptions) -> Self {
        Self::dynamic_in(client, resource, options, Arc::new(PlainWatch))
    }

    /// An informer of an untyped kind that lists and watches in `scope` (see
    /// [`list_scope`](crate::list_scope)); [`dynamic`](Self::dynamic) uses [`PlainWatch`].
    pub fn dynamic_in(
        client: Client,
        resource: ApiResource,
        options: ListWatchOptions,
        scope: Arc<dyn ListScope>,
    ) -> Self {
        let decode = Decode::dynamic_only(|object: DynamicObject| Ok(share(object)));
        Self::watching(client, resource, options, decode, scope)
    }

    /// An informer fed by a stream of ready-made events, e.g. in tests or from another source of
    /// truth. It counts as synced from the start.
    pub fn from_stream(
        info: GroupVersionKind,
        events: impl futures::Stream<Item = InformerEvent> + Send + 'static,
    ) -> Self {
        Self {
            info,
            synced: SyncedFlag::new(true),
            max_concurrent_workers: None,
            source: Box::new(move |_, _| events.boxed()),
        }
    }

    /// An informer of the typed kind `K` over raw watch events you supply: a
    /// `kube_runtime::watcher` stream set up your own way, or recorded traffic in tests and
    /// benchmarks. The events go through the same cache, diff, `managedFields` rule, transform,
    /// resync and per-object decoding as with [`Informer::new`]; the options' namespace, selectors,
    /// page size and streaming list do not apply (the stream is chosen already), and nothing
    /// reconnects when the stream ends. It reports synced after the stream's first complete list
    /// (`Init` to `InitDone`).
    pub fn from_watch_stream<K>(
        info: GroupVersionKind,
        events: impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>>
        + Send
        + 'static,
        options: ListWatchOptions,
    ) -> Self
    where
        K: kube::Resource
            + DeserializeOwned
            + serde::Serialize
            + Clone
            + fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        Self::over_watch_stream(info, events.boxed(), options, typed_decoder::<K>())
    }

    /// [`from_watch_stream`](Self::from_watch_stream) for the projection `P` of its kind (see
    /// [`projection`](crate::projection)): each object is cached as a
    /// [`Projected<P>`](crate::projection::Projected).
    pub fn projection_from_watch_stream<P: Projection>(
        info: GroupVersionKind,
        events: impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>>
        + Send
        + 'static,
        options: ListWatchOptions,
    ) -> Self {
        Self::over_watch_stream(info, events.boxed(), options, projection_decoder::<P>(None))
    }

    fn over_watch_stream(
        info: GroupVersionKind,
        events: BoxStream<'static, Result<Event<DynamicObject>, watcher::Error>>,
        options: ListWatchOptions,
        decode: Decode,
    ) -> Self {
        let events = events
            .map(|item| item.map(|event| map_event(event, ListedObject::from)))
            .boxed();
        let synced = SyncedFlag::new(false);
        let flag = synced.clone();
        let kind = info.kind.clone();
        let max_concurrent_workers = options.max_concurrent_workers;
        let source: Source = Box::new(move |metrics, shared| {
            informer_events(events, options, decode, kind, flag, metrics, shared, None)
        });
        Self {
            info,
            synced,
            max_concurrent_workers,
            source,
        }
    }

    /// The informer of a shared informer ([`Informers`](crate::Informers)): `api` and `config`
    /// as kube-rs gives them, `decode` turning each raw object into the kind's object, `scope`
    /// what it lists and watches in (see [`list_scope`](crate::list_scope)).
    pub(crate) fn shared(
        api: Api<DynamicObject>,
        resource: &ApiResource,
        config: watcher::Config,
        options: ListWatchOptions,
        decode: Decode,
        scope: Arc<dyn ListScope>,
    ) -> Self {
        Self::listing(api, resource, config, options, decode, scope)
    }

    /// Group, version and kind of the objects.
    pub fn gvk(&self) -> &GroupVersionKind {
        &self.info
    }

    /// The informer's synced flag (readiness depends on it).
    pub fn synced(&self) -> SyncedFlag {
        self.synced.clone()
    }

    pub(crate) fn max_concurrent_workers(&self) -> Option<usize> {
        self.max_concurrent_workers
    }

    /// The informer's events; the controller calls this with the kind's metrics.
    pub(crate) fn into_events(self, metrics: KindMetrics) -> BoxStream<'static, InformerEvent> {
        (self.source)(metrics, None)
    }

    /// The events of a shared informer's informer, keeping object states in `cache` (which the
    /// shared informer writes as it publishes each event).
    pub(crate) fn into_shared_events(
        self,
        metrics: KindMetrics,
        cache: Arc<SharedCache>,
    ) -> BoxStream<'static, InformerEvent> {
        (self.source)(metrics, Some(cache))
    }

    /// The informer's events without a controller (for tests and custom consumers); nothing happens
    /// until the stream is polled.
    ///
    /// # Errors
    ///
    /// When the (unregistered) metric collectors cannot be created.
    pub fn into_stream(
        self,
    ) -> Result<BoxStream<'static, InformerEvent>, crate::metric_registration::MetricsError> {
        let metrics = ControllerMetrics::unregistered(None)?.for_kind(&self.info.kind);
        Ok(self.into_events(metrics))
    }

    fn watching(
        client: Client,
        resource: ApiResource,
        options: ListWatchOptions,
        decode: Decode,
        scope: Arc<dyn ListScope>,
    ) -> Self {
        let api: Api<DynamicObject> = match &options.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let config = options.watcher_config();
        Self::listing(api, &resource, config, options, decode, scope)
    }

    /// The list+watch of `api` with `config` as `scope` starts it (the plain one: kube-runtime's
    /// watcher and its backoff), through the cache, diff, managedFields rule, transform, resync
    /// and decoding of `options`; each list covers what `scope` says when it starts.
    fn listing(
        api: Api<DynamicObject>,
        resource: &ApiResource,
        config: watcher::Config,
        options: ListWatchOptions,
        decode: Decode,
        scope: Arc<dyn ListScope>,
    ) -> Self {
        let info = GroupVersionKind {
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
        };
        let synced = SyncedFlag::new(false);
        let flag = synced.clone();
        let kind = resource.kind.clone();
        let max_concurrent_workers = options.max_concurrent_workers;
        let resource = resource.clone();
        let lister = decode.lister(&resource, &options);
        let source: Source = Box::new(move |metrics, shared| {
            let relist = Arc::new(drift::Relist {
                api,
                resource: resource.clone(),
                config,
                scope: Arc::clone(&scope),
                lister,
            });
            let raw = relist.watch();
            let drift = options
                .drift_check
                .map(|check| drift::DriftChecker::new(check, relist));
            informer_events_served(
                raw,
                options,
                decode,
                kind,
                flag,
                metrics,
                shared,
                Some(scope),
                Some(resource),
                drift,
            )
        });
        Self {
            info,
            synced,
            max_concurrent_workers,
            source,
        }
    }
}

/// Reads each object as `K` on its own, so one bad object fails alone, and keeps the raw object
/// of one that fails.
fn typed_decoder<K>() -> Decode
where
    K: kube::Resource
        + DeserializeOwned
        + serde::Serialize
        + Clone
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    typed_decoder_with::<K>(None)
}

/// A typed transform, run on each decoded object before it is cached.
pub(crate) type TypedTransform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// [`typed_decoder`] with a transform of the decoded object.
pub(crate) fn typed_decoder_with<K>(transform: Option<TypedTransform<K>>) -> Decode
where
    K: kube::Resource
        + DeserializeOwned
        + serde::Serialize
        + Clone
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let read_transform = transform.clone();
    Decode {
        dynamic: Arc::new(
            move |object: DynamicObject| match decode::decode_typed::<K>(object) {
                Ok(mut typed) => {
                    if let Some(transform) = &transform {
                        transform(&mut typed);
                    }
                    Ok(share(typed))
                }
                Err((object, error)) => {
                    Err(Undecodable::new(object, &error, std::any::type_name::<K>()))
                }
            },
        ),
        read: Some(Arc::new(move |resource, keep_managed_fields| {
            read::lister::<read::Typed<K>>(resource, keep_managed_fields, read_transform.clone())
        })),
    }
}

/// Reads each object's body into the projection `P` (serde skips every field `P` does not name,
/// so they are never cached) beside the object's metadata; an object whose projected fields do
/// not fit is kept raw, as with a full type.
pub(crate) fn projection_decoder<P: Projection>(
    transform: Option<TypedTransform<Projected<P>>>,
) -> Decode {
    let read_transform = transform.clone();
    Decode {
        dynamic: Arc::new(
            move |object: DynamicObject| match P::deserialize(&object.data) {
                Ok(fields) => {
                    let mut projected = Projected::new(object.metadata, fields);
                    if let Some(transform) = &transform {
                        transform(&mut projected);
                    }
                    Ok(share(projected))
                }
                Err(error) => Err(Undecodable::new(object, &error, std::any::type_name::<P>())),
            },
        ),
        read: Some(Arc::new(move |resource, keep_managed_fields| {
            read::lister::<read::ProjectionOf<P>>(
                resource,
                keep_managed_fields,
                read_transform.clone(),
            )
        })),
    }
}

/// The decoder of a dynamic kind, with a transform. It lists `DynamicObject`s: there is no type
/// to read them into.
pub(crate) fn dynamic_decoder(transform: Option<TypedTransform<DynamicObject>>) -> Decode {
    Decode::dynamic_only(move |mut object: DynamicObject| {
        if let Some(transform) = &transform {
            transform(&mut object);
        }
        Ok(share(object))
    })
}

impl fmt::Debug for Informer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("info", &self.info)
            .field("synced", &self.synced.is_synced())
            .finish_non_exhaustive()
    }
}

type RawEvents = crate::list_scope::RawWatch;

#[cfg(test)]
#[path = "tests/projection.rs"]
mod projection_tests;
#[cfg(test)]
#[path = "tests/read.rs"]
mod read_tests;
#[cfg(test)]
#[path = "tests/resync.rs"]
mod resync_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
#[path = "tests/view.rs"]
mod view_tests;
