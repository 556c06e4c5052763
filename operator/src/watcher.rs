//! Watchers: edge-triggered handlers that see every event of their kind.
//!
//! A [`DynWatcher`] gets `add`, `update(old, new)` and `delete` for every informer event of the kind
//! it is registered for, in the order the informer produced them per object (see
//! [`controller`](crate::controller) for the exact guarantees). `sync` is never called by the
//! controller itself; wrappers such as the opinionated watcher call it for objects that may have
//! changed while the operator was down.
//!
//! The trait is object safe and works on [`SharedObject`]s, so one controller can mix kinds and
//! wrappers can wrap any watcher. For a concrete type implement [`TypedWatcher`] and register
//! [`typed_watcher`]`(w)`; for a few closures use [`DynWatcherFns`]. Both downcast without copying;
//! an object of another type is an error for that call (and is retried by policy, then given up).
//!
//! # Objects that do not decode
//!
//! A typed informer delivers an object that does not deserialize into its type as an
//! [`Undecodable`](crate::object::Undecodable) (see [`object`](crate::object)). The typed adapters
//! ([`typed_watcher`], [`DynWatcherFns`]) skip it without calling the user and without an error
//! (the informer has logged and counted it already):
//!
//! - `add`, `sync` or `delete` of an undecodable object, and an `update` to one: nothing;
//! - an `update` from an undecodable object to a decodable one: `sync(new)`, since the watcher
//!   missed the states in between (it may never have seen the object at all), which is what
//!   `sync` means ("reconcile to this state").
//!
//! So a plain typed watcher does not hear of the deletion of an object whose last state did not
//! decode; the [opinionated wrappers](crate::opinionated#objects-that-do-not-decode) hand such a
//! deletion to a raw hook instead.

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::handler::{BoxError, HandlerContext};
use crate::object::{KubeObject, SharedObject, as_undecodable, downcast_shared};

/// An edge-triggered handler for one kind; see the [module docs](self).
#[async_trait]
pub trait DynWatcher: Send + Sync + 'static {
    /// An object appeared (initial list, creation, or re-list after a disconnect).
    async fn add(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError>;
    /// An object changed; `old` is the last state the informer saw. A periodic resync calls this
    /// with `old` and `new` being the same object.
    async fn update(
        &self,
        ctx: &HandlerContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError>;
    /// An object is gone; `object` is its last known state.
    async fn delete(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError>;
    /// The object may have changed while nobody watched. Only wrappers call this; the default
    /// does nothing.
    async fn sync(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        let _ = (ctx, object);
        Ok(())
    }
}

#[async_trait]
impl<W: DynWatcher + ?Sized> DynWatcher for Arc<W> {
    async fn add(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        (**self).add(ctx, object).await
    }
    async fn update(
        &self,
        ctx: &HandlerContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError> {
        (**self).update(ctx, old, new).await
    }
    async fn delete(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        (**self).delete(ctx, object).await
    }
    async fn sync(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        (**self).sync(ctx, object).await
    }
}

#[async_trait]
impl<W: DynWatcher + ?Sized> DynWatcher for Box<W> {
    async fn add(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        (**self).add(ctx, object).await
    }
    async fn update(
        &self,
        ctx: &HandlerContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError> {
        (**self).update(ctx, old, new).await
    }
    async fn delete(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        (**self).delete(ctx, object).await
    }
    async fn sync(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        (**self).sync(ctx, object).await
    }
}

/// A watcher of objects of type `K`; register it through [`typed_watcher`].
#[async_trait]
pub trait TypedWatcher<K: KubeObject>: Send + Sync + 'static {
    /// See [`DynWatcher::add`].
    async fn add(&self, ctx: &HandlerContext, object: Arc<K>) -> Result<(), BoxError>;
    /// See [`DynWatcher::update`].
    async fn update(&self, ctx: &HandlerContext, old: Arc<K>, new: Arc<K>) -> Result<(), BoxError>;
    /// See [`DynWatcher::delete`].
    async fn delete(&self, ctx: &HandlerContext, object: Arc<K>) -> Result<(), BoxError>;
    /// See [`DynWatcher::sync`]; the default does nothing.
    async fn sync(&self, ctx: &HandlerContext, object: Arc<K>) -> Result<(), BoxError> {
        let _ = (ctx, object);
        Ok(())
    }
}

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

/// Downcasts `object` for a typed handler: `None` for an undecodable object, which typed
/// handlers skip (see the [module docs](self#objects-that-do-not-decode)).
pub(crate) fn typed_or_skip<K: KubeObject>(
    object: &SharedObject,
) -> Result<Option<Arc<K>>, BoxError> {
    // The expected type first: one downcast for the common case, not two.
    if let Some(typed) = downcast_shared::<K>(object) {
        return Ok(Some(typed));
    }
    if let Some(undecodable) = as_undecodable(object) {
        tracing::debug!(%undecodable, "undecodable object skipped by a typed handler");
        return Ok(None);
    }
    expect_type(object).map(Some)
}

/// [`typed_or_skip`] of an object the caller owns: the expected type is checked by reference
/// and the `Arc` converted in place, so the common case moves no reference count.
pub(crate) fn typed_or_skip_owned<K: KubeObject>(
    object: SharedObject,
) -> Result<Option<Arc<K>>, BoxError> {
    if (object.as_ref() as &dyn Any).is::<K>() {
        // Checked just above, so this conversion cannot fail.
        let any: Arc<dyn Any + Send + Sync> = object;
        return Ok(any.downcast::<K>().ok());
    }
    typed_or_skip(&object)
}

/// What a typed watcher's `update(old, new)` becomes when either side may be undecodable.
pub(crate) enum TypedUpdate<K> {
    /// Both decode: `update(old, new)`.
    Update(Arc<K>, Arc<K>),
    /// From undecodable to decodable: `sync(new)`.
    Sync(Arc<K>),
    /// To undecodable: nothing.
    Skip,
}

pub(crate) fn typed_update<K: KubeObject>(
    old: &SharedObject,
    new: &SharedObject,
) -> Result<TypedUpdate<K>, BoxError> {
    Ok(match (typed_or_skip::<K>(old)?, typed_or_skip::<K>(new)?) {
        (Some(old), Some(new)) => TypedUpdate::Update(old, new),
        (None, Some(new)) => TypedUpdate::Sync(new),
        (_, None) => TypedUpdate::Skip,
    })
}

/// [`typed_update`] of objects the caller owns (see [`typed_or_skip_owned`]).
pub(crate) fn typed_update_owned<K: KubeObject>(
    old: SharedObject,
    new: SharedObject,
) -> Result<TypedUpdate<K>, BoxError> {
    Ok(
        match (
            typed_or_skip_owned::<K>(old)?,
            typed_or_skip_owned::<K>(new)?,
        ) {
            (Some(old), Some(new)) => TypedUpdate::Update(old, new),
            (None, Some(new)) => TypedUpdate::Sync(new),
            (_, None) => TypedUpdate::Skip,
        },
    )
}

/// Makes a [`DynWatcher`] of a [`TypedWatcher`].
pub fn typed_watcher<K: KubeObject, W: TypedWatcher<K>>(watcher: W) -> TypedWatcherAdapter<K, W> {
    TypedWatcherAdapter {
        inner: watcher,
        _kind: PhantomData,
    }
}

/// A [`TypedWatcher`] seen as a [`DynWatcher`]; made by [`typed_watcher`].
pub struct TypedWatcherAdapter<K, W> {
    inner: W,
    _kind: PhantomData<fn() -> K>,
}

impl<K, W> TypedWatcherAdapter<K, W> {
    /// The wrapped watcher.
    pub fn inner(&self) -> &W {
        &self.inner
    }
}

#[async_trait]
impl<K: KubeObject, W: TypedWatcher<K>> DynWatcher for TypedWatcherAdapter<K, W> {
    async fn add(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        match typed_or_skip(&object)? {
            Some(object) => self.inner.add(ctx, object).await,
            None => Ok(()),
        }
    }
    async fn update(
        &self,
        ctx: &HandlerContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError> {
        match typed_update(&old, &new)? {
            TypedUpdate::Update(old, new) => self.inner.update(ctx, old, new).await,
            TypedUpdate::Sync(new) => self.inner.sync(ctx, new).await,
            TypedUpdate::Skip => Ok(()),
        }
    }
    async fn delete(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        match typed_or_skip(&object)? {
            Some(object) => self.inner.delete(ctx, object).await,
            None => Ok(()),
        }
    }
    async fn sync(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        match typed_or_skip(&object)? {
            Some(object) => self.inner.sync(ctx, object).await,
            None => Ok(()),
        }
    }
}

type BoxFuture = futures::future::BoxFuture<'static, Result<(), BoxError>>;
type OneFn<K> = Arc<dyn Fn(HandlerContext, Arc<K>) -> BoxFuture + Send + Sync>;
type TwoFn<K> = Arc<dyn Fn(HandlerContext, Arc<K>, Arc<K>) -> BoxFuture + Send + Sync>;

/// A watcher made of closures, one per event type; events without a closure succeed untouched.
///
/// `K` is the object type (`DynamicObject` for untyped kinds).
///
/// ```
/// use kubeapp_operator::watcher::DynWatcherFns;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let watcher = DynWatcherFns::<ConfigMap>::new()
///     .on_add(|_ctx, cm| async move {
///         tracing::info!(name = ?cm.metadata.name, "added");
///         Ok(())
///     })
///     .on_delete(|_ctx, _cm| async move { Ok(()) });
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
    F: Fn(HandlerContext, Arc<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    Arc::new(move |ctx, obj| Box::pin(f(ctx, obj)))
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
        F: Fn(HandlerContext, Arc<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.add = Some(one(f));
        self
    }

    /// Handles `update(old, new)`.
    #[must_use]
    pub fn on_update<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(HandlerContext, Arc<K>, Arc<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.update = Some(Arc::new(move |ctx, old, new| Box::pin(f(ctx, old, new))));
        self
    }

    /// Handles `delete`.
    #[must_use]
    pub fn on_delete<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(HandlerContext, Arc<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.delete = Some(one(f));
        self
    }

    /// Handles `sync`.
    #[must_use]
    pub fn on_sync<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(HandlerContext, Arc<K>) -> Fut + Send + Sync + 'static,
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
    ctx: &HandlerContext,
    object: &SharedObject,
) -> BoxFuture {
    match f {
        None => Box::pin(std::future::ready(Ok(()))),
        Some(f) => match typed_or_skip(object) {
            Ok(Some(object)) => f(ctx.clone(), object),
            Ok(None) => Box::pin(std::future::ready(Ok(()))),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        },
    }
}

// Written out instead of `#[async_trait]`: the closures' futures are boxed already, and an
// `async fn` here would box each call a second time.
impl<K: KubeObject> DynWatcher for DynWatcherFns<K> {
    fn add<'s, 'c, 'f>(&'s self, ctx: &'c HandlerContext, object: SharedObject) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        call_one(self.add.as_ref(), ctx, &object)
    }

    fn update<'s, 'c, 'f>(
        &'s self,
        ctx: &'c HandlerContext,
        old: SharedObject,
        new: SharedObject,
    ) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        match typed_update(&old, &new) {
            Ok(TypedUpdate::Update(old, new)) => match &self.update {
                Some(f) => f(ctx.clone(), old, new),
                None => Box::pin(std::future::ready(Ok(()))),
            },
            Ok(TypedUpdate::Sync(_)) => call_one(self.sync.as_ref(), ctx, &new),
            Ok(TypedUpdate::Skip) => Box::pin(std::future::ready(Ok(()))),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }

    fn delete<'s, 'c, 'f>(
        &'s self,
        ctx: &'c HandlerContext,
        object: SharedObject,
    ) -> WatcherFuture<'f>
    where
        's: 'f,
        'c: 'f,
        Self: 'f,
    {
        call_one(self.delete.as_ref(), ctx, &object)
    }

    fn sync<'s, 'c, 'f>(
        &'s self,
        ctx: &'c HandlerContext,
        object: SharedObject,
    ) -> WatcherFuture<'f>
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
            Box::new(DynWatcherFns::<ConfigMap>::new().on_add(move |_, cm| {
                let log = log.clone();
                async move {
                    log.lock()
                        .expect("lock")
                        .push(cm.metadata.name.clone().unwrap_or_default());
                    Ok(())
                }
            }));
        let ctx = HandlerContext::new("cm", CancellationToken::new());
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        watcher.add(&ctx, share(cm.clone())).await.expect("add");
        watcher
            .update(&ctx, share(cm.clone()), share(cm))
            .await
            .expect("no update closure: ok");
        let err = watcher
            .add(&ctx, share(Secret::default()))
            .await
            .expect_err("a Secret is not a ConfigMap");
        assert!(err.to_string().contains("Secret"), "{err}");
        assert_eq!(*seen.lock().expect("lock"), ["a"]);
    }

    /// A typed watcher that logs every call.
    struct Logged(Arc<Mutex<Vec<String>>>);

    #[async_trait]
    impl TypedWatcher<ConfigMap> for Logged {
        async fn add(&self, _: &HandlerContext, o: Arc<ConfigMap>) -> Result<(), BoxError> {
            self.push("add", &o);
            Ok(())
        }
        async fn update(
            &self,
            _: &HandlerContext,
            _: Arc<ConfigMap>,
            o: Arc<ConfigMap>,
        ) -> Result<(), BoxError> {
            self.push("update", &o);
            Ok(())
        }
        async fn delete(&self, _: &HandlerContext, o: Arc<ConfigMap>) -> Result<(), BoxError> {
            self.push("delete", &o);
            Ok(())
        }
        async fn sync(&self, _: &HandlerContext, o: Arc<ConfigMap>) -> Result<(), BoxError> {
            self.push("sync", &o);
            Ok(())
        }
    }

    impl Logged {
        fn push(&self, what: &str, o: &ConfigMap) {
            let name = o.metadata.name.clone().unwrap_or_default();
            self.0.lock().expect("lock").push(format!("{what} {name}"));
        }
    }

    #[tokio::test]
    async fn typed_adapters_skip_undecodable_objects_and_an_update_back_to_decodable_is_a_sync() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let ctx = HandlerContext::new("cm", CancellationToken::new());
        let raw: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "namespace": "ns" }, "data": { "k": 1 },
        }))
        .expect("raw");
        let error = serde_json::from_str::<u8>("-1").expect_err("a serde error");
        let bad = share(crate::object::Undecodable::new(raw, &error, "ConfigMap"));
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        let good = share(cm);
        let adapters: [Box<dyn DynWatcher>; 2] = [
            Box::new(typed_watcher(Logged(seen.clone()))),
            Box::new({
                let (sync, update) = (seen.clone(), seen.clone());
                DynWatcherFns::<ConfigMap>::new()
                    .on_sync(move |_, o| {
                        Logged(sync.clone()).push("sync", &o);
                        async { Ok(()) }
                    })
                    .on_update(move |_, _, o| {
                        Logged(update.clone()).push("update", &o);
                        async { Ok(()) }
                    })
            }),
        ];
        for watcher in adapters {
            watcher.add(&ctx, bad.clone()).await.expect("skipped");
            watcher
                .update(&ctx, good.clone(), bad.clone())
                .await
                .expect("skipped");
            watcher
                .update(&ctx, bad.clone(), good.clone())
                .await
                .expect("a sync");
            watcher.delete(&ctx, bad.clone()).await.expect("skipped");
            watcher.sync(&ctx, bad.clone()).await.expect("skipped");
        }
        assert_eq!(*seen.lock().expect("lock"), ["sync a", "sync a"]);
        let reconciler = crate::reconciler::ReconcilerFn::<ConfigMap, _>::new(|_, _| async {
            Err::<crate::reconciler::ReconcileResult, _>(crate::reconciler::ReconcileError::new(
                "never called",
            ))
        });
        let request = crate::reconciler::ReconcileRequest {
            action: crate::reconciler::ReconcileAction::Updated,
            object: bad,
            state: Default::default(),
            cause: None,
        };
        let result = crate::reconciler::DynReconciler::reconcile(&reconciler, &ctx, request).await;
        assert_eq!(
            result.ok(),
            Some(crate::reconciler::ReconcileResult::done())
        );
    }

    /// The owned downcast the typed path uses: the same allocation for the expected type, a
    /// skip for an undecodable object, an error naming both types for any other.
    #[test]
    fn an_owned_downcast_keeps_the_allocation_skips_undecodable_and_names_a_wrong_type() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        let shared = share(cm);
        let address = Arc::as_ptr(&shared).cast::<()>();
        let typed = typed_or_skip_owned::<ConfigMap>(shared)
            .expect("a ConfigMap")
            .expect("decoded");
        assert_eq!(Arc::as_ptr(&typed).cast::<()>(), address, "no copy");
        assert_eq!(Arc::strong_count(&typed), 1, "no reference left behind");

        let raw: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "b" },
        }))
        .expect("raw");
        let error = serde_json::from_str::<u8>("-1").expect_err("a serde error");
        let bad = share(crate::object::Undecodable::new(raw, &error, "ConfigMap"));
        assert!(
            typed_or_skip_owned::<ConfigMap>(bad)
                .expect("skipped, not an error")
                .is_none()
        );

        let error = typed_or_skip_owned::<ConfigMap>(share(Secret::default()))
            .expect_err("a Secret is no ConfigMap")
            .to_string();
        assert!(
            error.contains("ConfigMap") && error.contains("Secret"),
            "{error}"
        );
        match typed_update_owned::<ConfigMap>(share(Secret::default()), share(ConfigMap::default()))
        {
            Err(error) => assert!(error.to_string().contains("Secret"), "{error}"),
            Ok(_) => panic!("an update from a Secret is an error"),
        }
    }
}
