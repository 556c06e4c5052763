//! Finalizer names, the finalizer list arithmetic, and the patch that changes the list.
//!
//! # Names
//!
//! [`FinalizerNames`] holds the wrapper's finalizer and its in-progress finalizer. The defaults
//! are `operator.{version}.{kind}.{group}` and `wip.{version}.{kind}.{group}` (for the core group,
//! whose name is empty, the trailing `.{group}` is left out, because a finalizer must not end in a
//! dot). Both can be overridden; each must be 1 to 63 characters long, and the two must differ.
//!
//! # Patches
//!
//! A change of the list is an RFC 6902 JSON patch of two operations: `replace
//! /metadata/resourceVersion` with the resourceVersion the list was computed from, and `add
//! /metadata/finalizers` with the whole new list. The apiserver applies the patch to the current
//! object and then checks the resulting resourceVersion like an update does: when the object
//! changed in between, the versions differ and the answer is HTTP 409 Conflict, so a list computed
//! from an old copy can never overwrite a newer one. (A `test` op on the resourceVersion would
//! express the same precondition, but kube-apiserver 1.36 answers a failed `test` with HTTP 422
//! and a generic message that cannot be told apart from a truly invalid patch, such as adding a
//! finalizer to an object being deleted; the `replace` form gives a clean 409.)
//!
//! The first attempt computes the new list from the event's copy of the object, which saves a
//! read when nothing else wrote meanwhile; a retry of a handler call (whose copy is known to be
//! old) starts from a fresh read. On a conflict the object is read again, the list is computed
//! again from the fresh copy, and the patch is retried after a short backoff
//! ([`ConflictRetry`]); the wait ends early when the handler context is cancelled. Other
//! controllers' finalizers are never removed or reordered: the new list is the current list
//! minus ours, plus ours at the end.
//!
//! A patch never touches another incarnation of the object: when the fresh read finds a
//! different UID under the name (or nothing), the patch reports the object gone and changes
//! nothing. A finalizer is never added to an object that is being deleted (the apiserver forbids
//! it); a change that would add one changes nothing at all, so an in-progress finalizer is never
//! swapped away from an object whose deletion it holds.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tracing::Instrument;

use crate::handler::HandlerContext;
use crate::metrics::MetricsError;
use crate::object::ObjectKey;

/// The longest finalizer name accepted.
pub const MAX_FINALIZER_LENGTH: usize = 63;

/// A finalizer name that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinalizerNameError {
    /// The name is longer than [`MAX_FINALIZER_LENGTH`].
    #[error(
        "finalizer `{finalizer}` is {length} characters long; at most {MAX_FINALIZER_LENGTH} are allowed"
    )]
    TooLong {
        /// The rejected name.
        finalizer: String,
        /// Its length in characters.
        length: usize,
    },
    /// The name is empty.
    #[error("a finalizer name must not be empty")]
    Empty,
    /// The finalizer and the in-progress finalizer are the same name.
    #[error("the finalizer and the in-progress finalizer are both `{0}`; they must differ")]
    Same(String),
}

/// Checks that `finalizer` is a usable finalizer name (1 to 63 characters).
pub fn validate_finalizer(finalizer: &str) -> Result<(), FinalizerNameError> {
    let length = finalizer.chars().count();
    if length == 0 {
        return Err(FinalizerNameError::Empty);
    }
    if length > MAX_FINALIZER_LENGTH {
        return Err(FinalizerNameError::TooLong {
            finalizer: finalizer.to_string(),
            length,
        });
    }
    Ok(())
}

fn with_kind(prefix: &str, resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        format!("{prefix}.{}.{}", resource.version, resource.kind)
    } else {
        format!(
            "{prefix}.{}.{}.{}",
            resource.version, resource.kind, resource.group
        )
    }
}

/// The default finalizer of a kind: `operator.{version}.{kind}.{group}`.
pub fn default_finalizer(resource: &ApiResource) -> String {
    with_kind("operator", resource)
}

/// The default in-progress finalizer of a kind: `wip.{version}.{kind}.{group}`.
pub fn default_in_progress_finalizer(resource: &ApiResource) -> String {
    with_kind("wip", resource)
}

/// The wrapper's finalizer and its in-progress finalizer, both validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizerNames {
    finalizer: String,
    in_progress: String,
}

impl FinalizerNames {
    /// Validated names; see [`validate_finalizer`].
    pub fn new(
        finalizer: impl Into<String>,
        in_progress: impl Into<String>,
    ) -> Result<Self, FinalizerNameError> {
        let (finalizer, in_progress) = (finalizer.into(), in_progress.into());
        validate_finalizer(&finalizer)?;
        validate_finalizer(&in_progress)?;
        if finalizer == in_progress {
            return Err(FinalizerNameError::Same(finalizer));
        }
        Ok(Self {
            finalizer,
            in_progress,
        })
    }

    /// The defaults of a kind ([`default_finalizer`], [`default_in_progress_finalizer`]); an
    /// error when a long kind or group makes them longer than 63 characters.
    pub fn defaults(resource: &ApiResource) -> Result<Self, FinalizerNameError> {
        Self::new(
            default_finalizer(resource),
            default_in_progress_finalizer(resource),
        )
    }

    /// The finalizer that marks an object as handled.
    pub fn finalizer(&self) -> &str {
        &self.finalizer
    }

    /// The finalizer that holds an object whose add has not completed yet.
    pub fn in_progress(&self) -> &str {
        &self.in_progress
    }
}

/// Whether `meta` lists `finalizer`.
pub(crate) fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_deref()
        .is_some_and(|list| list.iter().any(|f| f == finalizer))
}

/// A change of an object's finalizer list: remove some names, then make sure one is present.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FinalizerChange<'a> {
    /// Appended when missing.
    pub add: Option<&'a str>,
    /// Removed wherever they appear.
    pub remove: &'a [&'a str],
}

impl FinalizerChange<'_> {
    /// The metric label of the change.
    fn operation(&self) -> &'static str {
        match (self.add, self.remove.is_empty()) {
            (Some(_), true) => "add",
            (Some(_), false) => "replace",
            (None, _) => "remove",
        }
    }
}

/// What a [`FinalizerChange`] means for one finalizer list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListPlan {
    /// The list already is as wanted.
    Unchanged,
    /// Set the list to this.
    Set(Vec<String>),
    /// The change would add a finalizer to an object being deleted, which the apiserver forbids;
    /// nothing is changed (not even the removals, which may be what holds the deletion).
    BlockedByDeletion,
}

/// The new finalizer list: `current` without `change.remove`, with `change.add` appended when
/// missing. Other finalizers keep their order.
pub(crate) fn plan_finalizers(
    current: &[String],
    change: FinalizerChange<'_>,
    deleting: bool,
) -> ListPlan {
    let mut next: Vec<String> = current
        .iter()
        .filter(|f| !change.remove.contains(&f.as_str()))
        .cloned()
        .collect();
    if let Some(add) = change.add
        && !next.iter().any(|f| f == add)
    {
        if deleting {
            return ListPlan::BlockedByDeletion;
        }
        next.push(add.to_string());
    }
    if next == current {
        ListPlan::Unchanged
    } else {
        ListPlan::Set(next)
    }
}

/// How a finalizer patch ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PatchOutcome {
    /// The list was changed; the object's metadata after the patch.
    Patched(Box<ObjectMeta>),
    /// The list already was as wanted; nothing was sent.
    Unchanged,
    /// The object (this incarnation of it) no longer exists.
    Gone,
    /// The change would add a finalizer to an object being deleted; nothing was changed.
    BlockedByDeletion,
}

/// A finalizer patch that failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerPatchError {
    /// Reading the object failed.
    #[error("reading {kind} {object} to patch its finalizers: {source}")]
    Read {
        /// The kind.
        kind: String,
        /// Namespace and name.
        object: ObjectKey,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The patch request failed for another reason than a conflict.
    #[error("patching the finalizers of {kind} {object}: {source}")]
    Patch {
        /// The kind.
        kind: String,
        /// Namespace and name.
        object: ObjectKey,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Every attempt met a conflict (someone else kept writing the object).
    #[error(
        "the finalizers of {kind} {object} were not patched: the object kept changing ({attempts} conflicting attempts)"
    )]
    Conflict {
        /// The kind.
        kind: String,
        /// Namespace and name.
        object: ObjectKey,
        /// How many patches were refused.
        attempts: u32,
    },
    /// The handler context was cancelled while waiting to retry a conflicting patch.
    #[error("patching the finalizers of {kind} {object} was cancelled: the controller is stopping")]
    Cancelled {
        /// The kind.
        kind: String,
        /// Namespace and name.
        object: ObjectKey,
    },
}

/// How often and how fast a conflicting finalizer patch is retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflictRetry {
    /// Retries after the first conflicting attempt (default 5).
    pub retries: u32,
    /// The wait before the first retry; doubled for each further one (default 50 ms).
    pub base_delay: Duration,
    /// The longest wait between two attempts (default 1 s).
    pub max_delay: Duration,
}

impl Default for ConflictRetry {
    fn default() -> Self {
        Self {
            retries: 5,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl ConflictRetry {
    fn delay(&self, retry: u32) -> Duration {
        self.base_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay)
    }
}

/// Counters of the opinionated wrappers' finalizer patches.
///
/// | name | type | labels |
/// |---|---|---|
/// | `opinionated_finalizer_patches_total` | counter, patch requests sent | `kind`, `operation` (add, remove, replace), `result` (success, conflict, error) |
/// | `opinionated_finalizer_conflicts_total` | counter, patches refused with 409 Conflict | `kind` |
///
/// Like [`ControllerMetrics`](crate::ControllerMetrics), one set of collectors exists per
/// namespace prefix in the process, and registering it into a registry again is a no-op.
#[derive(Clone, Debug)]
pub struct FinalizerMetrics {
    patches: IntCounterVec,
    conflicts: IntCounterVec,
}

impl FinalizerMetrics {
    /// Fresh collectors registered nowhere.
    pub fn unregistered(namespace: Option<&str>) -> Result<Self, MetricsError> {
        let ns = namespace.unwrap_or("");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help).namespace(ns), labels).map_err(|source| {
                MetricsError {
                    name: name.to_string(),
                    source,
                }
            })
        };
        Ok(Self {
            patches: counter(
                "opinionated_finalizer_patches_total",
                "Finalizer patch requests of the opinionated wrappers, by operation and result.",
                &["kind", "operation", "result"],
            )?,
            conflicts: counter(
                "opinionated_finalizer_conflicts_total",
                "Finalizer patches refused with 409 Conflict (the object changed meanwhile).",
                &["kind"],
            )?,
        })
    }

    /// The process-wide collectors for `namespace`, registered into `registry`; registering
    /// twice is harmless.
    pub fn register(registry: &Registry, namespace: Option<&str>) -> Result<Self, MetricsError> {
        static SHARED: OnceLock<Mutex<HashMap<String, FinalizerMetrics>>> = OnceLock::new();
        let metrics = {
            let mut shared = SHARED
                .get_or_init(Mutex::default)
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let key = namespace.unwrap_or("").to_string();
            match shared.get(&key) {
                Some(metrics) => metrics.clone(),
                None => {
                    let metrics = Self::unregistered(namespace)?;
                    shared.insert(key, metrics.clone());
                    metrics
                }
            }
        };
        let collectors: [(&str, Box<dyn prometheus::core::Collector>); 2] = [
            (
                "opinionated_finalizer_patches_total",
                Box::new(metrics.patches.clone()),
            ),
            (
                "opinionated_finalizer_conflicts_total",
                Box::new(metrics.conflicts.clone()),
            ),
        ];
        for (name, collector) in collectors {
            match registry.register(collector) {
                Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
                Err(source) => {
                    return Err(MetricsError {
                        name: name.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(metrics)
    }

    /// Both collectors, for a registry of the caller's choosing (an app's
    /// `metric_collectors()`); clones share their counts with `self`.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.patches.clone()),
            Box::new(self.conflicts.clone()),
        ]
    }

    /// Patches of `kind` with `result` for `operation` so far.
    pub fn patches(&self, kind: &str, operation: &str, result: &str) -> u64 {
        self.patches
            .with_label_values(&[kind, operation, result])
            .get()
    }

    /// Conflicts met by patches of `kind` so far.
    pub fn conflicts(&self, kind: &str) -> u64 {
        self.conflicts.with_label_values(&[kind]).get()
    }

    fn patch_counter(&self, kind: &str, operation: &str, result: &str) -> IntCounter {
        self.patches.with_label_values(&[kind, operation, result])
    }
}

/// Collectors registered nowhere, for wrappers configured without metrics.
#[allow(clippy::expect_used)] // Fixed, valid metric names and no prefix: construction cannot fail.
pub(crate) fn default_metrics() -> FinalizerMetrics {
    static DEFAULT: OnceLock<FinalizerMetrics> = OnceLock::new();
    DEFAULT
        .get_or_init(|| FinalizerMetrics::unregistered(None).expect("valid metric names"))
        .clone()
}

/// Changes the finalizer list of objects of one kind; see the [module docs](self).
#[derive(Clone)]
pub(crate) struct FinalizerPatcher {
    client: Client,
    resource: ApiResource,
    retry: ConflictRetry,
    metrics: FinalizerMetrics,
}

impl FinalizerPatcher {
    pub(crate) fn new(
        client: Client,
        resource: ApiResource,
        retry: ConflictRetry,
        metrics: FinalizerMetrics,
    ) -> Self {
        Self {
            client,
            resource,
            retry,
            metrics,
        }
    }

    fn api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &self.resource),
            None => Api::all_with(self.client.clone(), &self.resource),
        }
    }

    /// Applies `change` to the finalizers of the object whose metadata is `meta` (see the
    /// [module docs](self)). `trusted`: `meta` may be used for the first attempt (the
    /// resourceVersion precondition makes that safe); otherwise the object is read first.
    pub(crate) async fn apply(
        &self,
        ctx: &HandlerContext,
        meta: &ObjectMeta,
        trusted: bool,
        change: FinalizerChange<'_>,
    ) -> Result<PatchOutcome, FinalizerPatchError> {
        let key = ObjectKey {
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        };
        let span = tracing::info_span!(
            "opinionated-finalizer-patch",
            kind = %self.resource.kind,
            namespace = key.namespace.as_deref().unwrap_or(""),
            name = %key.name,
            operation = change.operation(),
            add = change.add.unwrap_or(""),
            remove = ?change.remove,
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
            error = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let result = self
            .apply_with_retries(ctx, meta, trusted, &key, change, &span)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(outcome) => {
                span.record("outcome", tracing::field::debug(outcome));
            }
            Err(error) => {
                span.record("error", tracing::field::display(error));
                span.record("otel.status_code", "ERROR");
            }
        }
        result
    }

    async fn apply_with_retries(
        &self,
        ctx: &HandlerContext,
        known: &ObjectMeta,
        trusted: bool,
        key: &ObjectKey,
        change: FinalizerChange<'_>,
        span: &tracing::Span,
    ) -> Result<PatchOutcome, FinalizerPatchError> {
        let api = self.api(key.namespace.as_deref());
        let kind = self.resource.kind.as_str();
        let operation = change.operation();
        let uid = known.uid.clone();
        let mut current: Option<ObjectMeta> =
            (trusted && known.resource_version.is_some()).then(|| known.clone());
        let mut conflicts = 0u32;
        loop {
            let meta = match current.take() {
                Some(meta) => meta,
                None => match api.get_opt(&key.name).await {
                    Ok(Some(fresh)) if uid.is_none() || fresh.metadata.uid == uid => fresh.metadata,
                    Ok(_) => return Ok(PatchOutcome::Gone),
                    Err(source) => {
                        return Err(FinalizerPatchError::Read {
                            kind: kind.to_string(),
                            object: key.clone(),
                            source,
                        });
                    }
                },
            };
            let list = meta.finalizers.as_deref().unwrap_or_default();
            let next = match plan_finalizers(list, change, meta.deletion_timestamp.is_some()) {
                ListPlan::Set(next) => next,
                ListPlan::Unchanged => return Ok(PatchOutcome::Unchanged),
                ListPlan::BlockedByDeletion => return Ok(PatchOutcome::BlockedByDeletion),
            };
            let patch = finalizer_patch(meta.resource_version.as_deref(), &next);
            span.record("attempts", conflicts + 1);
            match api
                .patch(
                    &key.name,
                    &PatchParams::default(),
                    &Patch::<()>::Json(patch),
                )
                .await
            {
                Ok(patched) => {
                    self.metrics.patch_counter(kind, operation, "success").inc();
                    tracing::debug!(finalizers = ?next, "finalizers patched");
                    return Ok(PatchOutcome::Patched(Box::new(patched.metadata)));
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    self.metrics
                        .patch_counter(kind, operation, "conflict")
                        .inc();
                    self.metrics.conflicts.with_label_values(&[kind]).inc();
                    if conflicts >= self.retry.retries {
                        return Err(FinalizerPatchError::Conflict {
                            kind: kind.to_string(),
                            object: key.clone(),
                            attempts: conflicts + 1,
                        });
                    }
                    let delay = self.retry.delay(conflicts);
                    conflicts += 1;
                    tracing::debug!(?delay, conflicts, "finalizer patch conflicted; re-reading");
                    if !backoff(ctx, delay).await {
                        return Err(FinalizerPatchError::Cancelled {
                            kind: kind.to_string(),
                            object: key.clone(),
                        });
                    }
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Ok(PatchOutcome::Gone);
                }
                Err(source) => {
                    self.metrics.patch_counter(kind, operation, "error").inc();
                    return Err(FinalizerPatchError::Patch {
                        kind: kind.to_string(),
                        object: key.clone(),
                        source,
                    });
                }
            }
        }
    }
}

/// Waits `delay`; false when the handler context was cancelled first.
async fn backoff(ctx: &HandlerContext, delay: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = ctx.cancelled() => false,
    }
}

/// The RFC 6902 patch that sets the finalizer list, with `resource_version` as the precondition
/// (see the [module docs](self#patches)).
fn finalizer_patch(resource_version: Option<&str>, finalizers: &[String]) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
    json_patch::Patch(vec![
        PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: serde_json::json!(resource_version),
        }),
        PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "finalizers"]),
            value: serde_json::json!(finalizers),
        }),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn the_conflict_backoff_ends_early_when_the_context_is_cancelled() {
        let stop = CancellationToken::new();
        let ctx = HandlerContext::new("widgets", stop.clone());
        let started = tokio::time::Instant::now();
        assert!(backoff(&ctx, Duration::from_millis(50)).await, "waited");
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        let cancel = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.cancel();
        });
        assert!(!backoff(&ctx, Duration::from_secs(3600)).await, "cancelled");
        assert!(started.elapsed() < Duration::from_secs(2));
        cancel.await.expect("cancel task");
    }

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_string()).collect()
    }

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.dev".into(),
            version: "v1".into(),
            api_version: "example.dev/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    #[test]
    fn default_names_follow_the_go_sdk_pattern_and_drop_an_empty_group() {
        let names = FinalizerNames::defaults(&widgets()).expect("short enough");
        assert_eq!(names.finalizer(), "operator.v1.Widget.example.dev");
        assert_eq!(names.in_progress(), "wip.v1.Widget.example.dev");
        let configmaps = ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        };
        assert_eq!(default_finalizer(&configmaps), "operator.v1.ConfigMap");
    }

    #[test]
    fn a_name_longer_than_63_characters_is_rejected_with_its_length() {
        let long = format!("operator.v1.Widget.{}", "a".repeat(50));
        let err = FinalizerNames::new(long.clone(), "wip").expect_err("too long");
        assert_eq!(
            err,
            FinalizerNameError::TooLong {
                finalizer: long.clone(),
                length: 69
            }
        );
        assert!(err.to_string().contains(&long), "{err}");
        assert!(err.to_string().contains("69"), "{err}");
        assert!(validate_finalizer(&"x".repeat(63)).is_ok());
        assert_eq!(validate_finalizer(""), Err(FinalizerNameError::Empty));
        assert_eq!(
            FinalizerNames::new("same", "same"),
            Err(FinalizerNameError::Same("same".into()))
        );
        let long_group = ApiResource {
            group: "a-very-long-group-name.of-an-example.kubeapp.dev".into(),
            ..widgets()
        };
        assert!(matches!(
            FinalizerNames::defaults(&long_group),
            Err(FinalizerNameError::TooLong { .. })
        ));
    }

    #[test]
    fn adding_appends_and_keeps_other_finalizers_in_order() {
        let change = FinalizerChange {
            add: Some("ours"),
            remove: &[],
        };
        assert_eq!(
            plan_finalizers(&list(&["b", "a"]), change, false),
            ListPlan::Set(list(&["b", "a", "ours"]))
        );
        assert_eq!(
            plan_finalizers(&list(&["b", "ours", "a"]), change, false),
            ListPlan::Unchanged
        );
    }

    #[test]
    fn replacing_the_in_progress_finalizer_keeps_the_others_in_order() {
        let change = FinalizerChange {
            add: Some("ours"),
            remove: &["wip"],
        };
        assert_eq!(
            plan_finalizers(&list(&["x", "wip", "y"]), change, false),
            ListPlan::Set(list(&["x", "y", "ours"]))
        );
    }

    #[test]
    fn removing_keeps_the_others_in_order_and_is_a_no_op_when_absent() {
        let change = FinalizerChange {
            add: None,
            remove: &["ours", "wip"],
        };
        assert_eq!(
            plan_finalizers(&list(&["x", "ours", "y", "wip"]), change, true),
            ListPlan::Set(list(&["x", "y"]))
        );
        assert_eq!(
            plan_finalizers(&list(&["x", "y"]), change, true),
            ListPlan::Unchanged
        );
        assert_eq!(plan_finalizers(&[], change, false), ListPlan::Unchanged);
    }

    #[test]
    fn nothing_is_added_or_swapped_on_an_object_being_deleted() {
        let swap = FinalizerChange {
            add: Some("ours"),
            remove: &["wip"],
        };
        assert_eq!(
            plan_finalizers(&list(&["wip"]), swap, true),
            ListPlan::BlockedByDeletion
        );
        // Already there: removing the in-progress one is fine.
        assert_eq!(
            plan_finalizers(&list(&["ours", "wip"]), swap, true),
            ListPlan::Set(list(&["ours"]))
        );
    }

    #[test]
    fn conflict_backoff_doubles_up_to_the_maximum() {
        let retry = ConflictRetry::default();
        let delays: Vec<u128> = (0..6).map(|n| retry.delay(n).as_millis()).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1000]);
    }

    #[test]
    fn registering_the_finalizer_metrics_twice_is_harmless() {
        let registry = Registry::new();
        let first = FinalizerMetrics::register(&registry, Some("fin_twice")).expect("first");
        let second = FinalizerMetrics::register(&registry, Some("fin_twice")).expect("second");
        first.conflicts.with_label_values(&["k"]).inc();
        second.conflicts.with_label_values(&["k"]).inc();
        assert_eq!(first.conflicts("k"), 2);
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        assert!(
            names.contains(&"fin_twice_opinionated_finalizer_conflicts_total".to_string()),
            "{names:?}"
        );
    }

    #[test]
    fn the_patch_sets_the_list_with_the_resource_version_as_precondition() {
        let patch = finalizer_patch(Some("42"), &["theirs".to_string(), "ours".to_string()]);
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            serde_json::json!([
                { "op": "replace", "path": "/metadata/resourceVersion", "value": "42" },
                { "op": "add", "path": "/metadata/finalizers", "value": ["theirs", "ours"] },
            ])
        );
    }
}
