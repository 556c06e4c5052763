//! A scenario: the workload a fault plan runs under (steps of creates, updates and deletes of
//! the user's objects), the kinds whose end state is compared, and the operator under test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;

use kube::api::ApiResource;
use serde_json::Value;

use crate::snapshot::Normalize;

/// An error of a workload step or of starting an operator.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a workload step acts with: a client that reaches the apiserver directly (not through the
/// fault proxy), and the run's namespace.
#[derive(Clone)]
pub struct Workload {
    /// A client straight to the apiserver.
    pub client: kube::Client,
    /// The run's namespace: every run gets a fresh one.
    pub namespace: String,
}

type StepFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
type Step = Box<dyn Fn(Workload) -> StepFuture + Send + Sync>;

/// `step` as the scenario keeps it.
fn boxed<F, Fut>(step: F) -> Step
where
    F: Fn(Workload) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    Box::new(move |workload| Box::pin(step(workload)))
}

/// A workload in steps, and the kinds whose end state the oracle compares.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, PostParams};
/// use kubeapp_testing::Scenario;
///
/// let scenario = Scenario::new("configmaps")
///     .step("create", |workload| async move {
///         let api: Api<ConfigMap> = Api::namespaced(workload.client, &workload.namespace);
///         let mut object = ConfigMap::default();
///         object.metadata.name = Some("a".into());
///         api.create(&PostParams::default(), &object).await?;
///         Ok(())
///     })
///     .observe::<ConfigMap>(None);
/// assert_eq!(scenario.steps(), 1);
/// ```
pub struct Scenario {
    pub(crate) name: String,
    pub(crate) setup: Vec<(String, Step)>,
    pub(crate) steps: Vec<(String, Step)>,
    pub(crate) observed: Vec<(ApiResource, Option<String>)>,
    pub(crate) normalize: Option<Box<Normalize>>,
}

impl Scenario {
    /// An empty scenario named `name` (lower case letters, digits and `-` read best: it names
    /// the runs' namespaces).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            setup: Vec::new(),
            steps: Vec::new(),
            observed: Vec::new(),
            normalize: None,
        }
    }

    /// Adds a step that runs before the operator starts, in every run: the objects the
    /// operator finds when it starts (it lists them as it would after a deployment). No fault
    /// starts in a setup step; a watch fault's window starts with a step of
    /// [`step`](Self::step), so a scenario whose interesting history begins with objects the
    /// operator has already seen creates them here.
    pub fn setup<F, Fut>(mut self, name: impl Into<String>, step: F) -> Self
    where
        F: Fn(Workload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.setup.push((name.into(), boxed(step)));
        self
    }

    /// Adds a step. Each step ends when the operator is quiescent; a fault plan's watch fault
    /// starts before one step and ends after the next one (or after the last step).
    pub fn step<F, Fut>(mut self, name: impl Into<String>, step: F) -> Self
    where
        F: Fn(Workload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.steps.push((name.into(), boxed(step)));
        self
    }

    /// Compares the end state of kind `K` in the run's namespace (only objects matching
    /// `label_selector`, if given).
    pub fn observe<K: kube::Resource<DynamicType = ()>>(
        self,
        label_selector: Option<&str>,
    ) -> Self {
        self.observe_resource(ApiResource::erase::<K>(&()), label_selector)
    }

    /// [`observe`](Self::observe) for a resource known at run time.
    pub fn observe_resource(mut self, resource: ApiResource, label_selector: Option<&str>) -> Self {
        self.observed
            .push((resource, label_selector.map(str::to_owned)));
        self
    }

    /// Applies `normalize` to every observed object before comparison, after the apiserver's
    /// fields are removed (e.g. to drop a field that holds a time or a generated name). Each
    /// object carries its `apiVersion` and `kind`.
    pub fn normalize(mut self, normalize: impl Fn(&mut Value) + Send + Sync + 'static) -> Self {
        self.normalize = Some(Box::new(normalize));
        self
    }

    /// How many steps it has.
    pub fn steps(&self) -> usize {
        self.steps.len()
    }
}

/// What one process of the operator under test is started with.
#[derive(Clone)]
pub struct RunContext {
    /// A kubeconfig that reaches the apiserver through the run's fault proxy (for a child
    /// process: `KUBECONFIG`).
    pub kubeconfig: PathBuf,
    /// A client through the run's fault proxy (for an operator in the test process).
    pub client: kube::Client,
    /// The namespace the operator is to act on.
    pub namespace: String,
    /// The process's number in the run, from 1 (a crash plan starts a second one).
    pub process: usize,
    /// A directory of the run's own, for logs and certificates.
    pub dir: PathBuf,
}

/// How to start the operator under test, once per process of each run.
#[async_trait::async_trait]
pub trait OperatorUnderTest: Send + Sync {
    /// Starts one process (or an in-process instance) that reaches the apiserver as `run`
    /// says, acts on `run.namespace` only, and serves `/debug/kubeapp`.
    async fn start(&self, run: &RunContext) -> Result<Box<dyn RunningOperator>, BoxError>;
}

/// One started process of the operator under test.
#[async_trait::async_trait]
pub trait RunningOperator: Send {
    /// Where it serves `/metrics` and `/debug/kubeapp`.
    fn metrics_addr(&self) -> SocketAddr;
    /// Its log so far, for failure reports (empty if it has none).
    fn logs(&self) -> String {
        String::new()
    }
    /// Stops it at once, as SIGKILL does: no graceful stop.
    async fn kill(self: Box<Self>);
}
