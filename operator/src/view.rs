//! A typed handler's view of an object: the sequence of its decodable states.
//!
//! A typed informer delivers an object that does not deserialize into the kind's Rust type as an
//! [`Undecodable`](crate::object::Undecodable) (see [`object`](crate::object)), and keeps in it
//! the incarnation's last state that did decode
//! ([`Undecodable::last_decodable`](crate::object::Undecodable::last_decodable)). A typed
//! handler (the handlers of a [`KindHandle`](crate::KindHandle), and on the erased layer
//! `DynWatcherFns` and `DynReconcilerFn`) never gets an undecodable state; it sees the object as
//! the sequence of its decodable states, and every transition of that view is delivered:
//!
//! | what the object did | typed watcher | typed reconciler |
//! |---|---|---|
//! | decodable -> undecodable | nothing (the view did not change) | the request runs with the last decodable state |
//! | undecodable -> undecodable | nothing | the same |
//! | undecodable -> decodable, a state seen before | `update(last decodable, new)` | `Updated(new)` |
//! | undecodable -> decodable, never decodable before | `add(new)` | `Created(new)` |
//! | deleted while undecodable, a state seen before | `delete(last decodable)` | `Deleted(last decodable)` |
//! | created, changed or deleted, never decodable | nothing | nothing |
//! | periodic resync while undecodable | `update(last, last)` | `Resynced(last decodable)` |
//!
//! "Seen before" is per incarnation (UID) and per informer: the informer sets the last decodable
//! state from its cache, so a state the informer had before the object turned undecodable
//! counts, whether or not it was delivered to this handler yet. The first decodable state of an
//! object that has not decoded since the informer first saw it comes as an
//! [`Add`](crate::store::InformerEvent::Add) event (so reconcilers get `Created`, and the
//! opinionated wrappers take their add path), not as an update.
//!
//! Why a reconciler runs for an undecodable state: requests of one object merge while they wait
//! (see [`controller`](crate::controller)), so an `Updated` request that reaches an undecodable
//! state may carry a decodable state the reconciler has not seen yet (the update before it).
//! Reconcilers are level-triggered: the request runs with the last decodable state, which at worst
//! reconciles a state a second time and never loses one.
//!
//! Memory: the last decodable state is the `Arc` the informer already cached and delivered;
//! while the object is undecodable the cache holds it through the `Undecodable` (one object more
//! than the raw state), and when the object decodes again or is deleted it is dropped.

use std::any::Any;
use std::sync::Arc;

use crate::handler::BoxError;
use crate::object::{KubeObject, SharedObject, as_undecodable, downcast_shared};

/// The object was not of the type a typed handler expects (it was registered for another kind).
#[derive(Debug, thiserror::Error)]
#[error("expected an object of type {expected}, got {actual}")]
pub struct WrongObjectType {
    /// The type the handler expects.
    pub expected: &'static str,
    /// The type it got.
    pub actual: &'static str,
}

/// Downcasts `object` for a typed handler, or says which types did not match.
pub(crate) fn expect_type<K: KubeObject>(object: &SharedObject) -> Result<Arc<K>, BoxError> {
    downcast_shared::<K>(object).ok_or_else(|| {
        Box::new(WrongObjectType {
            expected: std::any::type_name::<K>(),
            actual: object.type_name(),
        }) as BoxError
    })
}

/// The typed handler's view of `object`: the object itself when it decoded, the last decodable
/// state of an undecodable one, `None` for an undecodable object that has none (see the
/// [module docs](self)); an error for an object of another type.
pub(crate) fn view<K: KubeObject>(object: &SharedObject) -> Result<Option<Arc<K>>, BoxError> {
    // The expected type first: one downcast for the common case, not two.
    if let Some(typed) = downcast_shared::<K>(object) {
        return Ok(Some(typed));
    }
    if let Some(undecodable) = as_undecodable(object) {
        return match undecodable.last_decodable() {
            Some(last) => expect_type::<K>(last).map(Some),
            None => {
                tracing::trace!(%undecodable, "no decodable state yet; typed handler not called");
                Ok(None)
            }
        };
    }
    expect_type(object).map(Some)
}

/// [`view`] of an object the caller owns: the expected type is checked by reference and the
/// `Arc` converted in place, so the common case moves no reference count.
pub(crate) fn view_owned<K: KubeObject>(object: SharedObject) -> Result<Option<Arc<K>>, BoxError> {
    if (object.as_ref() as &dyn Any).is::<K>() {
        // Checked just above, so this conversion cannot fail.
        let any: Arc<dyn Any + Send + Sync> = object;
        return Ok(any.downcast::<K>().ok());
    }
    view(&object)
}

/// What an `update(old, new)` event is to a typed watcher's view.
#[derive(Debug)]
pub(crate) enum ViewChange<K> {
    /// The view changed from `old` to `new` (or a resync re-delivers it).
    Update(Arc<K>, Arc<K>),
    /// The first decodable state of an object the view did not have: `add(new)`.
    Add(Arc<K>),
    /// The view did not change (an update into or between undecodable states): nothing.
    Unchanged,
}

/// Whether two views are the same state: the same allocation (the informer hands the cached
/// `Arc` on), or the same incarnation at the same `resourceVersion`.
fn same_state<K: KubeObject>(a: &Arc<K>, b: &Arc<K>) -> bool {
    if Arc::ptr_eq(a, b) {
        return true;
    }
    let (a, b) = (a.metadata(), b.metadata());
    a.resource_version.is_some() && a.resource_version == b.resource_version && a.uid == b.uid
}

/// The views of `old` and `new` as a change; `resync`: the event re-delivers one object.
fn change_of<K: KubeObject>(
    old: Option<Arc<K>>,
    new: Option<Arc<K>>,
    resync: bool,
) -> ViewChange<K> {
    match (old, new) {
        (_, None) => ViewChange::Unchanged,
        (None, Some(new)) => ViewChange::Add(new),
        (Some(old), Some(new)) if !resync && same_state(&old, &new) => ViewChange::Unchanged,
        (Some(old), Some(new)) => ViewChange::Update(old, new),
    }
}

/// What `update(old, new)` is to a typed watcher's view (see the [module docs](self)).
pub(crate) fn view_change<K: KubeObject>(
    old: &SharedObject,
    new: &SharedObject,
) -> Result<ViewChange<K>, BoxError> {
    let resync = Arc::ptr_eq(old, new);
    // Both decodable (almost every event): the update itself, a resync included.
    if let (Some(old), Some(new)) = (downcast_shared::<K>(old), downcast_shared::<K>(new)) {
        return Ok(ViewChange::Update(old, new));
    }
    Ok(change_of(view::<K>(old)?, view::<K>(new)?, resync))
}

/// [`view_change`] of objects the caller owns (see [`view_owned`]).
pub(crate) fn view_change_owned<K: KubeObject>(
    old: SharedObject,
    new: SharedObject,
) -> Result<ViewChange<K>, BoxError> {
    let resync = Arc::ptr_eq(&old, &new);
    let both_typed = (old.as_ref() as &dyn Any).is::<K>() && (new.as_ref() as &dyn Any).is::<K>();
    let (old, new) = (view_owned::<K>(old)?, view_owned::<K>(new)?);
    Ok(match (old, new) {
        // Both decodable (almost every event): the update itself, a resync included.
        (Some(old), Some(new)) if both_typed => ViewChange::Update(old, new),
        (old, new) => change_of(old, new, resync),
    })
}

#[cfg(test)]
mod tests;
