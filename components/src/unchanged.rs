//! Skipping applies that would change nothing, so a steady-state reconcile sends no request.
//!
//! Every rendered object is marked, before it is applied, with the annotation
//! `APPLIED_ANNOTATION`: a fingerprint (SHA-256, 16 hex digits) of the object as rendered. An
//! apply is skipped when the cached copy of the child (from the `owns` informer, through
//! `Context::cached`) both
//!
//! - carries the same fingerprint: what we applied last is what we render now, so no field we
//!   used to set has been dropped from the render (server-side apply would remove it), and
//! - contains every field of the object to apply with the same value (`covers`): nobody has
//!   changed a field we own since (a drift is re-applied).
//!
//! Anything else is applied, as are objects of kinds without a cache: the skip is an
//! optimization, never a reason not to write. A value the apiserver normalizes (`0.5` CPU stored
//! as `500m`) never matches, so such an object is applied every time, as without the skip. A
//! cache that lags our own last apply may let one apply be skipped; the child's own watch event
//! then triggers the next reconcile, which sees it.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The annotation holding the fingerprint of the object as rendered.
pub(crate) const APPLIED_ANNOTATION: &str = "components.kubeapp.dev/applied";

/// The fingerprint of `rendered` (without the annotation itself).
pub(crate) fn fingerprint(rendered: &Value) -> String {
    let mut unmarked = rendered.clone();
    if let Some(annotations) = unmarked["metadata"]["annotations"].as_object_mut() {
        annotations.remove(APPLIED_ANNOTATION);
    }
    let digest = Sha256::digest(unmarked.to_string().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Adds the fingerprint annotation to `rendered`.
pub fn mark(rendered: &mut Value) {
    let print = fingerprint(rendered);
    let metadata = &mut rendered["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = Value::Object(serde_json::Map::new());
    }
    metadata["annotations"][APPLIED_ANNOTATION] = Value::String(print);
}

/// Whether applying `desired` (marked) over `cached` would change nothing; see the
/// [module docs](self).
pub(crate) fn unchanged(desired: &Value, cached: &Value) -> bool {
    let print = |object: &Value| object["metadata"]["annotations"][APPLIED_ANNOTATION].clone();
    !print(desired).is_null() && print(desired) == print(cached) && covers(cached, desired)
}

/// Whether `whole` has every field of `part` with the same value (lists element by element, of
/// the same length; a `null` in `part` matches an absent field).
pub(crate) fn covers(whole: &Value, part: &Value) -> bool {
    match (part, whole) {
        (Value::Object(p), Value::Object(w)) => p.iter().all(|(key, value)| match w.get(key) {
            Some(present) => covers(present, value),
            None => value.is_null(),
        }),
        (Value::Array(p), Value::Array(w)) => {
            p.len() == w.len() && p.iter().zip(w).all(|(a, b)| covers(b, a))
        }
        _ => part == whole,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(port: i64) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"ports": [{"port": port}], "clusterIP": null}});
        mark(&mut object);
        object
    }

    /// As the apiserver stores it: defaults added, our annotation kept.
    fn stored(desired: &Value) -> Value {
        let mut object = desired.clone();
        object["metadata"]["uid"] = "u1".into();
        object["spec"]["ports"][0]["protocol"] = "TCP".into();
        object["spec"]["clusterIP"] = "10.0.0.1".into();
        object["spec"]["ports"][0]["targetPort"] = 80.into();
        object
    }

    #[test]
    fn a_stored_copy_with_defaults_added_is_unchanged() {
        let desired = service(80);
        let mut cached = stored(&desired);
        cached["spec"]["clusterIP"] = Value::Null;
        cached["spec"]
            .as_object_mut()
            .map(|s| s.remove("clusterIP"));
        assert!(unchanged(&desired, &cached));
    }

    #[test]
    fn drift_a_new_render_or_a_missing_mark_is_applied() {
        let desired = service(80);
        let mut drifted = stored(&desired);
        drifted["spec"]["ports"][0]["port"] = 81.into();
        assert!(!unchanged(&desired, &drifted), "someone changed our field");
        assert!(
            !unchanged(&service(81), &stored(&desired)),
            "a new render has a new fingerprint"
        );
        let mut unmarked = stored(&desired);
        unmarked["metadata"]["annotations"] = json!({});
        assert!(!unchanged(&desired, &unmarked));
    }

    #[test]
    fn a_dropped_field_changes_the_fingerprint() {
        let mut with_label = json!({"metadata": {"name": "a", "labels": {"tier": "web"}}});
        let mut without = json!({"metadata": {"name": "a"}});
        assert!(
            covers(&with_label, &without),
            "the old object has every field of the new one"
        );
        mark(&mut with_label);
        mark(&mut without);
        assert!(
            !unchanged(&without, &with_label),
            "yet the label must be removed by an apply"
        );
        assert_eq!(fingerprint(&with_label), fingerprint(&with_label.clone()));
    }
}
