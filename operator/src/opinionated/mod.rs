//! Opinionated wrappers: finalizers that make operator downtime safe.
//!
//! [`OpinionatedWatcher`] wraps any [`DynWatcher`](crate::erased::DynWatcher) and [`OpinionatedReconciler`]
//! wraps any [`DynReconciler`](crate::erased::DynReconciler), typed or untyped. They put a finalizer on every
//! object they handle, so that Kubernetes cannot finish a deletion before the operator has seen
//! it, and they use the finalizer at start-up to tell objects already handled from new ones.
//!
//! # The guarantee
//!
//! **For every object incarnation (UID) whose `add` succeeded, `delete` is called at least once
//! before the object disappears, even if the operator was down when it was deleted; objects that
//! changed during downtime get `sync` at start-up** (and `add` is not called for them again).
//! While the operator runs, `add` succeeds at most once per incarnation, and `add` and `update`
//! are never both called for one event.
//!
//! Limits: calls are at-least-once. A handler may see the same `delete` twice when the operator
//! stops after `delete` succeeded and before the finalizer was removed, and the same `add` twice
//! when it stops between `add` and the finalizer swap. An object whose `delete` keeps failing
//! stays in `Terminating` (that is the point of the finalizer): fix the handler, or remove the
//! finalizer by hand, in which case `delete` is still called once when the object disappears.
//!
//! # Finalizers
//!
//! By default `{group}/{app}-{plural}-{version}` ("handled") and, for the watcher, an
//! in-progress finalizer `{group}/{app}-{plural}-{version}-wip` ("add started, not completed"),
//! with `core.kubeapp.dev` for the core group and `operator` as the app of plain wrappers; see
//! [`finalizer`](self::finalizer#names) for the scheme, the shortening of long names, and how the
//! unqualified names of earlier releases are recognised and replaced. Both can be set through
//! [`OpinionatedOptions`]; every name must be a qualified name `prefix/name` with at most 63
//! characters after the slash (a [`FinalizerNameError`] names the rejected finalizer and the rule
//! when the wrapper is built). Finalizer changes are JSON patches whose precondition is the
//! object's UID and the finalizer list they were computed from (not the `resourceVersion`, see
//! [below](#two-requests-per-new-object)); a patch refused because the list changed is re-read and
//! retried, and none removes or reorders other controllers' finalizers; see [`finalizer`] for the
//! details.
//!
//! # What the watcher does in each state
//!
//! `add(obj)`:
//! - `obj` is being deleted and carries our finalizer or the in-progress one: `delete`, then
//!   remove both finalizers (a restart found a deletion it had not handled).
//! - `obj` is being deleted without them: nothing (not ours).
//! - `obj` carries our finalizer (a restart or a re-list): `sync`, then drop a leftover
//!   in-progress finalizer.
//! - otherwise: add the in-progress finalizer, `add`, then swap the in-progress finalizer for
//!   ours. If `add` fails, the in-progress finalizer stays and holds a deletion for us; the
//!   controller retries the add. If the object is deleted while `add` runs, the swap is skipped
//!   and the following update (below) calls `delete`, after the add.
//!
//! `update(old, new)`, checked in this order:
//! - `new` is being deleted: with our finalizer or the in-progress one, `delete`, then remove
//!   both; without them, nothing. This comes before any generation filter, so a deletion (which
//!   does not change the generation) is never swallowed.
//! - the add succeeded in this process and no event has yet shown whether the spec changed after
//!   the add read the object: `new` is compared with the object the add saw, not with `old`. A
//!   change is delivered as `update(object the add saw, new)` (after finishing the finalizer swap
//!   if it is missing); `new` unchanged and carrying our finalizer is the swap landing: nothing.
//!   So a spec change made while `add` ran (after the in-progress finalizer, or before it, when
//!   that patch met a conflict) is never folded into the add that read the older object.
//! - `old` lacked our finalizer (or the in-progress one), `new` has it, and nothing else changed:
//!   our own patch, nothing. (With a change too, which happens when a re-list folds several
//!   writes into one update, the checks go on, so the change is not lost.)
//! - our finalizer is missing from `new`: if `old` had it, someone else removed it: it is put
//!   back and nothing is called. Otherwise the add has not completed: the add path runs (only
//!   the parts not done yet: `add` is skipped when it already succeeded in this process), with
//!   `new`, the newest object (an add that failed earlier and waits for its retry has not
//!   succeeded, so the retry that follows only finishes the finalizer swap).
//! - nothing changed: the same generation (status, labels, annotations, finalizers, a periodic
//!   resync). Kinds without `metadata.generation` (ConfigMap, Secret, ...) never take this branch
//!   except for a resync of the same `resourceVersion`: for them every change that is not our own
//!   finalizer patch is an update. "Nothing else changed" for them means equal as JSON apart from
//!   `finalizers`, `resourceVersion` and `managedFields`.
//! - otherwise: `update(old, new)`.
//!
//! The newest spec of every object therefore reaches a handler, and `add` succeeds at most once
//! per incarnation while the process runs.
//!
//! `delete(obj)` (the watch says the object is gone): nothing when `delete` was already called
//! for this incarnation at `deletionTimestamp`; otherwise (its add never completed, someone
//! removed our finalizers, or the object was deleted before the wrapper got to it) `delete` is
//! called once, so no delete is lost.
//!
//! Besides the finalizers, each wrapper remembers per UID, while the process runs, whether `add`
//! succeeded and whether `delete` was handled (one small entry per live object, dropped when the
//! object is gone). That is what keeps a retry of an old event from calling `add` after `delete`,
//! and the final Delete event from calling `delete` a second time. The watcher's entry also holds
//! the object its `add` was given, from the add until the first event that tells whether the spec
//! changed since; for kinds with a generation that is usually the swap's own response, so the
//! object is dropped at once.
//!
//! # What the reconciler does
//!
//! One finalizer, no in-progress one. Checked in this order:
//! - a retry whose downstream call already succeeded only re-tries the finalizer patch that
//!   failed (noted in the request's [`ReconcileState`](crate::ReconcileState), out of the wrapped
//!   reconciler's reach);
//! - the watch's Delete event: dropped when `Deleted` was delivered at `deletionTimestamp`,
//!   otherwise delivered as `Deleted` once;
//! - being deleted with our finalizer: downstream `Deleted`, then the finalizer is removed (a
//!   `Deleted` that returns `requeue_after` is not done: it runs again after the delay and the
//!   finalizer stays); without our finalizer: nothing (the Delete event follows);
//! - a new object (no finalizer of ours, nothing delivered in this process): our finalizer is
//!   added first, then downstream gets `Created` (kube-runtime's order). From the patch on, a
//!   deletion waits for `Deleted`: an object deleted while its first `Created` (`apply`) runs
//!   gets its `Deleted` (`cleanup`) after it, also when the operator stops meanwhile and a new
//!   one takes over. When the object is gone, or being deleted, before the patch, `Created` is
//!   not called; its deletion's events deliver `Deleted`;
//! - after our finalizer was added and before `Created` succeeded in this process (`Created`
//!   failed and waits for its retry): any request, the retry or a newer event, goes downstream
//!   as `Created` with its object, the newest one. A spec change made after a failed `Created` is
//!   thus delivered as the creation, never behind the older copy;
//! - `Created` with our finalizer otherwise: downstream gets `Resynced` (a restart, a new
//!   leader's term, a requeue), except a retry of a `Created` that a newer event's `Created`
//!   already delivered (its copy is older): nothing;
//! - without our finalizer after `Created` was delivered, for a retry of `Created`: the
//!   finalizer is added, downstream is not called;
//! - without our finalizer after `Created` was delivered, for an update or resync: the finalizer
//!   is added (read first), then the request goes downstream. Such an event is our finalizer
//!   removed by someone, or a change by someone else seen before our patch's event: our own
//!   writes' events never get here, they reconcile nothing (see
//!   [below](#two-requests-per-new-object)), so this is what carries the change downstream;
//! - anything else goes downstream unchanged (kinds without `metadata.generation` need no special
//!   rule here: every update with our finalizer goes downstream).
//!
//! Downstream sees exactly one successful `Deleted` per object UID (it sees it again only when
//! its own `Deleted` call fails or asks for a requeue, or across a restart between the call and
//! the finalizer removal).
//!
//! Limit of the order: an operator stopped between the finalizer patch and a successful
//! `Created` delivers `Resynced`, not `Created`, for that object at its next start (the
//! finalizer is all that survives a restart). A reconciler must treat `Resynced` as "make it so"
//! (level-triggered), as kube-runtime's reconcilers treat every call. Before issue #32 the order
//! was the other way round, to keep `Created` for that case, and a deletion while `Created` ran
//! was not held: stopped at that moment, the operator never called `Deleted`, and children
//! `Created` made were left behind.
//!
//! # Two requests per new object
//!
//! For a new object the reconciler wrapper sends one request of its own: the finalizer patch
//! before `Created`. Its precondition is the UID and the finalizer list of the event's copy (not
//! the `resourceVersion`), so it needs no read first. A reconciler that writes the status makes
//! the second request. Both writes come back as watch events; they are the controller's own
//! writes (the finalizer patch records its resourceVersion, and so does
//! [`StatusWriter`](crate::StatusWriter) or a handler's
//! [`note_own_write`](crate::Context::note_own_write)), so they start no further reconcile
//! ([`own_writes`](crate::own_writes)): one reconcile per new object. A change by anyone else,
//! a status write included, has a resourceVersion of its own and is reconciled as usual.
//! `Created` gets the event's copy of the object, without the finalizer the patch just added.
//!
//! Two writes of one object in quick succession cost the apiserver something: it applies a
//! write to its watch cache's copy of the object first, and when that copy does not have the
//! previous write yet, etcd's compare-and-swap fails and the write is applied again to a fresh
//! read (measured at 2,000 new objects with the status write first and the patch straight after
//! it: 4,773 etcd updates for 4,002 writes, 771 applied twice; kube-runtime, whose second write
//! follows the first one's watch event, 4,002). So after the finalizer patch the wrapper waits
//! until the informer cache has seen it before calling `Created` (at most half a second,
//! normally a few milliseconds, and not at all while the kind's intake waits for room, when the
//! informer waits too; `Created` is correct either way): the watch that feeds the cache is served
//! from the apiserver's watch cache, so that has the patch too. A record already taken by its
//! echo means the echo has arrived, and there is no wait. `tests/own_writes.rs` counts the
//! apiserver's etcd updates: one per write (200 objects, 400 updates).
//!
//! Tests: `tests/own_writes.rs` (200 new objects: 200 finalizer patches, 200 status writes, no
//! read, no refusal, 200 reconciles; objects deleted inside their first `Created`, with and
//! without another finalizer; 3,000 objects created and deleted at once),
//! `tests/opinionated_first_apply.rs` (deleted during the first `apply`, with the operator
//! restarted meanwhile and without, children with and without owner references: `cleanup` runs
//! once), `tests/opinionated.rs` and `tests/opinionated_spec_changes.rs` for the rest of the
//! guarantee.
//!
//! # Objects that do not decode
//!
//! A typed informer delivers an object that does not deserialize into its Rust type as an
//! [`Undecodable`] (the raw object, the serde error and the incarnation's last decodable state,
//! if any); the wrapped typed handler sees the object as the sequence of its decodable states
//! (see [`view`](crate::view)). The wrappers read the raw metadata, so such an object is never
//! stuck silently nor deleted silently. An object with a decodable state is handled by the rules
//! above: its deletion held by our finalizer reaches `delete(last decodable)` /
//! `Deleted(last decodable)` and is released (amended by issue #32). An object without one
//! (created undecodable, or undecodable since before this process started) goes to the raw hook
//! [`OpinionatedOptions::on_undecodable_delete`], or stays held with a Warning Event and a
//! metric, or is released on the opt-in
//! [`OpinionatedOptions::release_undecodable_without_handler`]. The rules in full, the Events
//! and `opinionated_undecodable_objects_total`'s outcomes: [`undecodable`].
//!
//! # Retries and the dequeue policy
//!
//! When `add` fails, the controller schedules a retry of the Add event. The wrapper's own
//! in-progress-finalizer patch then produces an Update event of the same generation; that event
//! must not cancel the pending add retry. The controller's default
//! [`RetryDequeuePolicy::opinionated`](crate::RetryDequeuePolicy::opinionated) keeps it (a
//! different action keeps a retry), and so does [`opinionated_dequeue_policy`], which is the
//! same rule under a name that says why. A policy that drops pending retries on every new event
//! (`ControllerConfig::dequeue_policy(None)` or `RetryDequeuePolicy::always()`) delays a failed
//! add until the object's next change.
//!
//! # Metrics and spans
//!
//! [`FinalizerMetrics`] counts patch requests (by operation and result), conflicts and
//! undecodable objects (by outcome, see [above](#objects-that-do-not-decode)); take it from a
//! [`MetricsRegistry`](crate::MetricsRegistry) ([`finalizer`](crate::MetricsRegistry::finalizer),
//! a Runner's to have it served) and pass it in [`OpinionatedOptions::metrics`]. Without one, a
//! wrapper counts into private collectors, exported nowhere. Each
//! wrapper call runs in a span (`opinionated-watcher-add|update|delete`, `opinionated-reconcile`)
//! that records the decision taken, with a child span `opinionated-finalizer-patch` per patch;
//! failures set `otel.status_code = "ERROR"`.
//!
//! # Example
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_operator::opinionated::{OpinionatedOptions, OpinionatedWatcher, opinionated_dequeue_policy};
//! use kubeapp_operator::erased::DynWatcherFns;
//! use kubeapp_operator::{ControllerConfig, Informer, InformerController};
//! use kubeapp_operator::list_watch::ListWatchOptions;
//!
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let controller = InformerController::new(
//!     ControllerConfig::default().dequeue_policy(Some(opinionated_dequeue_policy())),
//! );
//! controller.erased().add_informer("configmaps", Informer::new::<ConfigMap>(client.clone(), ListWatchOptions::default()));
//! let watcher = DynWatcherFns::<ConfigMap>::new()
//!     .on_add(|cm, _ctx| async move { tracing::info!(name = ?cm.metadata.name, "add"); Ok(()) })
//!     .on_delete(|cm, _ctx| async move { tracing::info!(name = ?cm.metadata.name, "delete"); Ok(()) });
//! let watcher = OpinionatedWatcher::for_kind::<ConfigMap>(
//!     client,
//!     watcher,
//!     OpinionatedOptions::default().finalizer("example.dev/configmaps-finalizer"),
//! )?;
//! assert_eq!(watcher.finalizers().in_progress(), "core.kubeapp.dev/operator-configmaps-v1-wip");
//! controller.erased().add_watcher("configmaps", watcher);
//! controller.run(kubeapp_operator::CancellationToken::new()).await?;
//! # Ok(())
//! # }
//! ```

mod change;
pub mod finalizer;
mod progress;
mod reconciler;
pub mod undecodable;
mod watcher;

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use kube::api::ApiResource;

use crate::controller::RetryDequeuePolicy;
use crate::handler::{BoxError, DynContext};
use crate::object::Undecodable;

use self::undecodable::{UndecodableHandler, UndecodableOptions};

pub use self::finalizer::{
    CORE_GROUP_FINALIZER_PREFIX, ConflictRetry, DEFAULT_FINALIZER_APP, FinalizerMetrics,
    FinalizerNameError, FinalizerNames, FinalizerPatchError, IN_PROGRESS_SUFFIX,
    MAX_FINALIZER_LENGTH, MAX_FINALIZER_PREFIX_LENGTH, app_finalizer, app_in_progress_finalizer,
    default_finalizer, default_in_progress_finalizer, finalizer_prefix, legacy_finalizers,
    validate_finalizer,
};
pub use self::reconciler::OpinionatedReconciler;
pub use self::watcher::OpinionatedWatcher;

use self::finalizer::FinalizerPatcher;

/// Settings of the opinionated wrappers; `OpinionatedOptions::default()` uses the default
/// finalizer names (see [`finalizer`](self::finalizer#names)), 5 conflict retries from 50 ms,
/// metrics registered nowhere, and undecodable objects held (no hook, no release).
#[derive(Clone, Debug, Default)]
pub struct OpinionatedOptions {
    finalizer: Option<String>,
    in_progress_finalizer: Option<String>,
    app: Option<String>,
    conflict_retry: ConflictRetry,
    metrics: Option<FinalizerMetrics>,
    undecodable: UndecodableOptions,
}

impl OpinionatedOptions {
    /// The finalizer that marks objects as handled (default `{group}/{app}-{plural}-{version}`,
    /// see [`finalizer`](self::finalizer#names)). Must be a qualified name `prefix/name`;
    /// validated when the wrapper is made.
    #[must_use]
    pub fn finalizer(mut self, name: impl Into<String>) -> Self {
        self.finalizer = Some(name.into());
        self
    }

    /// The watcher's in-progress finalizer (default `{group}/{app}-{plural}-{version}-wip`).
    /// Must be a qualified name; validated when the wrapper is made; unused by the reconciler.
    #[must_use]
    pub fn in_progress_finalizer(mut self, name: impl Into<String>) -> Self {
        self.in_progress_finalizer = Some(name.into());
        self
    }

    /// The app whose name goes into the default finalizer names (instead of `operator`); the
    /// simple App sets it to its name. Its legacy names `{app}-{plural}-finalizer` and
    /// `{app}-wip` are then recognised and replaced.
    #[must_use]
    pub fn app_name(mut self, app: impl Into<String>) -> Self {
        self.app = Some(app.into());
        self
    }

    /// Handles the deletion of an object that does not deserialize into the wrapped handler's
    /// type and has no decodable state the handler could be given (see
    /// [Objects that do not decode](self#objects-that-do-not-decode); one with a decodable state
    /// goes to the wrapped handler's `delete` / `Deleted` instead): `hook` gets the raw object and
    /// the serde error ([`Undecodable`]); when it succeeds, the wrapper's finalizers are removed;
    /// when it fails, it is retried by policy.
    #[must_use]
    pub fn on_undecodable_delete<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(DynContext, Arc<Undecodable>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.undecodable.on_delete = Some(Arc::new(move |ctx, object| Box::pin(hook(ctx, object))));
        self
    }

    /// Opt-in: without an [`on_undecodable_delete`](Self::on_undecodable_delete) hook, release
    /// an undecodable object without a decodable state that is being deleted (remove the
    /// wrapper's finalizers) without calling any handler, with a Warning Event saying so.
    /// Without this, such an object stays held.
    #[must_use]
    pub fn release_undecodable_without_handler(mut self) -> Self {
        self.undecodable.release_without_handler = true;
        self
    }

    /// The reporting controller of the wrappers' Events (default
    /// [`DEFAULT_EVENT_REPORTER`](undecodable::DEFAULT_EVENT_REPORTER)).
    #[must_use]
    pub fn event_reporter(mut self, controller: impl Into<String>) -> Self {
        self.undecodable.reporter = Some(controller.into());
        self
    }

    /// How conflicting finalizer patches are retried.
    #[must_use]
    pub fn conflict_retry(mut self, retry: ConflictRetry) -> Self {
        self.conflict_retry = retry;
        self
    }

    /// Where finalizer patches are counted.
    #[must_use]
    pub fn metrics(mut self, metrics: FinalizerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The validated names for `resource`, defaults filled in. A default name brings its legacy
    /// name along (recognised and replaced, see [`finalizer`](self::finalizer#names)); a name set
    /// by hand does not.
    pub fn names(&self, resource: &ApiResource) -> Result<FinalizerNames, FinalizerNameError> {
        let app = self.app.as_deref();
        let app_or_default = app.unwrap_or(finalizer::DEFAULT_FINALIZER_APP);
        let (legacy, legacy_wip) = finalizer::legacy_finalizers(app, resource);
        let names = FinalizerNames::new(
            self.finalizer
                .clone()
                .unwrap_or_else(|| app_finalizer(app_or_default, resource)),
            self.in_progress_finalizer
                .clone()
                .unwrap_or_else(|| app_in_progress_finalizer(app_or_default, resource)),
        )?;
        Ok(names.with_legacy(
            self.finalizer.is_none().then_some(legacy),
            self.in_progress_finalizer.is_none().then_some(legacy_wip),
        ))
    }

    fn undecodable_handler(&self, client: Client, resource: ApiResource) -> UndecodableHandler {
        UndecodableHandler::new(
            client,
            resource,
            self.undecodable.clone(),
            self.metrics
                .clone()
                .unwrap_or_else(finalizer::default_metrics),
        )
    }

    fn patcher(&self, client: Client, resource: ApiResource) -> FinalizerPatcher {
        FinalizerPatcher::new(
            client,
            resource,
            self.conflict_retry.clone(),
            self.metrics
                .clone()
                .unwrap_or_else(finalizer::default_metrics),
        )
    }
}

/// The retry dequeue policy to run opinionated wrappers under: the controller's opinionated rule
/// (a new Delete drops a pending retry; a different action keeps it; the same generation keeps
/// it; a newer generation of the same action drops it). It keeps a failed add's retry when the
/// wrapper's own finalizer patch produces an Update event; see the [module docs](self).
///
/// Set it with `ControllerConfig::default().dequeue_policy(Some(opinionated_dequeue_policy()))`
/// (it is also the controller's default).
pub fn opinionated_dequeue_policy() -> RetryDequeuePolicy {
    RetryDequeuePolicy::opinionated()
}

/// Records a failed wrapper call on its span.
fn mark_error<T, E: std::fmt::Display>(span: &tracing::Span, result: &Result<T, E>) {
    if let Err(error) = result {
        span.record("error", tracing::field::display(error));
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReconcileAction::{Created, Deleted, Updated};
    use crate::handler::HandlerError;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(generation: i64, finalizers: &[&str]) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.generation = Some(generation);
        cm.metadata.finalizers = Some(finalizers.iter().map(|s| (*s).to_string()).collect());
        cm
    }

    #[test]
    fn our_own_finalizer_patch_keeps_the_retry_of_a_failed_add_and_a_delete_drops_it() {
        let policy = opinionated_dequeue_policy();
        let failed_add = cm(1, &[]);
        let own_patch = cm(1, &["wip"]);
        let err = HandlerError::Panicked("add failed".into());
        assert!(!policy.should_dequeue(Updated, &own_patch, Created, &failed_add, Some(&err)));
        assert!(policy.should_dequeue(Deleted, &own_patch, Created, &failed_add, Some(&err)));
        // Why the policy matters: with "every new event drops it", the add would not be retried.
        assert!(RetryDequeuePolicy::always().should_dequeue(
            Updated,
            &own_patch,
            Created,
            &failed_add,
            Some(&err)
        ));
    }

    #[test]
    fn options_override_each_name_and_validate_them() {
        let widgets = ApiResource {
            group: "example.dev".into(),
            version: "v1".into(),
            api_version: "example.dev/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let names = OpinionatedOptions::default()
            .finalizer("app.example.dev/widgets")
            .names(&widgets)
            .expect("valid");
        assert_eq!(names.finalizer(), "app.example.dev/widgets");
        assert!(names.legacy_finalizers().is_empty(), "a name set by hand");
        assert_eq!(names.in_progress(), "example.dev/operator-widgets-v1-wip");
        assert_eq!(names.legacy_in_progress(), ["wip.v1.Widget.example.dev"]);
        let app = OpinionatedOptions::default()
            .app_name("shop")
            .names(&widgets)
            .expect("valid");
        assert_eq!(app.finalizer(), "example.dev/shop-widgets-v1");
        assert_eq!(app.in_progress(), "example.dev/shop-widgets-v1-wip");
        assert_eq!(app.legacy_finalizers(), ["shop-widgets-finalizer"]);
        assert_eq!(app.legacy_in_progress(), ["shop-wip"]);
        let err = OpinionatedOptions::default()
            .in_progress_finalizer(format!("example.dev/{}", "w".repeat(64)))
            .names(&widgets)
            .expect_err("too long");
        assert!(
            matches!(err, FinalizerNameError::TooLong { length: 64, .. }),
            "{err}"
        );
        let err = OpinionatedOptions::default()
            .finalizer("shop-widgets-finalizer")
            .names(&widgets)
            .expect_err("unqualified");
        assert!(err.to_string().contains("shop-widgets-finalizer"), "{err}");
    }
}
