//! Conversion of `Template`s between `v1` (`spec.data`, a map) and `v2` (`spec.entries`, a
//! list), for the CRD's conversion webhook.
//!
//! [`converter`] is an sdk [`VersionConverter`], which handles the envelope (`apiVersion`,
//! `kind`, and `metadata` copied unchanged, as the apiserver requires); [`to_v2`] and [`to_v1`]
//! map `spec` and `status` (the status has the same shape in both versions).
//!
//! - `v1` -> `v2`: one entry per key, in key order. Always succeeds.
//! - `v2` -> `v1`: the entries become the map. Two entries with the same key fail the conversion
//!   with a message naming the key (a map cannot hold both, and dropping one silently would lose
//!   data); the apiserver then refuses the request with that message.
//!
//! The two directions are inverse on every `v1` object, and on every `v2` object whose entries
//! are in key order (others come back sorted).

use std::collections::BTreeMap;

use kubeapp::sdk::conversion::VersionConverter;

use crate::kind::{v1, v2};

/// `template` as `v2`.
///
/// # Errors
///
/// Never; the `Result` is the signature [`VersionConverter`] takes.
pub fn to_v2(template: v1::Template) -> Result<v2::Template, String> {
    let entries = template
        .spec
        .data
        .into_iter()
        .map(|(key, value)| v2::Entry { key, value })
        .collect();
    Ok(v2::Template {
        metadata: template.metadata,
        spec: v2::TemplateSpec { entries },
        status: template.status,
    })
}

/// `template` as `v1`.
///
/// # Errors
///
/// A message naming the key when two entries have the same key.
pub fn to_v1(template: v2::Template) -> Result<v1::Template, String> {
    let mut data = BTreeMap::new();
    for entry in template.spec.entries {
        if data.contains_key(&entry.key) {
            return Err(format!(
                "spec.entries has key {:?} more than once; keys must be unique",
                entry.key
            ));
        }
        data.insert(entry.key, entry.value);
    }
    Ok(v1::Template {
        metadata: template.metadata,
        spec: v1::TemplateSpec { data },
        status: template.status,
    })
}

/// The converter of `Template`s, for `ManagedKind::converter`.
pub fn converter() -> VersionConverter<v1::Template, v2::Template> {
    VersionConverter::new(to_v2, to_v1)
}

#[cfg(test)]
mod tests {
    use kubeapp::operator::apply::conditions;
    use kubeapp::sdk::conversion::Converter as _;
    use serde_json::json;

    use super::*;
    use crate::kind::TemplateStatus;

    fn v1_template() -> v1::Template {
        let mut t = v1::Template::new(
            "t",
            v1::TemplateSpec {
                data: [("b".into(), "2".into()), ("a".into(), "1".into())].into(),
            },
        );
        let mut status = TemplateStatus {
            observed_generation: Some(2),
            conditions: Vec::new(),
        };
        conditions::set(
            &mut status.conditions,
            conditions::ready(true, "ConfigMapApplied", "ConfigMap t is up to date"),
            Some(2),
        );
        t.status = Some(status);
        t
    }

    #[test]
    fn v1_to_v2_lists_entries_in_key_order_and_keeps_the_status() {
        let original = v1_template();
        let v2 = to_v2(original.clone()).expect("converts");
        let keys: Vec<&str> = v2.spec.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(v2.status, original.status);
        let back = to_v1(v2).expect("back");
        assert_eq!(
            (back.spec, back.status),
            (original.spec, original.status),
            "round trip"
        );
    }

    #[test]
    fn duplicate_keys_fail_with_the_key() {
        let mut v2 = to_v2(v1_template()).expect("converts");
        v2.spec.entries.push(v2::Entry {
            key: "a".into(),
            value: "again".into(),
        });
        let err = to_v1(v2).expect_err("duplicate");
        assert!(err.contains("key \"a\" more than once"), "{err}");
    }

    #[tokio::test]
    async fn the_converter_writes_the_envelope_and_keeps_metadata() {
        let stored = json!({
            "apiVersion": "reconciler.example.kubeapp.dev/v1",
            "kind": "Template",
            "metadata": {"name": "t", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {"data": {"k": "v"}},
            // A status as earlier releases of the example wrote it: its JSON is a metav1.Condition.
            "status": {"observedGeneration": 2, "conditions": [{
                "type": "Ready", "status": "True", "reason": "ConfigMapApplied",
                "message": "ConfigMap t is up to date",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2
            }]}
        });
        let v2 = converter()
            .convert(stored.clone(), "reconciler.example.kubeapp.dev/v2")
            .await
            .expect("to v2");
        assert_eq!(v2["apiVersion"], "reconciler.example.kubeapp.dev/v2");
        assert_eq!(v2["spec"], json!({"entries": [{"key": "k", "value": "v"}]}));
        assert_eq!(v2["metadata"], stored["metadata"]);
        assert_eq!(v2["status"], stored["status"]);
        let back = converter()
            .convert(v2, "reconciler.example.kubeapp.dev/v1")
            .await
            .expect("to v1");
        assert_eq!(back["spec"], stored["spec"]);
        assert_eq!(back["status"], stored["status"]);
    }
}
