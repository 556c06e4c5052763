//! [`OpinionatedWatcher`]: a [`DynWatcher`] wrapper that manages a finalizer and an in-progress
//! finalizer; see the [module docs](super) for the rules and the guarantee.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::ApiResource;
use tracing::Instrument;

mod decide;

pub(crate) use self::decide::{AddDecision, UpdateDecision, decide_add, decide_update};
use super::change::{changed, has_generation};
use super::finalizer::{
    FinalizerChange, FinalizerNameError, FinalizerNames, FinalizerPatcher, PatchOutcome,
};
use super::progress::{Progress, ProgressMap, incarnation};
use super::undecodable::UndecodableHandler;
use super::{OpinionatedOptions, mark_error};
use crate::handler::{BoxError, DynContext};
use crate::object::{SharedObject, Undecodable, as_undecodable};
use crate::watcher::DynWatcher;

/// A [`DynWatcher`] wrapper that makes downtime safe with finalizers; see the [module docs](super).
///
/// Register it like any watcher:
/// `controller.erased().add_watcher("widgets", OpinionatedWatcher::for_kind::<Widget>(client, my_watcher, OpinionatedOptions::default())?)`.
pub struct OpinionatedWatcher<W> {
    inner: W,
    names: FinalizerNames,
    patcher: FinalizerPatcher,
    progress: ProgressMap,
    kind: String,
    undecodable: UndecodableHandler,
}

impl<W: DynWatcher> OpinionatedWatcher<W> {
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

impl<W: DynWatcher> OpinionatedWatcher<W> {
    async fn patch(
        &self,
        ctx: &DynContext,
        meta: &ObjectMeta,
        trusted: bool,
        change: FinalizerChange<'_>,
    ) -> Result<PatchOutcome, BoxError> {
        Ok(self.patcher.apply(ctx, meta, trusted, change).await?)
    }

    /// The event's copy may be used for a first patch attempt unless this is a retry (whose copy
    /// is the failed event's, known to be old).
    fn trust_event_copy(ctx: &DynContext) -> bool {
        ctx.attempt() == 0
    }

    /// `delete` (unless this process already handled it for this incarnation), then release.
    async fn handle_deletion(
        &self,
        ctx: &DynContext,
        object: SharedObject,
    ) -> Result<(), BoxError> {
        let id = incarnation(object.as_ref());
        if self.progress.delete_handled(&id) {
            tracing::debug!("delete already handled; only releasing the object");
        } else {
            self.inner.delete(object.clone(), ctx).await?;
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
    async fn complete_add(&self, ctx: &DynContext, object: SharedObject) -> Result<(), BoxError> {
        let id = incarnation(object.as_ref());
        let (ours, wip) = (self.names.finalizer(), self.names.in_progress());
        let mut latest = object.metadata().clone();
        let mut trusted = Self::trust_event_copy(ctx);
        let mut added_now = false;
        match self.progress.get(&id) {
            Some(Progress::DeleteHandled) => {
                tracing::debug!("the delete of this object was handled already; add skipped");
                return Ok(());
            }
            Some(Progress::Added { .. }) => {
                tracing::debug!("add succeeded earlier; only the finalizer swap is left");
            }
            // `Creating` is the reconciler's; a watcher's add starts with the in-progress finalizer.
            Some(Progress::Creating) | None => {
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
                self.inner.add(object.clone(), ctx).await?;
                // Until an event shows the spec unchanged since, or delivers the change as
                // `update(object, newest)`: see the progress module.
                self.progress.set(
                    &id,
                    Progress::Added {
                        saw: Some(object.clone()),
                    },
                );
                added_now = true;
            }
        }
        let superseded = self.names.superseded_by_finalizer();
        let swap = FinalizerChange {
            add: Some(ours),
            remove: &superseded,
        };
        match self.patch(ctx, &latest, trusted, swap).await? {
            PatchOutcome::BlockedByDeletion => tracing::debug!(
                "deleted while add ran: the in-progress finalizer holds it until delete runs"
            ),
            // The swap landed on the generation the add saw, so no spec change slipped in
            // before it, and later ones come as updates of versions carrying our finalizer:
            // the object the add saw need not be kept (kinds without a generation keep it
            // until the swap's event, which the content comparison needs).
            PatchOutcome::Patched(meta)
                if added_now
                    && has_generation(object.as_ref())
                    && meta.generation == object.metadata().generation =>
            {
                self.progress.set(&id, Progress::ADDED);
            }
            _ => {}
        }
        Ok(())
    }

    /// The spec changed after the add read the object: finish the swap if it is missing, then
    /// `update(object the add saw, new)`; only then is the object the add saw forgotten, so a
    /// failed update is retried against it.
    async fn update_since_add(
        &self,
        ctx: &DynContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError> {
        let id = incarnation(new.as_ref());
        // Decided on this entry a moment ago; events of one object never run concurrently.
        let saw = self.progress.add_saw(&id).unwrap_or(old);
        let swap_seen = self.names.is_handled(new.metadata());
        if !swap_seen {
            self.complete_add(ctx, new.clone()).await?;
        }
        self.inner.update(saw, new.clone(), ctx).await?;
        // Until an event shows our finalizer, further spec changes can still arrive in events
        // that look like an add in progress (gen2+wip -> gen3+wip): keep comparing them with
        // what the handler saw last, so each reaches `update` instead of the add path.
        let progress = if swap_seen {
            Progress::ADDED
        } else {
            Progress::Added { saw: Some(new) }
        };
        self.progress.set(&id, progress);
        Ok(())
    }

    /// The add path for an event without our finalizer. When the add already succeeded in this
    /// process and the event carries a spec change, the change is not the add's to absorb: the
    /// swap is completed and the change goes to `update(old, new)`.
    async fn complete_add_or_update(
        &self,
        ctx: &DynContext,
        old: SharedObject,
        new: SharedObject,
    ) -> Result<(), BoxError> {
        let added = matches!(
            self.progress.get(&incarnation(new.as_ref())),
            Some(Progress::Added { .. })
        );
        self.complete_add(ctx, new.clone()).await?;
        if added && changed(old.as_ref(), new.as_ref()) {
            self.inner.update(old, new, ctx).await?;
        }
        Ok(())
    }

    async fn run_add(
        &self,
        ctx: &DynContext,
        object: SharedObject,
        decision: AddDecision,
    ) -> Result<(), BoxError> {
        match decision {
            AddDecision::Delete => self.handle_deletion(ctx, object).await,
            AddDecision::IgnoreDeleting => Ok(()),
            AddDecision::Sync { drop_in_progress } => {
                self.inner.sync(object.clone(), ctx).await?;
                self.progress
                    .set(&incarnation(object.as_ref()), Progress::ADDED);
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
        ctx: &DynContext,
        old: SharedObject,
        new: SharedObject,
        decision: UpdateDecision,
    ) -> Result<(), BoxError> {
        match decision {
            UpdateDecision::Delete => self.handle_deletion(ctx, new).await,
            UpdateDecision::IgnoreDeleting
            | UpdateDecision::IgnoreOwnPatch
            | UpdateDecision::IgnoreUnchanged => Ok(()),
            UpdateDecision::AddConfirmed => {
                self.progress
                    .set(&incarnation(new.as_ref()), Progress::ADDED);
                Ok(())
            }
            UpdateDecision::ChangedSinceAdd => self.update_since_add(ctx, old, new).await,
            UpdateDecision::Restore => {
                let restore = FinalizerChange {
                    add: Some(self.names.finalizer()),
                    remove: &self.names.superseded_by_finalizer(),
                };
                self.patch(ctx, new.metadata(), Self::trust_event_copy(ctx), restore)
                    .await?;
                Ok(())
            }
            UpdateDecision::CompleteAdd => self.complete_add_or_update(ctx, old, new).await,
            UpdateDecision::Update => self.inner.update(old, new, ctx).await,
        }
    }

    /// An Add or Update to an undecodable object without a decodable state; see the
    /// [module docs](super#objects-that-do-not-decode).
    async fn run_undecodable(
        &self,
        ctx: &DynContext,
        object: Arc<Undecodable>,
    ) -> Result<(), BoxError> {
        let meta = &object.raw().metadata;
        let held = self.names.is_handled(meta) || self.names.is_in_progress(meta);
        let release = self.names.all();
        self.undecodable
            .handle(ctx, object, held, &self.progress, &self.patcher, &release)
            .await
    }

    async fn run_delete(&self, ctx: &DynContext, object: SharedObject) -> Result<(), BoxError> {
        if let Some(undecodable) = never_decoded(&object) {
            let handled = self
                .progress
                .remove(&incarnation(object.as_ref()))
                .is_some_and(|progress| progress.delete_handled());
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
            // (An undecodable last state reaches a typed handler as its last decodable one.)
            _ => self.inner.delete(object, ctx).await,
        }
    }
}

/// `object` as an [`Undecodable`] without a decodable state: the objects the wrappers' own rules
/// for undecodable objects are for. An undecodable state of an object that has a decodable one
/// goes the usual way (a typed handler gets the last decodable state).
fn never_decoded(object: &SharedObject) -> Option<Arc<Undecodable>> {
    as_undecodable(object).filter(|undecodable| undecodable.last_decodable().is_none())
}

#[async_trait]
impl<W: DynWatcher> DynWatcher for OpinionatedWatcher<W> {
    async fn add(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        if let Some(undecodable) = never_decoded(&object) {
            let span = wrapper_span!("opinionated-watcher-add", self, object, "undecodable");
            let result = self
                .run_undecodable(ctx, undecodable)
                .instrument(span.clone())
                .await;
            mark_error(&span, &result);
            return result;
        }
        if let Some(undecodable) = as_undecodable(&object) {
            self.undecodable.kept(&undecodable).await;
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
        old: SharedObject,
        new: SharedObject,
        ctx: &DynContext,
    ) -> Result<(), BoxError> {
        if let Some(undecodable) = never_decoded(&new) {
            let span = wrapper_span!("opinionated-watcher-update", self, new, "undecodable");
            let result = self
                .run_undecodable(ctx, undecodable)
                .instrument(span.clone())
                .await;
            mark_error(&span, &result);
            return result;
        }
        if never_decoded(&old).is_some() {
            // The first decodable state (the informer reports it as an Add; an event source that
            // does not is handled alike): the add path, by the object's finalizers.
            return self.add(new, ctx).await;
        }
        if let Some(undecodable) = as_undecodable(&new) {
            self.undecodable.kept(&undecodable).await;
        }
        let add_saw = self.progress.add_saw(&incarnation(new.as_ref()));
        let decision = decide_update(old.as_ref(), new.as_ref(), &self.names, add_saw.as_deref());
        let span = wrapper_span!("opinionated-watcher-update", self, new, decision.label());
        let result = self
            .run_update(ctx, old, new, decision)
            .instrument(span.clone())
            .await;
        mark_error(&span, &result);
        result
    }

    async fn delete(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        let span = wrapper_span!("opinionated-watcher-delete", self, object, "delete-event");
        let result = self.run_delete(ctx, object).instrument(span.clone()).await;
        mark_error(&span, &result);
        result
    }

    /// The wrapper decides itself when the wrapped watcher's `sync` runs; a direct call is passed
    /// through.
    async fn sync(&self, object: SharedObject, ctx: &DynContext) -> Result<(), BoxError> {
        self.inner.sync(object, ctx).await
    }
}

#[cfg(test)]
mod tests;
