//! The small operator the fault harness is proven on, in a sound variant and in variants that
//! each carry one classic bug, and the scenarios that exercise them.
//!
//! Each `Parent` renders ConfigMap children labelled with its name (found again through a
//! `watches` trigger on that label, whose cache the handler may read), reports
//! `status.observed` (the value it rendered), and deletes its children when it is deleted. It
//! is a plain kind (no finalizer of the operator's own, as a kube-runtime controller). The
//! children are not owned: the operator deletes them itself (a real cluster's garbage collector
//! would otherwise hide the delete bug, and testenv has none), as it would an external record.
//!
//! Every variant passes a happy-path test. The bugs:
//!
//! - [`Variant::TwoCreates`]: creates `-a`, then `-b`, and takes an `-a` that exists for "done
//!   before". A crash right after the create of `-a`, or a lost answer to it, leaves `-b`
//!   missing for good.
//! - [`Variant::ChildFromStaleCache`]: looks its child `-a-…` up in the cache and creates one
//!   (from a `generateName`) when the cache has none (`-b` it applies, as the sound one does).
//!   When the cache has not yet seen the child it created, the next reconcile creates a second
//!   one.
//! - [`Variant::StatusFromStaleCopy`]: writes its whole status from its cached copy of the parent
//!   as a merge patch (no `resourceVersion`, so it never conflicts; a field the copy lacks is
//!   written as null), so a field another writer set since (`status.note`) is clobbered when
//!   that copy is stale. (An update with the copy's `resourceVersion` would get a 409 instead:
//!   that is the safe way.)
//! - [`Variant::CleanupOnlyWhenMarked`]: deletes the children when it sees the parent marked for
//!   deletion (a `deletionTimestamp`, while another controller's finalizer holds it) and does
//!   nothing for the `Deleted` request ("done when it was marked"). When the marked state is
//!   never observed (a watch that fell behind re-lists after the parent is gone, or the marked
//!   update and the delete coalesce into one request), the children stay.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubeapp::prelude::*;
use kubeapp::testing::{
    BoxError, OperatorUnderTest, RunContext, RunningOperator, Scenario, Workload,
};
use serde_json::json;

/// A parent of ConfigMaps.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "faults.kubeapp.dev",
    version = "v1",
    kind = "Parent",
    namespaced,
    status = "ParentStatus"
)]
pub struct ParentSpec {
    /// What the children hold.
    pub value: String,
}

/// What the operator (`observed`) and another writer (`note`) report.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ParentStatus {
    /// The value the operator rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<String>,
    /// Set by another writer (a second controller, a person): not the operator's to change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The label naming a child's parent.
pub const PARENT_LABEL: &str = "faults.kubeapp.dev/parent";

/// Another controller's finalizer, which holds a parent in its marked state until the
/// workload (playing that controller) removes it.
pub const HOLD_FINALIZER: &str = "faults.kubeapp.dev/hold";

/// Which operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Server-side apply of `-a` and `-b`, a merge patch of `status.observed` only, cleanup on
    /// the marked state and on `Deleted`: idempotent, and blind to stale caches.
    Sound,
    /// See the [module docs](self).
    TwoCreates,
    /// See the [module docs](self).
    ChildFromStaleCache,
    /// See the [module docs](self).
    StatusFromStaleCopy,
    /// See the [module docs](self).
    CleanupOnlyWhenMarked,
}

/// The child `<parent>-<suffix>` holding the parent's value.
pub fn child(parent: &Parent, suffix: &str) -> ConfigMap {
    let mut child = ConfigMap::default();
    child.metadata.name = Some(format!("{}-{suffix}", parent.name_any()));
    child.metadata.namespace = parent.namespace();
    child.metadata.labels = Some([(PARENT_LABEL.to_owned(), parent.name_any())].into());
    child.data = Some([("value".to_owned(), parent.spec.value.clone())].into());
    child
}

/// Deletes every child of `parent` (listed from the apiserver, so none is missed).
async fn delete_children(children: &Api<ConfigMap>, parent: &Parent) -> Result<(), kube::Error> {
    let selector = format!("{PARENT_LABEL}={}", parent.name_any());
    for child in children
        .list(&ListParams::default().labels(&selector))
        .await?
    {
        match children
            .delete(&child.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

async fn reconcile(
    variant: Variant,
    request: ReconcileRequest<Parent>,
    ctx: Context,
    client: kube::Client,
) -> Result<ReconcileResult, ReconcileError> {
    let parent = request.object.as_ref();
    let namespace = parent.namespace().unwrap_or_default();
    let children: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let parents: Api<Parent> = Api::namespaced(client, &namespace);
    if request.action == ReconcileAction::Deleted {
        if variant != Variant::CleanupOnlyWhenMarked {
            delete_children(&children, parent).await?;
        }
        return Ok(ReconcileResult::done());
    }
    if parent.metadata.deletion_timestamp.is_some() {
        delete_children(&children, parent).await?;
        return Ok(ReconcileResult::done());
    }
    let apply = PatchParams::apply("fault-harness-test").force();
    match variant {
        Variant::Sound | Variant::StatusFromStaleCopy | Variant::CleanupOnlyWhenMarked => {
            for suffix in ["a", "b"] {
                let child = child(parent, suffix);
                children
                    .patch(&child.name_any(), &apply, &Patch::Apply(&child))
                    .await?;
            }
        }
        Variant::TwoCreates => {
            match children
                .create(&PostParams::default(), &child(parent, "a"))
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    return Ok(ReconcileResult::done());
                }
                other => {
                    other?;
                }
            }
            children
                .create(&PostParams::default(), &child(parent, "b"))
                .await?;
        }
        Variant::ChildFromStaleCache => {
            let cache = ctx
                .related_store::<ConfigMap>()
                .ok_or("no cache of the children: the kind lacks its watches trigger")?;
            let prefix = format!("{}-a-", parent.name_any());
            let wanted = child(parent, "a");
            let cached = cache.list(parent.namespace().as_deref());
            let found = cached
                .iter()
                .find(|cached| cached.name_any().starts_with(&prefix));
            match found {
                None => {
                    let mut fresh = wanted;
                    fresh.metadata.name = None;
                    fresh.metadata.generate_name = Some(prefix);
                    children.create(&PostParams::default(), &fresh).await?;
                }
                Some(found) if found.data != wanted.data => {
                    let data = json!({ "data": wanted.data });
                    children
                        .patch(
                            &found.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&data),
                        )
                        .await?;
                }
                Some(_) => {}
            }
            // After `-a`: the trigger of `-b`'s event then finds `-a` in the cache (one watch
            // stream delivers in order).
            let b = child(parent, "b");
            children
                .patch(&b.name_any(), &apply, &Patch::Apply(&b))
                .await?;
        }
    }
    let observed = Some(parent.spec.value.clone());
    if variant == Variant::StatusFromStaleCopy {
        // The whole status, from the cached copy, as a merge patch (no resourceVersion, so no
        // conflict): every field is written, the ones the copy lacks as null.
        let copy = parent.status.clone().unwrap_or_default();
        let status = json!({ "status": { "observed": observed, "note": copy.note } });
        parents
            .patch_status(
                &parent.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await?;
    } else {
        // A server-side apply of `observed` alone, recorded as the kind's own write (its echo
        // starts no reconcile); written only when it changed.
        ctx.status(parent)
            .write(ParentStatus {
                observed,
                note: None,
            })
            .await?;
    }
    Ok(ReconcileResult::done())
}

/// The operator, in the test process: a simple App under a Runner serving `/debug/kubeapp`.
pub struct InProcess(pub Variant);

/// A started [`InProcess`].
pub struct Running {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

#[async_trait::async_trait]
impl OperatorUnderTest for InProcess {
    async fn start(&self, run: &RunContext) -> Result<Box<dyn RunningOperator>, BoxError> {
        let variant = self.0;
        let client = run.client.clone();
        // Plain: no finalizer of its own (kubeapp's opinionated wrapper would hold every
        // deletion until the handler saw it, and hide the delete bug), as a kube-runtime
        // controller is written.
        let parents = ManagedKind::<Parent>::new()
            .plain()
            .watches::<ConfigMap>(watcher::Config::default().labels(PARENT_LABEL), |child| {
                child
                    .labels()
                    .get(PARENT_LABEL)
                    .map(|parent| {
                        ObjectRef::new(parent).within(child.namespace().as_deref().unwrap_or(""))
                    })
                    .into_iter()
                    .collect()
            })
            .reconcile_fn(move |request, ctx| reconcile(variant, request, ctx, client.clone()));
        let runner = Runner::new(
            RunnerConfig::default().metrics_addr(SocketAddr::from(([127, 0, 0, 1], 0))),
        )?;
        // The Runner's informers and metrics, so that its /debug/kubeapp reports the app's.
        let config = AppConfig::new("fault-harness-test")
            .namespace(Some(run.namespace.clone()))
            .informers(runner.informers().clone())
            .metrics(runner.metrics().clone())
            .managed_kind(parents);
        let app = SimpleApp::new(config, run.client.clone())?;
        let mut runner = runner.app(app);
        let addr = runner.bind().await?;
        let task = tokio::spawn(async move {
            let _ = runner.run_until(std::future::pending::<()>()).await;
        });
        Ok(Box::new(Running { addr, task }))
    }
}

#[async_trait::async_trait]
impl RunningOperator for Running {
    fn metrics_addr(&self) -> SocketAddr {
        self.addr
    }

    async fn kill(self: Box<Self>) {
        // As SIGKILL: no graceful stop, every connection dropped with the task.
        self.task.abort();
        let _ = self.task.await;
    }
}

fn parents(workload: &Workload) -> Api<Parent> {
    Api::namespaced(workload.client.clone(), &workload.namespace)
}

/// Creates parents `names` with `value`, held by [`HOLD_FINALIZER`] if `held`.
pub async fn create_parents(
    workload: &Workload,
    names: &[&str],
    value: &str,
    held: bool,
) -> Result<(), BoxError> {
    for name in names {
        let mut parent = Parent::new(
            name,
            ParentSpec {
                value: value.into(),
            },
        );
        if held {
            parent.metadata.finalizers = Some(vec![HOLD_FINALIZER.to_owned()]);
        }
        parents(workload)
            .create(&PostParams::default(), &parent)
            .await?;
    }
    Ok(())
}

/// Sets `value` on parents `names`.
pub async fn set_value(workload: &Workload, names: &[&str], value: &str) -> Result<(), BoxError> {
    let patch = json!({ "spec": { "value": value } });
    for name in names {
        parents(workload)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Another writer sets `status.note` on parent `name`.
pub async fn note(workload: &Workload, name: &str) -> Result<(), BoxError> {
    let patch = json!({ "status": { "note": "set by another writer" } });
    parents(workload)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Someone edits child `name` by hand (the operator is to restore it).
pub async fn edit_child(workload: &Workload, name: &str) -> Result<(), BoxError> {
    let patch = json!({ "data": { "value": "edited by hand" } });
    Api::<ConfigMap>::namespaced(workload.client.clone(), &workload.namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The other controller lets go of parent `name` (removes [`HOLD_FINALIZER`]).
pub async fn release_hold(workload: &Workload, name: &str) -> Result<(), BoxError> {
    let patch = json!({ "metadata": { "finalizers": null } });
    parents(workload)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn observed(scenario: Scenario) -> Scenario {
    scenario
        .observe::<Parent>(None)
        .observe::<ConfigMap>(Some(PARENT_LABEL))
}

/// Three parents created, one deleted: for [`Variant::TwoCreates`].
pub fn two_children() -> Scenario {
    observed(
        Scenario::new("two-children")
            .step("create three", |workload| async move {
                create_parents(&workload, &["p1", "p2", "p3"], "v1", false).await
            })
            .step("delete one", |workload| async move {
                parents(&workload)
                    .delete("p3", &DeleteParams::default())
                    .await?;
                Ok(())
            }),
    )
}

/// Two parents created, then changed: for [`Variant::ChildFromStaleCache`].
pub fn create_then_change() -> Scenario {
    observed(
        Scenario::new("create-then-change")
            .step("create two", |workload| async move {
                create_parents(&workload, &["p1", "p2"], "v1", false).await
            })
            .step("change both", |workload| async move {
                set_value(&workload, &["p1", "p2"], "v2").await
            }),
    )
}

/// A parent the operator has rendered gets a note from another writer, then its child is
/// edited by hand: for [`Variant::StatusFromStaleCopy`].
pub fn note_then_drift() -> Scenario {
    observed(
        Scenario::new("note-then-drift")
            .setup("create one", |workload| async move {
                create_parents(&workload, &["p1"], "v1", false).await
            })
            .step("another writer notes its status", |workload| async move {
                note(&workload, "p1").await
            })
            .step("its child is edited by hand", |workload| async move {
                edit_child(&workload, "p1-a").await
            }),
    )
}

/// Three parents held by another controller's finalizer; one is deleted, then let go: for
/// [`Variant::CleanupOnlyWhenMarked`].
pub fn marked_then_gone() -> Scenario {
    observed(
        Scenario::new("marked-then-gone")
            .setup("create three, held", |workload| async move {
                create_parents(&workload, &["p1", "p2", "p3"], "v1", true).await
            })
            .step("delete one", |workload| async move {
                parents(&workload)
                    .delete("p3", &DeleteParams::default())
                    .await?;
                Ok(())
            })
            .step(
                "the other controller lets go of it",
                |workload| async move { release_hold(&workload, "p3").await },
            ),
    )
}
