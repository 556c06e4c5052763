//! Turning one listed or watched `DynamicObject` into the kind's Rust type.
//!
//! Informers list and watch dynamically so that one object that does not fit the type fails
//! alone (see the [module docs](super)); every object is then converted on its own. This is on
//! the path of every watch event, so it avoids the obvious round trip (serialising the whole
//! `DynamicObject` into a new JSON tree and deserialising that): the type is read straight from
//! the object's already parsed body (borrowed, so a failure still has the object to report), and
//! the metadata, already typed, is moved in rather than written out and read back.

use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Keys the conversion lends to the body while reading it, and takes back after.
const METADATA: &str = "metadata";
const API_VERSION: &str = "apiVersion";
const KIND: &str = "kind";

/// `object` as a `K`, or the object unchanged with the reason it does not fit.
///
/// The result equals `serde_json::from_value::<K>(serde_json::to_value(&object))`: the body
/// is read with the object's `apiVersion` and `kind` (types that check them still do) and an
/// empty `metadata` (types that require the field find it), then the object's own metadata
/// replaces the empty one.
// The error hands the object back by value: it is rare, and its only caller turns it into an
// `Undecodable` at once.
#[allow(clippy::result_large_err)]
pub(crate) fn decode_typed<K>(
    mut object: DynamicObject,
) -> Result<K, (DynamicObject, serde_json::Error)>
where
    K: kube::Resource + DeserializeOwned,
{
    let Value::Object(body) = &mut object.data else {
        // Never from an apiserver (the body is the rest of a JSON object); the long way keeps
        // the error what it would be.
        return match serde_json::to_value(&object).and_then(serde_json::from_value::<K>) {
            Ok(typed) => Ok(typed),
            Err(error) => Err((object, error)),
        };
    };
    let lent: Vec<&str> = [METADATA, API_VERSION, KIND]
        .into_iter()
        .filter(|key| !body.contains_key(*key))
        .collect();
    for key in &lent {
        let value = match *key {
            METADATA => Value::Object(serde_json::Map::new()),
            API_VERSION => object
                .types
                .as_ref()
                .map_or(Value::Null, |t| Value::String(t.api_version.clone())),
            _ => object
                .types
                .as_ref()
                .map_or(Value::Null, |t| Value::String(t.kind.clone())),
        };
        if !value.is_null() {
            body.insert((*key).to_string(), value);
        }
    }
    let read = K::deserialize(&object.data);
    if let Value::Object(body) = &mut object.data {
        for key in lent {
            body.remove(key);
        }
    }
    match read {
        Ok(mut typed) => {
            *typed.meta_mut() = object.metadata;
            Ok(typed)
        }
        Err(error) => Err((object, error)),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DynamicObject, ObjectMeta};
    use serde_json::json;

    use super::decode_typed;

    fn dynamic(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("a DynamicObject")
    }

    /// The conversion it replaces.
    fn long_way<K: kube::Resource + serde::de::DeserializeOwned>(
        object: &DynamicObject,
    ) -> serde_json::Result<K> {
        serde_json::to_value(object).and_then(serde_json::from_value::<K>)
    }

    fn config_map() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "x"}, "finalizers": ["f/one"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                    "uid": "u-0", "controller": true}],
            },
            "data": {"k": "v"},
            "immutable": true,
        })
    }

    #[test]
    fn a_config_map_reads_the_same_as_through_a_json_round_trip() {
        let object = dynamic(config_map());
        let expected: ConfigMap = long_way(&object).expect("long way");
        let typed: ConfigMap = decode_typed(object).expect("decoded");
        assert_eq!(typed, expected);
        assert_eq!(typed.metadata.finalizers, Some(vec!["f/one".to_string()]));
        assert_eq!(
            typed
                .data
                .as_ref()
                .and_then(|d| d.get("k"))
                .map(String::as_str),
            Some("v")
        );
    }

    #[test]
    fn a_custom_resource_requiring_metadata_reads_the_same() {
        #[derive(serde::Deserialize, serde::Serialize, Debug, PartialEq, Clone)]
        struct Spec {
            size: u32,
        }
        // Derived Deserialize: `metadata` is a required field, as in kube-derive's types.
        #[derive(serde::Deserialize, serde::Serialize, Debug, PartialEq, Clone)]
        struct Widget {
            metadata: ObjectMeta,
            spec: Spec,
        }
        impl kube::Resource for Widget {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                "Widget".into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "example.dev".into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                "widgets".into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
        let object = dynamic(json!({
            "apiVersion": "example.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": 3},
            "spec": {"size": 2},
        }));
        let expected: Widget = long_way(&object).expect("long way");
        let typed: Widget = decode_typed(object).expect("decoded");
        assert_eq!(typed, expected);
        assert_eq!(typed.metadata.generation, Some(3));

        // Not a Widget: the error names the field, and the object comes back as it was.
        let bad = dynamic(json!({
            "apiVersion": "example.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"size": "two"},
        }));
        let before = bad.clone();
        let (returned, error) = decode_typed::<Widget>(bad).expect_err("size is not a number");
        assert!(error.to_string().contains("invalid type"), "{error}");
        assert_eq!(returned, before, "nothing lent to the body is left in it");
        assert!(long_way::<Widget>(&before).is_err());
    }

    #[test]
    fn a_wrong_api_version_is_refused_as_before_and_a_missing_one_accepted_as_before() {
        let mut wrong = config_map();
        wrong["apiVersion"] = json!("v2");
        let object = dynamic(wrong);
        assert!(long_way::<ConfigMap>(&object).is_err());
        let (returned, _) = decode_typed::<ConfigMap>(object.clone()).expect_err("v2");
        assert_eq!(returned, object);

        // Without type information (a synthetic object): both ways read it.
        let mut object = dynamic(config_map());
        object.types = None;
        assert!(long_way::<ConfigMap>(&object).is_ok());
        let typed: ConfigMap = decode_typed(object).expect("decoded without types");
        assert_eq!(typed.metadata.name.as_deref(), Some("a"));
    }
}
