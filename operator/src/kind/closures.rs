//! [`WatcherFns<K, C>`]: a typed [`Watcher`] made of closures, for watchers too small to be a
//! type of their own.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::context::Context;
use crate::handler::BoxError;

use super::traits::Watcher;

/// The boxed future a closure of [`WatcherFns`] returns.
type WatchFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
/// `add`, `delete` or `sync` as a closure.
type OneObject<K, C> = Box<dyn Fn(Arc<K>, Context<C>) -> WatchFuture + Send + Sync>;
/// `update` as a closure.
type TwoObjects<K, C> = Box<dyn Fn(Arc<K>, Arc<K>, Context<C>) -> WatchFuture + Send + Sync>;

/// A [`Watcher`] from closures `Fn(Arc<K>, Context<C>) -> impl Future` (`update` gets the old
/// and the new object first). A method without a closure does nothing. The argument types come
/// from the kind handle or managed kind the watcher is attached to.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::WatcherFns;
///
/// let watcher = WatcherFns::<ConfigMap>::new()
///     .on_add(|cm, _ctx| async move {
///         tracing::info!(name = ?cm.metadata.name, "added");
///         Ok(())
///     })
///     .on_delete(|_cm, _ctx| async move { Ok(()) });
/// # let _ = watcher;
/// ```
pub struct WatcherFns<K, C = ()> {
    add: Option<OneObject<K, C>>,
    update: Option<TwoObjects<K, C>>,
    delete: Option<OneObject<K, C>>,
    sync: Option<OneObject<K, C>>,
}

impl<K, C> Default for WatcherFns<K, C> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
            sync: None,
        }
    }
}

impl<K, C> fmt::Debug for WatcherFns<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatcherFns")
            .field("add", &self.add.is_some())
            .field("update", &self.update.is_some())
            .field("delete", &self.delete.is_some())
            .field("sync", &self.sync.is_some())
            .finish()
    }
}

fn one<K, C, F, Fut>(f: F) -> OneObject<K, C>
where
    F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    Box::new(move |object, ctx| Box::pin(f(object, ctx)))
}

impl<K, C> WatcherFns<K, C> {
    /// A watcher that does nothing until closures are set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles `add`.
    #[must_use]
    pub fn on_add<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.add = Some(one(f));
        self
    }

    /// Handles `update(old, new)`.
    #[must_use]
    pub fn on_update<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.update = Some(Box::new(move |old, new, ctx| Box::pin(f(old, new, ctx))));
        self
    }

    /// Handles `delete`.
    #[must_use]
    pub fn on_delete<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.delete = Some(one(f));
        self
    }

    /// Handles `sync` (called by the opinionated wrapper; see [`Watcher::sync`]).
    #[must_use]
    pub fn on_sync<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.sync = Some(one(f));
        self
    }
}

/// Runs `f` if set, else succeeds at once.
fn run_one<K, C>(f: Option<&OneObject<K, C>>, object: Arc<K>, ctx: &Context<C>) -> WatchFuture {
    match f {
        Some(f) => f(object, ctx.clone()),
        None => Box::pin(std::future::ready(Ok(()))),
    }
}

impl<K, C> Watcher<K, C> for WatcherFns<K, C>
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
{
    fn add(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        run_one(self.add.as_ref(), object, ctx)
    }

    fn update(
        &self,
        old: Arc<K>,
        new: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        match &self.update {
            Some(f) => f(old, new, ctx.clone()),
            None => Box::pin(std::future::ready(Ok(()))),
        }
    }

    fn delete(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        run_one(self.delete.as_ref(), object, ctx)
    }

    fn sync(
        &self,
        object: Arc<K>,
        ctx: &Context<C>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        run_one(self.sync.as_ref(), object, ctx)
    }
}
