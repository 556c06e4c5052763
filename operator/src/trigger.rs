//! Related-object triggers: a change of one object reconciles others.
//!
//! - [`KindHandle::owns`](crate::KindHandle::owns): a change or delete of a child whose
//!   *controller* owner reference points at an object of the handle's kind reconciles that owner.
//! - [`KindHandle::watches`](crate::KindHandle::watches): a change or delete of any watched
//!   object reconciles what a mapper returns.
//! - [`Trigger`]: reconcile one object, or every object of the kind, on demand.
//!
//! A triggered request enters the owner's lane, so per-object order holds, as a reconcile of the
//! owner's **newest cached object** with action
//! [`Resynced`](crate::ReconcileAction::Resynced) and a [`TriggerCause`] in
//! [`ReconcileRequest::cause`](crate::ReconcileRequest::cause). Watchers do not run for it. A
//! trigger that arrives while a reconcile of the owner waits merges into it (level-triggered). An
//! owner that is not in the cache (deleted, or outside the informer's selectors) is not
//! reconciled; the trigger is dropped and logged at debug level.
//!
//! The Add event of an object that a handler of the owner's kind created with
//! [`Context::apply`](crate::Context::apply), at the version that write returned, triggers
//! nothing: it is the echo of the owner's own reconcile (counted in
//! `reconciler_own_write_events_skipped_total`; see [`own_writes`](crate::own_writes)). Any
//! later change of the child, ours included, triggers as usual.
//!
//! When a trigger starts, every child already cached counts as changed, so each owner with
//! children is reconciled once at start-up (a reconcile that merges with the owner's own initial
//! Add when that still waits).

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use crate::action::TriggerCause;
use crate::controller::kind_runtime::KindRuntime;
use crate::informers::{Offer, Subscribe};
use crate::object::{KubeObject, ObjectKey, SharedObject};
use crate::store::InformerEvent;
use crate::store::SharedCache;

/// Maps a related object to the keys of the objects to reconcile.
pub(crate) type MapFn = Box<dyn Fn(&dyn KubeObject) -> Vec<ObjectKey> + Send + Sync>;

/// How a sink names the cause of the requests it makes.
#[derive(Clone, Copy)]
pub(crate) enum CauseKind {
    Owned,
    Mapped,
}

/// A trigger subscribed to a related kind's shared informer.
pub(crate) struct TriggerSink {
    pub(crate) owner: Arc<KindRuntime>,
    pub(crate) owner_cache: Arc<SharedCache>,
    pub(crate) map: MapFn,
    pub(crate) cause: CauseKind,
    /// Kind and apiVersion of the related objects, for the cause's reference.
    pub(crate) related: kube::api::ApiResource,
}

/// A trigger only reads events and never waits: it takes each one by reference.
impl Subscribe for TriggerSink {
    fn offer(&self, event: InformerEvent) -> Offer {
        Offer::taken_or_gone(self.deliver(&event))
    }

    fn offer_ref(&self, event: &InformerEvent) -> Offer {
        Offer::taken_or_gone(self.deliver(event))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl TriggerSink {
    /// Turns one event of a related object into reconciles of its owners; always true (a
    /// trigger stays until it is removed).
    pub(crate) fn deliver(&self, event: &InformerEvent) -> bool {
        let related = event.object();
        // The creation of a child by the owner kind's own `Context::apply` tells its reconciler
        // nothing new: that reconcile made it (see `own_writes`).
        if matches!(event, InformerEvent::Add(_))
            && self.owner.own_writes.take_creation(related.metadata())
        {
            self.owner.metrics.own_write_echoes.inc();
            return true;
        }
        let keys = (self.map)(related.as_ref());
        if keys.is_empty() {
            return true;
        }
        let meta = related.metadata();
        let mut source = ObjectRef::<DynamicObject>::new_with(
            meta.name.as_deref().unwrap_or(""),
            self.related.clone(),
        );
        if let Some(namespace) = &meta.namespace {
            source = source.within(namespace);
        }
        let cause = match self.cause {
            CauseKind::Owned => TriggerCause::Owned {
                child: Box::new(source),
            },
            CauseKind::Mapped => TriggerCause::Mapped {
                source: Box::new(source),
            },
        };
        // An Add not recorded as ours yet may still be: its creator's response can come back
        // after the watch event. The reconcile request carries it, and dispatch checks again.
        let creation = matches!(event, InformerEvent::Add(_)).then(|| SharedObject::clone(related));
        for key in keys {
            reconcile_cached(
                &self.owner,
                &self.owner_cache,
                &key,
                &cause,
                creation.clone(),
            );
        }
        true
    }
}

/// Queues a reconcile of the cached object under `key`, if there is one.
fn reconcile_cached(
    owner: &Arc<KindRuntime>,
    cache: &SharedCache,
    key: &ObjectKey,
    cause: &TriggerCause,
    creation: Option<SharedObject>,
) {
    match cache.get(key) {
        Some(object) => owner.push_triggered(object, cause.clone(), creation),
        None => {
            tracing::debug!(kind = %owner.name, object = %key, %cause, "trigger for an object not in the cache; dropped");
        }
    }
}

/// The keys of the objects a child's controller owner reference points at, for an owner kind
/// of `group`/`kind`: the child's namespace for a namespaced owner, none for a cluster-scoped one
/// (both are looked up; only one can exist).
pub(crate) fn controller_owner_keys(group: String, kind: String) -> MapFn {
    Box::new(move |child: &dyn KubeObject| {
        let meta = child.metadata();
        meta.owner_references
            .iter()
            .flatten()
            .filter(|owner| owner.controller == Some(true) && owner.kind == kind)
            .filter(|owner| api_group(&owner.api_version) == group)
            .flat_map(|owner| {
                let namespaced = meta.namespace.clone().map(|ns| ObjectKey {
                    namespace: Some(ns),
                    name: owner.name.clone(),
                });
                let cluster = ObjectKey {
                    namespace: None,
                    name: owner.name.clone(),
                };
                namespaced.into_iter().chain([cluster])
            })
            .collect()
    })
}

/// The group of an `apiVersion` (`""` for the core group's `v1`).
fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Reconciles objects of kind `K` on demand; from [`KindHandle::trigger`](crate::KindHandle::trigger).
/// Cheap to clone.
///
/// For a change no watch reports (a timer, a message from outside the cluster):
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::runtime::reflector::ObjectRef;
/// use kubeapp_operator::KindHandle;
///
/// fn on_outside_change(config_maps: &KindHandle<ConfigMap>) {
///     let trigger = config_maps.trigger();
///     // One object (when it is cached), then every cached object of the kind.
///     trigger.reconcile(&ObjectRef::new("settings").within("shop"));
///     trigger.reconcile_all();
/// }
/// ```
pub struct Trigger<K> {
    pub(crate) owner: Arc<KindRuntime>,
    pub(crate) cache: Arc<SharedCache>,
    pub(crate) kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Trigger<K> {
    fn clone(&self) -> Self {
        Self {
            owner: Arc::clone(&self.owner),
            cache: Arc::clone(&self.cache),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Trigger<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trigger")
            .field("kind", &self.owner.name)
            .finish()
    }
}

impl<K: kube::Resource> Trigger<K> {
    /// Reconciles the cached object `object` refers to (nothing when it is not cached).
    pub fn reconcile(&self, object: &ObjectRef<K>) {
        let key = ObjectKey {
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        };
        reconcile_cached(
            &self.owner,
            &self.cache,
            &key,
            &TriggerCause::Requested,
            None,
        );
    }
}

// `reconcile_all` needs no `ObjectRef<K>`, so a projection's trigger has it too.
impl<K> Trigger<K> {
    /// Reconciles every cached object of the kind.
    pub fn reconcile_all(&self) {
        let objects: Vec<SharedObject> = self.cache.snapshot();
        for object in objects {
            self.owner
                .push_triggered(object, TriggerCause::Requested, None);
        }
    }
}
