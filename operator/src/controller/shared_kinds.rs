//! Kinds fed by a shared informer (registered through a `KindHandle`): finding or making the
//! kind's runtime for an informer, and attaching it to (and detaching it from) the informer and
//! its triggers when the controller starts and stops.

use std::sync::{Arc, PoisonError};

use super::kind_runtime::{KindRuntime, Running};
use super::subscription::kind_subscriber;
use super::{InformerController, RunState};
use crate::informers::{Fanout, Subscriber};
use kube::core::GroupVersionKind;

impl InformerController {
    /// The kind runtime fed by the shared informer `fanout`, made (and, while the controller
    /// runs, subscribed) on first use. Named by the kind's plural (`-2`, `-3`, ... for a second
    /// informer of the same plural, e.g. with other selectors).
    pub(crate) fn shared_kind(&self, fanout: &Arc<Fanout>) -> Arc<KindRuntime> {
        let mut kinds = self
            .shared
            .kinds
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(runtime) = kinds
            .values()
            .find(|runtime| runtime.fanout.get().is_some_and(|f| Arc::ptr_eq(f, fanout)))
        {
            return Arc::clone(runtime);
        }
        let plural = &fanout.resource.plural;
        let mut name = plural.clone();
        let mut n = 1;
        while kinds.contains_key(&name) {
            n += 1;
            name = format!("{plural}-{n}");
        }
        let runtime = Arc::new(KindRuntime::new(
            &name,
            Arc::clone(&self.shared.config),
            self.shared.metrics.for_kind(&name),
        ));
        let _ = runtime.info.set(GroupVersionKind {
            group: fanout.resource.group.clone(),
            version: fanout.resource.version.clone(),
            kind: fanout.resource.kind.clone(),
        });
        runtime
            .own_writes
            .set_kind(&fanout.resource.group, &fanout.resource.kind);
        runtime.init_workers(fanout.max_concurrent_workers);
        let _ = runtime.cache.set(Arc::clone(&fanout.cache));
        runtime.own_writes.set_cache(Arc::clone(&fanout.cache));
        let _ = runtime.fanout.set(Arc::clone(fanout));
        kinds.insert(name.clone(), Arc::clone(&runtime));
        drop(kinds);
        self.shared
            .synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name, fanout.cache.synced.clone()));
        let state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let RunState::Running(run) = &*state {
            start(&runtime, run);
        }
        runtime
    }

    /// Subscribes a trigger now if the controller runs (else `run` does).
    pub(crate) fn subscribe_if_running(
        &self,
        runtime: &Arc<KindRuntime>,
        fanout: Arc<Fanout>,
        subscriber: Subscriber,
    ) {
        if let Some(run) = runtime.current_run() {
            spawn_subscribe(&run, fanout, subscriber);
        }
    }
}

impl InformerController {
    pub(crate) fn runtimes(&self) -> Vec<Arc<KindRuntime>> {
        self.shared
            .kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

/// Starts a kind on the controller's run: its shared informer's events (the cache first, as
/// Adds) and its triggers' go to its lanes from now on.
pub(super) fn start(runtime: &Arc<KindRuntime>, run: &Arc<Running>) {
    runtime.set_running(Some(Arc::clone(run)));
    if let Some(fanout) = runtime.fanout.get() {
        let fanout = Arc::clone(fanout);
        let subscriber = kind_subscriber(runtime, run);
        let (runtime, live_run) = (Arc::clone(runtime), Arc::clone(run));
        run.tracker.spawn_on(
            async move {
                fanout.subscribe(subscriber).await;
                // The cache is in the lanes: handlers added from now on get it replayed.
                runtime.mark_live(&live_run);
            },
            &run.runtime,
        );
    }
    for (fanout, subscriber) in runtime.triggers() {
        spawn_subscribe(run, fanout, subscriber);
    }
}

/// Subscribes a trigger on the controller's runtime (a subscription awaits the informer's lock).
fn spawn_subscribe(run: &Running, fanout: Arc<Fanout>, subscriber: Subscriber) {
    run.tracker.spawn_on(
        async move { fanout.subscribe(subscriber).await },
        &run.runtime,
    );
}

/// Detaches a kind from its shared informer and triggers when the controller stops.
pub(super) fn stop(runtime: &Arc<KindRuntime>, run: &Arc<Running>) {
    runtime.set_running(None);
    if let Some(fanout) = runtime.fanout.get() {
        fanout.unsubscribe(&kind_subscriber(runtime, run));
    }
    for (fanout, subscriber) in runtime.triggers() {
        fanout.unsubscribe(&subscriber);
    }
}
