//! Status writes through the status subresource, skipped when nothing changed.

use std::fmt::Debug;

use kube::Resource;
use kube::core::object::HasStatus;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::body::drop_nulls;
use super::error::ApplyError;
use super::scope::KindScope;
use super::server_side::{Applier, Target, send_apply};

/// The outcome of [`StatusWriter::write`].
#[derive(Clone, Debug)]
pub enum StatusWrite<K> {
    /// The status differed and was written; the object as the API server returned it.
    Written(K),
    /// The status equals the object's current status (ignoring condition timestamps); no request
    /// was sent.
    Unchanged,
}

impl<K> StatusWrite<K> {
    /// Whether a request was sent.
    pub fn is_written(&self) -> bool {
        matches!(self, Self::Written(_))
    }
}

/// Writes the status of one object through its status subresource, only when it changed.
///
/// Made by [`Applier::status`]. The new status is compared with the status of the object the
/// writer was made from (usually the cached object the handler got), ignoring every
/// `lastTransitionTime` in a `conditions` list anywhere in the status, and `null` fields (a
/// `None` is not applied, so it is no change either): a condition whose status
/// did not change keeps its time (see [`conditions::set`](super::conditions::set)), and a
/// condition rebuilt with a fresh time is not a change worth a write.
///
/// The write is a server-side apply of `{status: ..}` on `/status` under the applier's field
/// manager (forced on a conflict, like [`Apply`](super::Apply)), not a merge patch: with the
/// conditions list declared a map keyed by `type`
/// ([`conditions::schema`](super::conditions::schema)), conditions other managers set survive,
/// and a status field this manager stops declaring is removed.
#[must_use = "a StatusWriter does nothing until `write` is awaited"]
pub struct StatusWriter<K: Resource> {
    applier: Applier,
    object: K,
    dyntype: K::DynamicType,
}

impl Applier {
    /// A status writer for `object` (a `#[derive(CustomResource)]` type with `status = ..`), as
    /// this applier's field manager.
    pub fn status<K: Resource<DynamicType = ()> + Clone>(&self, object: &K) -> StatusWriter<K> {
        StatusWriter {
            applier: self.clone(),
            object: object.clone(),
            dyntype: (),
        }
    }
}

impl<K> StatusWriter<K>
where
    K: Resource + HasStatus + Serialize + DeserializeOwned + Clone + Debug,
    K::Status: Serialize,
    K::Scope: KindScope,
{
    /// Writes `status` unless it equals the object's current status (ignoring condition
    /// timestamps).
    ///
    /// # Errors
    ///
    /// [`ApplyError::MissingName`] / [`ApplyError::MissingNamespace`] for an object that cannot
    /// be addressed, [`ApplyError::Serialize`], and [`ApplyError::Api`] for a refused request
    /// (e.g. 404 when the object is gone or the kind has no status subresource).
    pub async fn write(self, status: K::Status) -> Result<StatusWrite<K>, ApplyError> {
        let target = Target::of::<K>(&self.object, &self.dyntype)?;
        let serialize = |value: Option<&K::Status>| {
            serde_json::to_value(value).map_err(|source| ApplyError::Serialize {
                object: target.describe(),
                source,
            })
        };
        // Nulls are compared as they are applied: not at all (see `drop_nulls`).
        let mut current = serialize(self.object.status())?;
        let mut new = serialize(Some(&status))?;
        drop_nulls(&mut current);
        drop_nulls(&mut new);
        if same_ignoring_timestamps(&current, &new) {
            tracing::debug!(object = %target.describe(), "status unchanged; not written");
            return Ok(StatusWrite::Unchanged);
        }
        let mut metadata = Map::new();
        metadata.insert("name".into(), Value::String(target.name.clone()));
        if let Some(ns) = &target.namespace {
            metadata.insert("namespace".into(), Value::String(ns.clone()));
        }
        let body = serde_json::json!({
            "apiVersion": target.api_version,
            "kind": target.kind,
            "metadata": metadata,
            "status": new,
        });
        let url = K::url_path(&self.dyntype, target.namespace.as_deref());
        let written: K = send_apply(
            self.applier.client(),
            &url,
            Some("status"),
            &target,
            self.applier.field_manager(),
            &body,
            "status write",
        )
        .await?;
        self.applier.note_status_write(
            &K::group(&self.dyntype),
            &K::kind(&self.dyntype),
            written.meta(),
        );
        Ok(StatusWrite::Written(written))
    }
}

impl Applier {
    /// Applies `status`, the status fields this manager owns as JSON, to `object`'s status
    /// subresource (server-side apply under this field manager, forced); returns the object as
    /// stored. For code that owns some status fields of a kind whose Rust status type it does not
    /// know (a component graph, a phase machine); deciding whether anything changed is the
    /// caller's, as it knows which fields are its own. Typed handlers use
    /// [`status`](Self::status).
    ///
    /// # Errors
    ///
    /// [`ApplyError::MissingName`] for an object without a name, [`ApplyError::Api`] for a
    /// refused request.
    pub async fn apply_status_fields<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        status: Value,
    ) -> Result<kube::api::DynamicObject, ApplyError> {
        let meta = object.meta();
        let kind = K::kind(&()).into_owned();
        let name = meta
            .name
            .clone()
            .ok_or_else(|| ApplyError::MissingName { kind: kind.clone() })?;
        let resource = kube::api::ApiResource::erase::<K>(&());
        let api: kube::Api<kube::api::DynamicObject> = match meta.namespace.as_deref() {
            Some(namespace) => {
                kube::Api::namespaced_with(self.client().clone(), namespace, &resource)
            }
            None => kube::Api::all_with(self.client().clone(), &resource),
        };
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": kind,
            "metadata": {"name": name},
            "status": status,
        });
        let params = kube::api::PatchParams::apply(self.field_manager()).force();
        let written = api
            .patch_status(&name, &params, &kube::api::Patch::Apply(&body))
            .await
            .map_err(|source| ApplyError::Api {
                operation: "status write",
                object: super::error::describe(&kind, meta.namespace.as_deref(), &name),
                field_manager: self.field_manager().to_string(),
                source: Box::new(source),
            })?;
        self.note_status_write(&K::group(&()), &kind, &written.metadata);
        Ok(written)
    }
}

/// Whether two serialized statuses are equal once condition timestamps are removed.
pub(crate) fn same_ignoring_timestamps(a: &Value, b: &Value) -> bool {
    if a == b {
        return true;
    }
    let (mut a, mut b) = (a.clone(), b.clone());
    strip_condition_timestamps(&mut a);
    strip_condition_timestamps(&mut b);
    a == b
}

/// Removes `lastTransitionTime` from every entry of every `conditions` list in `value`.
fn strip_condition_timestamps(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key == "conditions"
                    && let Value::Array(conditions) = child
                {
                    for condition in conditions.iter_mut() {
                        if let Value::Object(condition) = condition {
                            condition.remove("lastTransitionTime");
                        }
                    }
                }
                strip_condition_timestamps(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_condition_timestamps),
        _ => {}
    }
}
