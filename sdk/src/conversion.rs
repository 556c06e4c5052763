//! Converting objects of a kind between its versions, for a CRD conversion webhook.
//!
//! A [`Converter`] gets one object (JSON, any served version) and the desired `group/version` and
//! returns the object in that version. [`VersionConverter`] builds one from two typed functions
//! between the Rust types of two versions, and takes care of the envelope: objects already in the
//! desired version come back unchanged; `apiVersion` and `kind` are set from the target type; and
//! `metadata` is copied from the input unchanged, because the apiserver rejects a conversion that
//! alters metadata (other than labels and annotations). The functions therefore only map `spec`
//! and `status`.
//!
//! ```
//! use kubeapp_sdk::conversion::{Converter, VersionConverter};
//! # mod v1 { use kube::CustomResource; use schemars::JsonSchema; use serde::{Deserialize, Serialize};
//! #   #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//! #   #[kube(group = "example.com", version = "v1", kind = "Gadget", namespaced)]
//! #   pub struct GadgetSpec { pub size: i64 } }
//! # mod v2 { use kube::CustomResource; use schemars::JsonSchema; use serde::{Deserialize, Serialize};
//! #   #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//! #   #[kube(group = "example.com", version = "v2", kind = "Gadget", namespaced)]
//! #   pub struct GadgetSpec { pub dimension: i64 } }
//! let converter = VersionConverter::new(
//!     |old: v1::Gadget| Ok(v2::Gadget::new("", v2::GadgetSpec { dimension: old.spec.size })),
//!     |new: v2::Gadget| Ok(v1::Gadget::new("", v1::GadgetSpec { size: new.spec.dimension })),
//! );
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let stored = serde_json::json!({
//!     "apiVersion": "example.com/v1", "kind": "Gadget",
//!     "metadata": {"name": "g", "namespace": "default", "uid": "1"}, "spec": {"size": 3}
//! });
//! let converted = converter.convert(stored, "example.com/v2").await.expect("converts");
//! assert_eq!(converted["spec"]["dimension"], 3);
//! assert_eq!(converted["metadata"]["name"], "g");
//! # });
//! ```

use std::marker::PhantomData;

use async_trait::async_trait;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::app::ConversionError;

/// Converts objects of one kind between versions.
#[async_trait]
pub trait Converter: Send + Sync + 'static {
    /// Returns `object` in `desired_api_version` (`group/version`).
    async fn convert(
        &self,
        object: Value,
        desired_api_version: &str,
    ) -> Result<Value, ConversionError>;
}

type ConvertFn<From, To> = dyn Fn(From) -> Result<To, String> + Send + Sync;

/// A [`Converter`] between the Rust types `A` and `B` of two versions of a kind; see the
/// [module docs](self).
pub struct VersionConverter<A, B> {
    a_to_b: Box<ConvertFn<A, B>>,
    b_to_a: Box<ConvertFn<B, A>>,
    types: PhantomData<fn(A, B)>,
}

impl<A, B> VersionConverter<A, B> {
    /// A converter from the two directions; each returns a message on failure.
    pub fn new(
        a_to_b: impl Fn(A) -> Result<B, String> + Send + Sync + 'static,
        b_to_a: impl Fn(B) -> Result<A, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            a_to_b: Box::new(a_to_b),
            b_to_a: Box::new(b_to_a),
            types: PhantomData,
        }
    }
}

fn api_version<K: Resource<DynamicType = ()>>() -> String {
    K::api_version(&()).into_owned()
}

/// Deserializes `object` as `From`, converts it, and writes the envelope of `To`.
fn convert_one<From, To>(
    object: Value,
    convert: &ConvertFn<From, To>,
    desired: &str,
) -> Result<Value, ConversionError>
where
    From: DeserializeOwned + Resource<DynamicType = ()>,
    To: Serialize + Resource<DynamicType = ()>,
{
    let kind = From::kind(&()).into_owned();
    let failed = |message: String| ConversionError::Failed {
        kind: kind.clone(),
        desired_api_version: desired.to_string(),
        message,
    };
    let metadata = object.get("metadata").cloned().unwrap_or(Value::Null);
    let typed: From = serde_json::from_value(object).map_err(|e| {
        failed(format!(
            "the object does not match {}: {e}",
            api_version::<From>()
        ))
    })?;
    let converted = convert(typed).map_err(&failed)?;
    let mut value = serde_json::to_value(&converted).map_err(|e| failed(e.to_string()))?;
    value["apiVersion"] = Value::String(api_version::<To>());
    value["kind"] = Value::String(To::kind(&()).into_owned());
    value["metadata"] = metadata;
    Ok(value)
}

#[async_trait]
impl<A, B> Converter for VersionConverter<A, B>
where
    A: Serialize + DeserializeOwned + Resource<DynamicType = ()> + Send + 'static,
    B: Serialize + DeserializeOwned + Resource<DynamicType = ()> + Send + 'static,
{
    async fn convert(&self, object: Value, desired: &str) -> Result<Value, ConversionError> {
        let from = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if from == desired {
            return Ok(object);
        }
        let (a, b) = (api_version::<A>(), api_version::<B>());
        if from == a && desired == b {
            convert_one::<A, B>(object, &*self.a_to_b, desired)
        } else if from == b && desired == a {
            convert_one::<B, A>(object, &*self.b_to_a, desired)
        } else {
            Err(ConversionError::NotImplemented {
                kind: A::kind(&()).into_owned(),
                desired_api_version: format!(
                    "{desired} (from {from}; this converter knows {a} and {b})"
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    /// ConfigMap <-> Secret stands in for two versions of a kind: different types, same shape.
    fn converter() -> VersionConverter<ConfigMap, Secret> {
        VersionConverter::new(
            |cm: ConfigMap| {
                Ok(Secret {
                    string_data: cm.data,
                    ..Secret::default()
                })
            },
            |secret: Secret| match secret.string_data {
                Some(data) => Ok(ConfigMap {
                    data: Some(data),
                    ..ConfigMap::default()
                }),
                None => Err("no stringData to convert".into()),
            },
        )
    }

    #[tokio::test]
    async fn converts_both_ways_and_keeps_metadata() {
        let cm = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "uid": "u", "resourceVersion": "7"}, "data": {"k": "v"}
        });
        let same = converter()
            .convert(cm.clone(), "v1")
            .await
            .expect("same version");
        assert_eq!(
            same, cm,
            "an object already in the desired version is unchanged"
        );

        let conv = converter();
        // Both types are apiVersion "v1", so exercise one direction through convert_one.
        let out = convert_one::<ConfigMap, Secret>(cm, &*conv.a_to_b, "v1").expect("converted");
        assert_eq!(out["kind"], "Secret");
        assert_eq!(out["stringData"]["k"], "v");
        assert_eq!(
            out["metadata"]["resourceVersion"], "7",
            "metadata copied unchanged"
        );
    }

    #[tokio::test]
    async fn a_failing_function_or_bad_object_is_a_failure_with_a_message() {
        let conv = converter();
        let secret =
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let err =
            convert_one::<Secret, ConfigMap>(secret, &*conv.b_to_a, "v1").expect_err("no data");
        assert!(
            err.to_string().contains("no stringData to convert"),
            "{err}"
        );

        let bad = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": 1}});
        let err = convert_one::<ConfigMap, Secret>(bad, &*conv.a_to_b, "v1").expect_err("bad data");
        assert!(err.to_string().contains("does not match v1"), "{err}");
    }

    #[tokio::test]
    async fn unknown_versions_are_not_implemented() {
        let object = serde_json::json!({"apiVersion": "other.example.com/v9", "kind": "ConfigMap"});
        let err = converter()
            .convert(object, "v1")
            .await
            .expect_err("unknown source");
        assert!(
            matches!(err, ConversionError::NotImplemented { .. }),
            "{err:?}"
        );
    }
}
