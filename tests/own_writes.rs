//! End-to-end tests (real kube-apiserver + etcd) of the request path of an opinionated
//! reconciler (kubeapp issue #18): two requests per new object, one reconcile per object, no
//! reconcile for the watch events of the operator's own writes, and no delete lost.
//!
//! - 200 new objects of a kind with a generation and a status subresource, reconciled by a
//!   reconciler that writes `status.observedGeneration` through the SDK's status writer: exactly
//!   one status write and one finalizer patch per object, no read, no refused request, one
//!   reconcile each; the 400 echoes (status write, finalizer patch) are counted as skipped. Then a
//!   status write, a label change and a spec change by someone else each reconcile again, and
//!   deleting all 200 at once delivers `Deleted` for every one.
//! - The same for a kind without `metadata.generation` (ConfigMap): the finalizer patch's echo
//!   is skipped, a data change by someone else reconciles.
//! - With `reconcile_own_writes(true)` the echoes are reconciled (the opt-in works, and so the
//!   first test fails when echoes are not recognised).
//! - Objects deleted while their first `Created` runs (with and without another controller's
//!   finalizer also holding the deletion; since issue #32 our finalizer went on before `Created`,
//!   so it holds them until `Deleted` was delivered), then 3,000 under churn (1,500 created and
//!   deleted by the test at once, 1,500 deleted by their own `Created`): every object whose
//!   `Created` ran gets `Deleted` exactly once, none is left.
//! - 1,500 objects created and each given a spec change at once (64 requests in flight), racing
//!   the controller's own status writes and finalizer patches: every spec change is reconciled
//!   (its generation observed), none is taken for an echo.
//!
//! - 200 objects whose reconciler also creates a child ConfigMap with `ctx.apply(..).owned_by(..)`
//!   under `owns`: still one reconcile each (the child's Add is the echo of that reconcile's own
//!   write, 600 echoes skipped), while someone else's change of a child, and its deletion,
//!   reconcile the owner (issue #35: the quick start reconciled each sample twice).
//!
//! Requests are counted by the operator's own instrumented client; reconciles by the handler.

mod call_log;
mod crd_env;

use call_log::{CallLog, eventually, logs};
use crd_env::CrdEnv;
use futures::StreamExt;
use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::{
    CancellationToken, Context, ControllerConfig, InformerController, InformerOptions,
    MetricsRegistry, OpinionatedOptions, ReconcileAction, ReconcileError, ReconcileRequest,
    ReconcileResult, Reconciler, reconciler_fn,
};
use kubeapp::runner::client_metrics::ClientMetrics;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "ownwrites.kubeapp.dev",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus"
)]
struct GadgetSpec {
    size: i32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct GadgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

const OBJECTS: usize = 200;
/// Objects of each churned group (deleted by the test, deleted by their own `Created`).
const CHURNED: usize = 1_500;
/// Requests the churn keeps in flight.
const CHURN_CONCURRENCY: usize = 64;
const OURS: &str = "ownwrites.kubeapp.dev/operator-gadgets-v1";
const CM_OURS: &str = "test.kubeapp.dev/own-writes";
const HOLD: &str = "test.kubeapp.dev/hold";
const MAX_PARALLEL_ENVS: usize = 2;

struct Env(CrdEnv);

impl std::ops::Deref for Env {
    type Target = CrdEnv;
    fn deref(&self) -> &CrdEnv {
        &self.0
    }
}

impl Env {
    async fn start(prefix: &str) -> Self {
        static SLOTS: Semaphore = Semaphore::const_new(MAX_PARALLEL_ENVS);
        logs();
        Self(CrdEnv::start::<Gadget>(&SLOTS, prefix).await)
    }

    fn gadgets(&self) -> Api<Gadget> {
        Api::namespaced(self.env.client(), &self.ns)
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.env.client(), &self.ns)
    }
}

/// A running controller with its counted client and metrics.
struct Operator {
    stop: CancellationToken,
    requests: ClientMetrics,
    registry: MetricsRegistry,
    prefix: String,
}

impl Operator {
    /// Requests of the operator's client with this status code, verb and subresource, to the
    /// kind's plural `kind`.
    fn requests(&self, code: &str, verb: &str, kind: &str, subresource: &str) -> u64 {
        self.requests.requests(code, verb, kind, subresource)
    }

    /// `reconciler_own_write_events_skipped_total` for `kind`.
    fn skipped(&self, kind: &str) -> u64 {
        self.samples("reconciler_own_write_events_skipped_total", kind)
            .map(|metric| metric.get_counter().get_value() as u64)
            .sum()
    }

    /// Reconciler calls of `kind` as `reconciler_process_duration_seconds` counted them (its
    /// sample count, summed over event types).
    fn timed_reconciles(&self, kind: &str) -> u64 {
        self.samples("reconciler_process_duration_seconds", kind)
            .map(|metric| metric.get_histogram().get_sample_count())
            .sum()
    }

    /// The samples of the prefixed metric `name` labelled with `kind`.
    fn samples(&self, name: &str, kind: &str) -> impl Iterator<Item = prometheus::proto::Metric> {
        let name = format!("{}_{name}", self.prefix);
        let kind = kind.to_string();
        self.registry
            .registry()
            .gather()
            .into_iter()
            .filter(move |family| family.name() == name)
            .flat_map(|family| family.get_metric().to_vec())
            .filter(move |metric| {
                metric
                    .get_label()
                    .iter()
                    .any(|label| label.name() == "kind" && label.value() == kind)
            })
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Starts a controller whose kinds `register` adds through the operator's counted client.
async fn start_operator(
    env: &Env,
    prefix: &str,
    config: ControllerConfig,
    register: impl FnOnce(&InformerController, kube::Client),
) -> Operator {
    let (client, requests) = call_log::counted_client(env.env.kubeconfig(), prefix).await;
    let registry = MetricsRegistry::new(Some(prefix)).expect("metrics");
    let controller = InformerController::new(config.metrics(registry.controller()));
    register(&controller, client);
    let stop = CancellationToken::new();
    tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    eventually("the controller synced", || controller.is_synced()).await;
    Operator {
        stop,
        requests,
        registry,
        prefix: prefix.to_string(),
    }
}

/// [`start_operator`] with one kind: the test's gadgets, reconciled by `reconciler` through the
/// opinionated wrapper (default options).
async fn start_gadget_operator(
    env: &Env,
    prefix: &str,
    config: ControllerConfig,
    reconciler: impl Reconciler<Gadget>,
) -> Operator {
    start_operator(env, prefix, config, |controller, client| {
        let _ = controller
            .kind(
                Api::<Gadget>::namespaced(client, &env.ns),
                watcher::Config::default(),
                InformerOptions::default(),
            )
            .reconcile_opinionated(reconciler, OpinionatedOptions::default())
            .expect("finalizer name");
    })
    .await
}

/// Logs `<action> <name>` and writes `status.observedGeneration` through the SDK's status
/// writer when it differs from the generation.
fn status_reconciler(log: CallLog) -> impl Reconciler<Gadget> {
    reconciler_fn(move |request: ReconcileRequest<Gadget>, ctx: Context| {
        let log = log.clone();
        async move {
            let gadget = request.object.as_ref();
            log.push(format!("{} {}", request.action, gadget.name_any()));
            if request.action == ReconcileAction::Deleted {
                return Ok(ReconcileResult::done());
            }
            observe_generation(gadget, &ctx).await?;
            Ok(ReconcileResult::done())
        }
    })
}

/// Writes `status.observedGeneration` through the SDK's status writer when it differs from the
/// generation (one status write per new object).
async fn observe_generation(gadget: &Gadget, ctx: &Context) -> Result<(), ReconcileError> {
    let generation = gadget.metadata.generation;
    let mut status = gadget.status.clone().unwrap_or_default();
    if status.observed_generation != generation {
        status.observed_generation = generation;
        ctx.status(gadget)
            .write(status)
            .await
            .map_err(ReconcileError::new)?;
    }
    Ok(())
}

/// The label of the gadgets' child ConfigMaps (the `owns` trigger watches only these).
const CHILD_LABEL: &str = "test.kubeapp.dev/child-of-gadget";

/// Logs `<action> <name>`, applies the gadget's child ConfigMap (owned by it, through the
/// context's applier) and writes `status.observedGeneration` when it differs.
fn child_reconciler(log: CallLog) -> impl Reconciler<Gadget> {
    reconciler_fn(move |request: ReconcileRequest<Gadget>, ctx: Context| {
        let log = log.clone();
        async move {
            let gadget = request.object.as_ref();
            log.push(format!("{} {}", request.action, gadget.name_any()));
            if request.action == ReconcileAction::Deleted {
                return Ok(ReconcileResult::done());
            }
            let child = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(gadget.name_any()),
                    namespace: gadget.namespace(),
                    labels: Some([(CHILD_LABEL.to_string(), "yes".to_string())].into()),
                    ..ObjectMeta::default()
                },
                data: Some([("size".to_string(), gadget.spec.size.to_string())].into()),
                ..ConfigMap::default()
            };
            ctx.apply(child)
                .owned_by(gadget)
                .map_err(ReconcileError::new)?
                .await
                .map_err(ReconcileError::new)?;
            observe_generation(gadget, &ctx).await?;
            Ok(ReconcileResult::done())
        }
    })
}

fn gadget(name: &str) -> Gadget {
    Gadget::new(name, GadgetSpec { size: 1 })
}

async fn create_gadgets(api: &Api<Gadget>, count: usize) {
    let creates = (0..count).map(|i| async move {
        api.create(&PostParams::default(), &gadget(&format!("g-{i:03}")))
            .await
            .expect("create gadget");
    });
    join_all(creates).await;
}

/// Waits until every gadget carries our finalizer and has its generation observed.
async fn wait_all_reconciled(api: &Api<Gadget>, count: usize) {
    let deadline = tokio::time::Instant::now() + call_log::WAIT;
    loop {
        let list = api.list(&ListParams::default()).await.expect("list");
        let done = list
            .items
            .iter()
            .filter(|g| {
                g.finalizers().iter().any(|f| f == OURS)
                    && g.status.as_ref().and_then(|s| s.observed_generation)
                        == g.metadata.generation
            })
            .count();
        if done == count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{done} of {count} gadgets reconciled within {:?}",
            call_log::WAIT
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn new_objects_cost_two_requests_and_one_reconcile_and_others_changes_still_reconcile() {
    let env = Env::start("own-writes").await;
    let log = CallLog::new();
    let operator = start_gadget_operator(
        &env,
        "own_writes_gadgets",
        ControllerConfig::default(),
        status_reconciler(log.clone()),
    )
    .await;
    create_gadgets(&env.gadgets(), OBJECTS).await;
    wait_all_reconciled(&env.gadgets(), OBJECTS).await;
    // Every object's two writes come back as two watch events; once all 400 were taken as
    // echoes, the counts below are final (a reconcile of an echo would come before its skip).
    eventually("400 echoes skipped", || {
        operator.skipped("gadgets") == 2 * OBJECTS as u64
    })
    .await;
    let objects = OBJECTS as u64;
    assert_eq!(
        operator.requests("200", "patch", "gadgets", "status"),
        objects
    );
    assert_eq!(operator.requests("200", "patch", "gadgets", ""), objects);
    assert_eq!(
        operator.requests("200", "get", "gadgets", ""),
        0,
        "no reads"
    );
    for code in ["409", "422"] {
        assert_eq!(operator.requests(code, "patch", "gadgets", ""), 0, "{code}");
        assert_eq!(operator.requests(code, "patch", "gadgets", "status"), 0);
    }
    let calls = log.entries();
    assert_eq!(calls.len(), OBJECTS, "one reconcile per object: {calls:?}");
    assert!(calls.iter().all(|c| c.starts_with("Created ")), "{calls:?}");
    // Each write is applied once: the finalizer patch waits until the cache has seen the status
    // write, so the apiserver (which applies a patch to its watch cache's copy first) does not
    // apply it to an old copy, fail etcd's compare-and-swap and apply it again.
    assert_eq!(
        etcd_updates(&env.client(), "gadgets").await,
        2 * objects,
        "etcd updates of gadgets: one per write"
    );

    // Someone else's writes reconcile: a status write, a label, a spec change.
    let api = env.gadgets();
    let params = PatchParams::default();
    let status = serde_json::json!({"status": {"note": "set by someone else"}});
    api.patch_status("g-000", &params, &Patch::Merge(status))
        .await
        .expect("foreign status write");
    log.wait_contains("Updated g-000").await;
    let label = serde_json::json!({"metadata": {"labels": {"team": "blue"}}});
    api.patch("g-001", &params, &Patch::Merge(label))
        .await
        .expect("label");
    log.wait_contains("Updated g-001").await;
    let spec = serde_json::json!({"spec": {"size": 2}});
    api.patch("g-002", &params, &Patch::Merge(spec))
        .await
        .expect("spec");
    log.wait_contains("Updated g-002").await;
    // The spec change's status write is the reconciler's own again: skipped too.
    eventually("the spec change's status write skipped", || {
        operator.skipped("gadgets") == 2 * objects + 1
    })
    .await;
    assert_eq!(log.count("Updated g-002"), 1, "{:?}", log.entries());

    // Deleting all at once delivers Deleted for every one and releases them.
    join_all((0..OBJECTS).map(|i| {
        let api = api.clone();
        async move {
            api.delete(&format!("g-{i:03}"), &DeleteParams::default())
                .await
                .expect("delete");
        }
    }))
    .await;
    log.wait_for("Deleted for every gadget", |calls| {
        (0..OBJECTS).all(|i| {
            let deleted = format!("Deleted g-{i:03}");
            calls.contains(&deleted)
        })
    })
    .await;
    eventually_empty(&api).await;
}

/// The apiserver's count of etcd updates of `resource` objects (every attempt, retries included),
/// from its `/metrics`.
async fn etcd_updates(client: &kube::Client, resource: &str) -> u64 {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a valid request");
    let text = client
        .request_text(request)
        .await
        .expect("the apiserver's /metrics");
    let series = format!(
        "etcd_request_duration_seconds_count{{group=\"ownwrites.kubeapp.dev\",operation=\"update\",resource=\"{resource}\"}}"
    );
    let line = text
        .lines()
        .find(|line| line.starts_with(&series))
        .unwrap_or_else(|| panic!("{series} missing from the apiserver's /metrics"));
    line.rsplit(' ')
        .next()
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"))
}

/// Objects of the load case below.
const LOAD: usize = 1_500;

#[tokio::test]
async fn spec_changes_racing_the_controllers_own_writes_are_all_reconciled_at_scale() {
    // 1,500 gadgets; while their `Created` calls write status and the wrapper patches
    // finalizers (echoes checked as they are queued or at dispatch), the test changes every
    // spec, 64 requests in flight. Every change must reach the reconciler: each object ends
    // with its new generation observed, none is taken for an echo.
    let env = Env::start("own-writes-load").await;
    let log = CallLog::new();
    let operator = start_gadget_operator(
        &env,
        "own_writes_load",
        ControllerConfig::default(),
        status_reconciler(log.clone()),
    )
    .await;
    let api = env.gadgets();
    let slots = Semaphore::new(CHURN_CONCURRENCY);
    join_all((0..LOAD).map(|i| {
        let (api, slots) = (&api, &slots);
        async move {
            let _slot = slots.acquire().await.expect("open");
            let name = format!("load-{i:04}");
            api.create(&PostParams::default(), &gadget(&name))
                .await
                .expect("create");
            let spec = serde_json::json!({"spec": {"size": 2}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(spec))
                .await
                .expect("spec change");
        }
    }))
    .await;
    wait_all_reconciled(&api, LOAD).await;
    let list = api.list(&ListParams::default()).await.expect("list");
    assert!(
        list.items
            .iter()
            .all(|g| g.metadata.generation == Some(2) && g.spec.size == 2),
        "every spec change landed"
    );
    // Every reconciler call is in the duration histogram once the workers are idle (each worker
    // counts into its own buffer and folds it in when it parks): none lost under this load.
    eventually("every reconcile call timed", || {
        operator.timed_reconciles("gadgets") == log.entries().len() as u64
    })
    .await;
    drop(operator);
}

/// Waits until no gadget is left (their finalizers were removed).
async fn eventually_empty(api: &Api<Gadget>) {
    let deadline = tokio::time::Instant::now() + call_log::WAIT;
    loop {
        let left = api.list(&ListParams::default()).await.expect("list").items;
        if left.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} gadgets left, e.g. {:?}",
            left.len(),
            left.first()
                .map(|g| (g.name_any(), g.finalizers().to_vec()))
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn with_reconcile_own_writes_the_echoes_are_reconciled() {
    let env = Env::start("own-writes-opt-in").await;
    let log = CallLog::new();
    let operator = start_gadget_operator(
        &env,
        "own_writes_opt_in",
        ControllerConfig::default().reconcile_own_writes(true),
        status_reconciler(log.clone()),
    )
    .await;
    create_gadgets(&env.gadgets(), 1).await;
    wait_all_reconciled(&env.gadgets(), 1).await;
    // The status write's and the finalizer patch's events reach the reconciler (they may merge
    // into one request while the first call runs, so at least one more call).
    log.wait_contains("Updated g-000").await;
    assert_eq!(operator.skipped("gadgets"), 0);
}

#[tokio::test]
async fn a_kind_without_generation_skips_its_finalizer_echo_and_reconciles_data_changes() {
    let env = Env::start("own-writes-cm").await;
    let log = CallLog::new();
    let operator = start_operator(
        &env,
        "own_writes_cm",
        ControllerConfig::default(),
        |controller, client| {
            let reconciler = reconciler_fn({
                let log = log.clone();
                move |request: ReconcileRequest<ConfigMap>, _ctx: Context| {
                    let log = log.clone();
                    async move {
                        log.push(format!("{} {}", request.action, request.object.name_any()));
                        Ok::<_, ReconcileError>(ReconcileResult::done())
                    }
                }
            });
            let _ = controller
                .kind(
                    Api::<ConfigMap>::namespaced(client, &env.ns),
                    watcher::Config::default().labels("test=own-writes"),
                    InformerOptions::default(),
                )
                .reconcile_opinionated(reconciler, OpinionatedOptions::default().finalizer(CM_OURS))
                .expect("finalizer name");
        },
    )
    .await;
    let api = env.config_maps();
    join_all((0..OBJECTS).map(|i| {
        let api = api.clone();
        async move {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(format!("cm-{i:03}"));
            cm.metadata.labels = Some([("test".to_string(), "own-writes".to_string())].into());
            cm.data = Some([("k".to_string(), "v1".to_string())].into());
            api.create(&PostParams::default(), &cm)
                .await
                .expect("create");
        }
    }))
    .await;
    eventually("every finalizer echo skipped", || {
        operator.skipped("configmaps") == OBJECTS as u64
    })
    .await;
    assert_eq!(log.entries().len(), OBJECTS, "{:?}", log.entries());
    assert_eq!(
        operator.requests("200", "patch", "configmaps", ""),
        OBJECTS as u64
    );
    assert_eq!(operator.requests("200", "get", "configmaps", ""), 0);
    let data = serde_json::json!({"data": {"k": "v2"}});
    api.patch("cm-007", &PatchParams::default(), &Patch::Merge(data))
        .await
        .expect("data change");
    log.wait_contains("Updated cm-007").await;
}

/// Logs calls; `Created` of a gadget whose name starts with `doomed` deletes it: the object is
/// deleted while its first `Created` runs, after the wrapper's finalizer went on.
fn deleting_reconciler(log: CallLog, api: Api<Gadget>) -> impl Reconciler<Gadget> {
    reconciler_fn(move |request: ReconcileRequest<Gadget>, _ctx: Context| {
        let (log, api) = (log.clone(), api.clone());
        async move {
            let name = request.object.name_any();
            log.push(format!("{} {name}", request.action));
            if request.action == ReconcileAction::Created && name.starts_with("doomed") {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(ReconcileError::new)?;
            }
            Ok(ReconcileResult::done())
        }
    })
}

#[tokio::test]
async fn objects_deleted_during_their_first_created_and_under_churn_lose_no_delete() {
    let env = Env::start("own-writes-delete").await;
    let log = CallLog::new();
    let api = env.gadgets();
    let _operator = start_gadget_operator(
        &env,
        "own_writes_delete",
        ControllerConfig::default(),
        deleting_reconciler(log.clone(), api.clone()),
    )
    .await;
    // Since issue #32 our finalizer goes on before `Created`: an object deleting itself in
    // `Created` is held until `Deleted` was delivered, then released.
    api.create(&PostParams::default(), &gadget("doomed-gone"))
        .await
        .expect("create");
    log.wait_contains("Deleted doomed-gone").await;
    eventually_absent(&api, "doomed-gone").await;
    // Held by another finalizer too: `Deleted` comes at the deletion (not when the other
    // finalizer goes), and only ours is removed.
    let mut held = gadget("doomed-held");
    held.metadata.finalizers = Some(vec![HOLD.to_string()]);
    api.create(&PostParams::default(), &held)
        .await
        .expect("create");
    log.wait_contains("Deleted doomed-held").await;
    eventually_finalizers(&api, "doomed-held", &[HOLD]).await;
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    api.patch(
        "doomed-held",
        &PatchParams::default(),
        &Patch::Merge(release),
    )
    .await
    .expect("release");
    eventually_absent(&api, "doomed-held").await;
    assert_eq!(log.count("Deleted doomed-held"), 1, "{:?}", log.entries());

    // Churn at scale: CHURNED objects created and deleted by the test right away (some before
    // the wrapper's finalizer patch, some after), and as many deleted by their own `Created`,
    // all at once.
    let names: Vec<String> = (0..CHURNED)
        .flat_map(|i| [format!("churn-{i:04}"), format!("doomed-churn-{i:04}")])
        .collect();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(CHURN_CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &gadget(&name))
                    .await
                    .expect("create");
                if name.starts_with("churn") {
                    // The operator may have deleted nothing here: only doomed objects delete
                    // themselves, so a 404 would be a bug of the test, not a race.
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .expect("delete");
                }
            }
        })
        .await;
    eventually_empty(&api).await;
    // Every object whose `Created` ran gets its `Deleted`, exactly once. Checked by polling
    // (each check reads the whole log once; a check per log entry would be quadratic).
    let unanswered = || {
        let calls = log.entries();
        let mut created = std::collections::HashSet::new();
        let mut deleted = std::collections::HashMap::<&str, usize>::new();
        for call in &calls {
            match call.split_once(' ') {
                Some(("Created", name)) => {
                    created.insert(name);
                }
                Some(("Deleted", name)) => *deleted.entry(name).or_default() += 1,
                _ => {}
            }
        }
        let twice: Vec<&str> = deleted
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(name, _)| *name)
            .collect();
        assert!(twice.is_empty(), "Deleted delivered twice: {twice:?}");
        let missing = names
            .iter()
            .filter(|name| created.contains(name.as_str()) && !deleted.contains_key(name.as_str()))
            .count();
        let doomed_created = names
            .iter()
            .filter(|name| name.starts_with("doomed") && created.contains(name.as_str()))
            .count();
        (missing, doomed_created)
    };
    eventually("Deleted for every churned gadget whose Created ran", || {
        unanswered().0 == 0
    })
    .await;
    // A doomed object deletes itself in `Created`, so each one's `Created` ran: the case the
    // test is about happened CHURNED times, not only for the objects the churn left alone.
    assert_eq!(unanswered().1, CHURNED, "every doomed object ran Created");
}

/// Waits until `name` is gone.
async fn eventually_absent(api: &Api<Gadget>, name: &str) {
    let deadline = tokio::time::Instant::now() + call_log::WAIT;
    while api.get_opt(name).await.expect("get").is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{name} still there");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Waits until `name` carries exactly `finalizers`.
async fn eventually_finalizers(api: &Api<Gadget>, name: &str, finalizers: &[&str]) {
    let deadline = tokio::time::Instant::now() + call_log::WAIT;
    loop {
        let object = api.get(name).await.expect("get");
        if object.finalizers() == finalizers {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} carries {:?}, not {finalizers:?}",
            object.finalizers()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_child_the_reconcile_created_triggers_no_second_reconcile_and_others_changes_still_do() {
    let env = Env::start("own-children").await;
    let log = CallLog::new();
    let operator = start_operator(
        &env,
        "own_children_gadgets",
        ControllerConfig::default(),
        |controller, client| {
            let kind = controller.kind(
                Api::<Gadget>::namespaced(client.clone(), &env.ns),
                watcher::Config::default(),
                InformerOptions::default(),
            );
            let _ = kind.owns::<ConfigMap>(
                Api::namespaced(client, &env.ns),
                watcher::Config::default().labels(CHILD_LABEL),
            );
            let _ = kind
                .reconcile_opinionated(child_reconciler(log.clone()), OpinionatedOptions::default())
                .expect("finalizer name");
        },
    )
    .await;
    create_gadgets(&env.gadgets(), OBJECTS).await;
    wait_all_reconciled(&env.gadgets(), OBJECTS).await;
    let config_maps = env.config_maps();
    let children = config_maps
        .list(&ListParams::default().labels(CHILD_LABEL))
        .await
        .expect("list children");
    assert_eq!(children.items.len(), OBJECTS, "a child per gadget");
    // Each object's three writes (finalizer, child, status) come back as three watch events:
    // once all 600 were taken as echoes, the reconcile count below is final (a reconcile of an
    // echo would come before its skip).
    eventually("600 echoes skipped", || {
        operator.skipped("gadgets") == 3 * OBJECTS as u64
    })
    .await;
    let calls = log.entries();
    assert_eq!(calls.len(), OBJECTS, "one reconcile per object: {calls:?}");
    assert!(calls.iter().all(|c| c.starts_with("Created ")), "{calls:?}");

    // Someone else's change of a child reconciles its owner, and so does its deletion (the
    // reconcile puts it back).
    let label = serde_json::json!({"metadata": {"labels": {"team": "blue"}}});
    config_maps
        .patch("g-000", &PatchParams::default(), &Patch::Merge(label))
        .await
        .expect("label a child");
    log.wait_contains("Resynced g-000").await;
    config_maps
        .delete("g-001", &DeleteParams::default())
        .await
        .expect("delete a child");
    log.wait_contains("Resynced g-001").await;
    let deadline = tokio::time::Instant::now() + call_log::WAIT;
    while config_maps.get_opt("g-001").await.expect("get").is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted child is not back within {:?}",
            call_log::WAIT
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
