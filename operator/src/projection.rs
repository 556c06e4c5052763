//! Projections: caching only the fields a handler reads (what issue #40 calls *views*).
//!
//! A cached Kubernetes object costs memory for every field it has, read or not: a Pod with a
//! full spec and status is several kilobytes in the cache, while a handler that places Pods reads
//! its metadata, `spec.nodeName`, `status.phase` and its conditions. A [`Projection`] is a serde
//! type that names those fields; an informer registered for it
//! ([`InformerController::projection`](crate::InformerController::projection),
//! [`Informers::projection_store`](crate::Informers::projection_store)) decodes each listed or
//! watched object into it and caches only that, as a [`Projected<P>`]: the object's metadata
//! (without `managedFields`, as every kubeapp cache) and the projection.
//!
//! ```
//! use k8s_openapi::api::core::v1::{Pod, PodCondition};
//! use kubeapp_operator::projection::Projection;
//! use serde::{Deserialize, Serialize};
//!
//! /// What a scheduler-watching handler reads of a Pod; every other field is skipped while the
//! /// object is decoded and never cached.
//! #[derive(Clone, Debug, Default, Deserialize, Serialize)]
//! #[serde(default)]
//! struct PodPlacement {
//!     spec: Placement,
//!     status: Health,
//! }
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize)]
//! #[serde(default, rename_all = "camelCase")]
//! struct Placement {
//!     node_name: Option<String>,
//! }
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize)]
//! #[serde(default)]
//! struct Health {
//!     phase: Option<String>,
//!     conditions: Vec<PodCondition>,
//! }
//!
//! impl Projection for PodPlacement {
//!     type Of = Pod;
//! }
//! ```
//!
//! One informer (and one cache) runs per kind *and* projection: registering `Pod` and
//! `PodPlacement` in one process watches Pods twice. The kind handle of a projection takes the
//! same typed handlers as any kind (`Watcher<Projected<P>, C>`, `Reconciler<Projected<P>, C>`,
//! the opinionated wrappers, `owns`), and a handler reads the projection's fields through
//! `Deref` (`pod.status.phase`) and the metadata through [`Projected::meta`].
//!
//! # Writes go through the full kind
//!
//! A [`Projected<P>`] is deliberately not a `kube::Resource`: it cannot be applied, replaced or
//! have its status written (`ctx.apply(projected)`, `ctx.status(&projected)` and
//! `Api::<Projected<P>>::replace` do not compile), because it lacks every field outside the
//! projection and writing it whole would drop them. Handlers write with the full kind:
//! server-side apply of the fields they own (`ctx.apply(Pod { .. })`, which leaves other fields
//! to their owners), or a full read first ([`Projected::get_full`]) when they must change an
//! object they only project. A projection can own children: `ctx.apply(child).owned_by(&*pod)`
//! takes a `Projected<P>` as it takes a full object (see [`Owner`](crate::apply::Owner)).
//!
//! The compiler holds handlers to this. With a projection of a Pod's `status.phase` only (the
//! blocks below are the crate's compile-fail tests; each shares its setup with the first, which
//! compiles, and was checked to fail with the error code it names, which rustdoc itself checks
//! only on nightly):
//!
//! ```
//! # use k8s_openapi::api::core::v1::Pod;
//! # use kubeapp_operator::Context;
//! # use kubeapp_operator::projection::{Projected, Projection};
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct PodPhase { status: Phase }
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct Phase { phase: Option<String> }
//! # impl Projection for PodPhase { type Of = Pod; }
//! // Reading a projected field, and writing with the full kind, compile:
//! async fn handle(pod: &Projected<PodPhase>, ctx: &Context) -> Result<(), Box<dyn std::error::Error>> {
//!     if pod.status.phase.as_deref() == Some("Failed") {
//!         let mut mark = Pod::default();
//!         mark.metadata.name = pod.meta().name.clone();
//!         mark.metadata.namespace = pod.meta().namespace.clone();
//!         mark.metadata.labels = Some([("example.dev/failed".to_string(), "true".to_string())].into());
//!         ctx.apply(mark).await?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Reading a field the projection does not have does not (E0609):
//!
//! ```compile_fail,E0609
//! # use k8s_openapi::api::core::v1::Pod;
//! # use kubeapp_operator::Context;
//! # use kubeapp_operator::projection::{Projected, Projection};
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct PodPhase { status: Phase }
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct Phase { phase: Option<String> }
//! # impl Projection for PodPhase { type Of = Pod; }
//! fn containers(pod: &Projected<PodPhase>) -> usize {
//!     pod.spec.containers.len()
//! }
//! ```
//!
//! Nor applying the projection (E0277: `Projected<PodPhase>` is not a `kube::Resource`):
//!
//! ```compile_fail,E0277
//! # use k8s_openapi::api::core::v1::Pod;
//! # use kubeapp_operator::Context;
//! # use kubeapp_operator::projection::{Projected, Projection};
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct PodPhase { status: Phase }
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct Phase { phase: Option<String> }
//! # impl Projection for PodPhase { type Of = Pod; }
//! async fn apply(pod: &Projected<PodPhase>, ctx: &Context) {
//!     let _ = ctx.apply(pod.clone()).await;
//! }
//! ```
//!
//! Nor writing its status from it (E0277):
//!
//! ```compile_fail,E0277
//! # use k8s_openapi::api::core::v1::Pod;
//! # use kubeapp_operator::Context;
//! # use kubeapp_operator::projection::{Projected, Projection};
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct PodPhase { status: Phase }
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct Phase { phase: Option<String> }
//! # impl Projection for PodPhase { type Of = Pod; }
//! async fn status(pod: &Projected<PodPhase>, ctx: &Context) {
//!     let _ = ctx.status(pod);
//! }
//! ```
//!
//! Nor an `Api` of projections to replace through (E0599: its constructors need a
//! `kube::Resource`):
//!
//! ```compile_fail,E0599
//! # use k8s_openapi::api::core::v1::Pod;
//! # use kubeapp_operator::Context;
//! # use kubeapp_operator::projection::{Projected, Projection};
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct PodPhase { status: Phase }
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct Phase { phase: Option<String> }
//! # impl Projection for PodPhase { type Of = Pod; }
//! fn api(client: kube::Client) {
//!     let _ = kube::Api::<Projected<PodPhase>>::all(client);
//! }
//! ```
//!
//! Nor replacing the full kind with one (E0308):
//!
//! ```compile_fail,E0308
//! # use k8s_openapi::api::core::v1::Pod;
//! # use kubeapp_operator::Context;
//! # use kubeapp_operator::projection::{Projected, Projection};
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct PodPhase { status: Phase }
//! # #[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
//! # #[serde(default)]
//! # struct Phase { phase: Option<String> }
//! # impl Projection for PodPhase { type Of = Pod; }
//! async fn replace(pod: &Projected<PodPhase>, api: kube::Api<Pod>) {
//!     let _ = api.replace("p", &Default::default(), pod).await;
//! }
//! ```
//!
//! # When a projection is safe
//!
//! - **Safe** for handlers that read a few fields and write with server-side apply, patches of
//!   their own fields, or other objects (children, Events, an outside system).
//! - **Never** for an object the operator rewrites whole (a `replace`, or a status written from
//!   the cached object): there is no cached whole to write from. Read it in full on demand
//!   ([`Projected::get_full`]) or register the full kind.
//! - An update that changes only fields outside the projection is still delivered (the handler
//!   sees an unchanged projection with a new `resourceVersion`), so handlers stay level-based;
//!   the own-write echo check and the opinionated wrappers compare what the projection holds.
//! - An object whose projected fields do not decode (a wrong type in one of them) is an
//!   undecodable state like any other (see [`view`](crate::view)); fields outside the
//!   projection are never read, so they cannot make an object undecodable.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::object::{Kind, KubeObject};

/// The fields of a kind a handler reads, as a serde type; see the [module docs](self).
///
/// The type is read from the object's body (its top-level fields other than `metadata`, such as
/// `spec` and `status`), so it declares those it needs and serde skips the rest. Mark the
/// structs `#[serde(default)]` (or the fields `Option`) where the apiserver may omit a field, as
/// it does a Pod's `status` right after it is created. `Serialize` is what the own-write echo
/// check and the opinionated wrappers compare two states with; it never writes to the apiserver.
pub trait Projection:
    DeserializeOwned + Serialize + Clone + fmt::Debug + Send + Sync + 'static
{
    /// The kind this is a projection of: what its informer lists and watches, and what a full
    /// read ([`Projected::get_full`]) returns.
    type Of: Kind;
}

/// A cached object of kind `P::Of` with only the fields of the projection `P`: its metadata and
/// `P`, which it derefs to. Not a `kube::Resource`, so it can never be written back (see the
/// [module docs](self#writes-go-through-the-full-kind)).
#[derive(Clone, Debug)]
pub struct Projected<P> {
    metadata: ObjectMeta,
    fields: P,
}

impl<P: Projection> Projected<P> {
    /// The projection of an object with `metadata`: what the informer caches. Public for tests
    /// and synthetic streams; an informer builds these itself.
    pub fn new(metadata: ObjectMeta, fields: P) -> Self {
        Self { metadata, fields }
    }

    /// The object's metadata (without `managedFields` unless the informer keeps them).
    pub fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    /// The metadata to change, for the informer (it drops `managedFields`).
    pub(crate) fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    /// The projected fields.
    pub fn fields(&self) -> &P {
        &self.fields
    }

    /// Reads the whole object from the apiserver (not the cache): for the rare write that needs
    /// fields outside the projection. One GET per call.
    ///
    /// # Errors
    ///
    /// What the GET returns (404 when the object is gone).
    pub async fn get_full(&self, client: kube::Client) -> kube::Result<P::Of> {
        // Through the dynamic API: `Api<P::Of>`'s constructors are bound to one scope, and
        // `P::Of` may be namespaced or cluster-wide.
        let resource = ApiResource::erase::<P::Of>(&());
        let api: Api<DynamicObject> = match self.metadata.namespace.as_deref() {
            Some(namespace) => Api::namespaced_with(client, namespace, &resource),
            None => Api::all_with(client, &resource),
        };
        let object = api
            .get(self.metadata.name.as_deref().unwrap_or_default())
            .await?;
        serde_json::to_value(object)
            .and_then(serde_json::from_value)
            .map_err(kube::Error::SerdeError)
    }
}

impl<P> Deref for Projected<P> {
    type Target = P;

    fn deref(&self) -> &P {
        &self.fields
    }
}

impl<P: Projection> KubeObject for Projected<P> {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
    /// The projection's fields with the metadata beside them, as the full object's JSON would
    /// have them (a projection that is not a JSON object sits under `"fields"`).
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        let metadata = serde_json::to_value(&self.metadata)?;
        Ok(match serde_json::to_value(&self.fields)? {
            serde_json::Value::Object(mut body) => {
                body.insert("metadata".to_string(), metadata);
                serde_json::Value::Object(body)
            }
            other => serde_json::json!({ "metadata": metadata, "fields": other }),
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    struct Keys {
        data: std::collections::BTreeMap<String, String>,
    }

    impl Projection for Keys {
        type Of = ConfigMap;
    }

    #[test]
    fn a_projection_serializes_its_fields_beside_the_metadata() {
        let meta = ObjectMeta {
            name: Some("a".into()),
            ..ObjectMeta::default()
        };
        let keys = Keys {
            data: [("k".to_string(), "v".to_string())].into(),
        };
        let projected = Projected::new(meta, keys.clone());
        assert_eq!(
            projected.to_json().expect("serializable"),
            json!({"metadata": {"name": "a"}, "data": {"k": "v"}})
        );
        assert_eq!(projected.data, keys.data, "Deref reaches the fields");
        assert_eq!(projected.meta().name.as_deref(), Some("a"));
    }
}
