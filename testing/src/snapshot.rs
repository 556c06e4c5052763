//! The end state of a run, comparable between runs: the scenario's objects, listed in the run's
//! namespace, with what the apiserver assigns (uids, resourceVersions, timestamps, managed
//! fields) removed, so that two runs that did the same things compare equal.

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

/// A user's normalisation of an object before comparison (e.g. dropping a field that holds a
/// generated name).
pub type Normalize = dyn Fn(&mut Value) + Send + Sync;

/// Objects by `kind/name`, normalised.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot(pub BTreeMap<String, Value>);

/// Fields of `metadata` the apiserver assigns or that differ between runs by construction.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "generation",
    "namespace",
    "selfLink",
];

/// Condition fields that are times.
const CONDITION_TIMES: &[&str] = &[
    "lastTransitionTime",
    "lastUpdateTime",
    "lastProbeTime",
    "lastHeartbeatTime",
];

impl Snapshot {
    /// Lists `resources` in `namespace` (with `selector`, if any) and normalises each object.
    pub async fn take(
        client: &kube::Client,
        namespace: &str,
        resources: &[(ApiResource, Option<String>)],
        normalize: Option<&Normalize>,
    ) -> Result<Self, kube::Error> {
        let mut objects = BTreeMap::new();
        for (resource, selector) in resources {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
            let mut params = ListParams::default();
            params.label_selector.clone_from(selector);
            for object in api.list(&params).await?.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                let mut value = serde_json::to_value(&object).unwrap_or(Value::Null);
                normalize_server_fields(&mut value);
                if let Some(normalize) = normalize {
                    normalize(&mut value);
                }
                objects.insert(format!("{}/{name}", resource.kind), value);
            }
        }
        Ok(Self(objects))
    }

    /// How `self` (a run under faults) differs from `reference`, one line per difference.
    pub fn diff(&self, reference: &Self) -> Vec<String> {
        let mut differences = Vec::new();
        for (key, expected) in &reference.0 {
            match self.0.get(key) {
                None => differences.push(format!("{key}: missing (the fault-free run has it)")),
                Some(found) => diff_values(key, expected, found, &mut differences),
            }
        }
        for key in self.0.keys().filter(|key| !reference.0.contains_key(*key)) {
            differences.push(format!(
                "{key}: present (the fault-free run does not have it)"
            ));
        }
        differences
    }
}

/// Removes what the apiserver assigns: server metadata, owner references' uids, and the times
/// of `status.conditions`.
fn normalize_server_fields(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_METADATA {
            metadata.remove(*field);
        }
        if let Some(owners) = metadata
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for owner in owners.iter_mut().filter_map(Value::as_object_mut) {
                owner.remove("uid");
            }
        }
        if metadata
            .get("annotations")
            .is_some_and(|a| a.as_object().is_some_and(|a| a.is_empty()))
        {
            metadata.remove("annotations");
        }
    }
    if let Some(conditions) = object
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            for field in CONDITION_TIMES {
                condition.remove(*field);
            }
        }
    }
}

/// The differing leaves of two values, as `path: fault-free X, this run Y`.
fn diff_values(path: &str, expected: &Value, found: &Value, out: &mut Vec<String>) {
    match (expected, found) {
        (Value::Object(expected), Value::Object(found)) => {
            for (key, value) in expected {
                let inner = format!("{path}.{key}");
                match found.get(key) {
                    Some(other) => diff_values(&inner, value, other, out),
                    None => out.push(format!("{inner}: fault-free {value}, this run absent")),
                }
            }
            for (key, value) in found.iter().filter(|(key, _)| !expected.contains_key(*key)) {
                out.push(format!("{path}.{key}: fault-free absent, this run {value}"));
            }
        }
        _ if expected == found => {}
        _ => out.push(format!("{path}: fault-free {expected}, this run {found}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_fields_and_condition_times_do_not_count() {
        let mut a = json!({
            "metadata": {"name": "x", "uid": "1", "resourceVersion": "5", "generation": 2,
                "ownerReferences": [{"name": "o", "uid": "u1"}]},
            "status": {"conditions": [{"type": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        });
        let mut b = json!({
            "metadata": {"name": "x", "uid": "2", "resourceVersion": "9", "generation": 3,
                "ownerReferences": [{"name": "o", "uid": "u2"}]},
            "status": {"conditions": [{"type": "Ready", "lastTransitionTime": "2026-02-02T00:00:00Z"}]}
        });
        normalize_server_fields(&mut a);
        normalize_server_fields(&mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn a_diff_names_each_differing_leaf_and_each_missing_or_extra_object() {
        let reference = Snapshot(BTreeMap::from([
            (
                "ConfigMap/a".to_owned(),
                json!({"data": {"k": "1", "j": "2"}}),
            ),
            ("ConfigMap/b".to_owned(), json!({})),
        ]));
        let run = Snapshot(BTreeMap::from([
            (
                "ConfigMap/a".to_owned(),
                json!({"data": {"k": "0", "j": "2"}}),
            ),
            ("ConfigMap/c".to_owned(), json!({})),
        ]));
        assert_eq!(
            run.diff(&reference),
            [
                r#"ConfigMap/a.data.k: fault-free "1", this run "0""#,
                "ConfigMap/b: missing (the fault-free run has it)",
                "ConfigMap/c: present (the fault-free run does not have it)",
            ]
        );
        assert!(reference.diff(&reference).is_empty());
    }
}
