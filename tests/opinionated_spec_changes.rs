//! End-to-end tests (real kube-apiserver + etcd) of the opinionated wrappers' promise that no
//! change is lost (contract sections 5 and 6, kubeapp issue #12):
//!
//! - a spec change made while the watcher's `add` runs, after the in-progress finalizer is on or
//!   before it lands, reaches the watcher as `update(object the add saw, newest)`, and one made
//!   after a failed `add` reaches the `add` that succeeds; two changes made before our finalizer swap
//!   each reach `update`, from what the handler saw last;
//! - a spec change made while the reconciler's `Created` runs reaches it, and one made after a
//!   failed `Created` is delivered as `Created` with the newest object (the failed event's older
//!   copy is never delivered after it);
//! - for a kind without `metadata.generation` (ConfigMap) every data or label change after the
//!   add reaches `update` and the reconciler, and our own finalizer patches do not.
//!
//! The changes are made from inside the handlers (or a watcher registered before the wrapper),
//! so they happen at the exact step under test without any timing.

mod call_log;
mod crd_env;

use call_log::{CallLog, WAIT, logs, wait_finalizers};
use crd_env::CrdEnv;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::erased::DynReconcilerFn;
use kubeapp::operator::erased::DynWatcherFns;
use kubeapp::operator::list_watch::ListWatchOptions;
use kubeapp::operator::opinionated::{OpinionatedOptions, opinionated_dequeue_policy};
use kubeapp::operator::{
    CancellationToken, ControllerConfig, Informer, InformerController, OpinionatedReconciler,
    OpinionatedWatcher, ReconcileAction, ReconcileResult, RetryPolicy,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// A custom kind: it has `metadata.generation`.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "specchanges.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced
)]
struct WidgetSpec {
    size: i32,
}

const OURS: &str = "specchanges.kubeapp.dev/operator-widgets-v1";
const KIND: &str = "widgets";
/// Qualified names: kube-apiserver refuses unqualified finalizers on core kinds.
const CM_OURS: &str = "test.kubeapp.dev/cm";
const CM_WIP: &str = "test.kubeapp.dev/cm-wip";
const MAX_PARALLEL_ENVS: usize = 2;

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

    fn widgets(&self) -> Api<Widget> {
        Api::namespaced(self.client(), &self.ns)
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client(), &self.ns)
    }
}

/// One run of an InformerController with one informer of `K` in the test namespace.
struct Operator {
    stop: CancellationToken,
    running: JoinHandle<()>,
}

impl Operator {
    async fn start<K>(env: &Env, kind: &str, add: impl FnOnce(&InformerController)) -> Self
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Serialize
            + Send
            + Sync
            + 'static,
    {
        let controller = InformerController::new(
            ControllerConfig::default()
                // The failing first calls below rely on the spec change they make reaching the
                // lane before their retry is due: 3 s leaves a loaded machine room for that.
                .retry_policy(RetryPolicy::exponential(Duration::from_secs(3), 30))
                .dequeue_policy(Some(opinionated_dequeue_policy()))
                .shutdown_grace(Duration::from_secs(5)),
        );
        controller.erased().add_informer(
            kind,
            Informer::new::<K>(env.client(), ListWatchOptions::default().namespace(&env.ns)),
        );
        add(&controller);
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (controller, stop) = (controller.clone(), stop.clone());
            async move { controller.run(stop).await.expect("the controller runs") }
        });
        for (kind, flag) in controller.synced_flags() {
            tokio::time::timeout(WAIT, flag.wait())
                .await
                .unwrap_or_else(|_| panic!("informer {kind} never synced"));
        }
        Self { stop, running }
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.running)
            .await
            .expect("the controller stops in time")
            .expect("the controller task does not panic");
    }
}

async fn set_size(api: &Api<Widget>, name: &str, size: i32) {
    let patch = serde_json::json!({ "spec": { "size": size } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("spec patch");
}

/// Names `0..n` with a prefix.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
async fn spec_changes_made_while_the_watchers_add_runs_reach_update_from_what_the_add_saw() {
    let env = Env::start("watcher-spec").await;
    let api = env.widgets();
    let log = CallLog::new();
    // "in-add-*": the spec changes inside `add`, after the in-progress finalizer is on and
    // before ours replaces it. "before-wip": a watcher registered before the wrapper changes the
    // spec first, so the wrapper's in-progress patch meets a conflict and `add` gets the older
    // copy of the event. "failed-add": the first `add` changes the spec and fails; the update
    // event then goes the add path with the newest object (and the failed add's retry, whose
    // copy is older, calls nothing).
    let in_add = names("in-add-", 5);
    let changer = (env.widgets(), log.clone());
    let inner = DynWatcherFns::<Widget>::new()
        .on_add(move |w, _| {
            let (api, log) = changer.clone();
            async move {
                let name = w.name_any();
                if name == "twice-in-add" {
                    // Two changes before our swap: the second arrives after the first was
                    // delivered, in an event that still looks like an add in progress.
                    set_size(&api, &name, 2).await;
                    set_size(&api, &name, 3).await;
                }
                if name.starts_with("in-add-") {
                    assert!(
                        w.finalizers().is_empty(),
                        "the add's copy predates our patch"
                    );
                    set_size(&api, &name, 2).await;
                }
                if name == "failed-add" && w.spec.size == 1 {
                    set_size(&api, &name, 2).await;
                    log.push(format!("add {name} 1 failed"));
                    return Err("the first add fails on purpose".into());
                }
                log.push(format!("add {name} {}", w.spec.size));
                Ok(())
            }
        })
        .on_update({
            let log = log.clone();
            move |old, new, _| {
                log.push(format!(
                    "update {} {}->{}",
                    new.name_any(),
                    old.spec.size,
                    new.spec.size
                ));
                async { Ok(()) }
            }
        });
    let first = DynWatcherFns::<Widget>::new().on_add({
        let api = env.widgets();
        move |w, _| {
            let api = api.clone();
            async move {
                if w.name_any() == "before-wip" {
                    set_size(&api, "before-wip", 2).await;
                }
                Ok(())
            }
        }
    });
    let wrapped =
        OpinionatedWatcher::for_kind::<Widget>(env.client(), inner, OpinionatedOptions::default())
            .expect("valid finalizer names");
    let op = Operator::start::<Widget>(&env, KIND, |controller| {
        controller.erased().add_watcher(KIND, first);
        controller.erased().add_watcher(KIND, wrapped);
    })
    .await;

    let all: Vec<String> = in_add
        .iter()
        .cloned()
        .chain(["before-wip".into()])
        .collect();
    for name in all
        .iter()
        .map(String::as_str)
        .chain(["failed-add", "twice-in-add"])
    {
        let w = Widget::new(name, WidgetSpec { size: 1 });
        api.create(&PostParams::default(), &w)
            .await
            .expect("create");
    }
    for name in &all {
        log.wait_contains(&format!("update {name} 1->2")).await;
        wait_finalizers(&api, name, &[OURS]).await;
        // Marker: a later spec change is an ordinary update, after everything before it.
        set_size(&api, name, 3).await;
        log.wait_contains(&format!("update {name} 2->3")).await;
        assert_eq!(
            log.of(name),
            [
                format!("add {name} 1"),
                format!("update {name} 1->2"),
                format!("update {name} 2->3")
            ],
            "the add saw 1, the change to 2 reached update once, add succeeded once"
        );
    }
    let name = "failed-add";
    log.wait_contains(&format!("add {name} 2")).await;
    wait_finalizers(&api, name, &[OURS]).await;
    set_size(&api, name, 3).await;
    log.wait_contains(&format!("update {name} 2->3")).await;
    assert_eq!(
        log.of(name),
        [
            format!("add {name} 1 failed"),
            format!("add {name} 2"),
            format!("update {name} 2->3")
        ],
        "after a failed add, the newest spec reaches the add that succeeds, once"
    );
    let name = "twice-in-add";
    log.wait_contains(&format!("update {name} 2->3")).await;
    wait_finalizers(&api, name, &[OURS]).await;
    set_size(&api, name, 4).await;
    log.wait_contains(&format!("update {name} 3->4")).await;
    assert_eq!(
        log.of(name),
        [
            format!("add {name} 1"),
            format!("update {name} 1->2"),
            format!("update {name} 2->3"),
            format!("update {name} 3->4")
        ],
        "each change made before our swap reaches update, from what the handler saw last"
    );
    op.stop().await;
}

#[tokio::test]
async fn spec_changes_made_while_created_runs_or_after_it_failed_reach_the_reconciler() {
    let env = Env::start("reconciler-spec").await;
    let api = env.widgets();
    let log = CallLog::new();
    // "in-created-*": the spec changes inside the successful `Created`. "failed-created": the
    // first `Created` changes the spec and fails; its retry (after 3 s) holds the older copy.
    let failed_once = Arc::new(Mutex::new(false));
    let reconciler = DynReconcilerFn::<Widget, _>::new({
        let (api, log) = (env.widgets(), log.clone());
        move |request, _ctx| {
            let (api, log, failed_once) = (api.clone(), log.clone(), failed_once.clone());
            async move {
                let w = &request.object;
                let name = w.name_any();
                if request.action == ReconcileAction::Created {
                    if name.starts_with("in-created-") && w.spec.size == 1 {
                        set_size(&api, &name, 2).await;
                    }
                    if name == "failed-created"
                        && !std::mem::replace(&mut *failed_once.lock().expect("lock"), true)
                    {
                        set_size(&api, &name, 2).await;
                        log.push(format!("{} {name} {} failed", request.action, w.spec.size));
                        return Err("the first Created fails on purpose".into());
                    }
                }
                log.push(format!("{} {name} {}", request.action, w.spec.size));
                Ok(ReconcileResult::done())
            }
        }
    });
    let wrapped = OpinionatedReconciler::for_kind::<Widget>(
        env.client(),
        reconciler,
        OpinionatedOptions::default(),
    )
    .expect("valid finalizer");
    let op = Operator::start::<Widget>(&env, KIND, |controller| {
        controller.erased().add_reconciler(KIND, wrapped);
    })
    .await;

    let in_created = names("in-created-", 5);
    let all: Vec<String> = in_created
        .iter()
        .cloned()
        .chain(["failed-created".into()])
        .collect();
    for name in &all {
        let w = Widget::new(name, WidgetSpec { size: 1 });
        api.create(&PostParams::default(), &w)
            .await
            .expect("create");
    }
    for name in &in_created {
        log.wait_contains(&format!("Updated {name} 2")).await;
        wait_finalizers(&api, name, &[OURS]).await;
    }
    // Before the fix the change went "add the finalizer, downstream not called", and the retry
    // (after 3 s) then delivered `Created` with the older copy, after the newer spec. Now the
    // first successful `Created` carries the newest spec, and the retry delivers nothing.
    let name = "failed-created";
    let created = format!("Created {name} ");
    log.wait_for("a successful Created of failed-created", |log| {
        log.iter()
            .any(|e| e.starts_with(&created) && !e.ends_with("failed"))
    })
    .await;
    let first_created = log
        .of(name)
        .into_iter()
        .find(|e| e.starts_with(&created) && !e.ends_with("failed"));
    assert_eq!(
        first_created,
        Some(format!("Created {name} 2")),
        "{:?}",
        log.of(name)
    );
    wait_finalizers(&api, name, &[OURS]).await;
    set_size(&api, name, 3).await;
    log.wait_contains(&format!("Updated {name} 3")).await;
    assert_eq!(
        log.of(name),
        [
            format!("Created {name} 1 failed"),
            format!("Created {name} 2"),
            // (Before issue #18 an `Updated 2` came here: the event of our own finalizer
            // patch, which now reconciles nothing.)
            format!("Updated {name} 3"),
        ],
        "the newest spec is delivered as the creation; the stale retry delivers nothing"
    );
    for name in &in_created {
        let calls = log.of(name);
        assert_eq!(
            calls.first(),
            Some(&format!("Created {name} 1")),
            "{calls:?}"
        );
        assert_eq!(
            calls.last(),
            Some(&format!("Updated {name} 2")),
            "{calls:?}"
        );
    }
    op.stop().await;
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    let mut cm = ConfigMap {
        data: Some(BTreeMap::from([("k".to_string(), value.to_string())])),
        ..ConfigMap::default()
    };
    cm.metadata.name = Some(name.into());
    cm
}

async fn merge_cm(api: &Api<ConfigMap>, name: &str, patch: serde_json::Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("config map patch");
}

fn value(cm: &ConfigMap) -> String {
    let data = cm.data.as_ref().and_then(|d| d.get("k")).cloned();
    let label = cm.labels().get("colour").cloned();
    format!(
        "{}{}",
        data.unwrap_or_default(),
        label.map(|l| format!("+{l}")).unwrap_or_default()
    )
}

#[tokio::test]
async fn every_config_map_change_after_the_add_reaches_the_watcher_and_the_reconciler() {
    let env = Env::start("configmaps").await;
    let api = env.config_maps();
    let log = CallLog::new();
    let watcher = DynWatcherFns::<ConfigMap>::new()
        .on_add({
            let log = log.clone();
            move |cm, _| {
                log.push(format!("add {} {}", cm.name_any(), value(&cm)));
                async { Ok(()) }
            }
        })
        .on_update({
            let log = log.clone();
            move |old, new, _| {
                log.push(format!(
                    "update {} {}->{}",
                    new.name_any(),
                    value(&old),
                    value(&new)
                ));
                async { Ok(()) }
            }
        });
    let options = OpinionatedOptions::default()
        .finalizer(CM_OURS)
        .in_progress_finalizer(CM_WIP);
    let watcher = OpinionatedWatcher::for_kind::<ConfigMap>(env.client(), watcher, options)
        .expect("valid finalizer names");
    let reconciler = DynReconcilerFn::<ConfigMap, _>::new({
        let log = log.clone();
        move |request, _ctx| {
            log.push(format!(
                "{} {} {}",
                request.action,
                request.object.name_any(),
                value(&request.object)
            ));
            async { Ok(ReconcileResult::done()) }
        }
    });
    let reconciler = OpinionatedReconciler::for_kind::<ConfigMap>(
        env.client(),
        reconciler,
        OpinionatedOptions::default().finalizer("test.kubeapp.dev/cm-reconciler"),
    )
    .expect("valid finalizer");
    // The watcher gets "w", the reconciler "r": one wrapper's finalizer is another controller's
    // finalizer to the other, and each would rightly see it as a change.
    let op = Operator::start::<ConfigMap>(&env, "configmaps", |controller| {
        controller
            .erased()
            .add_watcher("configmaps", FilterByName("w", watcher));
        controller
            .erased()
            .add_reconciler("configmaps", FilterByName("r", reconciler));
    })
    .await;

    api.create(&PostParams::default(), &config_map("w", "a"))
        .await
        .expect("create w");
    log.wait_contains("add w a").await;
    wait_finalizers(&api, "w", &[CM_OURS]).await;
    merge_cm(&api, "w", serde_json::json!({ "data": { "k": "b" } })).await;
    log.wait_contains("update w a->b").await;
    merge_cm(
        &api,
        "w",
        serde_json::json!({ "metadata": { "labels": { "colour": "red" } } }),
    )
    .await;
    log.wait_contains("update w b->b+red").await;
    assert_eq!(
        log.of("w"),
        ["add w a", "update w a->b", "update w b->b+red"],
        "data and label changes reach update; our own finalizer patches do not"
    );

    api.create(&PostParams::default(), &config_map("r", "a"))
        .await
        .expect("create r");
    log.wait_contains("Created r a").await;
    wait_finalizers(&api, "r", &["test.kubeapp.dev/cm-reconciler"]).await;
    merge_cm(&api, "r", serde_json::json!({ "data": { "k": "b" } })).await;
    log.wait_contains("Updated r b").await;
    op.stop().await;
}

/// Passes only the objects named `name` to the wrapped handler: one kind, two wrappers.
struct FilterByName<H>(&'static str, H);

#[async_trait::async_trait]
impl<H: kubeapp::operator::erased::DynWatcher> kubeapp::operator::erased::DynWatcher
    for FilterByName<H>
{
    async fn add(
        &self,
        object: kubeapp::operator::object::SharedObject,
        ctx: &kubeapp::operator::DynContext,
    ) -> Result<(), kubeapp::operator::BoxError> {
        if object.metadata().name.as_deref() != Some(self.0) {
            return Ok(());
        }
        self.1.add(object, ctx).await
    }

    async fn update(
        &self,
        old: kubeapp::operator::object::SharedObject,
        new: kubeapp::operator::object::SharedObject,
        ctx: &kubeapp::operator::DynContext,
    ) -> Result<(), kubeapp::operator::BoxError> {
        if new.metadata().name.as_deref() != Some(self.0) {
            return Ok(());
        }
        self.1.update(old, new, ctx).await
    }

    async fn delete(
        &self,
        object: kubeapp::operator::object::SharedObject,
        ctx: &kubeapp::operator::DynContext,
    ) -> Result<(), kubeapp::operator::BoxError> {
        if object.metadata().name.as_deref() != Some(self.0) {
            return Ok(());
        }
        self.1.delete(object, ctx).await
    }
}

#[async_trait::async_trait]
impl<R: kubeapp::operator::erased::DynReconciler> kubeapp::operator::erased::DynReconciler
    for FilterByName<R>
{
    async fn reconcile(
        &self,
        request: kubeapp::operator::ReconcileRequest,
        ctx: &kubeapp::operator::DynContext,
    ) -> Result<ReconcileResult, kubeapp::operator::ReconcileError> {
        if request.object.metadata().name.as_deref() != Some(self.0) {
            return Ok(ReconcileResult::done());
        }
        self.1.reconcile(request, ctx).await
    }
}
