//! Watchers: edge-triggered handlers that see every event of their kind.
//!
//! A [`DynWatcher`] gets `add`, `update(old, new)` and `delete` for every informer event of the kind
//! it is registered for, in the order the informer produced them per object (see
//! [`controller`](crate::controller) for the exact guarantees). `sync` is never called by the
//! controller itself; wrappers such as the opinionated watcher call it for objects that may have
//! changed while the operator was down.
//!
//! The trait is object safe and works on [`SharedObject`]s, so one controller can mix kinds and
//! wrappers can wrap any watcher. For closures over one concrete type use [`DynWatcherFns`]: it
//! downcasts without copying; an object of another type is an error for that call (and is retried
//! by policy, then given up). Typed handlers are written against
//! [`Watcher<K, C>`](crate::Watcher) and attached through a [`KindHandle`](crate::KindHandle).
//!
//! # Objects that do not decode
//!
//! A typed informer delivers an object that does not deserialize into its type as an
//! [`Undecodable`](crate::object::Undecodable) (see [`object`](crate::object)), carrying the
//! object's last decodable state. [`DynWatcherFns`] (like the typed handlers of a
//! [`KindHandle`](crate::KindHandle)) never passes an undecodable state to the user: they deliver the object as the sequence of its
//! decodable states ([`view`](crate::view) has the table), so
//!
//! - an `update` into an undecodable state, or between two, calls nothing (the view is
//!   unchanged); the informer has logged and counted it;
//! - an `update` back to a decodable state is `update(last decodable, new)`, or `add(new)` for
//!   an object that never decoded before;
//! - the `delete` of an object whose last state did not decode is `delete(last decodable)`;
//! - an object that never decoded reaches no typed handler at all (the
//!   [opinionated wrappers](crate::opinionated#objects-that-do-not-decode) hand its deletion to a
//!   raw hook).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::handler::{BoxError, DynContext};
use crate::object::{KubeObject, SharedObject};
use crate::view::{ViewChange, view, view_change};

/// An edge-triggered handler for one kind, on the erased layer (see [`erased`](crate::erased)):
/// every event of the kind, in order per object; `sync` only from wrappers.
#[async_trait]
pub trait DynWatcher: Send + Sync + 'static {
    /// An object appeared (initial list, creation, or re-list after a disconnect).
    async fn add(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError>;
    /// An object changed; `old` is the last state the informer saw. A periodic resync calls this
    /// with `old` and `new` being the same object.
    async fn update(
        &self,
        old: SharedObject,
        new: SharedObject,
        ctx: &DynContext,
    ) -> Result<(), BoxError>;
    /// An object is gone; `object` is its last known state.
    async fn delete(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError>;
    /// The object may have changed while nobody watched. Only wrappers call this; the default
    /// does nothing.
    async fn sync(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        let _ = (ctx, object);
        Ok(())
    }
}

#[async_trait]
impl<W: DynWatcher + ?Sized> DynWatcher for Arc<W> {
    async fn add(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        (**self).add(object, ctx).await
    }
    async fn update(
        &self,
        old: SharedObject,
        new: SharedObject,
        ctx: &DynContext,
    ) -> Result<(), BoxError> {
        (**self).update(old, new, ctx).await
    }
    async fn delete(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        (**self).delete(object, ctx).await
    }
    async fn sync(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        (**self).sync(object, ctx).await
    }
}

#[async_trait]
impl<W: DynWatcher + ?Sized> DynWatcher for Box<W> {
    async fn add(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        (**self).add(object, ctx).await
    }
    async fn update(
        &self,
        old: SharedObject,
        new: SharedObject,
        ctx: &DynContext,
    ) -> Result<(), BoxError> {
        (**self).update(old, new, ctx).await
    }
    async fn delete(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        (**self).delete(object, ctx).await
    }
    async fn sync(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        (**self).sync(object, ctx).await
    }
}

type BoxFuture = futures::future::BoxFuture<'static, Result<(), BoxError>>;
type OneFn<K> = Arc<dyn Fn(Arc<K>, DynContext) -> BoxFuture + Send + Sync>;
type TwoFn<K> = Arc<dyn Fn(Arc<K>, Arc<K>, DynContext) -> BoxFuture + Send + Sync>;

/// A watcher made of closures, one per event type; events without a closure succeed untouched.
///
/// `K` is the object type (`DynamicObject` for untyped kinds).
///
/// ```
/// use kubeapp_operator::erased::DynWatcherFns;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let watcher = DynWatcherFns::<ConfigMap>::new()
///     .on_add(|cm, _ctx| async move {
///         tracing::info!(name = ?cm.metadata.name, "added");
///         Ok(())
///     })
///     .on_delete(|_cm, _ctx| async move { Ok(()) });
/// # let _ = watcher;
/// ```
pub struct DynWatcherFns<K> {
    add: Option<OneFn<K>>,
    update: Option<TwoFn<K>>,
    delete: Option<OneFn<K>>,
    sync: Option<OneFn<K>>,
}

impl<K> Default for DynWatcherFns<K> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
            sync: None,
        }
    }
}

fn one<K, F, Fut>(f: F) -> OneFn<K>
where
    F: Fn(Arc<K>, DynContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    Arc::new(move |obj, ctx| Box::pin(f(obj, ctx)))
}

impl<K: KubeObject> DynWatcherFns<K> {
    /// A watcher that does nothing until closures are set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles `add`.
    #[must_use]
    pub fn on_add<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, DynContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.add = Some(one(f));
        self
    }

    /// Handles `update(old, new)`.
    #[must_use]
    pub fn on_update<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, Arc<K>, DynContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.update = Some(Arc::new(move |old, new, ctx| Box::pin(f(old, new, ctx))));
        self
    }

    /// Handles `delete`.
    #[must_use]
    pub fn on_delete<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, DynContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.delete = Some(one(f));
        self
    }

    /// Handles `sync`.
    #[must_use]
    pub fn on_sync<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, DynContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.sync = Some(one(f));
        self
    }
}

/// The future of a [`DynWatcher`] method as `#[async_trait]` declares it.
type WatcherFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>>;

/// Calls a one-object closure, or succeeds when there is none.
fn call_one<K: KubeObject>(
    f: Option<&OneFn<K>>,
    ctx: &DynContext,
    object: &SharedObject,
) -> BoxFuture {
    match f {
        None => Box::pin(std::future::ready(Ok(()))),
        Some(f) => match view(object) {
            Ok(Some(object)) => f(object, ctx.clone()),
            Ok(None) => Box::pin(std::future::ready(Ok(()))),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        },
    }
}

// Written out instead of `#[async_trait]`: the closures' futures are boxed already, and an
// `async fn` here would box each call a second time.
impl<K: KubeObject> DynWatcher for DynWatcherFns<K> {
    fn add<'s, 'c, 'f>(&'s self, object: SharedObject, ctx: &'c DynContext) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        call_one(self.add.as_ref(), ctx, &object)
    }

    fn update<'s, 'c, 'f>(
        &'s self,
        old: SharedObject,
        new: SharedObject,
        ctx: &'c DynContext,
    ) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        match view_change(&old, &new) {
            Ok(ViewChange::Update(old, new)) => match &self.update {
                Some(f) => f(old, new, ctx.clone()),
                None => Box::pin(std::future::ready(Ok(()))),
            },
            Ok(ViewChange::Add(new)) => match &self.add {
                Some(f) => f(new, ctx.clone()),
                None => Box::pin(std::future::ready(Ok(()))),
            },
            Ok(ViewChange::Unchanged) => Box::pin(std::future::ready(Ok(()))),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }

    fn delete<'s, 'c, 'f>(&'s self, object: SharedObject, ctx: &'c DynContext) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        call_one(self.delete.as_ref(), ctx, &object)
    }

    fn sync<'s, 'c, 'f>(&'s self, object: SharedObject, ctx: &'c DynContext) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        call_one(self.sync.as_ref(), ctx, &object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::share;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use std::sync::Mutex;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn closure_watcher_downcasts_and_rejects_other_types() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let watcher: Box<dyn DynWatcher> =
            Box::new(DynWatcherFns::<ConfigMap>::new().on_add(move |cm, _| {
                let log = log.clone();
                async move {
                    log.lock()
                        .expect("lock")
                        .push(cm.metadata.name.clone().unwrap_or_default());
                    Ok(())
                }
            }));
        let ctx = DynContext::new("cm", CancellationToken::new());
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        watcher.add(share(cm.clone()), &ctx).await.expect("add");
        watcher
            .update(share(cm.clone()), share(cm), &ctx)
            .await
            .expect("no update closure: ok");
        let err = watcher
            .add(share(Secret::default()), &ctx)
            .await
            .expect_err("a Secret is not a ConfigMap");
        assert!(err.to_string().contains("Secret"), "{err}");
        assert_eq!(*seen.lock().expect("lock"), ["a"]);
    }
}
