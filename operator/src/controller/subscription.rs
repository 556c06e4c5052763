//! A controller's kind as a subscriber of its shared informer: an event the run admits enters
//! the kind's lanes; one the run's [`EventFilter`](crate::gate::EventFilter) does not admit (e.g.
//! outside a sharded term's active slots) is dropped without waiting; a
//! full backlog of events for watchers hands the informer a wait for room (see
//! [`informers`](crate::informers), which owns the [`Subscribe`] trait).

use std::any::Any;
use std::sync::Arc;

use super::kind_runtime::{Enqueue, KindRuntime, Running};
use crate::informers::{Offer, Subscribe, Subscriber};
use crate::store::InformerEvent;

/// The subscription of `runtime`'s kind on `run`.
pub(crate) fn kind_subscriber(runtime: &Arc<KindRuntime>, run: &Arc<Running>) -> Subscriber {
    Subscriber::new(Arc::new(KindSubscription {
        runtime: Arc::clone(runtime),
        run: Arc::clone(run),
    }))
}

/// A kind's lanes on one run of the controller.
struct KindSubscription {
    runtime: Arc<KindRuntime>,
    run: Arc<Running>,
}

impl Subscribe for KindSubscription {
    fn offer(&self, event: InformerEvent) -> Offer {
        let run = &self.run;
        // Filtered (e.g. sharded): an object the term does not admit is forgotten, never queued.
        if !run.admits(event.object()) {
            return Offer::taken_or_gone(!run.stop_seen());
        }
        match self.runtime.try_enqueue(event, run) {
            Enqueue::Queued => Offer::Taken,
            Enqueue::Stopped => Offer::Gone,
            Enqueue::Full(waiting) => {
                let (runtime, run) = (Arc::clone(&self.runtime), Arc::clone(run));
                Offer::Full(Box::pin(async move {
                    runtime.enqueue_when_room(waiting, &run).await
                }))
            }
        }
    }

    /// A kind with watchers (its backlog of events for watchers is bounded) whose term filters
    /// no events (a filtered term, e.g. sharded, drops the events it does not admit without
    /// waiting).
    fn pauses_informer(&self) -> bool {
        self.run.filter.is_none() && self.runtime.has_watchers()
    }

    fn is_same(&self, other: &dyn Subscribe) -> bool {
        other.as_any().downcast_ref::<Self>().is_some_and(|o| {
            Arc::ptr_eq(&self.runtime, &o.runtime) && Arc::ptr_eq(&self.run, &o.run)
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
