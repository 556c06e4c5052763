//! [`PhaseMachine`]: the declaration of a kind's phases (a worker or an analysis per non-final
//! phase, inputs per phase, work intervals, the metric provider, the abort phase, the finalizer
//! hook), checked by [`PhaseMachine::build`] into the
//! [`PhaseScheduler`](crate::PhaseScheduler) that reconciles the kind (`build` lives with the
//! scheduler, which imports this module, not the other way round).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kubeapp_operator::{Context, Kind, MetricSetError, MetricsRegistry, ReconcileError};

use crate::analysis::Analysis;
use crate::inputs::{InputKey, InputValue};
use crate::metrics::PhaseMetrics;
use crate::phase::{Phase, PhaseError};
use crate::provider::{MetricError, MetricProvider, PrometheusProvider};
use crate::worker::{BoxInput, BoxWorker, Transition, Work};

/// The finalizer hook, boxed.
pub(crate) type BoxHook<K, C> = Box<
    dyn Fn(Arc<K>, Context<C>) -> futures::future::BoxFuture<'static, Result<(), ReconcileError>>
        + Send
        + Sync,
>;

/// One declared input of a phase: its key's name and how its value is read.
pub(crate) type DeclaredInput<K, C> = (&'static str, BoxInput<K, C>);

/// The analysis a phase waits on, and where its outcome leads.
pub(crate) struct DeclaredAnalysis<K, P> {
    /// The object's analysis (a spec field, or one fixed value).
    pub(crate) of: Box<dyn Fn(&K) -> Analysis + Send + Sync>,
    /// The phase after a successful (or promoted) analysis.
    pub(crate) on_success: P,
    /// The phase after a failed (or aborted) analysis.
    pub(crate) on_failure: P,
}

/// A kind's phases, workers and inputs; see the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use kube::CustomResource;
/// use kubeapp_phases::{Phase, PhaseError, PhaseMachine, PhaseStatus, Transition};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
///
/// /// A copy of a bucket, made by a Job.
/// #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
/// #[kube(group = "example.com", version = "v1", kind = "Backup", namespaced, status = "PhaseStatus")]
/// pub struct BackupSpec {
///     pub bucket: String,
/// }
///
/// #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// enum Step { Pending, Copying, Done, Failed }
///
/// impl Phase for Step {
///     const ALL: &'static [Self] = &[Step::Pending, Step::Copying, Step::Done, Step::Failed];
///     const INITIAL: Self = Step::Pending;
///     fn name(&self) -> &'static str {
///         match self {
///             Step::Pending => "Pending",
///             Step::Copying => "Copying",
///             Step::Done => "Done",
///             Step::Failed => "Failed",
///         }
///     }
///     fn is_final(&self) -> bool { matches!(self, Step::Done | Step::Failed) }
///     fn is_failure(&self) -> bool { *self == Step::Failed }
/// }
///
/// let pending = |work: kubeapp_phases::Work<Backup, Step>, _ctx| async move {
///     let name = work.object.metadata.name.clone().unwrap_or_default();
///     // The Job is applied with an owner reference to the Backup; then the phase moves on.
///     Ok(Transition::to(Step::Copying).output(json!({
///         "apiVersion": "batch/v1", "kind": "Job",
///         "metadata": {"name": format!("backup-{name}")},
///         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
///             {"name": "copy", "image": "rclone", "args": ["copy", work.object.spec.bucket]}]}}}
///     })))
/// };
/// let machine = PhaseMachine::<Backup, Step>::new()
///     .worker(Step::Pending, pending)
///     .worker(Step::Copying, |_work, _ctx| async move {
///         // A real worker reads the Job (an input, or the context's cache) and decides.
///         Ok(Transition::to(Step::Done).details(json!({"copied": true})))
///     })
///     .interval(Step::Copying, Duration::from_secs(10));
/// // Checked when built: every phase that is not final has a worker (or an analysis).
/// let scheduler = machine.build().expect("a consistent machine");
/// # let _ = scheduler;
/// // The scheduler is the kind's reconciler: `ManagedKind::<Backup>::new().reconciler(scheduler)`.
///
/// let incomplete = PhaseMachine::<Backup, Step>::new().worker(Step::Pending, pending);
/// assert!(matches!(incomplete.build(), Err(PhaseError::MissingWorker(phase)) if phase == "Copying"));
/// ```
pub struct PhaseMachine<K, P, C = ()> {
    pub(crate) workers: HashMap<P, BoxWorker<K, P, C>>,
    pub(crate) analyses: HashMap<P, DeclaredAnalysis<K, P>>,
    pub(crate) provider: Option<Arc<dyn MetricProvider>>,
    /// Where the `abort` gate moves a phase without an analysis.
    pub(crate) abort_to: Option<P>,
    /// Per phase, its inputs in declaration order.
    pub(crate) inputs: HashMap<P, Vec<DeclaredInput<K, C>>>,
    pub(crate) intervals: HashMap<P, Duration>,
    pub(crate) default_interval: Duration,
    pub(crate) finalizer: Option<BoxHook<K, C>>,
    pub(crate) prune: bool,
    pub(crate) metrics: Option<PhaseMetrics>,
    /// The first problem declared: a worker on a final phase, an input name used twice on a
    /// phase.
    pub(crate) problem: Option<PhaseError>,
}

impl<K, P: Phase, C> Default for PhaseMachine<K, P, C> {
    fn default() -> Self {
        Self {
            workers: HashMap::new(),
            analyses: HashMap::new(),
            provider: None,
            abort_to: None,
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

    /// `phase` waits on an analysis: `analysis(object)` (a spec field, or one fixed value; see
    /// [`crate::analysis`] for the rules), measured through the
    /// [`metric_provider`](Self::metric_provider) once per interval. Successful (or the
    /// `promote` gate) moves to `on_success`, failed (or `abort`) to `on_failure`, inconclusive
    /// pauses the object (`Paused=True`, reason `Inconclusive`) until a gate.
    ///
    /// The phase may also have a worker: it runs first on every reconcile (its outputs are
    /// ensured, its details written); when it moves to another phase the analysis is not
    /// measured. Without one, the analysis is the phase's only work.
    #[must_use]
    pub fn analysis(
        mut self,
        phase: P,
        analysis: impl Fn(&K) -> Analysis + Send + Sync + 'static,
        on_success: P,
        on_failure: P,
    ) -> Self {
        if phase.is_final() {
            self.problem
                .get_or_insert(PhaseError::AnalysisOnFinal(phase.name().into()));
        }
        self.analyses.insert(
            phase,
            DeclaredAnalysis {
                of: Box::new(analysis),
                on_success,
                on_failure,
            },
        );
        self
    }

    /// Where analyses are measured (e.g. a
    /// [`PrometheusProvider`]); required when a phase has
    /// an analysis.
    #[must_use]
    pub fn metric_provider(mut self, provider: impl MetricProvider + 'static) -> Self {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// [`metric_provider`](Self::metric_provider) with a [`PrometheusProvider`] at `base_url`
    /// (the query API's base, e.g. `http://prometheus:9090`), each query bounded by `timeout`.
    ///
    /// # Errors
    ///
    /// [`MetricError`] when the HTTP client cannot be built.
    pub fn prometheus(self, base_url: &str, timeout: Duration) -> Result<Self, MetricError> {
        Ok(self.metric_provider(PrometheusProvider::new(base_url, timeout)?))
    }

    /// Where the `abort` gate moves an object in a phase without an analysis (without this,
    /// `abort` applies to analyses only and is ignored elsewhere, with a Warning Event).
    #[must_use]
    pub fn abort_to(mut self, phase: P) -> Self {
        self.abort_to = Some(phase);
        self
    }

    /// An input of `phase` named by `key`: `read` computes its value (a metrics query,
    /// anything not in Kubernetes), which the worker gets with `work.inputs.get(key)`. A failing
    /// read fails the reconcile (retried) before the worker runs. A key name declared twice on
    /// one phase makes [`build`](Self::build) fail with [`PhaseError::DuplicateInput`].
    #[must_use]
    pub fn input<T, F, Fut>(mut self, phase: P, key: InputKey<T>, read: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReconcileError>> + Send + 'static,
    {
        let declared = self.inputs.entry(phase).or_default();
        if declared.iter().any(|(name, _)| *name == key.name()) {
            self.problem.get_or_insert(PhaseError::DuplicateInput {
                phase: phase.name().into(),
                input: key.name().into(),
            });
            return self;
        }
        let read = Arc::new(read);
        declared.push((
            key.name(),
            Box::new(move |object, ctx| {
                let read = Arc::clone(&read);
                async move {
                    let value = read(object, ctx).await?;
                    Ok(InputValue::of(key, value))
                }
                .boxed()
            }),
        ));
        self
    }

    /// A cache input of `phase` named by `key`: the `T` named `name(object)` in the custom
    /// object's namespace (`None` when not cached), from the cache of a kind attached with
    /// `owns` or `watches`.
    #[must_use]
    pub fn input_named<T: Kind>(
        self,
        phase: P,
        key: InputKey<Option<Arc<T>>>,
        name: impl Fn(&K) -> String + Send + Sync + 'static,
    ) -> Self {
        self.input(phase, key, move |object: Arc<K>, ctx: Context<C>| {
            let name = name(&object);
            let namespace = object.meta().namespace.clone();
            async move {
                let store = related_store::<T, C>(&ctx)?;
                Ok(store.get_named(namespace.as_deref(), &name))
            }
        })
    }

    /// A cache input of `phase` named by `key`: every `T` in the custom object's namespace whose
    /// label `label` has the value `value(object)`, from the cache of a kind attached with `owns`
    /// or `watches`.
    #[must_use]
    pub fn input_labelled<T: Kind>(
        self,
        phase: P,
        key: InputKey<Vec<Arc<T>>>,
        label: &'static str,
        value: impl Fn(&K) -> String + Send + Sync + 'static,
    ) -> Self {
        self.input(phase, key, move |object: Arc<K>, ctx: Context<C>| {
            let value = value(&object);
            let namespace = object.meta().namespace.clone();
            async move {
                let store = related_store::<T, C>(&ctx)?;
                Ok(store
                    .list(namespace.as_deref())
                    .into_iter()
                    .filter(|o| o.meta().labels.as_ref().and_then(|l| l.get(label)) == Some(&value))
                    .collect())
            }
        })
    }

    /// How long a non-final phase that did not move waits before it is worked again (default
    /// 5 s, or [`work_interval`](Self::work_interval)). A phase with an analysis is worked again
    /// when its next measurement is due, or after this interval if one is given here and it is
    /// shorter (the defaults do not apply to it).
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

    /// Counts into `registry`'s [`PhaseMetrics`] (a Runner's: the `context.metrics` of
    /// `Operator::app_with_context`), under its prefix: the same series as
    /// [`metrics`](Self::metrics) given `registry.set::<PhaseMetrics>()`, without naming the set.
    ///
    /// # Errors
    ///
    /// [`MetricSetError`] when the set cannot be created or its names clash with collectors
    /// registered before in `registry`.
    pub fn metrics_in(self, registry: &MetricsRegistry) -> Result<Self, MetricSetError> {
        Ok(self.metrics(registry.set::<PhaseMetrics>()?))
    }

    /// Whether the machine has a finalizer hook (then its kind needs a finalizer).
    pub fn has_finalizer_hook(&self) -> bool {
        self.finalizer.is_some()
    }
}

/// The cache of `T` the context reads, or a terminal error saying how to attach it.
fn related_store<T: Kind, C>(
    ctx: &Context<C>,
) -> Result<kubeapp_operator::Store<T>, ReconcileError> {
    ctx.related_store::<T>().ok_or_else(|| {
        ReconcileError::terminal(format!(
            "no cache of {} to read: attach it with owns or watches",
            T::kind(&())
        ))
    })
}
