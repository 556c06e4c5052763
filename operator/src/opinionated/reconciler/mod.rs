//! [`OpinionatedReconciler`]: a [`DynReconciler`] wrapper that manages one finalizer; see the
//! [module docs](super) for the rules and the guarantee.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::ApiResource;
use tracing::Instrument;

use super::finalizer::{
    FinalizerChange, FinalizerNameError, FinalizerNames, FinalizerPatcher, PatchOutcome,
};
use super::progress::{Progress, ProgressMap, incarnation};
use super::undecodable::UndecodableHandler;
use super::{OpinionatedOptions, mark_error};
use crate::action::ReconcileAction;
use crate::handler::DynContext;
use crate::object::{Undecodable, as_undecodable};
use crate::reconciler::{
    DynReconciler, ReconcileError, ReconcileRequest, ReconcileResult, ReconcileState,
};

/// The key under which the wrapper keeps its own note in a request's state: which finalizer
/// patch is left to retry after the downstream call already succeeded.
pub(crate) const STATE_KEY: &str = "kubeapp.dev/opinionated-finalizer";

/// The longest `Created` waits, after the finalizer patch that precedes it, for the cache to see
/// that patch: it normally takes milliseconds, and `Created` is correct either way (a write it
/// makes may then be applied twice by the apiserver). Bounded tightly because a shared informer
/// also waits for its slowest subscriber: another controller's full backlog stalls this kind's
/// cache too.
const CATCH_UP_LIMIT: Duration = Duration::from_millis(500);
const PENDING_ADD: &str = "add-pending";
const PENDING_REMOVAL: &str = "removal-pending";
/// A `Resync` (a requeue of `Created`, say) failed downstream: its retry is not a stale retry of
/// the creation, and must reach the reconciler again.
const RESYNC_FAILED: &str = "resync-failed";

/// What the wrapper does with a request; checked in the order of the variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReconcileDecision {
    /// Downstream succeeded earlier; only the finalizer patch noted in the state is left.
    RetryPatch {
        /// True for the removal, false for the add.
        removal: bool,
    },
    /// The watch's Delete event: deliver `Deleted` unless it was delivered at
    /// `deletionTimestamp`.
    DeleteEvent,
    /// Being deleted with our finalizer: downstream `Deleted`, then remove the finalizer.
    Delete,
    /// Being deleted without our finalizer: the watch's Delete event delivers `Deleted`.
    IgnoreDeleting,
    /// Created and already carrying our finalizer (a restart, a new leader's term, a requeue):
    /// downstream `Resynced`.
    Resync,
    /// A new object, or one whose `Created` has not succeeded yet in this process (it failed
    /// and waits for its retry): our finalizer first (unless this process added it already),
    /// then downstream `Created` with this, the newest, object.
    Create,
    /// A retry of a `Created` whose newer event already delivered `Created`, without our
    /// finalizer: add the finalizer, downstream is not called (its copy is older).
    AddFinalizer,
    /// A retry of a `Created` whose newer event already delivered `Created`, with our
    /// finalizer: nothing left to do (its copy is older).
    StaleRetry,
    /// Updated or resynced without our finalizer after `Created` was delivered: a change by
    /// someone else seen before our finalizer patch's event (made while `Created` ran, say), or
    /// our finalizer removed by someone: add the finalizer, then downstream gets the request.
    /// (Our own writes' events never get here: they reconcile nothing, see
    /// [`own_writes`](crate::own_writes).)
    AddFinalizerAndPass,
    /// Anything else goes downstream unchanged.
    Pass,
}

impl ReconcileDecision {
    fn label(self) -> &'static str {
        match self {
            Self::RetryPatch { removal: true } => "retry-finalizer-removal",
            Self::RetryPatch { removal: false } => "retry-finalizer-add",
            Self::DeleteEvent => "delete-event",
            Self::Delete => "delete",
            Self::IgnoreDeleting => "ignore-deleting",
            Self::Resync => "resync",
            Self::Create => "create",
            Self::AddFinalizer => "add-finalizer",
            Self::StaleRetry => "stale-retry",
            Self::AddFinalizerAndPass => "add-finalizer-and-pass",
            Self::Pass => "pass",
        }
    }
}

/// How far this process got with an incarnation, as [`decide`] needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Nothing delivered, and our finalizer not added by this process.
    Nothing,
    /// Our finalizer added by this process; `Created` not delivered yet.
    Creating,
    /// `Created` (or `Resynced` at start-up) delivered, or the object seen with our finalizer,
    /// or its delete handled.
    Created,
}

/// Decides a request. `delivery`: how far this process got with the incarnation; `retry`: the
/// request is a retry (or a requeue after an error) of an earlier call.
pub(crate) fn decide(
    action: ReconcileAction,
    meta: &ObjectMeta,
    state: &ReconcileState,
    names: &FinalizerNames,
    delivery: Delivery,
    retry: bool,
) -> ReconcileDecision {
    // Legacy names count as ours; the next patch replaces them.
    let ours = names.is_handled(meta);
    match state.note(STATE_KEY) {
        Some(PENDING_REMOVAL) if action != ReconcileAction::Deleted => {
            return ReconcileDecision::RetryPatch { removal: true };
        }
        Some(PENDING_ADD) if action == ReconcileAction::Created => {
            return ReconcileDecision::RetryPatch { removal: false };
        }
        _ => {}
    }
    if action == ReconcileAction::Deleted {
        return ReconcileDecision::DeleteEvent;
    }
    if meta.deletion_timestamp.is_some() {
        return if ours {
            ReconcileDecision::Delete
        } else {
            ReconcileDecision::IgnoreDeleting
        };
    }
    match (action, ours, delivery) {
        // Our finalizer went on before `Created`, which has not succeeded yet: this request
        // (its retry, or a newer event with the newest object) is still the creation.
        (_, true, Delivery::Creating) => ReconcileDecision::Create,
        // A retry of a `Created` that a newer event delivered meanwhile: its copy is older. Not
        // a retry of a failed `Resync` (a `Created` requeued after it was delivered): that one
        // failed after the delivery, and nothing else will run it again.
        (ReconcileAction::Created, true, Delivery::Created)
            if retry && state.note(STATE_KEY) != Some(RESYNC_FAILED) =>
        {
            ReconcileDecision::StaleRetry
        }
        (ReconcileAction::Created, true, _) => ReconcileDecision::Resync,
        // Without our finalizer, `Created` delivered tells a retry with an old copy, or a change
        // by someone else (or our finalizer removed), from a creation.
        (ReconcileAction::Created, false, Delivery::Created) => ReconcileDecision::AddFinalizer,
        (_, false, Delivery::Created) => ReconcileDecision::AddFinalizerAndPass,
        (_, false, _) => ReconcileDecision::Create,
        _ => ReconcileDecision::Pass,
    }
}

/// A [`DynReconciler`] wrapper that makes downtime safe with one finalizer; see the
/// [module docs](super).
///
/// A typed reconciler gets it from [`KindHandle::reconcile_opinionated`](crate::KindHandle::reconcile_opinionated)
/// (or `_fn`, or [`apply_cleanup`](crate::KindHandle::apply_cleanup)): the finalizer goes on before
/// the reconciler first sees an object, so a delete that happens while the operator is down is
/// still reconciled as [`Deleted`](crate::ReconcileAction::Deleted) when it comes back, and the
/// object goes only once that call succeeded.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_operator::{KindHandle, OpinionatedOptions, ReconcileAction, ReconcileResult};
///
/// fn attach(config_maps: &KindHandle<ConfigMap>) -> Result<(), Box<dyn std::error::Error>> {
///     let options = OpinionatedOptions::default().finalizer("example.com/cleanup");
///     config_maps.reconcile_opinionated_fn(
///         |request, _ctx| async move {
///             match request.action {
///                 // Also after a delete the operator did not see happen.
///                 ReconcileAction::Deleted => tracing::info!("released what it held"),
///                 // Created (first sight), Updated, Resynced (seen again after a restart).
///                 action => tracing::info!(?action, "brought up to date"),
///             }
///             Ok(ReconcileResult::done())
///         },
///         options,
///     )?;
///     Ok(())
/// }
/// ```
pub struct OpinionatedReconciler<R> {
    inner: R,
    names: FinalizerNames,
    patcher: FinalizerPatcher,
    delivered: ProgressMap,
    kind: String,
    undecodable: UndecodableHandler,
}

impl<R: DynReconciler> OpinionatedReconciler<R> {
    /// Wraps `reconciler` for objects of `resource`; finalizer patches go through `client`. Only
    /// the finalizer name of `options` is used (the reconciler has no in-progress finalizer).
    /// Fails when the finalizer name is invalid.
    pub fn new(
        client: Client,
        resource: ApiResource,
        reconciler: R,
        options: OpinionatedOptions,
    ) -> Result<Self, FinalizerNameError> {
        let names = options.names(&resource)?;
        Ok(Self {
            inner: reconciler,
            names,
            kind: resource.kind.clone(),
            undecodable: options.undecodable_handler(client.clone(), resource.clone()),
            patcher: options.patcher(client, resource),
            delivered: ProgressMap::default(),
        })
    }

    /// Wraps `reconciler` for the typed kind `K`.
    pub fn for_kind<K>(
        client: Client,
        reconciler: R,
        options: OpinionatedOptions,
    ) -> Result<Self, FinalizerNameError>
    where
        K: kube::Resource,
        K::DynamicType: Default,
    {
        Self::new(
            client,
            ApiResource::erase::<K>(&K::DynamicType::default()),
            reconciler,
            options,
        )
    }

    /// The finalizer in use.
    pub fn finalizer(&self) -> &str {
        self.names.finalizer()
    }

    /// The wrapped reconciler.
    pub fn inner(&self) -> &R {
        &self.inner
    }
}

impl<R> fmt::Debug for OpinionatedReconciler<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpinionatedReconciler")
            .field("kind", &self.kind)
            .field("finalizer", &self.names.finalizer())
            .finish_non_exhaustive()
    }
}

/// `state` with the wrapper's note set to `note` (or removed).
fn noted(mut state: ReconcileState, note: Option<&str>) -> ReconcileState {
    state.set_note(STATE_KEY, note);
    state
}

impl<R: DynReconciler> OpinionatedReconciler<R> {
    /// A request for an undecodable object without a decodable state; see the
    /// [module docs](super#objects-that-do-not-decode).
    async fn run_undecodable(
        &self,
        ctx: &DynContext,
        action: ReconcileAction,
        object: Arc<Undecodable>,
    ) -> Result<ReconcileResult, ReconcileError> {
        let meta = &object.raw().metadata;
        let span = tracing::info_span!(
            "opinionated-reconcile",
            kind = %self.kind,
            namespace = meta.namespace.as_deref().unwrap_or(""),
            name = meta.name.as_deref().unwrap_or(""),
            action = %action,
            decision = "undecodable",
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let result = if action == ReconcileAction::Deleted {
            let handled = self
                .delivered
                .remove(&incarnation(object.as_ref()))
                .is_some_and(|progress| progress.delete_handled());
            self.undecodable
                .gone(ctx, object, handled)
                .instrument(span.clone())
                .await
        } else {
            let held = self.names.is_handled(meta);
            let release = self.names.finalizer_and_legacy();
            self.undecodable
                .handle(
                    ctx,
                    object.clone(),
                    held,
                    &self.delivered,
                    &self.patcher,
                    &release,
                )
                .instrument(span.clone())
                .await
        };
        mark_error(&span, &result);
        result
            .map(|()| ReconcileResult::done())
            .map_err(ReconcileError::new)
    }

    /// Runs `change` after a successful downstream call. On failure the error carries the state
    /// with `note`, so the retry only re-tries the patch. `trust_event_copy`: whether the patch
    /// may start from the event's copy (see the [finalizer module](super::finalizer)).
    async fn patch_after(
        &self,
        ctx: &DynContext,
        request: &ReconcileRequest,
        result: ReconcileResult,
        change: FinalizerChange<'_>,
        note: &str,
        trust_event_copy: bool,
    ) -> Result<ReconcileResult, ReconcileError> {
        let state = result
            .state
            .clone()
            .unwrap_or_else(|| request.state.clone());
        let trusted = trust_event_copy && ctx.attempt() == 0;
        match self
            .patcher
            .apply(ctx, request.object.metadata(), trusted, change)
            .await
        {
            Ok(_) => Ok(ReconcileResult {
                state: Some(noted(state, None)),
                ..result
            }),
            Err(error) => Err(ReconcileError::new(error).with_state(noted(state, Some(note)))),
        }
    }

    /// Before `Created`, after the finalizer patch (a recorded write): waits (briefly) until the
    /// informer cache has seen the patch, so the apiserver's watch cache has it too and applies
    /// the reconciler's own write that follows (its status, say) once (see
    /// [`OwnWrites::seen_by_cache`](crate::own_writes::OwnWrites::seen_by_cache)). Measured at
    /// 2,000 new objects when the two writes came the other way round: 771 of 2,000 finalizer
    /// patches sent straight after the status write were applied twice (4,773 etcd updates for
    /// 4,002 writes).
    async fn let_cache_catch_up(&self, ctx: &DynContext, request: &ReconcileRequest) {
        let (Some(own), Some(uid)) = (ctx.own_writes(), request.object.metadata().uid.as_deref())
        else {
            return;
        };
        tokio::select! {
            seen = own.seen_by_cache(uid, CATCH_UP_LIMIT) => {
                if !seen {
                    tracing::debug!("the cache did not see the finalizer patch in time; going on");
                }
            }
            () = ctx.cancellation_token().cancelled() => {}
        }
    }

    async fn run(
        &self,
        ctx: &DynContext,
        request: ReconcileRequest,
        decision: ReconcileDecision,
    ) -> Result<ReconcileResult, ReconcileError> {
        let finalizer = self.names.finalizer();
        let id = incarnation(request.object.as_ref());
        let all = self.names.finalizer_and_legacy();
        // Adding ours also replaces a legacy name (a "replace" then); removing ours removes all.
        let legacy = if self.names.carries_legacy(request.object.metadata()) {
            &all[1..]
        } else {
            &[]
        };
        let add = FinalizerChange {
            add: Some(finalizer),
            remove: legacy,
        };
        let remove = FinalizerChange {
            add: None,
            remove: &all,
        };
        match decision {
            ReconcileDecision::RetryPatch { removal } => {
                let (change, note) = if removal {
                    (remove, PENDING_REMOVAL)
                } else {
                    (add, PENDING_ADD)
                };
                self.patch_after(ctx, &request, ReconcileResult::done(), change, note, false)
                    .await
            }
            ReconcileDecision::DeleteEvent => {
                self.undecodable.forget(request.object.as_ref());
                if self
                    .delivered
                    .remove(&id)
                    .is_some_and(|progress| progress.delete_handled())
                {
                    tracing::debug!("Deleted was delivered at deletionTimestamp");
                    return Ok(ReconcileResult::done());
                }
                self.inner.reconcile(request, ctx).await
            }
            ReconcileDecision::Delete => {
                let mut result = ReconcileResult::done();
                if !self.delivered.delete_handled(&id) {
                    let downstream = ReconcileRequest {
                        action: ReconcileAction::Deleted,
                        ..request.clone()
                    };
                    result = self.inner.reconcile(downstream, ctx).await?;
                    if result.requeue_after.is_some() {
                        // Not done yet: asked to run again; the finalizer stays until a
                        // Deleted call succeeds without a requeue.
                        return Ok(result);
                    }
                    self.delivered.set(&id, Progress::DeleteHandled);
                }
                // Cleanup at deletion rarely writes the object itself: the event's copy is
                // likely current.
                self.patch_after(ctx, &request, result, remove, PENDING_REMOVAL, true)
                    .await
            }
            ReconcileDecision::IgnoreDeleting => Ok(ReconcileResult::done()),
            ReconcileDecision::Resync => {
                let downstream = ReconcileRequest {
                    action: ReconcileAction::Resynced,
                    ..request.clone()
                };
                let result = self
                    .inner
                    .reconcile(downstream, ctx)
                    .await
                    .map_err(|mut error| {
                        // Its retry (still `Created`) must not look like a stale one.
                        let state = error.state.take().unwrap_or_else(|| request.state.clone());
                        error.state = Some(noted(state, Some(RESYNC_FAILED)));
                        error
                    })?;
                self.delivered.set(&id, Progress::ADDED);
                if !self.names.carries_legacy(request.object.metadata()) {
                    return Ok(result);
                }
                // The upgrade patch: a legacy finalizer name is replaced by ours.
                self.patch_after(ctx, &request, result, add, PENDING_ADD, true)
                    .await
            }
            ReconcileDecision::Create => {
                if !self.names.is_handled(request.object.metadata()) {
                    // Our finalizer before anything is applied (kube-runtime's order): from
                    // now on a deletion waits for `Deleted`, so a `cleanup` cannot be missed,
                    // not even across a restart while `Created` runs.
                    match self
                        .patcher
                        .apply(ctx, request.object.metadata(), ctx.attempt() == 0, add)
                        .await
                        .map_err(ReconcileError::new)?
                    {
                        PatchOutcome::Patched(_) | PatchOutcome::Unchanged => {}
                        PatchOutcome::Gone | PatchOutcome::BlockedByDeletion => {
                            // Deleted before anything was applied: the deletion's own events
                            // deliver `Deleted` (see the module docs).
                            tracing::debug!("gone or being deleted before its first Created");
                            return Ok(ReconcileResult::done());
                        }
                    }
                    self.delivered.set(&id, Progress::Creating);
                    // The reconciler's own write (a status, say) then applies to a watch cache
                    // that has the patch, once.
                    self.let_cache_catch_up(ctx, &request).await;
                }
                let downstream = ReconcileRequest {
                    action: ReconcileAction::Created,
                    ..request
                };
                let result = self.inner.reconcile(downstream, ctx).await?;
                self.delivered.set(&id, Progress::ADDED);
                Ok(result)
            }
            ReconcileDecision::AddFinalizer => {
                let state = request.state.clone();
                // Most updates without our finalizer are the object's own writes made before our
                // add landed (the status written during `Created`): their copy is older than our
                // patch, so reading first finds the finalizer and sends nothing, where the event's
                // copy would earn a 409. A finalizer really removed by someone costs one GET more.
                self.patch_after(
                    ctx,
                    &request,
                    ReconcileResult::done().with_state(state),
                    add,
                    PENDING_ADD,
                    false,
                )
                .await
            }
            ReconcileDecision::StaleRetry => Ok(ReconcileResult::done()),
            ReconcileDecision::AddFinalizerAndPass => {
                // Read first: the event is usually older than our finalizer patch, which then
                // needs nothing sent. The change is delivered either way: its event is not the
                // echo of our own write, so it would otherwise be lost (the patch's own event
                // reconciles nothing).
                self.patcher
                    .apply(ctx, request.object.metadata(), false, add)
                    .await
                    .map_err(ReconcileError::new)?;
                self.inner.reconcile(request, ctx).await
            }
            ReconcileDecision::Pass => {
                // Seen with our finalizer (a reconciler registered after the object's Created):
                // a later update without it is a repair, not a creation.
                if self.delivered.get(&id).is_none() {
                    self.delivered.set(&id, Progress::ADDED);
                }
                self.inner.reconcile(request, ctx).await
            }
        }
    }
}

#[async_trait]
impl<R: DynReconciler> DynReconciler for OpinionatedReconciler<R> {
    async fn reconcile(
        &self,
        request: ReconcileRequest,
        ctx: &DynContext,
    ) -> Result<ReconcileResult, ReconcileError> {
        if let Some(undecodable) = as_undecodable(&request.object) {
            match undecodable.last_decodable() {
                None => return self.run_undecodable(ctx, request.action, undecodable).await,
                // Handled as usual with the raw metadata (finalizers, deletion); downstream, a
                // typed reconciler gets the last decodable state.
                Some(_) if request.action != ReconcileAction::Deleted => {
                    self.undecodable.kept(&undecodable).await;
                }
                Some(_) => {}
            }
        }
        let delivery = match self.delivered.get(&incarnation(request.object.as_ref())) {
            None => Delivery::Nothing,
            Some(Progress::Creating) => Delivery::Creating,
            Some(_) => Delivery::Created,
        };
        let decision = decide(
            request.action,
            request.object.metadata(),
            &request.state,
            &self.names,
            delivery,
            ctx.attempt() > 0,
        );
        let meta = request.object.metadata();
        let span = tracing::info_span!(
            "opinionated-reconcile",
            kind = %self.kind,
            namespace = meta.namespace.as_deref().unwrap_or(""),
            name = meta.name.as_deref().unwrap_or(""),
            action = %request.action,
            decision = decision.label(),
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let result = self
            .run(ctx, request, decision)
            .instrument(span.clone())
            .await;
        mark_error(&span, &result);
        result
    }
}

#[cfg(test)]
mod tests;
