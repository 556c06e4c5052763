//! Whether two versions of one object differ in what a handler's `update` is about.
//!
//! For kinds with `metadata.generation` that is the generation: the API server bumps it on every
//! spec change and on nothing else (status, labels, annotations and finalizers keep it). Kinds
//! without a generation (ConfigMap, Secret, and other kinds without a spec) have no such signal,
//! so every change counts except the bookkeeping our own finalizer patch causes: the two versions
//! are compared as JSON with `metadata.finalizers`, `metadata.resourceVersion` and
//! `metadata.managedFields` left out. That serializes both objects, which is why the wrappers only
//! ask when the generation cannot answer.

use crate::object::KubeObject;

/// Whether the kind of `object` tracks spec changes in `metadata.generation`.
pub(crate) fn has_generation(object: &dyn KubeObject) -> bool {
    object.metadata().generation.is_some()
}

/// Whether `new` differs from `old` in anything but what a finalizer patch changes: the
/// generation for kinds that have one, otherwise the content (see the [module docs](self)).
pub(crate) fn changed(old: &dyn KubeObject, new: &dyn KubeObject) -> bool {
    if has_generation(old) && has_generation(new) {
        return old.metadata().generation != new.metadata().generation;
    }
    match (comparable(old), comparable(new)) {
        (Ok(old), Ok(new)) => old != new,
        (Err(error), _) | (_, Err(error)) => {
            // Never expected (the objects were deserialized from JSON); counting it as a change
            // delivers an update too many rather than losing one.
            tracing::warn!(%error, "object not serializable for comparison; treated as changed");
            true
        }
    }
}

/// The object as JSON without the fields a finalizer patch changes.
fn comparable(object: &dyn KubeObject) -> serde_json::Result<serde_json::Value> {
    let mut json = object.to_json()?;
    if let Some(meta) = json
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        for field in ["finalizers", "resourceVersion", "managedFields"] {
            meta.remove(field);
        }
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(rv: &str, finalizers: &[&str], value: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.resource_version = Some(rv.into());
        cm.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_string()).collect());
        cm.data = Some([("k".to_string(), value.to_string())].into());
        cm
    }

    #[test]
    fn without_a_generation_only_finalizer_bookkeeping_is_no_change() {
        let base = cm("1", &[], "a");
        assert!(!changed(&base, &cm("2", &["ours"], "a")));
        assert!(changed(&base, &cm("2", &["ours"], "b")));
        let mut labelled = cm("2", &[], "a");
        labelled.metadata.labels = Some([("l".to_string(), "v".to_string())].into());
        assert!(changed(&base, &labelled));
    }

    #[test]
    fn with_a_generation_only_the_generation_counts() {
        let mut old = cm("1", &[], "a");
        old.metadata.generation = Some(1);
        let mut new = cm("2", &["ours"], "b");
        new.metadata.generation = Some(1);
        assert!(!changed(&old, &new));
        new.metadata.generation = Some(2);
        assert!(changed(&old, &new));
    }
}
