//! [`PhaseMachine`]: the declaration of a kind's phases (a worker per non-final phase, inputs per
//! phase, work intervals, the finalizer hook), checked by [`PhaseMachine::build`] into the
//! [`PhaseScheduler`](crate::PhaseScheduler) that reconciles the kind (`build` lives with the
//! scheduler, which imports this module, not the other way round).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kubeapp_operator::{Context, Kind, ReconcileError};

use crate::metrics::PhaseMetrics;
use crate::phase::{Phase, PhaseError};
use crate::worker::{BoxInput, BoxWorker, InputValue, Labelled, Named, Transition, Work};

/// The finalizer hook, boxed.
pub(crate) type BoxHook<K, C> = Box<
    dyn Fn(Arc<K>, Context<C>) -> futures::future::BoxFuture<'static, Result<(), ReconcileError>>
        + Send
        + Sync,
>;

/// A kind's phases, workers and inputs; see the [module docs](self).
pub struct PhaseMachine<K, P, C = ()> {
    pub(crate) workers: HashMap<P, BoxWorker<K, P, C>>,
    pub(crate) inputs: HashMap<P, Vec<BoxInput<K, C>>>,
    pub(crate) intervals: HashMap<P, Duration>,
    pub(crate) default_interval: Duration,
    pub(crate) finalizer: Option<BoxHook<K, C>>,
    pub(crate) prune: bool,
    pub(crate) metrics: Option<PhaseMetrics>,
    /// A phase given a worker twice, or a worker on a final phase.
    pub(crate) problem: Option<PhaseError>,
}

impl<K, P: Phase, C> Default for PhaseMachine<K, P, C> {
    fn default() -> Self {
        Self {
            workers: HashMap::new(),
            inputs: HashMap::new(),
            intervals: HashMap::new(),
            default_interval: Duration::from_secs(5),
            finalizer: None,
            prune: false,
            metrics: None,
            problem: None,
        }
    }
}

impl<K, P, C> PhaseMachine<K, P, C>
where
    K: Kind,
    P: Phase,
    C: Send + Sync + 'static,
{
    /// A machine with no workers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The worker of `phase`: given the object, the phase's inputs and the context, it returns
    /// the next phase, the outputs and the details (or an error, retried by the controller's
    /// policy without changing the phase).
    ///
    /// A worker may run more than once for one phase (the operator may stop after its outputs
    /// were applied and before the status recorded the next phase): make it idempotent.
    #[must_use]
    pub fn worker<F, Fut>(mut self, phase: P, worker: F) -> Self
    where
        F: Fn(Work<K, P>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Transition<P>, ReconcileError>> + Send + 'static,
    {
        if phase.is_final() {
            self.problem
                .get_or_insert(PhaseError::WorkerOnFinal(phase.name().into()));
        }
        self.workers
            .insert(phase, Box::new(move |work, ctx| worker(work, ctx).boxed()));
        self
    }

    /// An input of `phase`: `read` computes a value (a metrics query, anything not in
    /// Kubernetes) that the worker gets with `work.inputs.get::<T>()`. A failing read fails the
    /// reconcile (retried) before the worker runs.
    #[must_use]
    pub fn input<T, F, Fut>(mut self, phase: P, read: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReconcileError>> + Send + 'static,
    {
        let read = Arc::new(read);
        self.inputs
            .entry(phase)
            .or_default()
            .push(Box::new(move |object, ctx| {
                let read = Arc::clone(&read);
                async move { read(object, ctx).await.map(InputValue::of) }.boxed()
            }));
        self
    }

    /// A cache input of `phase`: the `T` named `name(object)` in the custom object's namespace,
    /// from the cache of a kind attached with `owns` or `watches` (the worker gets
    /// [`Named<T>`]).
    #[must_use]
    pub fn input_named<T: Kind>(
        self,
        phase: P,
        name: impl Fn(&K) -> String + Send + Sync + 'static,
    ) -> Self {
        self.input(phase, move |object: Arc<K>, ctx: Context<C>| {
            let name = name(&object);
            let namespace = object.meta().namespace.clone();
            async move {
                let store = ctx.related_store::<T>().ok_or_else(|| {
                    ReconcileError::terminal(format!(
                        "no cache of {} to read: attach it with owns or watches",
                        T::kind(&())
                    ))
                })?;
                Ok(Named(store.get_named(namespace.as_deref(), &name)))
            }
        })
    }

    /// A cache input of `phase`: every `T` whose label `key` has the value `value(object)`, from
    /// the cache of a kind attached with `owns` or `watches` (the worker gets [`Labelled<T>`]).
    #[must_use]
    pub fn input_labelled<T: Kind>(
        self,
        phase: P,
        key: &'static str,
        value: impl Fn(&K) -> String + Send + Sync + 'static,
    ) -> Self {
        self.input(phase, move |object: Arc<K>, ctx: Context<C>| {
            let value = value(&object);
            let namespace = object.meta().namespace.clone();
            async move {
                let store = ctx.related_store::<T>().ok_or_else(|| {
                    ReconcileError::terminal(format!(
                        "no cache of {} to read: attach it with owns or watches",
                        T::kind(&())
                    ))
                })?;
                let objects = store
                    .list(namespace.as_deref())
                    .into_iter()
                    .filter(|o| o.meta().labels.as_ref().and_then(|l| l.get(key)) == Some(&value))
                    .collect();
                Ok(Labelled(objects))
            }
        })
    }

    /// How long a non-final phase that did not move waits before it is worked again (default
    /// 5 s, or [`work_interval`](Self::work_interval)).
    #[must_use]
    pub fn interval(mut self, phase: P, interval: Duration) -> Self {
        self.intervals.insert(phase, interval);
        self
    }

    /// The work interval of phases without their own.
    #[must_use]
    pub fn work_interval(mut self, interval: Duration) -> Self {
        self.default_interval = interval;
        self
    }

    /// Runs `hook` once when an object is deleted, before it goes. Only a kind registered with a
    /// finalizer (a simple App's default managed kind) calls it; register a machine without a
    /// hook as a plain kind (`ManagedKind::plain`), so no finalizer is added for nothing.
    #[must_use]
    pub fn on_delete<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ReconcileError>> + Send + 'static,
    {
        self.finalizer = Some(Box::new(move |object, ctx| hook(object, ctx).boxed()));
        self
    }

    /// Deletes outputs a phase no longer returns (recorded in `status.outputs`); by default they
    /// are left alone.
    #[must_use]
    pub fn prune_outputs(mut self) -> Self {
        self.prune = true;
        self
    }

    /// Counts transitions, time per phase, objects per phase and worker calls into `metrics`.
    #[must_use]
    pub fn metrics(mut self, metrics: PhaseMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Whether the machine has a finalizer hook (then its kind needs a finalizer).
    pub fn has_finalizer_hook(&self) -> bool {
        self.finalizer.is_some()
    }
}
