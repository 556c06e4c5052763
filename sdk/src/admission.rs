//! Typed admission handlers: validators and mutators of one kind `K`.
//!
//! A [`Validator`] accepts an object or rejects it with a message (and optionally a code); a
//! [`Mutator`] returns the changed object and the webhook server computes the JSON patch. Both see
//! a [`TypedAdmissionRequest`]: the operation, the new and old object as `K`, and who asked.
//! [`typed_request`] turns the webhook's untyped request into a typed one; an object that does not
//! deserialize as `K` is refused with a message naming the kind, the object and the serde error
//! (never a panic).
//!
//! ```
//! use async_trait::async_trait;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_sdk::admission::{TypedAdmissionRequest, Validator, validator_fn};
//! use kubeapp_sdk::app::AdmissionError;
//!
//! // As a type ...
//! struct NoEmptyConfigMaps;
//! #[async_trait]
//! impl Validator<ConfigMap> for NoEmptyConfigMaps {
//!     async fn validate(&self, request: &TypedAdmissionRequest<ConfigMap>) -> Result<(), AdmissionError> {
//!         match request.object.as_ref().and_then(|cm| cm.data.as_ref()) {
//!             Some(data) if !data.is_empty() => Ok(()),
//!             _ => Err(AdmissionError::denied("data must not be empty")),
//!         }
//!     }
//! }
//! // ... or as a closure.
//! let same = validator_fn(|request: TypedAdmissionRequest<ConfigMap>| async move {
//!     let empty = request.object.and_then(|cm| cm.data).is_none_or(|d| d.is_empty());
//!     if empty { Err(AdmissionError::denied("data must not be empty")) } else { Ok(()) }
//! });
//! # let _ = (NoEmptyConfigMaps, same);
//! ```

use std::future::Future;
use std::marker::PhantomData;

use async_trait::async_trait;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde::de::DeserializeOwned;

use crate::app::AdmissionError;

/// An admission request with its objects as `K`.
#[derive(Clone, Debug)]
pub struct TypedAdmissionRequest<K> {
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// The object as it would be stored (absent for DELETE).
    pub object: Option<K>,
    /// The object as it is stored now (UPDATE and DELETE).
    pub old_object: Option<K>,
    /// The namespace of the object, if namespaced.
    pub namespace: Option<String>,
    /// The name of the object (may be empty on CREATE with `generateName`).
    pub name: String,
    /// The user who made the request.
    pub username: Option<String>,
    /// True for a dry run: the hook must not have side effects.
    pub dry_run: bool,
}

fn decode<K: DeserializeOwned>(
    object: Option<&DynamicObject>,
    request: &AdmissionRequest<DynamicObject>,
    which: &str,
) -> Result<Option<K>, AdmissionError> {
    let Some(object) = object else {
        return Ok(None);
    };
    let value = serde_json::to_value(object)
        .map_err(|e| AdmissionError::Internal(format!("re-encoding the {which} object: {e}")))?;
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| AdmissionError::Denied {
            message: format!(
                "the {which} {} {}/{} does not match its schema: {e}",
                request.kind.kind,
                request.namespace.as_deref().unwrap_or(""),
                request.name
            ),
            code: Some(400),
        })
}

/// The typed view of `request`; a denial when an object does not deserialize as `K`.
pub fn typed_request<K: DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
) -> Result<TypedAdmissionRequest<K>, AdmissionError> {
    Ok(TypedAdmissionRequest {
        operation: request.operation.clone(),
        object: decode(request.object.as_ref(), request, "new")?,
        old_object: decode(request.old_object.as_ref(), request, "old")?,
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        username: request.user_info.username.clone(),
        dry_run: request.dry_run,
    })
}

/// Accepts or rejects objects of kind `K`.
#[async_trait]
pub trait Validator<K>: Send + Sync + 'static {
    /// `Ok(())` admits; [`AdmissionError::Denied`] rejects with a message and optional code.
    async fn validate(&self, request: &TypedAdmissionRequest<K>) -> Result<(), AdmissionError>;
}

/// Changes objects of kind `K` before they are stored.
#[async_trait]
pub trait Mutator<K>: Send + Sync + 'static {
    /// Returns the object as it should be stored (the webhook computes the patch).
    async fn mutate(&self, request: &TypedAdmissionRequest<K>) -> Result<K, AdmissionError>;
}

/// A [`Validator`] from a closure; see [`validator_fn`].
pub struct ValidatorFn<K, F> {
    f: F,
    kind: PhantomData<fn(K)>,
}

/// A validator from an async closure taking the request by value.
pub fn validator_fn<K, F, Fut>(f: F) -> ValidatorFn<K, F>
where
    F: Fn(TypedAdmissionRequest<K>) -> Fut,
{
    ValidatorFn {
        f,
        kind: PhantomData,
    }
}

#[async_trait]
impl<K, F, Fut> Validator<K> for ValidatorFn<K, F>
where
    K: Clone + Send + Sync + 'static,
    F: Fn(TypedAdmissionRequest<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), AdmissionError>> + Send,
{
    async fn validate(&self, request: &TypedAdmissionRequest<K>) -> Result<(), AdmissionError> {
        (self.f)(request.clone()).await
    }
}

/// A [`Mutator`] from a closure; see [`mutator_fn`].
pub struct MutatorFn<K, F> {
    f: F,
    kind: PhantomData<fn(K)>,
}

/// A mutator from an async closure taking the request by value.
pub fn mutator_fn<K, F, Fut>(f: F) -> MutatorFn<K, F>
where
    F: Fn(TypedAdmissionRequest<K>) -> Fut,
{
    MutatorFn {
        f,
        kind: PhantomData,
    }
}

#[async_trait]
impl<K, F, Fut> Mutator<K> for MutatorFn<K, F>
where
    K: Clone + Send + Sync + 'static,
    F: Fn(TypedAdmissionRequest<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<K, AdmissionError>> + Send,
{
    async fn mutate(&self, request: &TypedAdmissionRequest<K>) -> Result<K, AdmissionError> {
        (self.f)(request.clone()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn request(object: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "operation": "CREATE",
                "namespace": "ns",
                "name": "cm",
                "userInfo": {"username": "alice"},
                "object": object,
                "dryRun": false
            }
        });
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(review).expect("review");
        review.try_into().expect("request")
    }

    #[test]
    fn typed_request_carries_the_object_and_who_asked() {
        let req = request(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": "1"}
        }));
        let typed: TypedAdmissionRequest<ConfigMap> = typed_request(&req).expect("typed");
        assert_eq!(typed.operation, Operation::Create);
        assert_eq!(typed.username.as_deref(), Some("alice"));
        let data = typed.object.and_then(|cm| cm.data).expect("data");
        assert_eq!(data.get("a").map(String::as_str), Some("1"));
        assert!(typed.old_object.is_none());
    }

    #[test]
    fn an_object_that_does_not_fit_the_type_is_denied_with_the_serde_error() {
        let req = request(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": 1}
        }));
        let err = typed_request::<ConfigMap>(&req).expect_err("data values must be strings");
        let AdmissionError::Denied { message, code } = err else {
            panic!("not a denial: {err:?}")
        };
        assert_eq!(code, Some(400));
        assert!(
            message.contains("ConfigMap ns/cm") && message.contains("invalid type"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn closure_validator_and_mutator_are_called_with_the_request() {
        let req = request(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}
        }));
        let typed: TypedAdmissionRequest<ConfigMap> = typed_request(&req).expect("typed");
        let deny_alice = validator_fn(|r: TypedAdmissionRequest<ConfigMap>| async move {
            match r.username.as_deref() {
                Some("alice") => Err(AdmissionError::denied("not alice")),
                _ => Ok(()),
            }
        });
        let err = deny_alice
            .validate(&typed)
            .await
            .expect_err("alice is denied");
        assert_eq!(err.to_string(), "denied: not alice");
        let add_data = mutator_fn(|r: TypedAdmissionRequest<ConfigMap>| async move {
            let mut cm = r.object.unwrap_or_default();
            cm.data = Some([("added".to_string(), "yes".to_string())].into());
            Ok(cm)
        });
        let changed = add_data.mutate(&typed).await.expect("mutated");
        assert_eq!(
            changed.data.expect("data").get("added").map(String::as_str),
            Some("yes")
        );
    }
}
