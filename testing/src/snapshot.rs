//! The end state of a run, comparable between runs: the scenario's objects, listed in the run's
//! namespace, with what the apiserver assigns (uids, resourceVersions, timestamps, managed
//! fields) removed, so that two runs that did the same things compare equal. Also removed: the
//! annotation in which kubeapp components record a digest of what they applied (it covers the
//! owner's uid), and the `kube-root-ca.crt` ConfigMap a cluster puts in every namespace; the
//! run's namespace, wherever a string holds it, reads `<namespace>`; a name generated from
//! `generateName` reads `<prefix><generated>` (two such objects are `name` and `name#2`); and an
//! object whose every owner is of an observed kind and gone is left out (the garbage collector
//! deletes it in its own time).

use std::collections::{BTreeMap, BTreeSet};

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

/// Annotations that digest run-specific values (an applied object's owner uid and namespace):
/// kubeapp components' record of what it applied.
const RUN_SPECIFIC_ANNOTATIONS: &[&str] = &["components.kubeapp.dev/applied"];

/// Objects the cluster itself puts in every namespace, never the operator's: not compared.
const CLUSTER_OBJECTS: &[&str] = &["kube-root-ca.crt"];

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
        let mut objects = Vec::new();
        for (resource, selector) in resources {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
            let mut params = ListParams::default();
            params.label_selector.clone_from(selector);
            for object in api.list(&params).await?.items {
                objects.push((resource, object));
            }
        }
        // Owners the garbage collector judges by: the uids of every kind observed without a
        // selector (of a kind observed with one, the owner may just not be listed).
        let mut owners: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
        for (resource, _) in resources.iter().filter(|(_, selector)| selector.is_none()) {
            owners.insert((&resource.api_version, &resource.kind), BTreeSet::new());
        }
        for (resource, object) in &objects {
            if let (Some(uids), Some(uid)) = (
                owners.get_mut(&(resource.api_version.as_str(), resource.kind.as_str())),
                object.metadata.uid.as_deref(),
            ) {
                uids.insert(uid);
            }
        }
        let mut listed: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (resource, object) in &objects {
            let name = object.metadata.name.clone().unwrap_or_default();
            if CLUSTER_OBJECTS.contains(&name.as_str()) || awaits_collection(object, &owners) {
                continue;
            }
            let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
            // A list's items may come without their type: name it, for the normalize hook.
            if let Some(fields) = value.as_object_mut() {
                fields
                    .entry("apiVersion")
                    .or_insert_with(|| Value::String(resource.api_version.clone()));
                fields
                    .entry("kind")
                    .or_insert_with(|| Value::String(resource.kind.clone()));
            }
            normalize_server_fields(&mut value);
            replace_namespace(&mut value, namespace);
            if let Some(normalize) = normalize {
                normalize(&mut value);
            }
            let name = value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(&name)
                .to_owned();
            listed
                .entry(format!("{}/{name}", resource.kind))
                .or_default()
                .push(value);
        }
        Ok(Self::keyed(listed))
    }

    /// One key per object: objects that share a (normalised) name, such as two children
    /// generated from one `generateName`, are told apart as `kind/name#2`, `#3`, ... in the
    /// order of their content, so that the same objects key the same way in every run.
    fn keyed(listed: BTreeMap<String, Vec<Value>>) -> Self {
        let mut objects = BTreeMap::new();
        for (key, mut values) in listed {
            values.sort_by_cached_key(Value::to_string);
            for (index, value) in values.into_iter().enumerate() {
                let key = match index {
                    0 => key.clone(),
                    n => format!("{key}#{}", n + 1),
                };
                objects.insert(key, value);
            }
        }
        Self(objects)
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

/// Whether `object`'s every owner is of a kind in `owners` and gone from it: the garbage
/// collector deletes such an object, in its own time, so no end state should count it (a run
/// ends when the operator is quiescent, not when the collector is).
fn awaits_collection(
    object: &DynamicObject,
    owners: &BTreeMap<(&str, &str), BTreeSet<&str>>,
) -> bool {
    let references = object
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    !references.is_empty()
        && references.iter().all(|owner| {
            owners
                .get(&(owner.api_version.as_str(), owner.kind.as_str()))
                .is_some_and(|uids| !uids.contains(owner.uid.as_str()))
        })
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
        // A name the apiserver generated (from `generateName`) differs in every run: only its
        // prefix is the operator's.
        let generated = metadata
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|prefix| {
                metadata
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| name.starts_with(prefix) && name.len() > prefix.len())
            })
            .map(|prefix| format!("{prefix}<generated>"));
        if let Some(name) = generated {
            metadata.insert("name".to_owned(), Value::String(name));
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            for annotation in RUN_SPECIFIC_ANNOTATIONS {
                annotations.remove(*annotation);
            }
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
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

/// Replaces the run's namespace, wherever a string holds it (a status listing the objects it
/// made, a reference `namespace/name`), with `<namespace>`: runs differ in it by construction.
fn replace_namespace(value: &mut Value, namespace: &str) {
    match value {
        Value::String(text) if text.contains(namespace) => {
            *text = text.replace(namespace, "<namespace>");
        }
        Value::Array(items) => {
            for item in items {
                replace_namespace(item, namespace);
            }
        }
        Value::Object(fields) => {
            for field in fields.values_mut() {
                replace_namespace(field, namespace);
            }
        }
        _ => {}
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
        a["metadata"]["annotations"] = json!({"components.kubeapp.dev/applied": "1f"});
        b["metadata"]["annotations"] = json!({"components.kubeapp.dev/applied": "2e"});
        normalize_server_fields(&mut a);
        normalize_server_fields(&mut b);
        assert_eq!(a, b);
        assert!(a["metadata"].get("annotations").is_none(), "{a}");
    }

    #[test]
    fn generated_names_compare_by_prefix_and_a_second_one_is_an_object_of_its_own() {
        let child = |name: &str, value: &str| {
            let mut child = json!({"metadata": {"name": name, "generateName": "p1-"},
                "data": {"value": value}});
            normalize_server_fields(&mut child);
            child
        };
        let one = |name: &str| {
            Snapshot::keyed(BTreeMap::from([(
                "ConfigMap/p1-<generated>".to_owned(),
                vec![child(name, "v1")],
            )]))
        };
        assert_eq!(
            child("p1-x7k2q", "v1")["metadata"]["name"],
            "p1-<generated>"
        );
        assert!(one("p1-abcde").diff(&one("p1-x7k2q")).is_empty());
        let two = Snapshot::keyed(BTreeMap::from([(
            "ConfigMap/p1-<generated>".to_owned(),
            vec![child("p1-zzzzz", "v2"), child("p1-aaaaa", "v1")],
        )]));
        assert_eq!(
            two.diff(&one("p1-abcde")),
            ["ConfigMap/p1-<generated>#2: present (the fault-free run does not have it)"]
        );
    }

    #[test]
    fn an_object_whose_every_observed_owner_is_gone_awaits_the_collector() {
        let owned = |owners: Value| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "child", "ownerReferences": owners}}))
            .expect("an object")
        };
        let reference = |kind: &str, uid: &str| json!({"apiVersion": "example.dev/v1", "kind": kind, "name": "o", "uid": uid});
        let owners = BTreeMap::from([(("example.dev/v1", "Parent"), BTreeSet::from(["alive"]))]);
        assert!(awaits_collection(
            &owned(json!([reference("Parent", "gone")])),
            &owners
        ));
        assert!(!awaits_collection(
            &owned(json!([reference("Parent", "alive")])),
            &owners
        ));
        // One owner left, or an owner of a kind not observed: it stays.
        let two = json!([reference("Parent", "gone"), reference("Parent", "alive")]);
        assert!(!awaits_collection(&owned(two), &owners));
        assert!(!awaits_collection(
            &owned(json!([reference("Other", "x")])),
            &owners
        ));
        assert!(!awaits_collection(&owned(json!([])), &owners));
    }

    #[test]
    fn the_runs_namespace_is_a_placeholder_wherever_it_appears() {
        let mut status =
            json!({"objects": [{"namespace": "web-7-1", "ref": "web-7-1/cm"}], "n": 1});
        replace_namespace(&mut status, "web-7-1");
        assert_eq!(
            status,
            json!({"objects": [{"namespace": "<namespace>", "ref": "<namespace>/cm"}], "n": 1})
        );
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
