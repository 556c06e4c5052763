//! What the opinionated wrappers do with an object that does not decode into the wrapped handler's
//! type (summary in the [module docs](super#objects-that-do-not-decode)).
//!
//! A typed informer delivers an object that does not deserialize into its Rust type (a field of the
//! wrong type from an older schema, say) as an [`Undecodable`]: the raw `DynamicObject`, the serde
//! error and, when the informer saw one, the incarnation's last decodable state
//! ([`Undecodable::last_decodable`]). The wrapped typed handler never gets an undecodable state; it
//! sees the object as the sequence of its decodable states (see [`view`](crate::view)). The
//! wrappers read the raw metadata (finalizers, `deletionTimestamp`), so an undecodable object is
//! never stuck silently nor deleted silently. Two cases (amended by issue #32; before it, both went
//! the second way):
//!
//! **The object has a decodable state** (it decoded at some point since the informer first saw it,
//! and then stopped: a CRD version or a field's type changed under the running operator, or someone
//! edited it): the wrappers handle it by the rules of the [module docs](super), with its raw
//! metadata, and the wrapped handler gets the last decodable state:
//!
//! - being deleted with our finalizer (or the in-progress one): the watcher's `delete(last
//!   decodable)`, the reconciler's `Deleted(last decodable)`, then our finalizers are removed; the
//!   watch's Delete of such an object gets the same when its deletion was not handled at
//!   `deletionTimestamp`. The hook, the hold and the opt-in release below are not used: a handler
//!   can run, so it does.
//! - any other update: nothing for the watcher (its view did not change); the reconciler's request
//!   runs downstream with the last decodable state (a waiting request may have merged a decodable
//!   state into it). A Warning Event `UndecodableObject` and
//!   `opinionated_undecodable_objects_total{outcome="kept"}`, once per resourceVersion.
//! - when it decodes again: an ordinary update, `update(last decodable, new)`.
//!
//! **The object has no decodable state** (created undecodable, or undecodable since before this
//! process started): no typed handler can be given it, so
//!
//! - being deleted and held by our finalizer (or the in-progress or a legacy one): the hook set
//!   with [`OpinionatedOptions::on_undecodable_delete`] gets the raw object, then our finalizers
//!   are removed (`delete` counts as handled for that incarnation, as usual). Without a hook the
//!   object stays held: a Warning Event (reason `UndecodableObject`, naming the serde error) is
//!   recorded on it and
//!   `opinionated_undecodable_objects_total{outcome="held"}` counts it, once per resourceVersion;
//!   the call fails with [`UndecodableHeld`] and is retried by the controller's retry policy, so a
//!   fix of the object (it decodes again) or a hook added at the next start releases it. With the
//!   explicit opt-in [`OpinionatedOptions::release_undecodable_without_handler`] the finalizers are
//!   removed without any handler call, with a Warning Event `UndecodableObjectReleased` and
//!   `outcome="released"`.
//! - any other add or update (including being deleted without our finalizers): nothing but a
//!   Warning Event `UndecodableObject` and `outcome="ignored"`, once per resourceVersion.
//! - the watch's Delete of such an object whose delete was not handled at `deletionTimestamp`: the
//!   hook if set (`outcome="handled"`), otherwise a warning log and `outcome="gone"`.
//! - when it decodes for the first time: the informer reports an Add, so the add rules of the
//!   [module docs](super) apply (`add`, or `sync` when it carries our finalizer from an earlier
//!   run; the reconciler's `Created` or `Resynced`).
//!
//! A custom [`DynWatcher`](crate::erased::DynWatcher) or [`DynReconciler`](crate::erased::DynReconciler) wrapped
//! directly (not through the typed adapters) gets the `Undecodable` of an object with a decodable
//! state as the object, and can read the state from it.
//!
//! Here: the hook, the hold and the opt-in release (objects without a decodable state), and the
//! Warning Events and metric of both cases (`UndecodableHandler::kept` for the first).
//!
//! [`OpinionatedOptions::on_undecodable_delete`]: super::OpinionatedOptions::on_undecodable_delete
//! [`OpinionatedOptions::release_undecodable_without_handler`]:
//!     super::OpinionatedOptions::release_undecodable_without_handler

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use kube::Client;
use kube::Resource;
use kube::api::ApiResource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::finalizer::{FinalizerChange, FinalizerMetrics, FinalizerPatcher};
use super::progress::{Progress, ProgressMap, incarnation};
use crate::handler::{BoxError, DynContext};
use crate::object::{KubeObject, ObjectKey, Undecodable};

/// The Event reason of an undecodable object (held, or changed without being deleted).
pub const UNDECODABLE_REASON: &str = "UndecodableObject";
/// The Event reason of an undecodable object released without a handler.
pub const UNDECODABLE_RELEASED_REASON: &str = "UndecodableObjectReleased";
/// The reporting controller of the wrappers' Events unless set otherwise.
pub const DEFAULT_EVENT_REPORTER: &str = "kubeapp-opinionated";

/// The hook that handles the deletion of an undecodable object: it gets the raw object (and the
/// serde error) instead of the typed one; see
/// [`OpinionatedOptions::on_undecodable_delete`](super::OpinionatedOptions::on_undecodable_delete).
pub(crate) type UndecodableDeleteHook = Arc<
    dyn Fn(DynContext, Arc<Undecodable>) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync,
>;

/// The settings for undecodable objects, part of [`OpinionatedOptions`](super::OpinionatedOptions).
#[derive(Clone, Default)]
pub(crate) struct UndecodableOptions {
    pub(crate) on_delete: Option<UndecodableDeleteHook>,
    pub(crate) release_without_handler: bool,
    pub(crate) reporter: Option<String>,
}

impl fmt::Debug for UndecodableOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UndecodableOptions")
            .field("on_delete", &self.on_delete.is_some())
            .field("release_without_handler", &self.release_without_handler)
            .field("reporter", &self.reporter)
            .finish()
    }
}

/// An undecodable object being deleted is held by our finalizer, and nothing may release it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{kind} {object} is being deleted but does not deserialize into {expected} ({error}); it stays held by its finalizer: set OpinionatedOptions::on_undecodable_delete to handle it, fix the object, or opt in with release_undecodable_without_handler"
)]
pub struct UndecodableHeld {
    /// The kind.
    pub kind: String,
    /// Namespace and name.
    pub object: ObjectKey,
    /// The Rust type it does not deserialize into.
    pub expected: &'static str,
    /// The serde error.
    pub error: String,
}

/// The wrappers' handling of undecodable objects: the hook, the Warning Events and the metric.
pub(crate) struct UndecodableHandler {
    options: UndecodableOptions,
    recorder: Recorder,
    resource: ApiResource,
    metrics: FinalizerMetrics,
    /// The resourceVersion last reported per UID, so an object is reported once per version and
    /// not once per retry.
    reported: Mutex<HashMap<String, String>>,
}

impl UndecodableHandler {
    pub(crate) fn new(
        client: Client,
        resource: ApiResource,
        options: UndecodableOptions,
        metrics: FinalizerMetrics,
    ) -> Self {
        let reporter = Reporter {
            controller: options
                .reporter
                .clone()
                .unwrap_or_else(|| DEFAULT_EVENT_REPORTER.to_string()),
            instance: None,
        };
        Self {
            recorder: Recorder::new(client, reporter),
            resource,
            options,
            metrics,
            reported: Mutex::default(),
        }
    }

    fn count(&self, outcome: &str) {
        self.metrics
            .undecodable
            .with_label_values(&[&self.resource.kind, outcome])
            .inc();
    }

    /// True the first time this version of the object is seen (then forgotten once it is gone).
    fn first_report(&self, object: &Undecodable) -> bool {
        let version = object
            .raw()
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        reported.insert(incarnation(object), version.clone()) != Some(version)
    }

    /// Drops the memory of reports about `object`'s incarnation (it is gone or released).
    pub(crate) fn forget(&self, object: &dyn KubeObject) {
        self.reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&incarnation(object));
    }

    /// A Warning Event on the object; a failure to record it is logged, never fatal.
    async fn warn(&self, object: &Undecodable, reason: &str, note: String) {
        let reference = object.raw().object_ref(&self.resource);
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason, "recording the Warning Event failed");
        }
    }

    /// An Add or Update (or a reconcile that is not the watch's Delete) of an undecodable object:
    /// [`deleting`](Self::deleting) when it is being deleted and `held` by our finalizers,
    /// otherwise [`changed`](Self::changed).
    pub(crate) async fn handle(
        &self,
        ctx: &DynContext,
        object: Arc<Undecodable>,
        held: bool,
        progress: &ProgressMap,
        patcher: &FinalizerPatcher,
        release: &[&str],
    ) -> Result<(), BoxError> {
        if held && object.raw().metadata.deletion_timestamp.is_some() {
            self.deleting(ctx, object, progress, patcher, release).await
        } else {
            self.changed(object).await
        }
    }

    /// An undecodable object that is being deleted and held by our finalizers (`release`):
    /// the hook, or the opt-in release, or it stays held (an error, retried by policy).
    pub(crate) async fn deleting(
        &self,
        ctx: &DynContext,
        object: Arc<Undecodable>,
        progress: &ProgressMap,
        patcher: &FinalizerPatcher,
        release: &[&str],
    ) -> Result<(), BoxError> {
        let id = incarnation(object.as_ref());
        if !progress.delete_handled(&id) {
            if let Some(hook) = &self.options.on_delete {
                hook(ctx.clone(), object.clone()).await?;
                self.count("handled");
                tracing::info!(%object, "undecodable object's delete handled by the raw hook");
            } else if self.options.release_without_handler {
                self.count("released");
                tracing::warn!(%object, "undecodable object released without a handler (opt-in)");
                let note = format!(
                    "{object}; its finalizer was released without calling a handler (release_undecodable_without_handler)"
                );
                self.warn(&object, UNDECODABLE_RELEASED_REASON, note).await;
            } else {
                if self.first_report(&object) {
                    self.count("held");
                    let note = format!(
                        "{object}; the deletion stays held by finalizer {} until a handler can run",
                        release.first().copied().unwrap_or_default()
                    );
                    self.warn(&object, UNDECODABLE_REASON, note).await;
                }
                return Err(Box::new(UndecodableHeld {
                    kind: self.resource.kind.clone(),
                    object: ObjectKey::of(object.as_ref()),
                    expected: object.expected_type(),
                    error: object.error().to_string(),
                }));
            }
            progress.set(&id, Progress::DeleteHandled);
        }
        let change = FinalizerChange {
            add: None,
            remove: release,
        };
        patcher
            .apply(ctx, &object.raw().metadata, ctx.attempt() == 0, change)
            .await?;
        self.forget(object.as_ref());
        Ok(())
    }

    /// An undecodable object that is not being deleted (or not held by us): nothing but a Warning
    /// Event and the metric, once per resourceVersion.
    pub(crate) async fn changed(&self, object: Arc<Undecodable>) -> Result<(), BoxError> {
        if object.raw().metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        if self.first_report(&object) {
            self.count("ignored");
            tracing::warn!(%object, "undecodable object: no handler called");
            let note = format!("{object}; no handler is called until it deserializes again");
            self.warn(&object, UNDECODABLE_REASON, note).await;
        }
        Ok(())
    }

    /// An undecodable state of an object with a decodable one, which the wrappers handle as usual
    /// (handlers keep the last decodable state): a Warning Event and the metric
    /// (`outcome="kept"`), once per resourceVersion; nothing while it is being deleted (its
    /// deletion is delivered with the last decodable state).
    pub(crate) async fn kept(&self, object: &Undecodable) {
        if object.raw().metadata.deletion_timestamp.is_some() || !self.first_report(object) {
            return;
        }
        self.count("kept");
        tracing::warn!(%object, "undecodable object: handlers keep its last decodable state");
        let note =
            format!("{object}; handlers keep its last decodable state until it deserializes again");
        self.warn(object, UNDECODABLE_REASON, note).await;
    }

    /// The watch says an undecodable object is gone: the hook, unless its delete was handled.
    pub(crate) async fn gone(
        &self,
        ctx: &DynContext,
        object: Arc<Undecodable>,
        handled: bool,
    ) -> Result<(), BoxError> {
        self.forget(object.as_ref());
        if handled {
            return Ok(());
        }
        match &self.options.on_delete {
            Some(hook) => {
                hook(ctx.clone(), object.clone()).await?;
                self.count("handled");
            }
            None => {
                self.count("gone");
                tracing::warn!(
                    %object,
                    "undecodable object gone without being held by our finalizer; no handler called"
                );
            }
        }
        Ok(())
    }
}
