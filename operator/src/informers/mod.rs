//! [`Informers`]: the process-wide registry of shared informers.
//!
//! One list+watch per *informer key* per process: the kind (its Rust type, group, version and
//! plural), the `Api`'s namespace, the `watcher::Config` (selectors, page size, list strategy),
//! the transform's name, the `managedFields` choice and the resync period. Every controller, kind
//! handle, trigger and store that asks for the same key shares that watch and its cache; a
//! `kubeapp_runner::Runner` hands one registry to all its apps. The watch starts with its first
//! user (within a Tokio runtime) and stops when the last one is gone (see
//! [`open_watches`](Informers::open_watches)).
//!
//! Indexes are not part of the key: a second registration that asks for another index adds it to
//! the shared cache. The worker count is the controller's business, not the informer's.

mod options;
mod shared;

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;

use crate::list_scope::{ListScope, ListScopes, PlainWatch};
use crate::list_watch::{
    Decode, DriftCheck, Informer, ListWatchOptions, dynamic_decoder, projection_decoder,
    typed_decoder_with,
};
use crate::metrics::ControllerMetrics;
use crate::object::Kind;
use crate::projection::{Projected, Projection};
use crate::store::{IndexFn, Store, cache_digest};
use kubeapp_sdk::diagnostics::InformerDiagnostics;

pub use self::options::InformerOptions;
pub(crate) use self::shared::{Fanout, Offer, SharedInformer, Subscribe, Subscriber};

/// What identifies a shared informer; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InformerKey {
    type_id: TypeId,
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    /// `watcher::Config` has no `Hash`; its `Debug` form names every field.
    config: String,
    /// The config's selectors, for the diagnostics (already part of `config`).
    label_selector: Option<String>,
    field_selector: Option<String>,
    /// Whether the informer lists and watches itself (not fed by a stream).
    listed: bool,
    transform: Option<&'static str>,
    keep_managed_fields: bool,
    resync: Option<Duration>,
}

#[derive(Default)]
pub(crate) struct Registry {
    informers: Mutex<HashMap<InformerKey, Weak<SharedInformer>>>,
    metrics: OnceLock<ControllerMetrics>,
    /// Informer tasks running.
    opened: AtomicUsize,
    /// What each new shared informer lists and watches in (`None`: a [`PlainWatch`]).
    list_scopes: RwLock<Option<ListScopes>>,
}

impl Registry {
    /// Removes `key` when its informer is gone (not a newer one registered under it since).
    fn forget(&self, key: &InformerKey) {
        let mut informers = self
            .informers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if informers
            .get(key)
            .is_some_and(|weak| weak.strong_count() == 0)
        {
            informers.remove(key);
        }
    }
}

/// The registry of shared informers; see the [module docs](self). Cheap to clone; clones share
/// everything.
///
/// Registrations with the same kind, namespace, selectors and options share one list+watch
/// and one cache; the informer stops when its last store or handler is dropped.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use k8s_openapi::api::core::v1::Secret;
/// use kube::{Api, runtime::watcher};
/// use kubeapp_operator::{ControllerConfig, InformerController, InformerOptions, Informers};
///
/// let informers = Informers::new();
/// let secrets = || Api::<Secret>::namespaced(client.clone(), "shop");
/// let a = informers.store(secrets(), watcher::Config::default(), InformerOptions::default());
/// let b = informers.store(secrets(), watcher::Config::default(), InformerOptions::default());
/// a.wait_until_synced().await;
/// assert_eq!(informers.open_watches(), 1, "one watch for both stores");
/// assert_eq!(a.state().len(), b.state().len());
/// // A controller built on the same registry shares these informers with its handlers.
/// let controller = InformerController::new(ControllerConfig::default().informers(informers));
/// # let _ = controller;
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Informers {
    registry: Arc<Registry>,
}

/// What a registration needs besides the key.
pub(crate) struct Registration {
    pub(crate) api: Api<DynamicObject>,
    pub(crate) resource: ApiResource,
    pub(crate) config: watcher::Config,
    pub(crate) decode: Decode,
    pub(crate) indexes: Vec<(Arc<str>, IndexFn)>,
    pub(crate) max_concurrent_workers: Option<usize>,
    /// How the informer checks its cache (the first registration of a shared informer decides).
    pub(crate) drift_check: Option<DriftCheck>,
}

impl Informers {
    /// An empty registry whose informers count into collectors registered nowhere (see
    /// [`with_metrics`](Self::with_metrics)).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry whose informers count into `metrics`.
    pub fn with_metrics(metrics: ControllerMetrics) -> Self {
        let informers = Self::default();
        let _ = informers.registry.metrics.set(metrics);
        informers
    }

    /// Makes `metrics` the collectors of the registry's informers if none were given (by
    /// [`with_metrics`](Self::with_metrics) or an earlier call): the first controller built on
    /// a shared registry, e.g. a `kubeapp_runner::Runner`'s, names where its informers count.
    pub(crate) fn adopt_metrics(&self, metrics: &ControllerMetrics) {
        let _ = self.registry.metrics.set(metrics.clone());
    }

    /// Makes each shared informer registered from now on list and watch in the scope `scopes`
    /// gives for its resource (default: [`PlainWatch`], every object its config selects); see
    /// [`list_scope`](crate::list_scope). Set it before the kinds are registered: informers
    /// already made keep their scope. `kubeapp-ha`'s sharding sets its shard scopes here.
    pub fn list_in(&self, scopes: ListScopes) {
        *self
            .registry
            .list_scopes
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(scopes);
    }

    /// How many watches are open (each one a list+watch against the apiserver).
    pub fn open_watches(&self) -> usize {
        self.registry.opened.load(Ordering::Acquire)
    }

    /// What each shared informer in use reports for the Runner's `/debug/kubeapp`: its cache
    /// (objects, a digest comparable across replicas) and its watch (synced, last event,
    /// re-lists, failed requests); sorted by kind and namespace.
    pub fn diagnostics(&self) -> Vec<InformerDiagnostics> {
        let live: Vec<(InformerKey, Arc<SharedInformer>)> = self
            .registry
            .informers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(|(key, weak)| Some((key.clone(), weak.upgrade()?)))
            .collect();
        let mut report: Vec<InformerDiagnostics> = live
            .iter()
            .map(|(key, informer)| {
                let cache = &informer.fanout.cache;
                let activity = cache.synced.activity();
                let (objects, checksum) = cache_digest(cache);
                let mut entry = InformerDiagnostics::default();
                entry.kind.clone_from(&informer.fanout.resource.kind);
                entry
                    .api_version
                    .clone_from(&informer.fanout.resource.api_version);
                entry.namespace.clone_from(&key.namespace);
                entry.plural.clone_from(&key.plural);
                entry.label_selector.clone_from(&key.label_selector);
                entry.field_selector.clone_from(&key.field_selector);
                entry.listed = key.listed;
                entry.synced = cache.synced.is_synced();
                entry.objects = objects;
                entry.checksum = checksum;
                entry.last_event_age_seconds =
                    activity.last_event_age().map(|age| age.as_secs_f64());
                entry.relists = activity.relists();
                entry.watch_errors = activity.watch_errors();
                entry
            })
            .collect();
        report.sort_by(|a, b| (&a.kind, &a.namespace).cmp(&(&b.kind, &b.namespace)));
        report
    }

    /// A store over the shared informer of (`api`'s namespace, `config`, `options`), started if
    /// needed: for kinds a handler only reads.
    pub fn store<K: Kind>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        options: InformerOptions<K>,
    ) -> Store<K> {
        let informer = self.typed(api, config, options);
        Store::new(Arc::clone(&informer.fanout.cache), Some(informer))
    }

    /// A store over the shared informer of the projection `P` of its kind (see
    /// [`projection`](crate::projection)): the objects of `api`'s namespace and `config`, each
    /// cached as a [`Projected<P>`] only.
    pub fn projection_store<P: Projection>(
        &self,
        api: Api<P::Of>,
        config: watcher::Config,
        options: InformerOptions<Projected<P>>,
    ) -> Store<Projected<P>> {
        let informer = self.projected(api, config, options);
        Store::new(Arc::clone(&informer.fanout.cache), Some(informer))
    }

    /// A store of an untyped kind.
    pub fn dynamic_store(
        &self,
        api: Api<DynamicObject>,
        resource: ApiResource,
        config: watcher::Config,
        options: InformerOptions<DynamicObject>,
    ) -> Store<DynamicObject> {
        let informer = self.dynamic(api, resource, config, options);
        Store::new(Arc::clone(&informer.fanout.cache), Some(informer))
    }

    /// The shared informer of a typed kind.
    pub(crate) fn typed<K: Kind>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        options: InformerOptions<K>,
    ) -> Arc<SharedInformer> {
        let resource = ApiResource::erase::<K>(&());
        let namespace = api.namespace().map(str::to_string);
        let client = api.into_client();
        let dynamic = match &namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let transform = options.transform.clone();
        let decode = typed_decoder_with::<K>(transform.map(|(_, f)| f));
        self.shared::<K>(dynamic, resource, config, options, decode)
    }

    /// The shared informer of the projection `P` of its kind: one per kind and projection.
    pub(crate) fn projected<P: Projection>(
        &self,
        api: Api<P::Of>,
        config: watcher::Config,
        options: InformerOptions<Projected<P>>,
    ) -> Arc<SharedInformer> {
        let resource = ApiResource::erase::<P::Of>(&());
        let namespace = api.namespace().map(str::to_string);
        let client = api.into_client();
        let dynamic = match &namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let decode = projection_decoder::<P>(options.transform.clone().map(|(_, f)| f));
        self.shared::<Projected<P>>(dynamic, resource, config, options, decode)
    }

    /// The shared informer of an untyped kind.
    pub(crate) fn dynamic(
        &self,
        api: Api<DynamicObject>,
        resource: ApiResource,
        config: watcher::Config,
        options: InformerOptions<DynamicObject>,
    ) -> Arc<SharedInformer> {
        let decode = dynamic_decoder(options.transform.clone().map(|(_, f)| f));
        let namespace = api.namespace().map(str::to_string);
        let client = api.into_client();
        let api = match &namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        self.shared::<DynamicObject>(api, resource, config, options, decode)
    }

    fn shared<K: 'static>(
        &self,
        api: Api<DynamicObject>,
        resource: ApiResource,
        config: watcher::Config,
        options: InformerOptions<K>,
        decode: Decode,
    ) -> Arc<SharedInformer> {
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace: api.namespace().map(str::to_string),
            config: format!("{config:?}"),
            label_selector: config.label_selector.clone(),
            field_selector: config.field_selector.clone(),
            listed: true,
            transform: options.transform.as_ref().map(|(name, _)| *name),
            keep_managed_fields: options.keep_managed_fields,
            resync: options.resync,
        };
        self.register(
            key,
            Registration {
                api,
                resource,
                config,
                decode,
                indexes: options.indexes,
                max_concurrent_workers: options.max_concurrent_workers,
                drift_check: options.drift_check,
            },
            options.resync,
            options.keep_managed_fields,
        )
    }

    /// A shared informer over a ready-made [`Informer`] (a synthetic stream): never shared with
    /// another registration, read once a controller's kind subscribed.
    pub(crate) fn over_stream<K: 'static>(
        &self,
        informer: Informer,
        resource: ApiResource,
    ) -> Arc<SharedInformer> {
        static STREAMS: AtomicUsize = AtomicUsize::new(0);
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace: None,
            config: format!("stream-{}", STREAMS.fetch_add(1, Ordering::Relaxed)),
            label_selector: None,
            field_selector: None,
            listed: false,
            transform: None,
            keep_managed_fields: false,
            resync: None,
        };
        let metrics = self
            .registry
            .metrics
            .get_or_init(default_metrics)
            .for_kind(&resource.plural);
        let workers = informer.max_concurrent_workers();
        let shared = Arc::new(
            SharedInformer::new(
                key,
                Arc::downgrade(&self.registry),
                informer,
                metrics,
                resource,
                workers,
                None,
            )
            .over_stream(),
        );
        shared.ensure_started();
        shared
    }

    fn register(
        &self,
        key: InformerKey,
        registration: Registration,
        resync: Option<Duration>,
        keep_managed_fields: bool,
    ) -> Arc<SharedInformer> {
        let informer = {
            let mut informers = self
                .registry
                .informers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match informers.get(&key).and_then(Weak::upgrade) {
                Some(informer) => informer,
                None => {
                    let Registration {
                        api,
                        resource,
                        config,
                        decode,
                        max_concurrent_workers,
                        drift_check,
                        ..
                    } = &registration;
                    let scope: Arc<dyn ListScope> = match &*self
                        .registry
                        .list_scopes
                        .read()
                        .unwrap_or_else(PoisonError::into_inner)
                    {
                        Some(scopes) => scopes(resource),
                        None => Arc::new(PlainWatch),
                    };
                    let informer = Informer::shared(
                        api.clone(),
                        resource,
                        config.clone(),
                        listing_options(resync, keep_managed_fields, *drift_check),
                        decode.clone(),
                        Arc::clone(&scope),
                    );
                    let metrics = self
                        .registry
                        .metrics
                        .get_or_init(default_metrics)
                        .for_kind(&resource.plural);
                    let shared = Arc::new(SharedInformer::new(
                        key.clone(),
                        Arc::downgrade(&self.registry),
                        informer,
                        metrics,
                        resource.clone(),
                        *max_concurrent_workers,
                        Some(scope),
                    ));
                    informers.insert(key, Arc::downgrade(&shared));
                    shared
                }
            }
        };
        for (name, index) in registration.indexes {
            informer.fanout.cache.add_index(name, index);
        }
        informer.ensure_started();
        informer
    }
}

impl fmt::Debug for Informers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informers")
            .field("open_watches", &self.open_watches())
            .finish()
    }
}

/// Collectors registered nowhere, for a registry made without metrics.
#[allow(clippy::expect_used)] // Fixed, valid metric names: construction cannot fail.
fn default_metrics() -> ControllerMetrics {
    ControllerMetrics::unregistered(None).expect("valid metric names")
}

/// The list+watch options of a shared informer.
fn listing_options(
    resync: Option<Duration>,
    keep_managed_fields: bool,
    drift_check: Option<DriftCheck>,
) -> ListWatchOptions {
    let mut options = ListWatchOptions::default().drift_check(drift_check);
    if let Some(period) = resync {
        options = options.resync_interval(period);
    }
    if keep_managed_fields {
        options = options.keep_managed_fields();
    }
    options
}
