//! A component graph as a reconciler of its kind: [`ComponentsReconciler<K>`] runs the deploy and
//! verify phases for every live state of a custom object, through [`ReconcileCluster`] (the
//! operator's server-side apply under the handler context's field manager, each object owned by
//! the custom object with a controller reference).
//!
//! Each reconcile: run the phases; prune what the components applied before and not now (see
//! [`inventory`](crate::inventory)); write the status with the new inventory when
//! [`with_status`](ComponentsReconciler::with_status) asks for it and something changed; run the
//! [hooks](crate::hooks). Outcomes: every enabled component ready -> done (no requeue: attach it
//! with `owns` on the children's kinds so a changed or deleted child reconciles at once); a
//! failure (a component, a prune, a hook) -> an error naming it (retried by the controller's
//! policy) and a Warning Event on the custom object for each; otherwise (waiting, not ready yet)
//! -> requeue with a backoff ([`ComponentsReconciler::not_ready_backoff`]: 1 s doubling up to
//! 60 s by default, restarting once the object is ready or fails).
//!
//! Deletion: when the reconcile carries [`ReconcileAction::Deleted`] (the opinionated wrapper's
//! finalizer is being released, or the object is gone), every recorded object and every object
//! the graph renders now is torn down in reverse dependency order, wave by wave (see
//! [`teardown`](crate::teardown); not found is success); a wave not gone yet is reported and the
//! reconcile asks to run again, and a delete that fails fails the reconcile, so the finalizer holds
//! the custom object until everything is gone. A custom object being deleted while held by someone
//! else's finalizer is left alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::{Client, Resource};
use kubeapp_operator::{
    Applier, Context, MetricSetError, MetricsRegistry, ReconcileAction, ReconcileError,
    ReconcileRequest, ReconcileResult, Reconciler, Store,
};
use serde::Serialize;
use serde_json::Value;

use crate::component::{ComponentError, Rendered, Session, Stores};
use crate::graph::ComponentGraph;
use crate::hooks::{Hooks, NoHooks, after_run};
use crate::inventory::{PrunePlan, union};
use crate::metrics::ComponentMetrics;
use crate::report::{ComponentObject, Outcome, RunReport, Verified};
use crate::run::{Cluster, RunOptions, run_with};
use crate::status::status_update;
use crate::teardown::{Teardown, report_waiting, targets_of, tear_down, waves};
use crate::unchanged::unchanged;

/// The cluster of a reconcile; see the [module docs](self).
pub struct ReconcileCluster<'a, K> {
    applier: &'a Applier,
    client: &'a Client,
    owner: &'a K,
    cache: Option<&'a CacheLookup<'a>>,
}

/// Reads a cached child as JSON: (resource, namespace, name).
pub(crate) type CacheLookup<'a> =
    dyn Fn(&ApiResource, Option<&str>, &str) -> Option<Value> + Send + Sync + 'a;

impl<'a, K> ReconcileCluster<'a, K> {
    /// Applies with `applier`, deletes with `client`, owned by `owner`.
    pub fn new(applier: &'a Applier, client: &'a Client, owner: &'a K) -> Self {
        Self {
            applier,
            client,
            owner,
            cache: None,
        }
    }

    /// Skips an apply that would change nothing, judged against the child as `cache` has it
    /// (see [`unchanged`](crate::unchanged)).
    #[must_use]
    pub fn with_cache(mut self, cache: &'a CacheLookup<'a>) -> Self {
        self.cache = Some(cache);
        self
    }
}

impl<K> Cluster for ReconcileCluster<'_, K>
where
    K: Resource<DynamicType = ()> + Sync,
{
    async fn apply(&self, _component: &str, object: &Rendered) -> Result<Value, String> {
        let dynamic: DynamicObject =
            serde_json::from_value(object.object.clone()).map_err(|e| e.to_string())?;
        let apply = self
            .applier
            .apply_with(dynamic, object.resource.clone())
            .owned_by(self.owner)
            .map_err(|e| e.to_string())?;
        if let Some(cache) = self.cache {
            let desired = serde_json::to_value(apply.object()).map_err(|e| e.to_string())?;
            let metadata = &desired["metadata"];
            if let Some(name) = metadata["name"].as_str()
                && let Some(cached) = cache(&object.resource, metadata["namespace"].as_str(), name)
                && unchanged(&desired, &cached)
            {
                return Ok(cached);
            }
        }
        let stored = apply.send().await.map_err(|e| e.to_string())?;
        serde_json::to_value(stored).map_err(|e| e.to_string())
    }

    async fn delete(&self, _component: &str, object: &Rendered) -> Result<(), String> {
        let (api, name) = self.api_of(object)?;
        let params = if has_own_children(object) {
            DeleteParams::foreground()
        } else {
            DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn remaining(
        &self,
        _component: &str,
        object: &Rendered,
    ) -> Result<Option<Vec<String>>, String> {
        let (api, name) = self.api_of(object)?;
        match api.get_opt(name).await {
            Ok(Some(stored)) => Ok(Some(stored.metadata.finalizers.unwrap_or_default())),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl<K: Resource<DynamicType = ()>> ReconcileCluster<'_, K> {
    /// The `Api` of `object`'s resource in its namespace (the owner's when it names none), and
    /// its name.
    fn api_of<'o>(&self, object: &'o Rendered) -> Result<(Api<DynamicObject>, &'o str), String> {
        let name = object.object["metadata"]["name"]
            .as_str()
            .ok_or_else(|| format!("{} has no name", object.describe()))?;
        let namespace = object.object["metadata"]["namespace"]
            .as_str()
            .or_else(|| self.owner.meta().namespace.as_deref());
        let api = match namespace {
            Some(namespace) => {
                Api::namespaced_with(self.client.clone(), namespace, &object.resource)
            }
            None => Api::all_with(self.client.clone(), &object.resource),
        };
        Ok((api, name))
    }
}

/// Whether objects of `object`'s kind have children of their own (ReplicaSets, Pods, Jobs), so
/// that it is deleted in the foreground (see [`teardown`](crate::teardown)).
fn has_own_children(object: &Rendered) -> bool {
    matches!(
        (
            object.resource.group.as_str(),
            object.resource.kind.as_str()
        ),
        (
            "apps",
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"
        ) | ("batch", "Job" | "CronJob")
    )
}

/// A component graph as a reconciler; see the [module docs](self).
///
/// ```no_run
/// # use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "WebApp", namespaced, status = "kubeapp_components::ComponentsStatus")]
/// # pub struct WebAppSpec { image: String }
/// # fn demo(graph: kubeapp_components::ComponentGraph<WebApp>,
/// #         registry: &kubeapp_operator::MetricsRegistry,
/// #         web_apps: &kubeapp_operator::KindHandle<WebApp>) -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_components::ComponentsReconciler;
/// use kubeapp_operator::OpinionatedOptions;
///
/// let reconciler = ComponentsReconciler::new(graph)
///     // Ready/Updating conditions, the components summary and the inventory in status.
///     .with_status()
///     .metrics_in(registry)?;
/// // With a finalizer: cleanup tears the children down in reverse dependency order.
/// web_apps.reconcile_opinionated(reconciler, OpinionatedOptions::default())?;
/// # Ok(())
/// # }
/// ```
pub struct ComponentsReconciler<K, H = NoHooks> {
    graph: Arc<ComponentGraph<K>>,
    options: RunOptions,
    not_ready_first: Duration,
    not_ready_max: Duration,
    /// Consecutive not-ready reconciles per custom object (by uid), for the backoff.
    not_ready_streak: Mutex<HashMap<String, u32>>,
    write_status: bool,
    hooks: H,
    stores: Arc<Stores>,
    /// The inventory last recorded per custom object (by uid): the cached object a reconcile
    /// gets may predate our own last status write, and an entry missing there would never be
    /// pruned.
    recorded: Mutex<HashMap<String, Vec<ComponentObject>>>,
}

impl<K: Resource<DynamicType = ()>> ComponentsReconciler<K> {
    /// Runs `graph`, at most 4 components of a level at once, re-checking a not-ready graph after
    /// 5 s.
    pub fn new(graph: ComponentGraph<K>) -> Self {
        Self {
            graph: Arc::new(graph),
            options: RunOptions {
                kind: K::kind(&()).into_owned(),
                ..RunOptions::default()
            },
            not_ready_first: Duration::from_secs(1),
            not_ready_max: Duration::from_secs(60),
            not_ready_streak: Mutex::default(),
            write_status: false,
            hooks: NoHooks,
            stores: Arc::default(),
            recorded: Mutex::default(),
        }
    }
}

impl<K, H> ComponentsReconciler<K, H> {
    /// Writes the custom object's status after each run (see [`status`](crate::status)),
    /// including the inventory that pruning after a restart needs: the kind needs a status
    /// subresource with the fields listed there.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.write_status = true;
        self
    }

    /// How many components of one level are deployed at once.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.options.concurrency = concurrency.max(1);
        self
    }

    /// When a graph that is not ready (waiting, or verified not ready) is reconciled again:
    /// after `first`, doubling with each consecutive not-ready reconcile up to `max` (watch the
    /// children with `owns` so a child that becomes ready reconciles at once).
    #[must_use]
    pub fn not_ready_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.not_ready_first = first;
        self.not_ready_max = max.max(first);
        self
    }

    /// The requeue delay after `streak` consecutive not-ready reconciles.
    fn not_ready_delay(&self, streak: u32) -> Duration {
        self.not_ready_first
            .saturating_mul(1u32 << streak.min(20))
            .min(self.not_ready_max)
    }

    /// Counts outcomes and durations into `metrics`.
    #[must_use]
    pub fn metrics(mut self, metrics: ComponentMetrics) -> Self {
        self.options.metrics = Some(metrics);
        self
    }

    /// Counts outcomes and durations into `registry`'s [`ComponentMetrics`] (a Runner's: the
    /// `context.metrics` of `Operator::app_with_context`), under its prefix: the same series as
    /// [`metrics`](Self::metrics) given `registry.set::<ComponentMetrics>()`, without naming the
    /// set.
    ///
    /// # Errors
    ///
    /// [`MetricSetError`] when the set cannot be created or its names clash with collectors
    /// registered before in `registry`.
    pub fn metrics_in(self, registry: &MetricsRegistry) -> Result<Self, MetricSetError> {
        Ok(self.metrics(registry.set::<ComponentMetrics>()?))
    }

    /// Lets components read `store` (the cache of `T` objects) through [`Session::store`].
    #[must_use]
    pub fn reads<T: 'static>(mut self, store: Store<T>) -> Self {
        Arc::make_mut(&mut self.stores).insert(store);
        self
    }

    /// Runs `hooks` after each phase; see [`hooks`](crate::hooks).
    pub fn hooks<H2>(self, hooks: H2) -> ComponentsReconciler<K, H2> {
        ComponentsReconciler {
            graph: self.graph,
            options: self.options,
            not_ready_first: self.not_ready_first,
            not_ready_max: self.not_ready_max,
            not_ready_streak: self.not_ready_streak,
            write_status: self.write_status,
            hooks,
            stores: self.stores,
            recorded: self.recorded,
        }
    }

    /// The inventory of `object`: its status's record, with what this process recorded last.
    /// The outcome of a cleanup: done once every object is gone; else the objects still there
    /// are recorded (so a restart tears them down too), reported, and the cleanup runs again
    /// after the not-ready backoff; a failed delete fails the reconcile.
    async fn after_teardown<C>(
        &self,
        teardown: Teardown,
        object: &K,
        json: &Value,
        ctx: &Context<C>,
        uid: &str,
    ) -> Result<ReconcileResult, ReconcileError>
    where
        K: Resource<DynamicType = ()>,
    {
        let streak = {
            let mut recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
            let mut streaks = self
                .not_ready_streak
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if teardown.finished() {
                recorded.remove(uid);
                streaks.remove(uid);
                return Ok(ReconcileResult::done());
            }
            let gone: std::collections::HashSet<String> =
                teardown.gone.iter().map(|(_, o)| o.describe()).collect();
            if let Some(objects) = recorded.get_mut(uid) {
                objects.retain(|o| !gone.contains(&o.to_rendered().describe()));
            }
            let streak = streaks.get(uid).copied().unwrap_or(0);
            streaks.insert(uid.to_string(), streak.saturating_add(1));
            streak
        };
        if !teardown.failed.is_empty() {
            return Err(ReconcileError::new(format!(
                "cleaning up the components: {}",
                teardown.failed.join("; ")
            )));
        }
        report_waiting(&teardown.waiting, object, json, ctx).await;
        Ok(ReconcileResult::requeue_after(self.not_ready_delay(streak)))
    }

    fn previous(&self, object: &Value, uid: &str) -> Vec<ComponentObject> {
        let in_status: Vec<ComponentObject> =
            serde_json::from_value(object["status"]["components"]["objects"].clone())
                .unwrap_or_default();
        let recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        union(&in_status, recorded.get(uid).map_or(&[], Vec::as_slice))
    }
}

impl<K, C, H> Reconciler<K, C> for ComponentsReconciler<K, H>
where
    K: Resource<DynamicType = ()> + Serialize + Send + Sync + 'static,
    C: Send + Sync + 'static,
    H: Hooks<K>,
{
    async fn reconcile(
        &self,
        request: ReconcileRequest<K>,
        ctx: &Context<C>,
    ) -> Result<ReconcileResult, ReconcileError> {
        let object = Arc::clone(&request.object);
        let json = serde_json::to_value(object.as_ref()).map_err(ReconcileError::new)?;
        let uid = object.meta().uid.clone().unwrap_or_default();
        let previous = self.previous(&json, &uid);
        let session = Session::with_stores(Arc::clone(&object), Arc::clone(&self.stores));
        let lookup = |resource: &ApiResource, namespace: Option<&str>, name: &str| {
            ctx.cached(resource, namespace, name)
        };
        let cluster =
            ReconcileCluster::new(ctx.applier(), ctx.client(), object.as_ref()).with_cache(&lookup);
        if request.action == ReconcileAction::Deleted {
            let teardown = cleanup(&self.graph, &session, &cluster, &previous).await;
            return self
                .after_teardown(teardown, object.as_ref(), &json, ctx, &uid)
                .await;
        }
        if object.meta().deletion_timestamp.is_some() {
            // Being deleted, held by someone else's finalizer: nothing to bring up to date.
            return Ok(ReconcileResult::done());
        }
        let report = run_with(&self.graph, &session, &cluster, &self.options).await;
        let plan = PrunePlan::after(&previous, &report);
        let started = Instant::now();
        // A disabled branch goes in waves too; what is not gone yet stays recorded.
        let teardown = tear_down(&cluster, waves(&self.graph, targets_of(&plan.prune))).await;
        let gone: std::collections::HashSet<String> =
            teardown.gone.iter().map(|(_, o)| o.describe()).collect();
        let failed_prunes: Vec<ComponentObject> = plan
            .prune
            .iter()
            .filter(|stale| !gone.contains(&stale.to_rendered().describe()))
            .cloned()
            .collect();
        let prune_failures: Vec<String> = teardown
            .failed
            .iter()
            .map(|why| format!("pruning: {why}"))
            .collect();
        let prune_waits = !teardown.waiting.is_empty();
        if let Some(metrics) = &self.options.metrics {
            metrics.phase(&self.options.kind, "prune", started.elapsed());
            metrics.pruned(&self.options.kind, gone.len(), teardown.failed.len());
        }
        let record = plan.record(&failed_prunes);
        self.recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.clone(), record.clone());
        if self.write_status {
            write_status(&report, object.as_ref(), &json, ctx, &record).await?;
        }
        let mut hooked = after_run(&self.hooks, &session, &report).await;
        if prune_waits && hooked.is_ok() {
            let waiting: Vec<String> = teardown.waiting.iter().map(ToString::to_string).collect();
            hooked = Err(ComponentError::Waiting(format!(
                "pruning, waiting for: {}",
                waiting.join("; ")
            )));
        }
        let streak = self
            .not_ready_streak
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&uid)
            .copied()
            .unwrap_or(0);
        let result = outcome(
            &report,
            hooked,
            &prune_failures,
            object.as_ref(),
            ctx,
            self.not_ready_delay(streak),
        )
        .await;
        let mut streaks = self
            .not_ready_streak
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(r) if r.requeue_after.is_some() => {
                streaks.insert(uid, streak.saturating_add(1));
            }
            _ => {
                streaks.remove(&uid);
            }
        }
        result
    }
}

/// The custom object is going (its finalizer is being released, or it is gone): tears down every
/// object recorded in `previous` and every object the graph renders for it now (a render that
/// fails is skipped), wave by wave (see [`teardown`](crate::teardown)), not found counting as
/// deleted. The owner references would have the garbage collector delete them too, but in no
/// order; deleting here keeps the order and covers objects that cannot carry an owner reference
/// (cluster-scoped children of a namespaced object).
async fn cleanup<K, Cl>(
    graph: &ComponentGraph<K>,
    session: &Session<K>,
    cluster: &Cl,
    previous: &[ComponentObject],
) -> Teardown
where
    K: Send + Sync + 'static,
    Cl: Cluster,
{
    let mut targets = targets_of(previous);
    for node in graph.nodes() {
        if let Ok(rendered) = node.component.render(session) {
            targets.extend(rendered.into_iter().map(|r| (node.name.clone(), r)));
        }
    }
    tear_down(cluster, waves(graph, targets)).await
}

/// Applies the status after `report` when it changed; see [`status`](crate::status).
async fn write_status<K, C>(
    report: &RunReport,
    object: &K,
    json: &Value,
    ctx: &Context<C>,
    record: &[ComponentObject],
) -> Result<(), ReconcileError>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let current = json.get("status").cloned().unwrap_or(Value::Null);
    let meta = object.meta();
    let Some(status) = status_update(report, meta.generation, &current, record) else {
        return Ok(());
    };
    ctx.applier()
        .apply_status_fields(object, status)
        .await
        .map_err(ReconcileError::new)?;
    Ok(())
}

async fn outcome<K, C>(
    report: &RunReport,
    hooked: Result<(), ComponentError>,
    prune_failures: &[String],
    object: &K,
    ctx: &Context<C>,
    not_ready_requeue: Duration,
) -> Result<ReconcileResult, ReconcileError>
where
    K: Resource<DynamicType = ()>,
{
    let mut failed: Vec<String> = report
        .names
        .iter()
        .zip(report.deployed.iter().zip(&report.verified))
        .filter_map(|(name, (deployed, verified))| match (deployed, verified) {
            (Outcome::Failed(why), _) | (_, Verified::Failed(why)) => {
                Some(format!("{name}: {why}"))
            }
            _ => None,
        })
        .collect();
    failed.extend(prune_failures.iter().cloned());
    let hook_waits = match hooked {
        Ok(()) => false,
        Err(ComponentError::Waiting(_)) => true,
        Err(ComponentError::Failed(why)) => {
            failed.push(format!("hook: {why}"));
            false
        }
    };
    if failed.is_empty() {
        if report.all_ready() && !hook_waits {
            return Ok(ReconcileResult::done());
        }
        return Ok(ReconcileResult::requeue_after(not_ready_requeue));
    }
    for failure in &failed {
        // An Event that cannot be written must not hide the failure itself.
        if let Err(error) = ctx
            .recorder()
            // One series per component (the action), so each failure keeps its own note.
            .publish_action(
                object,
                true,
                crate::status::COMPONENT_FAILED,
                failure.split(':').next().unwrap_or("component"),
                failure.clone(),
            )
            .await
        {
            tracing::warn!(%error, "the Warning Event about a failed component was not written");
        }
    }
    Err(ReconcileError::new(format!(
        "components failed: {}",
        failed.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn not_ready_requeues_back_off_from_first_to_max() {
        let graph = ComponentGraph::<ConfigMap>::builder()
            .build()
            .expect("empty graph");
        let reconciler = ComponentsReconciler::new(graph);
        let delays: Vec<u64> = (0..9)
            .map(|streak| reconciler.not_ready_delay(streak).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        let graph = ComponentGraph::<ConfigMap>::builder()
            .build()
            .expect("empty graph");
        let slow = ComponentsReconciler::new(graph)
            .not_ready_backoff(Duration::from_secs(3600), Duration::from_secs(10));
        assert_eq!(
            slow.not_ready_delay(0),
            Duration::from_secs(3600),
            "max is at least first"
        );
        assert_eq!(slow.not_ready_delay(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn metrics_in_counts_into_the_registry_under_its_prefix() {
        let registry = MetricsRegistry::new(Some("shop")).expect("valid prefix");
        let graph = ComponentGraph::<ConfigMap>::builder()
            .build()
            .expect("empty graph");
        let reconciler = ComponentsReconciler::new(graph)
            .metrics_in(&registry)
            .expect("a fresh registry");
        let metrics = reconciler.options.metrics.as_ref().expect("metrics set");
        metrics.phase("ConfigMap", "prune", Duration::from_millis(5));
        let names: Vec<String> = registry
            .registry()
            .gather()
            .iter()
            .map(|family| family.name().to_string())
            .collect();
        assert!(
            names.contains(&"shop_component_phase_duration_seconds".to_string()),
            "{names:?}"
        );
        // The registry's own set: the reconciler counts into the same series.
        let set = registry.set::<ComponentMetrics>().expect("registered once");
        set.phase("ConfigMap", "prune", Duration::from_millis(5));
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.registry().gather())
            .expect("text format");
        assert!(
            text.contains(
                "shop_component_phase_duration_seconds_count{kind=\"ConfigMap\",phase=\"prune\"} 2"
            ),
            "{text}"
        );
    }
}
