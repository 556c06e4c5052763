//! A component graph as a reconciler of its kind: [`ComponentsReconciler<K>`] runs the deploy and
//! verify phases for every live state of a custom object, through [`ReconcileCluster`] (the
//! operator's server-side apply under the handler context's field manager, each object owned by
//! the custom object with a controller reference).
//!
//! Outcomes: every enabled component ready -> done (no requeue: attach it with `owns` on the
//! children's kinds so a changed or deleted child reconciles at once); a failure -> an error
//! naming the failed components (retried by the controller's policy) and a Warning Event on the
//! custom object for each; otherwise (waiting, not ready yet) -> requeue after
//! [`ComponentsReconciler::not_ready_requeue`]. A deletion does nothing: the children go with
//! their owner (the cluster's garbage collector follows the owner references).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource};
use kubeapp_operator::{
    Applier, Context, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult,
    Reconciler,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::component::{Rendered, Session};
use crate::graph::ComponentGraph;
use crate::run::{BoxComponent, Cluster, Outcome, RunReport, Verified, run};
use crate::status::status_update;

/// The cluster of a reconcile; see the [module docs](self).
pub struct ReconcileCluster<'a, K> {
    applier: &'a Applier,
    client: &'a Client,
    owner: &'a K,
}

impl<'a, K> ReconcileCluster<'a, K> {
    /// Applies with `applier`, deletes with `client`, owned by `owner`.
    pub fn new(applier: &'a Applier, client: &'a Client, owner: &'a K) -> Self {
        Self {
            applier,
            client,
            owner,
        }
    }
}

impl<K> Cluster for ReconcileCluster<'_, K>
where
    K: Resource<DynamicType = ()> + Sync,
{
    async fn apply(&self, _component: &str, object: &Rendered) -> Result<Value, String> {
        let dynamic: DynamicObject =
            serde_json::from_value(object.object.clone()).map_err(|e| e.to_string())?;
        let stored = self
            .applier
            .apply_with(dynamic, object.resource.clone())
            .owned_by(self.owner)
            .map_err(|e| e.to_string())?
            .send()
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(stored).map_err(|e| e.to_string())
    }

    async fn delete(&self, _component: &str, object: &Rendered) -> Result<(), String> {
        let name = object.object["metadata"]["name"]
            .as_str()
            .ok_or_else(|| format!("{} has no name", object.describe()))?;
        let namespace = object.object["metadata"]["namespace"]
            .as_str()
            .or_else(|| self.owner.meta().namespace.as_deref());
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => {
                Api::namespaced_with(self.client.clone(), namespace, &object.resource)
            }
            None => Api::all_with(self.client.clone(), &object.resource),
        };
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A component graph as a reconciler; see the [module docs](self).
pub struct ComponentsReconciler<K> {
    graph: Arc<ComponentGraph<K, BoxComponent<K>>>,
    concurrency: usize,
    not_ready_requeue: Duration,
    write_status: bool,
}

impl<K> ComponentsReconciler<K> {
    /// Runs `graph`, at most 4 components of a level at once, re-checking a not-ready graph after
    /// 5 s.
    pub fn new(graph: ComponentGraph<K, BoxComponent<K>>) -> Self {
        Self {
            graph: Arc::new(graph),
            concurrency: 4,
            not_ready_requeue: Duration::from_secs(5),
            write_status: false,
        }
    }

    /// Writes the custom object's status after each run (see [`status`](crate::status)): the
    /// kind needs a status subresource with the fields listed there.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.write_status = true;
        self
    }

    /// How many components of one level are deployed at once.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// When a graph that is not ready (waiting, or verified not ready) is reconciled again.
    #[must_use]
    pub fn not_ready_requeue(mut self, delay: Duration) -> Self {
        self.not_ready_requeue = delay;
        self
    }
}

impl<K, C> Reconciler<K, C> for ComponentsReconciler<K>
where
    K: Resource<DynamicType = ()> + Serialize + Send + Sync + 'static,
    C: Send + Sync + 'static,
{
    async fn reconcile(
        &self,
        request: ReconcileRequest<K>,
        ctx: &Context<C>,
    ) -> Result<ReconcileResult, ReconcileError> {
        if request.action == ReconcileAction::Deleted {
            return Ok(ReconcileResult::done());
        }
        let object = Arc::clone(&request.object);
        let session = Session::new(Arc::clone(&object));
        let cluster = ReconcileCluster::new(ctx.applier(), ctx.client(), object.as_ref());
        let report = run(&self.graph, &session, &cluster, self.concurrency).await;
        if self.write_status {
            write_status(&report, object.as_ref(), ctx).await?;
        }
        outcome(&report, object.as_ref(), ctx, self.not_ready_requeue).await
    }
}

/// Applies the status after `report` when it changed; see [`status`](crate::status).
async fn write_status<K, C>(
    report: &RunReport,
    object: &K,
    ctx: &Context<C>,
) -> Result<(), ReconcileError>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let current = serde_json::to_value(object)
        .map_err(ReconcileError::new)?
        .get("status")
        .cloned()
        .unwrap_or(Value::Null);
    let meta = object.meta();
    let Some(status) = status_update(report, meta.generation, &current) else {
        return Ok(());
    };
    let name = meta
        .name
        .as_deref()
        .ok_or_else(|| ReconcileError::terminal("the custom object has no name"))?;
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match meta.namespace.as_deref() {
        Some(namespace) => Api::namespaced_with(ctx.client().clone(), namespace, &resource),
        None => Api::all_with(ctx.client().clone(), &resource),
    };
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "status": status,
    });
    let params = PatchParams::apply(ctx.applier().field_manager()).force();
    api.patch_status(name, &params, &Patch::Apply(&body))
        .await
        .map_err(|e| ReconcileError::new(format!("writing the status of {name}: {e}")))?;
    Ok(())
}

async fn outcome<K, C>(
    report: &RunReport,
    object: &K,
    ctx: &Context<C>,
    not_ready_requeue: Duration,
) -> Result<ReconcileResult, ReconcileError>
where
    K: Resource<DynamicType = ()>,
{
    if report.all_ready() {
        return Ok(ReconcileResult::done());
    }
    let failed: Vec<String> = report
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
    if failed.is_empty() {
        return Ok(ReconcileResult::requeue_after(not_ready_requeue));
    }
    for failure in &failed {
        // An Event that cannot be written must not hide the failure itself.
        if let Err(error) = ctx
            .recorder()
            .warning(object, "ComponentFailed", failure.clone())
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
