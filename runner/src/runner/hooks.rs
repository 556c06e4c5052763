//! Work a [`Runner`](crate::Runner) does after everything stopped, such as flushing telemetry.

use std::future::Future;
use std::pin::Pin;

/// One hook: called once, its future awaited.
pub(super) type ShutdownHook =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + 'static>;

/// Boxes `hook` as a [`ShutdownHook`].
pub(super) fn boxed<F, Fut>(hook: F) -> ShutdownHook
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Box::new(move || -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(hook()) })
}

/// Runs the hooks one after the other, in the order they were added.
pub(super) async fn run_all(hooks: Vec<ShutdownHook>) {
    for hook in hooks {
        hook().await;
    }
}
