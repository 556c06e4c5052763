//! End-to-end tests of the opinionated wrappers (`kubeapp::operator::opinionated`) against a real
//! kube-apiserver + etcd: the finalizer lifecycle, operator downtime (the controller stopped and a
//! new one started later against the same control plane), foreign finalizers, conflicts, and the
//! reconciler's exactly-one-Deleted promise.
//!
//! Each test runs its own control plane; at most [`MAX_PARALLEL_ENVS`] run at once.

mod call_log;
mod crd_env;

use call_log::logs;
use crd_env::CrdEnv;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::erased::DynReconcilerFn;
use kubeapp::operator::erased::DynWatcherFns;
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::opinionated::{
    ConflictRetry, FinalizerMetrics, OpinionatedOptions, opinionated_dequeue_policy,
};
use kubeapp::operator::{
    BoxError, CancellationToken, ControllerConfig, Informer, InformerController,
    OpinionatedReconciler, OpinionatedWatcher, ReconcileResult, RetryPolicy,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

/// A custom kind with a status subresource, so status-only changes can be made.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "opinionated.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
struct WidgetSpec {
    size: i32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
struct WidgetStatus {
    seen: Option<i32>,
}

const OURS: &str = "opinionated.kubeapp.dev/operator-widgets-v1";
const WIP: &str = "opinionated.kubeapp.dev/operator-widgets-v1-wip";
/// Another controller's finalizer.
const OTHER: &str = "other.dev/x";
const KIND: &str = "widgets";
const TIMEOUT: Duration = Duration::from_secs(60);
const MAX_PARALLEL_ENVS: usize = 3;

/// A control plane with the Widget CRD and a fresh namespace, holding one of the parallel slots.
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
        Self(CrdEnv::start::<Widget>(&SLOTS, prefix).await)
    }

    fn api(&self) -> Api<Widget> {
        Api::namespaced(self.client(), &self.ns)
    }
}

fn name_of(w: &Widget) -> String {
    w.name_any()
}

/// An append-only log that tests await conditions on.
#[derive(Clone)]
struct Log(Arc<watch::Sender<Vec<String>>>);

impl Log {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Vec::new())))
    }

    fn push(&self, entry: String) {
        self.0.send_modify(|log| log.push(entry));
    }

    fn entries(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    fn count(&self, entry: &str) -> usize {
        self.entries().iter().filter(|e| *e == entry).count()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let mut rx = self.0.subscribe();
        match tokio::time::timeout(TIMEOUT, rx.wait_for(|log| done(log))).await {
            Ok(Ok(log)) => log.clone(),
            _ => panic!(
                "{what}: not reached within {TIMEOUT:?}; log: {:#?}",
                self.entries()
            ),
        }
    }

    async fn wait_contains(&self, entry: &str) -> Vec<String> {
        self.wait_for(entry, |log| log.iter().any(|e| e == entry))
            .await
    }

    async fn wait_count(&self, entry: &str, n: usize) -> Vec<String> {
        self.wait_for(&format!("{n} x {entry}"), |log| {
            log.iter().filter(|e| *e == entry).count() >= n
        })
        .await
    }
}

type Hook = Arc<dyn Fn(Arc<Widget>, usize) -> BoxFuture<'static, ()> + Send + Sync>;

/// A watcher that logs every call (`add w 1`, `add-failed w`, `update w 1->2`, `delete w`,
/// `delete-failed w`, `sync w 2`), fails on request, and runs optional hooks at the start of
/// `add` and `delete` (with the call's number for that object name, from 1).
#[derive(Clone, Default)]
struct Recorder {
    log: Option<Log>,
    add_failures: Arc<Mutex<HashMap<String, u32>>>,
    delete_failures: Arc<Mutex<HashMap<String, u32>>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    before_add: Option<Hook>,
    before_delete: Option<Hook>,
}

const FOREVER: u32 = u32::MAX;

impl Recorder {
    fn new(log: &Log) -> Self {
        Self {
            log: Some(log.clone()),
            ..Self::default()
        }
    }

    fn push(&self, entry: String) {
        if let Some(log) = &self.log {
            log.push(entry);
        }
    }

    /// Makes the next `n` adds of `name` fail (`FOREVER`: all; 0: none from now on).
    fn fail_adds(&self, name: &str, n: u32) {
        self.add_failures
            .lock()
            .expect("lock")
            .insert(name.into(), n);
    }

    fn fail_deletes(&self, name: &str, n: u32) {
        self.delete_failures
            .lock()
            .expect("lock")
            .insert(name.into(), n);
    }

    fn call_number(&self, what: &str, name: &str) -> usize {
        let mut calls = self.calls.lock().expect("lock");
        let n = calls.entry(format!("{what} {name}")).or_default();
        *n += 1;
        *n
    }

    fn take_failure(map: &Mutex<HashMap<String, u32>>, name: &str) -> bool {
        let mut map = map.lock().expect("lock");
        match map.get_mut(name) {
            Some(n) if *n > 0 => {
                if *n != FOREVER {
                    *n -= 1;
                }
                true
            }
            _ => false,
        }
    }
}

impl Recorder {
    /// The recorder as a watcher of Widgets.
    fn watcher(&self) -> DynWatcherFns<Widget> {
        let (add, update, delete, sync) = (self.clone(), self.clone(), self.clone(), self.clone());
        DynWatcherFns::new()
            .on_add(move |w, _| {
                let recorder = add.clone();
                async move { recorder.add(w).await }
            })
            .on_update(move |old, new, _| {
                update.push(format!(
                    "update {} {}->{}",
                    name_of(&new),
                    old.spec.size,
                    new.spec.size
                ));
                async { Ok(()) }
            })
            .on_delete(move |w, _| {
                let recorder = delete.clone();
                async move { recorder.delete(w).await }
            })
            .on_sync(move |w, _| {
                sync.push(format!("sync {} {}", name_of(&w), w.spec.size));
                async { Ok(()) }
            })
    }

    async fn add(&self, w: Arc<Widget>) -> Result<(), BoxError> {
        let name = name_of(&w);
        let call = self.call_number("add", &name);
        if let Some(hook) = &self.before_add {
            hook(w.clone(), call).await;
        }
        if Self::take_failure(&self.add_failures, &name) {
            self.push(format!("add-failed {name}"));
            return Err(format!("add of {name} fails on purpose").into());
        }
        self.push(format!("add {name} {}", w.spec.size));
        Ok(())
    }

    async fn delete(&self, w: Arc<Widget>) -> Result<(), BoxError> {
        let name = name_of(&w);
        let call = self.call_number("delete", &name);
        if let Some(hook) = &self.before_delete {
            hook(w.clone(), call).await;
        }
        if Self::take_failure(&self.delete_failures, &name) {
            self.push(format!("delete-failed {name}"));
            return Err(format!("delete of {name} fails on purpose").into());
        }
        self.push(format!("delete {name}"));
        Ok(())
    }
}

/// One run of an operator: an InformerController with one Widget informer in the test namespace.
struct Operator {
    controller: InformerController,
    stop: CancellationToken,
    running: JoinHandle<()>,
}

fn config(retry_base: Duration) -> ControllerConfig {
    ControllerConfig::default()
        .retry_policy(RetryPolicy::exponential(retry_base, 30))
        .dequeue_policy(Some(opinionated_dequeue_policy()))
        .shutdown_grace(Duration::from_secs(5))
}

impl Operator {
    async fn start(
        env: &Env,
        config: ControllerConfig,
        add: impl FnOnce(&InformerController),
    ) -> Self {
        let controller = InformerController::new(config);
        controller.erased().add_informer(
            KIND,
            Informer::new::<Widget>(env.client(), ListWatchOptions::default().namespace(&env.ns)),
        );
        add(&controller);
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move {
                controller
                    .run(stop)
                    .await
                    .expect("the controller runs once")
            }
        });
        for (kind, flag) in controller.synced_flags() {
            tokio::time::timeout(TIMEOUT, flag.wait())
                .await
                .unwrap_or_else(|_| panic!("informer {kind} never synced"));
        }
        Self {
            controller,
            stop,
            running,
        }
    }

    /// An operator running the opinionated wrapper around `recorder`.
    async fn watching(env: &Env, recorder: &Recorder, options: OpinionatedOptions) -> Self {
        Self::watching_with(env, recorder, options, config(Duration::from_millis(100))).await
    }

    async fn watching_with(
        env: &Env,
        recorder: &Recorder,
        options: OpinionatedOptions,
        config: ControllerConfig,
    ) -> Self {
        let watcher =
            OpinionatedWatcher::for_kind::<Widget>(env.client(), recorder.watcher(), options)
                .expect("valid finalizer names");
        assert_eq!(watcher.finalizers().finalizer(), OURS);
        assert_eq!(watcher.finalizers().in_progress(), WIP);
        Self::start(env, config, |controller| {
            controller.erased().add_watcher(KIND, watcher)
        })
        .await
    }

    /// "Operator down": cancel the controller's token and await its run.
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(TIMEOUT, self.running)
            .await
            .expect("the controller stops in time")
            .expect("the controller task does not panic");
        drop(self.controller);
    }
}

fn widget(name: &str, size: i32) -> Widget {
    Widget::new(name, WidgetSpec { size })
}

fn widget_with_finalizers(name: &str, size: i32, finalizers: &[&str]) -> Widget {
    let mut w = widget(name, size);
    w.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_string()).collect());
    w
}

async fn create(api: &Api<Widget>, w: &Widget) -> Widget {
    api.create(&PostParams::default(), w).await.expect("create")
}

async fn merge(api: &Api<Widget>, name: &str, patch: serde_json::Value) -> Widget {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch")
}

async fn set_size(api: &Api<Widget>, name: &str, size: i32) {
    merge(api, name, serde_json::json!({ "spec": { "size": size } })).await;
}

async fn delete(api: &Api<Widget>, name: &str) {
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
}

/// Waits until the object `name` satisfies `condition` (`None` when it does not exist).
async fn wait_object(
    api: &Api<Widget>,
    name: &str,
    what: &str,
    condition: impl Fn(Option<&Widget>) -> bool + Send + 'static,
) -> Option<Widget> {
    match tokio::time::timeout(
        TIMEOUT,
        await_condition(api.clone(), name, move |w: Option<&Widget>| condition(w)),
    )
    .await
    {
        Ok(Ok(object)) => object,
        Ok(Err(error)) => panic!("{what}: watch failed: {error}"),
        Err(_) => panic!(
            "{what}: not reached within {TIMEOUT:?}; object now: {:#?}",
            api.get_opt(name).await
        ),
    }
}

async fn wait_finalizers(api: &Api<Widget>, name: &str, expected: &[&str]) -> Widget {
    let expected: Vec<String> = expected.iter().map(|f| (*f).to_string()).collect();
    let what = format!("{name} has finalizers {expected:?}");
    wait_object(api, name, &what, move |w| {
        w.is_some_and(|w| w.finalizers() == expected.as_slice())
    })
    .await
    .expect("the object exists")
}

async fn wait_gone(api: &Api<Widget>, name: &str, uid: &str) {
    tokio::time::timeout(
        TIMEOUT,
        await_condition(api.clone(), name, conditions::is_deleted(uid)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} still exists after {TIMEOUT:?}"))
    .expect("watch");
}

/// Polls `condition` (a counter, which nothing can be subscribed to) until it holds.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let polled = tokio::time::timeout(TIMEOUT, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "{what}: not within {TIMEOUT:?}");
}

fn uid(w: &Widget) -> String {
    w.uid().expect("created objects have a UID")
}

#[tokio::test]
async fn add_leaves_our_finalizer_and_not_the_in_progress_one() {
    let env = Env::start("add").await;
    let api = env.api();
    let log = Log::new();
    let op = Operator::watching(&env, &Recorder::new(&log), OpinionatedOptions::default()).await;

    create(&api, &widget("w", 1)).await;
    log.wait_contains("add w 1").await;
    wait_finalizers(&api, "w", &[OURS]).await;

    // Marker: a spec change is observed after everything our own patches caused.
    set_size(&api, "w", 2).await;
    log.wait_contains("update w 1->2").await;
    assert_eq!(log.entries(), ["add w 1", "update w 1->2"]);
    op.stop().await;
}

#[tokio::test]
async fn a_failed_add_keeps_the_in_progress_finalizer_and_holds_the_delete_until_add_succeeds() {
    let env = Env::start("add-fails").await;
    let api = env.api();
    let log = Log::new();
    let gate = Arc::new(Semaphore::new(0));
    let mut recorder = Recorder::new(&log);
    recorder.fail_adds("w", 2);
    let (hook_gate, hook_log) = (gate.clone(), log.clone());
    recorder.before_add = Some(Arc::new(move |w, call| {
        let (gate, log) = (hook_gate.clone(), hook_log.clone());
        Box::pin(async move {
            if call == 3 {
                log.push(format!("add-started {} 3", name_of(&w)));
                gate.acquire().await.expect("gate open").forget();
            }
        })
    }));
    let op = Operator::watching(&env, &recorder, OpinionatedOptions::default()).await;

    let created = create(&api, &widget("w", 1)).await;
    log.wait_contains("add-started w 3").await;
    assert_eq!(log.count("add-failed w"), 2);
    // The failed adds left the in-progress finalizer, and not ours.
    wait_finalizers(&api, "w", &[WIP]).await;

    // A delete now is held by the in-progress finalizer while the add is still being retried.
    delete(&api, "w").await;
    let held = wait_object(&api, "w", "w is terminating", |w| {
        w.is_some_and(|w| w.metadata.deletion_timestamp.is_some())
    })
    .await
    .expect("held by the in-progress finalizer");
    assert_eq!(held.finalizers(), [WIP]);
    assert_eq!(log.count("delete w"), 0, "{:?}", log.entries());

    // The add succeeds; only then does delete run, and the object goes away.
    gate.add_permits(1);
    wait_gone(&api, "w", &uid(&created)).await;
    log.wait_contains("delete w").await;
    assert_eq!(
        log.entries(),
        [
            "add-failed w",
            "add-failed w",
            "add-started w 3",
            "add w 1",
            "delete w"
        ]
    );
    op.stop().await;
}

#[tokio::test]
async fn operator_down_while_the_spec_changed_calls_sync_with_the_new_object_and_not_add() {
    let env = Env::start("down-changed").await;
    let api = env.api();
    let log = Log::new();
    let recorder = Recorder::new(&log);

    let op = Operator::watching(&env, &recorder, OpinionatedOptions::default()).await;
    create(&api, &widget("w", 1)).await;
    log.wait_contains("add w 1").await;
    wait_finalizers(&api, "w", &[OURS]).await;
    op.stop().await;

    set_size(&api, "w", 2).await;

    let op = Operator::watching(&env, &recorder, OpinionatedOptions::default()).await;
    log.wait_contains("sync w 2").await;
    set_size(&api, "w", 3).await;
    log.wait_contains("update w 2->3").await;
    assert_eq!(log.entries(), ["add w 1", "sync w 2", "update w 2->3"]);
    op.stop().await;
}

#[tokio::test]
async fn operator_down_while_deleted_calls_delete_exactly_once_and_the_object_disappears() {
    let env = Env::start("down-deleted").await;
    let api = env.api();
    let log = Log::new();
    let recorder = Recorder::new(&log);

    let op = Operator::watching(&env, &recorder, OpinionatedOptions::default()).await;
    let created = create(&api, &widget("w", 1)).await;
    log.wait_contains("add w 1").await;
    wait_finalizers(&api, "w", &[OURS]).await;
    op.stop().await;

    delete(&api, "w").await;
    let held = api.get("w").await.expect("the finalizer holds the object");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.finalizers(), [OURS]);

    let op = Operator::watching(&env, &recorder, OpinionatedOptions::default()).await;
    wait_gone(&api, "w", &uid(&created)).await;
    log.wait_contains("delete w").await;

    // Marker: a new incarnation under the same name is handled after the old one's Delete event.
    create(&api, &widget("w", 7)).await;
    log.wait_contains("add w 7").await;
    assert_eq!(log.entries(), ["add w 1", "delete w", "add w 7"]);
    op.stop().await;
}

#[tokio::test]
async fn status_and_label_changes_do_not_call_update_a_spec_change_does_and_a_deletion_without_a_new_generation_is_handled()
 {
    let env = Env::start("updates").await;
    let api = env.api();
    let log = Log::new();
    let recorder = Recorder::new(&log);
    // Retries come after an hour: whatever happens here is caused by events, not retries.
    let op = Operator::watching_with(
        &env,
        &recorder,
        OpinionatedOptions::default(),
        config(Duration::from_secs(3600)),
    )
    .await;

    let created = create(&api, &widget("w", 1)).await;
    log.wait_contains("add w 1").await;
    wait_finalizers(&api, "w", &[OURS]).await;

    let status = serde_json::json!({ "status": { "seen": 1 } });
    api.patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status patch");
    merge(
        &api,
        "w",
        serde_json::json!({ "metadata": { "labels": { "colour": "blue" } } }),
    )
    .await;
    set_size(&api, "w", 2).await;
    log.wait_contains("update w 1->2").await;
    assert_eq!(log.entries(), ["add w 1", "update w 1->2"]);

    // The first delete fails; its retry would only come after an hour.
    recorder.fail_deletes("w", 1);
    delete(&api, "w").await;
    log.wait_contains("delete-failed w").await;
    let terminating = api.get("w").await.expect("held");
    // A label change of the terminating object keeps the generation, and still runs delete.
    let relabelled = merge(
        &api,
        "w",
        serde_json::json!({ "metadata": { "labels": { "colour": "red" } } }),
    )
    .await;
    assert_eq!(
        relabelled.metadata.generation,
        terminating.metadata.generation
    );
    wait_gone(&api, "w", &uid(&created)).await;
    log.wait_contains("delete w").await;
    assert_eq!(
        log.entries(),
        ["add w 1", "update w 1->2", "delete-failed w", "delete w"]
    );
    op.stop().await;
}

#[tokio::test]
async fn a_finalizer_removed_by_someone_else_is_put_back_and_a_later_delete_still_calls_delete() {
    let env = Env::start("restore").await;
    let api = env.api();
    let log = Log::new();
    let op = Operator::watching(&env, &Recorder::new(&log), OpinionatedOptions::default()).await;

    let created = create(&api, &widget("w", 1)).await;
    log.wait_contains("add w 1").await;
    wait_finalizers(&api, "w", &[OURS]).await;

    merge(
        &api,
        "w",
        serde_json::json!({ "metadata": { "finalizers": null } }),
    )
    .await;
    wait_finalizers(&api, "w", &[OURS]).await;

    set_size(&api, "w", 2).await;
    log.wait_contains("update w 1->2").await;
    assert_eq!(
        log.entries(),
        ["add w 1", "update w 1->2"],
        "putting the finalizer back calls nothing"
    );

    delete(&api, "w").await;
    wait_gone(&api, "w", &uid(&created)).await;
    log.wait_contains("delete w").await;
    assert_eq!(log.entries(), ["add w 1", "update w 1->2", "delete w"]);
    op.stop().await;
}

/// Another controller that adds its finalizer (read, modify, write with the resourceVersion).
async fn add_foreign_finalizer(api: &Api<Widget>, name: &str, finalizer: &str) {
    loop {
        let mut current = api.get(name).await.expect("get");
        current.metadata.managed_fields = None;
        let mut list = current.finalizers().to_vec();
        list.push(finalizer.to_string());
        let patch = serde_json::json!({ "metadata": {
            "resourceVersion": current.resource_version(),
            "finalizers": list,
        }});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => panic!("adding {finalizer}: {error}"),
        }
    }
}

#[tokio::test]
async fn other_controllers_finalizers_survive_every_patch_in_order_and_conflicts_are_retried() {
    let env = Env::start("foreign").await;
    let api = env.api();
    let log = Log::new();
    let served = kubeapp::operator::MetricsRegistry::new(Some("e2e_foreign")).expect("metrics");
    let registry = served.registry().clone();
    let metrics = served.finalizer();
    let mut recorder = Recorder::new(&log);
    // Concurrent writers: during add another controller adds its finalizer, and during delete it
    // removes one of its own, so our next finalizer patch meets a changed list (the patch's
    // precondition; the relabel that comes with it alone would not be a conflict).
    let writer = env.api();
    recorder.before_add = Some(Arc::new(move |w, _| {
        let api = writer.clone();
        Box::pin(async move { add_foreign_finalizer(&api, &name_of(&w), "other.dev/c").await })
    }));
    let writer = env.api();
    recorder.before_delete = Some(Arc::new(move |w, _| {
        let api = writer.clone();
        Box::pin(async move {
            merge(
                &api,
                &name_of(&w),
                serde_json::json!({ "metadata": {
                    "labels": { "touched": "yes" },
                    "finalizers": ["other.dev/a", "other.dev/b", OURS],
                } }),
            )
            .await;
        })
    }));
    let op = Operator::watching(
        &env,
        &recorder,
        OpinionatedOptions::default().metrics(metrics.clone()),
    )
    .await;

    let created = create(
        &api,
        &widget_with_finalizers("w", 1, &["other.dev/a", "other.dev/b"]),
    )
    .await;
    log.wait_contains("add w 1").await;
    let with_ours = ["other.dev/a", "other.dev/b", "other.dev/c", OURS];
    wait_finalizers(&api, "w", &with_ours).await;
    let conflicts_after_add = metrics.conflicts("Widget");
    assert!(
        conflicts_after_add >= 1,
        "the concurrent writer's finalizer made our patch's list test fail"
    );

    // Someone removes ours and keeps the others: ours comes back at the end, others in order.
    merge(
        &api,
        "w",
        serde_json::json!({ "metadata": { "finalizers": ["other.dev/a", "other.dev/b", "other.dev/c"] } }),
    )
    .await;
    wait_finalizers(&api, "w", &with_ours).await;

    delete(&api, "w").await;
    log.wait_contains("delete w").await;
    let held = wait_finalizers(&api, "w", &["other.dev/a", "other.dev/b"]).await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.labels().get("touched").map(String::as_str),
        Some("yes")
    );
    assert!(
        metrics.conflicts("Widget") > conflicts_after_add,
        "the list change during delete forced another refusal"
    );
    // Counted when the patch response arrives, which may be after the watch saw the change.
    eventually("a successful removal is counted", || {
        metrics.patches("Widget", "remove", "success") >= 1
    })
    .await;
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    assert!(
        text.contains("e2e_foreign_opinionated_finalizer_conflicts_total{kind=\"Widget\"}"),
        "{text}"
    );

    merge(
        &api,
        "w",
        serde_json::json!({ "metadata": { "finalizers": null } }),
    )
    .await;
    wait_gone(&api, "w", &uid(&created)).await;
    assert_eq!(log.entries(), ["add w 1", "delete w"]);
    op.stop().await;
}

#[tokio::test]
async fn delete_is_called_once_for_an_object_whose_add_never_succeeded() {
    let env = Env::start("never-added").await;
    let api = env.api();
    let log = Log::new();
    let recorder = Recorder::new(&log);
    recorder.fail_adds("w", FOREVER);
    let op = Operator::watching(&env, &recorder, OpinionatedOptions::default()).await;

    let created = create(&api, &widget("w", 1)).await;
    log.wait_count("add-failed w", 2).await;
    wait_finalizers(&api, "w", &[WIP]).await;

    delete(&api, "w").await;
    wait_gone(&api, "w", &uid(&created)).await;
    log.wait_contains("delete w").await;

    // Marker: a new incarnation (whose add succeeds) is handled after the old one's Delete event
    // and after any retry of the old add.
    recorder.fail_adds("w", 0);
    create(&api, &widget("w", 5)).await;
    log.wait_contains("add w 5").await;
    let entries = log.entries();
    assert_eq!(log.count("delete w"), 1, "{entries:?}");
    let delete_at = entries
        .iter()
        .position(|e| e == "delete w")
        .expect("delete");
    assert!(
        entries[..delete_at].iter().all(|e| e == "add-failed w"),
        "{entries:?}"
    );
    assert_eq!(entries[delete_at + 1..], ["add w 5"], "{entries:?}");
    op.stop().await;
}

/// An operator running the opinionated reconciler around a logging reconciler.
async fn reconciling(
    env: &Env,
    log: &Log,
    fail_created: &Arc<Mutex<Vec<String>>>,
    options: OpinionatedOptions,
) -> Operator {
    let (log, fail_created) = (log.clone(), fail_created.clone());
    let writer = env.api();
    let touched = Arc::new(Mutex::new(Vec::<String>::new()));
    let reconciler = DynReconcilerFn::<Widget, _>::new(move |request, _ctx| {
        let name = name_of(&request.object);
        let action = request.action;
        let (log, fail_created, writer, touched) = (
            log.clone(),
            fail_created.clone(),
            writer.clone(),
            touched.clone(),
        );
        async move {
            if action == kubeapp::operator::ReconcileAction::Created
                && fail_created.lock().expect("lock").contains(&name)
            {
                log.push(format!("Created-failed {name}"));
                return Err("created fails on purpose".into());
            }
            // "c": the first Deleted removes c's other finalizer, so the list our removal was
            // computed from is gone and the patch is refused.
            if action == kubeapp::operator::ReconcileAction::Deleted && name == "c" {
                let first = {
                    let mut touched = touched.lock().expect("lock");
                    let first = !touched.contains(&name);
                    touched.push(name.clone());
                    first
                };
                if first {
                    merge(
                        &writer,
                        &name,
                        serde_json::json!({ "metadata": { "finalizers": [OURS] } }),
                    )
                    .await;
                }
            }
            log.push(format!("{action} {name}"));
            Ok(ReconcileResult::done())
        }
    });
    let reconciler = OpinionatedReconciler::for_kind::<Widget>(env.client(), reconciler, options)
        .expect("valid finalizer");
    assert_eq!(reconciler.finalizer(), OURS);
    Operator::start(env, config(Duration::from_millis(100)), |controller| {
        controller.erased().add_reconciler(KIND, reconciler);
    })
    .await
}

#[tokio::test]
async fn reconciler_sees_exactly_one_deleted_per_uid_in_every_path_and_resynced_after_a_restart() {
    let env = Env::start("reconciler").await;
    let api = env.api();
    let log = Log::new();
    let fail_created = Arc::new(Mutex::new(vec!["b".to_string()]));
    let metrics = FinalizerMetrics::unregistered(Some("e2e_reconciler")).expect("metrics");
    // No conflict retries: c's other finalizer, removed during c's Deleted, makes the removal
    // fail, so the controller retries it (only the removal, noted in the request state).
    let options = OpinionatedOptions::default()
        .metrics(metrics.clone())
        .conflict_retry(ConflictRetry {
            retries: 0,
            ..ConflictRetry::default()
        });
    let op = reconciling(&env, &log, &fail_created, options.clone()).await;

    let mut uids = HashMap::new();
    for name in ["a", "b", "c", "d"] {
        let others: &[&str] = if name == "c" { &[OTHER] } else { &[] };
        let created = create(&api, &widget_with_finalizers(name, 1, others)).await;
        uids.insert(name, uid(&created));
    }
    for name in ["a", "c", "d"] {
        log.wait_contains(&format!("Created {name}")).await;
        let expected: &[&str] = if name == "c" { &[OTHER, OURS] } else { &[OURS] };
        wait_finalizers(&api, name, expected).await;
    }
    log.wait_count("Created-failed b", 2).await;
    // Since issue #32 our finalizer goes on before `Created`: b is held though its `Created`
    // keeps failing (before, b never carried it, and its Delete event delivered `Deleted`).
    wait_finalizers(&api, "b", &[OURS]).await;

    // a: finalizer present. b: finalizer present, `Created` never succeeded (`Deleted` at the
    // deletion all the same). c: the removal fails once and is retried.
    for name in ["a", "b", "c"] {
        delete(&api, name).await;
    }
    for name in ["a", "b", "c"] {
        wait_gone(&api, name, &uids[name]).await;
        log.wait_contains(&format!("Deleted {name}")).await;
    }
    assert!(
        metrics.conflicts("Widget") >= 1,
        "c's finalizer removal met a conflict"
    );

    // Markers: new incarnations under the same names are handled after the old Delete events.
    fail_created.lock().expect("lock").clear();
    for name in ["a", "b", "c"] {
        create(&api, &widget(name, 2)).await;
    }
    for name in ["a", "b", "c"] {
        log.wait_count(&format!("Created {name}"), if name == "b" { 1 } else { 2 })
            .await;
    }
    for name in ["a", "b", "c"] {
        assert_eq!(
            log.count(&format!("Deleted {name}")),
            1,
            "{name}: {:?}",
            log.entries()
        );
    }

    // Restart: d, which carries our finalizer, comes back as Resynced, not Created.
    op.stop().await;
    let op = reconciling(&env, &log, &fail_created, options).await;
    log.wait_contains("Resynced d").await;
    assert_eq!(log.count("Created d"), 1, "{:?}", log.entries());
    op.stop().await;
}

/// The reconciler's own writes do not make the wrapper's finalizer patches conflict: after a
/// `Created` call that wrote the status, the finalizer add starts from the event's copy, whose
/// finalizer list (the patch's precondition) the status write did not change; the update event
/// of that status write, whose copy still lacks the finalizer, reads before patching and finds
/// nothing to do (or merges with the patch's event into one request that reconciles). Before
/// issue #18 each new object cost a 409 (and a 50 ms backoff) or a read on the add. The status
/// is written with a client of the test's own and not noted, so its event is someone else's
/// change to the controller: it is reconciled, and a later `Updated` shows the object's events
/// were all handled.
#[tokio::test]
async fn a_reconciler_writing_status_on_created_meets_no_finalizer_conflict() {
    let env = Env::start("no-conflict").await;
    let api = env.api();
    let log = Log::new();
    let metrics = FinalizerMetrics::unregistered(Some("e2e_no_conflict")).expect("metrics");
    let writer = env.api();
    let reconciler = DynReconcilerFn::<Widget, _>::new({
        let log = log.clone();
        move |request, _ctx| {
            let (log, writer) = (log.clone(), writer.clone());
            let name = name_of(&request.object);
            let size = request.object.spec.size;
            let action = request.action;
            async move {
                if action == kubeapp::operator::ReconcileAction::Created {
                    writer
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(serde_json::json!({ "status": { "seen": size } })),
                        )
                        .await?;
                }
                log.push(format!("{action} {name}"));
                Ok(ReconcileResult::done())
            }
        }
    });
    let options = OpinionatedOptions::default().metrics(metrics.clone());
    let reconciler = OpinionatedReconciler::for_kind::<Widget>(env.client(), reconciler, options)
        .expect("valid finalizer");
    let op = Operator::start(&env, config(Duration::from_millis(100)), |controller| {
        controller.erased().add_reconciler(KIND, reconciler);
    })
    .await;

    let names = ["n1", "n2", "n3", "n4", "n5"];
    for name in names {
        create(&api, &widget(name, 7)).await;
    }
    for name in names {
        log.wait_contains(&format!("Created {name}")).await;
        let done = wait_finalizers(&api, name, &[OURS]).await;
        assert_eq!(done.status.and_then(|s| s.seen), Some(7), "{name}");
    }
    // The finalizer patches' events are the controller's own and reconcile nothing; a spec
    // change of each object comes after them (per-object order): once downstream sees it, every
    // earlier event of the object has been handled.
    for name in names {
        merge(&api, name, serde_json::json!({ "spec": { "size": 8 } })).await;
        log.wait_contains(&format!("Updated {name}")).await;
    }
    assert_eq!(
        metrics.conflicts("Widget"),
        0,
        "no finalizer patch met a 409"
    );
    assert_eq!(metrics.patches("Widget", "add", "success"), 5);
    op.stop().await;
}
