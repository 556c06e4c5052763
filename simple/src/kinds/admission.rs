//! Admission handlers of one kind with the typing done: the app routes untyped requests to them.

use std::marker::PhantomData;

use async_trait::async_trait;
use kube::api::DynamicObject;
use kube::core::admission::AdmissionRequest;
use kubeapp_operator::Kind;
use kubeapp_sdk::admission::{Mutator, Validator, typed_request};
use kubeapp_sdk::app::AdmissionError;

/// A validator of admission requests of one kind, with the typing done.
#[async_trait]
pub(crate) trait AdmissionValidator: Send + Sync {
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError>;
}

/// A mutator of admission requests of one kind, with the typing done.
#[async_trait]
pub(crate) trait AdmissionMutator: Send + Sync {
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError>;
}

/// Adapts a typed sdk handler (`Validator<K>` or `Mutator<K>`) to the untyped request.
pub(crate) struct Typed<K, H> {
    handler: H,
    kind: PhantomData<fn(K)>,
}

impl<K, H> Typed<K, H> {
    pub(crate) fn new(handler: H) -> Self {
        Self {
            handler,
            kind: PhantomData,
        }
    }
}

#[async_trait]
impl<K: Kind, V: Validator<K>> AdmissionValidator for Typed<K, V> {
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        let typed = typed_request::<K>(request)?;
        self.handler.validate(&typed).await
    }
}

#[async_trait]
impl<K: Kind, M: Mutator<K>> AdmissionMutator for Typed<K, M> {
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        let typed = typed_request::<K>(request)?;
        let mutated = self.handler.mutate(&typed).await?;
        let value = serde_json::to_value(&mutated)
            .map_err(|e| AdmissionError::Internal(format!("encoding the mutated object: {e}")))?;
        serde_json::from_value(value)
            .map_err(|e| AdmissionError::Internal(format!("encoding the mutated object: {e}")))
    }
}
