//! The JSON patch that changes a finalizer list, sent with conflict retries.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use tracing::Instrument;

use crate::handler::DynContext;
use crate::object::ObjectKey;
use crate::own_writes::WrittenPart;

use super::*;

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
    #[error("reading {kind} {object} to patch its finalizers")]
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
    #[error("patching the finalizers of {kind} {object}")]
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
    pub(crate) fn delay(&self, retry: u32) -> Duration {
        self.base_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay)
    }
}

/// Changes the finalizer list of objects of one kind; see the [module docs](super).
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
    /// [module docs](super)). `trusted`: `meta` may be used for the first attempt (the
    /// resourceVersion precondition makes that safe); otherwise the object is read first.
    pub(crate) async fn apply(
        &self,
        ctx: &DynContext,
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
        ctx: &DynContext,
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
        // The list (and deletion state) a patch refused with HTTP 422 was computed from, and the
        // refusal: a 422 says no more than "the patch did not apply" (a failed `test` has no
        // message of its own), so the next read decides whether the copy was stale.
        let mut refused: Option<(Vec<String>, bool, Box<kube::core::Status>)> = None;
        loop {
            // Whether this attempt works from the caller's copy rather than a fresh read.
            let from_known = current.is_some();
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
            if let Some((tested, deleting, status)) = refused.take()
                && tested == list
                && deleting == meta.deletion_timestamp.is_some()
            {
                // Nothing the patch depended on changed: the refusal was not about a stale copy.
                self.metrics.patch_counter(kind, operation, "error").inc();
                return Err(FinalizerPatchError::Patch {
                    kind: kind.to_string(),
                    object: key.clone(),
                    source: kube::Error::Api(status),
                });
            }
            let next = match plan_finalizers(list, change, meta.deletion_timestamp.is_some()) {
                ListPlan::Set(next) => next,
                ListPlan::Unchanged => return Ok(PatchOutcome::Unchanged),
                ListPlan::BlockedByDeletion => return Ok(PatchOutcome::BlockedByDeletion),
            };
            let patch = finalizer_patch(uid.as_deref(), list, &next);
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
                    if let Some(own) = ctx.own_writes() {
                        own.record(&patched.metadata, WrittenPart::Finalizers);
                    }
                    return Ok(PatchOutcome::Patched(Box::new(patched.metadata)));
                }
                Err(kube::Error::Api(status)) if status.code == 409 || status.code == 422 => {
                    if status.code == 422 {
                        refused = Some((list.to_vec(), meta.deletion_timestamp.is_some(), status));
                    }
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
                    // A refusal of the caller's copy only says that copy was old: re-read at
                    // once. One of a fresh read is a race with another writer: back off.
                    let delay = if from_known {
                        Duration::ZERO
                    } else {
                        self.retry.delay(conflicts)
                    };
                    conflicts += 1;
                    tracing::debug!(?delay, conflicts, "finalizer patch conflicted; re-reading");
                    if !delay.is_zero() && !backoff(ctx, delay).await {
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
pub(crate) async fn backoff(ctx: &DynContext, delay: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = ctx.cancelled() => false,
    }
}

/// The RFC 6902 patch that sets the finalizer list to `finalizers`, on the condition that the
/// object is still the incarnation `uid` and its list is still `current` (see the
/// [module docs](self#patches)).
pub(crate) fn finalizer_patch(
    uid: Option<&str>,
    current: &[String],
    finalizers: &[String],
) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, TestOperation};
    let mut operations = Vec::with_capacity(3);
    if let Some(uid) = uid {
        operations.push(PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["metadata", "uid"]),
            value: serde_json::json!(uid),
        }));
    }
    operations.push(PatchOperation::Test(TestOperation {
        path: PointerBuf::from_tokens(["metadata", "finalizers"]),
        // An empty list is stored as no list at all; `null` tests for that (kube-apiserver's
        // JSON patch treats a missing member as equal to `null`).
        value: if current.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::json!(current)
        },
    }));
    operations.push(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(["metadata", "finalizers"]),
        value: serde_json::json!(finalizers),
    }));
    json_patch::Patch(operations)
}
