//! The load test of objects that pass through undecodable states (kubeapp issue #32, defect 1),
//! beside `load_churn.rs`: 2,000 `Flip` objects against a real kube-apiserver + etcd, created 10 at
//! a time; while the creates still run, every third object flips in and out of decodability (a
//! string where the Rust type wants a number; half of them are created undecodable), a second third
//! gets two spec updates, and every fifth object is deleted (the flipping ones while undecodable);
//! some flipping objects end undecodable. The handlers are two pairs of a typed watcher and a typed
//! reconciler on one `KindHandle`: plain, and inside the opinionated wrappers (one workload for
//! both: the run stays under two minutes).
//!
//! It then waits (up to two minutes) until every delete reached all four handlers with the object's
//! last decodable state, and the last decodable state of every live object reached them all, and
//! checks that the watcher saw each object as one unbroken sequence of decodable states: `add`
//! first (the first decodable state of an object created undecodable included), each `update` from
//! the state before, `delete` of the last one. It fails with a list of what was lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt as _};
use kubeapp::operator::{
    BoxError, CancellationToken, Context, ControllerConfig, InformerController, InformerOptions,
    OpinionatedOptions, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult,
    Reconciler, Watcher,
};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};

/// One 2,000-object run at a time (the same rule as `load_churn.rs`, should a second test join).
static ONE_AT_A_TIME: Semaphore = Semaphore::const_new(1);

const OBJECTS: usize = 2000;
const CONCURRENCY: usize = 10;
/// How long the handlers may take, after the workload, to see everything.
const DEADLINE: Duration = Duration::from_secs(120);
/// `add` and `Created` work this long, so later events of an object queue behind them.
const ADD_DELAY: Duration = Duration::from_millis(5);

/// The Rust type wants a number; the stored schema accepts anything in `spec`
/// (`TestEnv::install_crd_with_open_spec`).
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "flip.soak.kubeapp.dev",
    version = "v1",
    kind = "Flip",
    namespaced
)]
struct FlipSpec {
    revision: u32,
}

/// One write of the workload: a decodable revision, an undecodable value (numbered, so that each
/// is a change), or the delete.
#[derive(Clone, Copy, Debug)]
enum Step {
    Good(u32),
    Bad(u32),
    Delete,
}

impl Step {
    fn spec(self) -> serde_json::Value {
        match self {
            Self::Good(revision) => serde_json::json!({ "revision": revision }),
            Self::Bad(n) => serde_json::json!({ "revision": format!("not a number {n}") }),
            Self::Delete => serde_json::Value::Null,
        }
    }
}

/// Object `i`'s creation and then its writes, one after the other.
fn plan(i: usize) -> Vec<Step> {
    use Step::{Bad, Delete, Good};
    let deleted = i.is_multiple_of(5);
    let mut steps = match i % 3 {
        // Flipping; every second one is created undecodable.
        0 if i.is_multiple_of(6) => vec![Bad(0), Good(1), Bad(2), Good(2)],
        0 => vec![Good(0), Bad(1), Good(1), Bad(2), Good(2)],
        1 => vec![Good(0), Good(1), Good(2)],
        _ => vec![Good(0)],
    };
    if i.is_multiple_of(3) && (deleted || i % 2 == 1) {
        // Deleted while undecodable, or undecodable for good.
        steps.push(Bad(3));
    }
    if deleted {
        steps.push(Delete);
    }
    steps
}

/// The revision of the last decodable state in `steps`.
fn last_good(steps: &[Step]) -> Option<u32> {
    steps.iter().rev().find_map(|step| match step {
        Step::Good(revision) => Some(*revision),
        _ => None,
    })
}

fn name(i: usize) -> String {
    format!("flip-{i:05}")
}

/// One handler call: what, the revision of the object it got, and for an update the old one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Add(u32),
    Update(u32, u32),
    Delete(u32),
    Sync(u32),
    Reconcile(ReconcileAction, u32),
}

/// Every handler call per object name; waiters are woken on each.
#[derive(Clone)]
struct Recorder {
    calls: Arc<Mutex<HashMap<String, Vec<Call>>>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Recorder {
    fn new() -> Self {
        Self {
            calls: Arc::default(),
            changed: Arc::new(watch::Sender::new(0)),
        }
    }

    /// A recorder of its own that wakes the same waiters.
    fn sibling(&self) -> Self {
        Self {
            calls: Arc::default(),
            changed: Arc::clone(&self.changed),
        }
    }

    fn record(&self, flip: &Flip, call: Call) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(flip.name_any())
            .or_default()
            .push(call);
        self.changed.send_modify(|n| *n += 1);
    }

    fn calls(&self) -> HashMap<String, Vec<Call>> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Recording(Recorder);

impl Watcher<Flip> for Recording {
    async fn add(&self, flip: Arc<Flip>, _ctx: &Context) -> Result<(), BoxError> {
        tokio::time::sleep(ADD_DELAY).await;
        self.0.record(&flip, Call::Add(flip.spec.revision));
        Ok(())
    }
    async fn update(&self, old: Arc<Flip>, new: Arc<Flip>, _ctx: &Context) -> Result<(), BoxError> {
        let call = Call::Update(old.spec.revision, new.spec.revision);
        self.0.record(&new, call);
        Ok(())
    }
    async fn delete(&self, flip: Arc<Flip>, _ctx: &Context) -> Result<(), BoxError> {
        self.0.record(&flip, Call::Delete(flip.spec.revision));
        Ok(())
    }
    async fn sync(&self, flip: Arc<Flip>, _ctx: &Context) -> Result<(), BoxError> {
        self.0.record(&flip, Call::Sync(flip.spec.revision));
        Ok(())
    }
}

impl Reconciler<Flip> for Recording {
    async fn reconcile(
        &self,
        request: ReconcileRequest<Flip>,
        _ctx: &Context,
    ) -> Result<ReconcileResult, ReconcileError> {
        if request.action == ReconcileAction::Created {
            tokio::time::sleep(ADD_DELAY).await;
        }
        let call = Call::Reconcile(request.action, request.object.spec.revision);
        self.0.record(&request.object, call);
        Ok(ReconcileResult::done())
    }
}

/// What is wrong with the watcher's calls of one object, or `None`: one unbroken sequence of
/// decodable states ending in `expected` (`deleted`: with its delete). `opinionated`: the
/// wrapper skips the `add` of an object being deleted before its add ran, and calls only
/// `delete` (see the opinionated guarantee), so a sequence may also be that `delete` alone.
fn watcher_loss(calls: &[Call], expected: u32, deleted: bool, opinionated: bool) -> Option<String> {
    let mut view = None;
    let mut gone = false;
    for call in calls {
        let wrong = match (*call, view) {
            _ if gone => true,
            (Call::Add(revision), None) => {
                view = Some(revision);
                false
            }
            (Call::Delete(revision), None) if opinionated => {
                (view, gone) = (Some(revision), true);
                false
            }
            (Call::Update(old, new), Some(current)) => {
                view = Some(new);
                old != current
            }
            (Call::Delete(revision), Some(current)) => {
                gone = true;
                revision != current
            }
            _ => true,
        };
        if wrong {
            return Some(format!("{call:?} does not follow the view {view:?}"));
        }
    }
    match (view, gone) {
        (Some(last), true) if deleted && last == expected => None,
        (Some(last), false) if !deleted && last == expected => None,
        _ => Some(format!(
            "ends at {view:?} (deleted: {gone}), expected {expected} (deleted: {deleted})"
        )),
    }
}

/// What is wrong with the reconciler's calls of one object, or `None`: the first request is a
/// `Created` (or a `Deleted` it merged into) and the last has the last decodable state.
fn reconciler_loss(calls: &[Call], expected: u32, deleted: bool) -> Option<String> {
    let requests: Vec<(ReconcileAction, u32)> = calls
        .iter()
        .filter_map(|call| match call {
            Call::Reconcile(action, revision) => Some((*action, *revision)),
            _ => None,
        })
        .collect();
    let first = requests.first().map(|(action, _)| *action);
    if !matches!(
        first,
        Some(ReconcileAction::Created | ReconcileAction::Deleted)
    ) {
        return Some(format!("first request {first:?}"));
    }
    let last = requests.last().copied();
    let wanted = (deleted, expected);
    match last {
        Some((action, revision)) if ((action == ReconcileAction::Deleted), revision) == wanted => {
            None
        }
        _ => Some(format!(
            "last request {last:?}, expected revision {expected} (deleted: {deleted})"
        )),
    }
}

/// Every object's loss, watcher and reconciler, sorted.
fn losses(calls: &HashMap<String, Vec<Call>>, opinionated: bool) -> Vec<String> {
    let mut found = Vec::new();
    for i in 0..OBJECTS {
        let steps = plan(i);
        let expected = last_good(&steps).expect("every object decodes at some point");
        let deleted = matches!(steps.last(), Some(Step::Delete));
        let (watcher, reconciler): (Vec<Call>, Vec<Call>) = calls
            .get(&name(i))
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .partition(|call| !matches!(call, Call::Reconcile(..)));
        if let Some(loss) = watcher_loss(&watcher, expected, deleted, opinionated) {
            found.push(format!("{} watcher: {loss}; {watcher:?}", name(i)));
        }
        if let Some(loss) = reconciler_loss(&reconciler, expected, deleted) {
            found.push(format!("{} reconciler: {loss}; {reconciler:?}", name(i)));
        }
    }
    found
}

/// Creates the objects `CONCURRENCY` at a time and, as each is created, runs its writes
/// (`CONCURRENCY` objects at a time); returns the number of writes.
async fn workload(api: &Api<DynamicObject>) -> usize {
    let (to_churn, created) = futures::channel::mpsc::unbounded::<usize>();
    let creator = async {
        let mut to_churn = to_churn;
        let mut creates = futures::stream::iter(0..OBJECTS)
            .map(|i| async move {
                let object: DynamicObject = serde_json::from_value(serde_json::json!({
                    "apiVersion": "flip.soak.kubeapp.dev/v1", "kind": "Flip",
                    "metadata": { "name": name(i) }, "spec": plan(i)[0].spec(),
                }))
                .expect("a Flip");
                api.create(&PostParams::default(), &object)
                    .await
                    .unwrap_or_else(|e| panic!("creating {}: {e}", name(i)));
                i
            })
            .buffer_unordered(CONCURRENCY);
        while let Some(i) = creates.next().await {
            to_churn.send(i).await.expect("the churner runs");
        }
    };
    let churner = created
        .map(|i| async move {
            let steps = plan(i);
            for step in &steps[1..] {
                match step {
                    Step::Delete => api
                        .delete(&name(i), &DeleteParams::default())
                        .await
                        .map(drop),
                    write => {
                        let patch = serde_json::json!({ "spec": write.spec() });
                        api.patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .map(drop)
                    }
                }
                .unwrap_or_else(|e| panic!("{step:?} of {}: {e}", name(i)));
            }
            steps.len()
        })
        .buffer_unordered(CONCURRENCY)
        .fold(0, |writes, steps| async move { writes + steps });
    let ((), writes) = tokio::join!(creator, churner);
    writes
}

fn logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    // The informer logs each undecodable state at error level: thousands here.
                    .unwrap_or_else(|_| {
                        "warn,kubeapp_operator::list_watch=off,kubeapp_operator::opinionated=off,\
                         kube_client::client::builder=off"
                            .into()
                    }),
            )
            .with_test_writer()
            .try_init();
    });
}

/// Waits until neither recorder shows a loss, woken by every handler call, until [`DEADLINE`];
/// returns the losses left, each prefixed with the pair it belongs to.
async fn converge(plain: &Recorder, opinionated: &Recorder) -> Vec<String> {
    let mut changes = plain.changed.subscribe();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        changes.mark_unchanged();
        let found: Vec<String> = [("plain", plain, false), ("opinionated", opinionated, true)]
            .into_iter()
            .flat_map(|(pair, recorder, wrapped)| {
                losses(&recorder.calls(), wrapped)
                    .into_iter()
                    .map(move |loss| format!("{pair}: {loss}"))
            })
            .collect();
        if found.is_empty() {
            return found;
        }
        // Woken by the next handler call; what is lost after the deadline stays lost.
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            _ => return found,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_handlers_see_every_delete_and_last_decodable_state_of_flipping_objects_under_load() {
    logs();
    let _slot = ONE_AT_A_TIME.acquire().await.expect("never closed");
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd_with_open_spec::<Flip>().await.expect("CRD");
    let ns = env.create_namespace("flip").await.expect("namespace");
    let controller = InformerController::new(
        ControllerConfig::default().shutdown_grace(Duration::from_secs(10)),
    );
    let flips = controller.kind(
        Api::<Flip>::namespaced(env.client(), &ns),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    // Two pairs on the same objects (one workload): plain, and inside the opinionated wrappers
    // (whose finalizers the plain pair's deletes wait for too).
    let plain = Recorder::new();
    let wrapped = plain.sibling();
    let _plain_watcher = flips.watch(Recording(plain.clone()));
    let _plain_reconciler = flips.reconcile(Recording(plain.clone()));
    let options = OpinionatedOptions::default();
    let _wrapped_watcher = flips
        .watch_opinionated(Recording(wrapped.clone()), options.clone())
        .expect("valid names");
    let _wrapped_reconciler = flips
        .reconcile_opinionated(
            Recording(wrapped.clone()),
            options.finalizer("flip.soak.kubeapp.dev/reconciler"),
        )
        .expect("valid names");
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await.expect("the controller runs") }
    });
    tokio::time::timeout(Duration::from_secs(60), flips.store().wait_until_synced())
        .await
        .expect("the informer syncs");

    let started = Instant::now();
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client(),
        &ns,
        &kube::api::ApiResource::erase::<Flip>(&()),
    );
    let writes = workload(&api).await;
    let workload_time = started.elapsed();
    let found = converge(&plain, &wrapped).await;
    let calls = |recorder: &Recorder| -> usize { recorder.calls().values().map(Vec::len).sum() };
    eprintln!(
        "{OBJECTS} objects, {writes} writes in {workload_time:.1?}; handler calls: plain {}, \
         opinionated {}; converged {:.1?} after the workload; {} losses",
        calls(&plain),
        calls(&wrapped),
        started.elapsed().saturating_sub(workload_time),
        found.len()
    );
    assert!(
        found.is_empty(),
        "{} losses (one per object and handler that missed something), e.g.:\n{}",
        found.len(),
        found
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the controller stops in time")
        .expect("the controller task does not panic");
}
