//! [`OpinionatedWatcher`]: a [`Watcher`] wrapper that manages a finalizer and an in-progress
//! finalizer; see the [module docs](super) for the rules and the guarantee.

use std::fmt;
use std::sync::Arc;

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
use crate::handler::{BoxError, HandlerContext};
use crate::object::{KubeObject, SharedObject, Undecodable, as_undecodable};
use crate::watcher::{TypedWatcher, TypedWatcherAdapter, Watcher, typed_watcher};

/// What the wrapper does with an `add`; see the [module docs](super).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddDecision {
    /// Being deleted and held by our finalizer (or the in-progress one): `delete`, then release.
    Delete,
    /// Being deleted without our finalizers: not ours to handle.
    IgnoreDeleting,
    /// Already handled (a restart or a re-list): `sync`, then drop a leftover in-progress
    /// finalizer.
    Sync {
        /// The in-progress finalizer is still there.
        drop_in_progress: bool,
    },
    /// New: in-progress finalizer, `add`, then swap it for ours.
    Add,
}

impl AddDecision {
    fn label(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::IgnoreDeleting => "ignore-deleting",
            Self::Sync { .. } => "sync",
            Self::Add => "add",
        }
    }
}

pub(crate) fn decide_add(meta: &ObjectMeta, names: &FinalizerNames) -> AddDecision {
    let ours = names.is_handled(meta);
    let in_progress = names.is_in_progress(meta);
    if meta.deletion_timestamp.is_some() {
        if ours || in_progress {
            AddDecision::Delete
        } else {
            AddDecision::IgnoreDeleting
        }
    } else if ours {
        AddDecision::Sync {
            // A legacy name is tidied up by the same patch.
            drop_in_progress: in_progress || names.carries_legacy(meta),
        }
    } else {
        AddDecision::Add
    }
}

/// What the wrapper does with an `update(old, new)`; the checks run in the order of the variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateDecision {
    /// `new` is being deleted and held by our finalizer (or the in-progress one).
    Delete,
    /// `new` is being deleted without our finalizers.
    IgnoreDeleting,
    /// Our own patch: `old` lacked our finalizer (or the in-progress one) and `new` has it.
    IgnoreOwnPatch,
    /// Someone else removed our finalizer: put it back, call nothing.
    Restore,
    /// The add of this object has not completed: go the add path (never both add and update).
    CompleteAdd,
    /// Same generation: a status, label, annotation or finalizer change, or a resync.
    IgnoreSameGeneration,
    /// A spec change: `update(old, new)`.
    Update,
}

impl UpdateDecision {
    fn label(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::IgnoreDeleting => "ignore-deleting",
            Self::IgnoreOwnPatch => "ignore-own-patch",
            Self::Restore => "restore-finalizer",
            Self::CompleteAdd => "complete-add",
            Self::IgnoreSameGeneration => "ignore-same-generation",
            Self::Update => "update",
        }
    }
}

pub(crate) fn decide_update(
    old: &ObjectMeta,
    new: &ObjectMeta,
    names: &FinalizerNames,
) -> UpdateDecision {
    // Legacy names count as ours (see the finalizer module's names section).
    let has_finalizer = |meta: &ObjectMeta, name: &str| {
        if name == names.finalizer() {
            names.is_handled(meta)
        } else {
            names.is_in_progress(meta)
        }
    };
    let (ours, wip) = (names.finalizer(), names.in_progress());
    let same_generation = old.generation == new.generation;
    if new.deletion_timestamp.is_some() {
        return if has_finalizer(new, ours) || has_finalizer(new, wip) {
            UpdateDecision::Delete
        } else {
            UpdateDecision::IgnoreDeleting
        };
    }
    // Our own swap. With a new generation as well (a re-list can fold several writes into one
    // update), the spec change still reaches `update` below.
    if same_generation && !has_finalizer(old, ours) && has_finalizer(new, ours) {
        return UpdateDecision::IgnoreOwnPatch;
    }
    if !has_finalizer(new, ours) {
        if has_finalizer(old, ours) {
            return UpdateDecision::Restore;
        }
        // The in-progress finalizer just appeared: the add that put it there is running or
        // waiting for its retry (which the dequeue policy keeps), so this event adds nothing.
        if same_generation && !has_finalizer(old, wip) && has_finalizer(new, wip) {
            return UpdateDecision::IgnoreOwnPatch;
        }
        return UpdateDecision::CompleteAdd;
    }
    if same_generation {
        UpdateDecision::IgnoreSameGeneration
    } else {
        UpdateDecision::Update
    }
}

/// A [`Watcher`] wrapper that makes downtime safe with finalizers; see the [module docs](super).
///
/// Register it like any watcher:
/// `controller.add_watcher("widgets", OpinionatedWatcher::for_kind::<Widget>(client, my_watcher, OpinionatedOptions::default())?)`.
pub struct OpinionatedWatcher<W> {
    inner: W,
    names: FinalizerNames,
    patcher: FinalizerPatcher,
    progress: ProgressMap,
    kind: String,
    undecodable: UndecodableHandler,
}

impl<W: Watcher> OpinionatedWatcher<W> {
    /// Wraps `watcher` for objects of `resource` (an untyped kind, or any kind by its
    /// `ApiResource`); finalizer patches go through `client`. Fails when a finalizer name is
    /// invalid (longer than 63 characters, empty, or both the same).
    pub fn new(
        client: Client,
        resource: ApiResource,
        watcher: W,
        options: OpinionatedOptions,
    ) -> Result<Self, FinalizerNameError> {
        let names = options.names(&resource)?;
        Ok(Self {
            inner: watcher,
            names,
            kind: resource.kind.clone(),
            undecodable: options.undecodable_handler(client.clone(), resource.clone()),
            patcher: options.patcher(client, resource),
            progress: ProgressMap::default(),
        })
    }

    /// Wraps `watcher` for the typed kind `K` (a derived custom resource or a k8s-openapi type).
    pub fn for_kind<K>(
        client: Client,
        watcher: W,
        options: OpinionatedOptions,
    ) -> Result<Self, FinalizerNameError>
    where
        K: kube::Resource,
        K::DynamicType: Default,
    {
        Self::new(
            client,
            ApiResource::erase::<K>(&K::DynamicType::default()),
            watcher,
            options,
        )
    }

    /// The finalizer names in use.
    pub fn finalizers(&self) -> &FinalizerNames {
        &self.names
    }

    /// The wrapped watcher.
    pub fn inner(&self) -> &W {
        &self.inner
    }
}

impl<K, T> OpinionatedWatcher<TypedWatcherAdapter<K, T>>
where
    K: KubeObject + kube::Resource,
    K::DynamicType: Default,
    T: TypedWatcher<K>,
{
    /// Wraps a [`TypedWatcher`] of `K`.
    pub fn typed(
        client: Client,
        watcher: T,
        options: OpinionatedOptions,
    ) -> Result<Self, FinalizerNameError> {
        Self::for_kind::<K>(client, typed_watcher(watcher), options)
    }
}

impl<W> fmt::Debug for OpinionatedWatcher<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpinionatedWatcher")
            .field("kind", &self.kind)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// A span per wrapper call, with the decision taken.
macro_rules! wrapper_span {
    ($name:literal, $self:ident, $object:expr, $decision:expr) => {{
        let meta = $object.metadata();
        tracing::info_span!(
            $name,
            kind = %$self.kind,
            namespace = meta.namespace.as_deref().unwrap_or(""),
            name = meta.name.as_deref().unwrap_or(""),
            decision = $decision,
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }};
}

impl<W: Watcher> OpinionatedWatcher<W> {
    async fn patch(
        &self,
        ctx: &HandlerContext,
        meta: &ObjectMeta,
        trusted: bool,
        change: FinalizerChange<'_>,
    ) -> Result<PatchOutcome, BoxError> {
        Ok(self.patcher.apply(ctx, meta, trusted, change).await?)
    }

    /// The event's copy may be used for a first patch attempt unless this is a retry (whose copy
    /// is the failed event's, known to be old).
    fn trust_event_copy(ctx: &HandlerContext) -> bool {
        ctx.attempt() == 0
    }

    /// `delete` (unless this process already handled it for this incarnation), then release.
    async fn handle_deletion(
        &self,
        ctx: &HandlerContext,
        object: SharedObject,
    ) -> Result<(), BoxError> {
        let id = incarnation(object.as_ref());
        if self.progress.get(&id) == Some(Progress::DeleteHandled) {
            tracing::debug!("delete already handled; only releasing the object");
        } else {
            self.inner.delete(ctx, object.clone()).await?;
            self.progress.set(&id, Progress::DeleteHandled);
        }
        self.patch(
            ctx,
            object.metadata(),
            Self::trust_event_copy(ctx),
            FinalizerChange {
                add: None,
                remove: &self.names.all(),
            },
        )
        .await?;
        Ok(())
    }

    /// In-progress finalizer, `add`, then swap it for ours; parts already done are skipped.
    async fn complete_add(
        &self,
        ctx: &HandlerContext,
        object: SharedObject,
    ) -> Result<(), BoxError> {
        let id = incarnation(object.as_ref());
        let (ours, wip) = (self.names.finalizer(), self.names.in_progress());
        let mut latest = object.metadata().clone();
        let mut trusted = Self::trust_event_copy(ctx);
        match self.progress.get(&id) {
            Some(Progress::DeleteHandled) => {
                tracing::debug!("the delete of this object was handled already; add skipped");
                return Ok(());
            }
            Some(Progress::Added) => {
                tracing::debug!("add succeeded earlier; only the finalizer swap is left");
            }
            None => {
                let hold = FinalizerChange {
                    add: Some(wip),
                    remove: &[],
                };
                match self.patch(ctx, &latest, trusted, hold).await? {
                    PatchOutcome::Patched(meta) => {
                        latest = *meta;
                        trusted = true;
                    }
                    PatchOutcome::Unchanged => {}
                    PatchOutcome::Gone => {
                        tracing::debug!("object gone before add; its Delete event calls delete");
                        return Ok(());
                    }
                    PatchOutcome::BlockedByDeletion => {
                        tracing::debug!(
                            "object being deleted before add; its Delete event calls delete"
                        );
                        return Ok(());
                    }
                }
                self.inner.add(ctx, object.clone()).await?;
                self.progress.set(&id, Progress::Added);
            }
        }
        let superseded = self.names.superseded_by_finalizer();
        let swap = FinalizerChange {
            add: Some(ours),
            remove: &superseded,
        };
        if self.patch(ctx, &latest, trusted, swap).await? == PatchOutcome::BlockedByDeletion {
            tracing::debug!(
                "deleted while add ran: the in-progress finalizer holds it until delete runs"
            );
        }
        Ok(())
    }

    async fn run_add(
        &self,
        ctx: &HandlerContext,
        object: SharedObject,
        decision: AddDecision,
    ) -> Result<(), BoxError> {
        match decision {
            AddDecision::Delete => self.handle_deletion(ctx, object).await,
            AddDecision::IgnoreDeleting => Ok(()),
            AddDecision::Sync { drop_in_progress } => {
                self.inner.sync(ctx, object.clone()).await?;
                self.progress
                    .set(&incarnation(object.as_ref()), Progress::Added);
                if drop_in_progress {
                    // Also the upgrade patch: a legacy finalizer is replaced by ours.
                    let upgrade = self.names.carries_legacy(object.metadata());
                    let drop_wip = FinalizerChange {
                        add: upgrade.then(|| self.names.finalizer()),
                        remove: &self.names.superseded_by_finalizer(),
                    };
                    self.patch(
                        ctx,
                        object.metadata(),
                        Self::trust_event_copy(ctx),
                        drop_wip,
                    )
                    .await?;
                }
                Ok(())
            }
            AddDecision::Add => self.complete_add(ctx, object).await,
        }
    }

    async fn run_update(
        &self,
        ctx: &HandlerContext,
        old: SharedObject,
        new: SharedObject,
        decision: UpdateDecision,
    ) -> Result<(), BoxError> {
        match decision {
            UpdateDecision::Delete => self.handle_deletion(ctx, new).await,
            UpdateDecision::IgnoreDeleting
            | UpdateDecision::IgnoreOwnPatch
            | UpdateDecision::IgnoreSameGeneration => Ok(()),
            UpdateDecision::Restore => {
                let restore = FinalizerChange {
                    add: Some(self.names.finalizer()),
                    remove: &self.names.superseded_by_finalizer(),
                };
                self.patch(ctx, new.metadata(), Self::trust_event_copy(ctx), restore)
                    .await?;
                Ok(())
            }
            UpdateDecision::CompleteAdd => self.complete_add(ctx, new).await,
            UpdateDecision::Update => self.inner.update(ctx, old, new).await,
        }
    }

    /// An Add or Update to an undecodable object; see the [module docs](super#objects-that-do-not-decode).
    async fn run_undecodable(
        &self,
        ctx: &HandlerContext,
        object: Arc<Undecodable>,
    ) -> Result<(), BoxError> {
        let meta = &object.raw().metadata;
        let held = self.names.is_handled(meta) || self.names.is_in_progress(meta);
        let release = self.names.all();
        self.undecodable
            .handle(ctx, object, held, &self.progress, &self.patcher, &release)
            .await
    }

    async fn run_delete(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        if let Some(undecodable) = as_undecodable(&object) {
            let handled = self.progress.remove(&incarnation(object.as_ref()))
                == Some(Progress::DeleteHandled);
            return self.undecodable.gone(ctx, undecodable, handled).await;
        }
        self.undecodable.forget(object.as_ref());
        match self.progress.remove(&incarnation(object.as_ref())) {
            Some(Progress::DeleteHandled) => {
                tracing::debug!("delete was handled at deletionTimestamp");
                Ok(())
            }
            // Never held by our finalizer long enough for us to see the deletion (its add never
            // completed, or someone removed our finalizers): the delete is still delivered once.
            _ => self.inner.delete(ctx, object).await,
        }
    }
}

#[async_trait]
impl<W: Watcher> Watcher for OpinionatedWatcher<W> {
    async fn add(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        if let Some(undecodable) = as_undecodable(&object) {
            let span = wrapper_span!("opinionated-watcher-add", self, object, "undecodable");
            let result = self
                .run_undecodable(ctx, undecodable)
                .instrument(span.clone())
                .await;
            mark_error(&span, &result);
            return result;
        }
        let decision = decide_add(object.metadata(), &self.names);
        let span = wrapper_span!("opinionated-watcher-add", self, object, decision.label());
        let result = self
            .run_add(ctx, object, decision)
            .instrument(span.clone())
            .await;
        mark_error(&span, &result);
        result
    }

    async fn update(
        &self,
        ctx: &HandlerContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError> {
        if let Some(undecodable) = as_undecodable(&new) {
            let span = wrapper_span!("opinionated-watcher-update", self, new, "undecodable");
            let result = self
                .run_undecodable(ctx, undecodable)
                .instrument(span.clone())
                .await;
            mark_error(&span, &result);
            return result;
        }
        let decision = decide_update(old.metadata(), new.metadata(), &self.names);
        let span = wrapper_span!("opinionated-watcher-update", self, new, decision.label());
        let result = self
            .run_update(ctx, old, new, decision)
            .instrument(span.clone())
            .await;
        mark_error(&span, &result);
        result
    }

    async fn delete(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        let span = wrapper_span!("opinionated-watcher-delete", self, object, "delete-event");
        let result = self.run_delete(ctx, object).instrument(span.clone()).await;
        mark_error(&span, &result);
        result
    }

    /// The wrapper decides itself when the wrapped watcher's `sync` runs; a direct call is passed
    /// through.
    async fn sync(&self, ctx: &HandlerContext, object: SharedObject) -> Result<(), BoxError> {
        self.inner.sync(ctx, object).await
    }
}

#[cfg(test)]
mod tests;
