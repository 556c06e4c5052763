//! Objects as the controller sees them: any `kube::Resource`, type-erased and shared.
//!
//! One [`InformerController`](crate::InformerController) serves typed kinds (`#[derive(CustomResource)]`
//! types, k8s-openapi types) and untyped kinds (`DynamicObject`) side by side, so events carry a
//! [`SharedObject`], an `Arc<dyn KubeObject>`. Handlers that know their type get the concrete
//! `Arc<K>` back without a copy ([`downcast_shared`]); the typed handlers of [`kind`](crate::kind)
//! and the closure forms of [`erased`](crate::erased) do that for them.
//!
//! # Objects that do not decode
//!
//! A typed informer delivers an object that does not deserialize into its Rust type as an
//! [`Undecodable`]: the raw `DynamicObject` and the serde error, a [`KubeObject`] like any other,
//! so its metadata (finalizers, `deletionTimestamp`) still reaches the opinionated wrappers, which
//! can release or hand it over (see [`opinionated`](crate::opinionated#objects-that-do-not-decode)).
//! The informer also keeps, in the [`Undecodable`], the object's last state that did decode
//! ([`Undecodable::last_decodable`]), so that a typed handler's view of the object stays the
//! sequence of its decodable states: the typed adapters hand that state to the user where the
//! view calls for it and skip the undecodable states themselves (details in
//! [`view`](crate::view)).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::DynamicObject;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The bounds every typed kind meets: derived custom resources and k8s-openapi types.
pub trait Kind:
    Resource<DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Kind for K where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A Kubernetes object of any kind, readable through its metadata and downcastable to its type.
///
/// Implemented for every `kube::Resource` that is `Serialize + Debug + Send + Sync + 'static`,
/// which covers derived custom resources, k8s-openapi types and `DynamicObject`.
pub trait KubeObject: Any + Send + Sync + fmt::Debug {
    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// The object as `Any`, for downcasting by reference.
    fn as_any(&self) -> &dyn Any;
    /// The object as `Arc<dyn Any>`, for downcasting without a copy.
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// The Rust type name, for error messages.
    fn type_name(&self) -> &'static str;
    /// The object serialized as JSON, for comparing the content of two versions of an object
    /// whose kind has no `metadata.generation` (the opinionated wrappers do that to tell their own
    /// finalizer patch from a data change). It serializes the whole object: not for hot paths.
    fn to_json(&self) -> serde_json::Result<serde_json::Value>;
}

impl<K> KubeObject for K
where
    K: kube::Resource + serde::Serialize + fmt::Debug + Send + Sync + 'static,
{
    fn metadata(&self) -> &ObjectMeta {
        self.meta()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<K>()
    }
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }
}

/// A type-erased object shared between the informer cache, the controller and handlers.
pub type SharedObject = Arc<dyn KubeObject>;

/// Wraps a typed object as a [`SharedObject`].
pub fn share<K: KubeObject>(object: K) -> SharedObject {
    Arc::new(object)
}

/// The concrete `Arc<K>` behind `object` (the same allocation, no copy), or `None` when the
/// object is of another type.
pub fn downcast_shared<K: KubeObject>(object: &SharedObject) -> Option<Arc<K>> {
    // Upcast (no call), then one type check.
    let any: Arc<dyn Any + Send + Sync> = Arc::<dyn KubeObject>::clone(object);
    any.downcast::<K>().ok()
}

/// An object that a typed informer could not deserialize into its Rust type: the raw object, why
/// it failed, and the object's last state that did decode; see the
/// [module docs](self#objects-that-do-not-decode).
#[derive(Debug)]
pub struct Undecodable {
    raw: Arc<DynamicObject>,
    error: String,
    expected: &'static str,
    /// The same incarnation's last decodable state (shared with the event that delivered it, so
    /// it costs one object only while the object is undecodable).
    last_decodable: Option<SharedObject>,
}

impl Undecodable {
    /// `raw` failed to deserialize into `expected` (a Rust type name) with `error`.
    pub fn new(raw: DynamicObject, error: &serde_json::Error, expected: &'static str) -> Self {
        Self {
            raw: Arc::new(raw),
            error: error.to_string(),
            expected,
            last_decodable: None,
        }
    }

    /// The same undecodable state, remembering `last` as the incarnation's last decodable state
    /// (the informer sets it from its cache; see [`view`](crate::view)).
    #[must_use]
    pub(crate) fn with_last_decodable(&self, last: SharedObject) -> Self {
        Self {
            raw: Arc::clone(&self.raw),
            error: self.error.clone(),
            expected: self.expected,
            last_decodable: Some(last),
        }
    }

    /// The last state of this incarnation that decoded, as the informer delivered it, when the
    /// informer saw one: what a typed handler's view of the object still is. `None` for an object
    /// that has not decoded since this process first saw it (created undecodable, or undecodable
    /// when the informer started).
    pub fn last_decodable(&self) -> Option<&SharedObject> {
        self.last_decodable.as_ref()
    }

    /// The object as the apiserver sent it (after the informer's transform).
    pub fn raw(&self) -> &Arc<DynamicObject> {
        &self.raw
    }

    /// The serde error, as text.
    pub fn error(&self) -> &str {
        &self.error
    }

    /// The Rust type the object did not deserialize into.
    pub(crate) fn expected_type(&self) -> &'static str {
        self.expected
    }
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} does not deserialize into {}: {}",
            ObjectKey::of(self),
            self.expected,
            self.error
        )
    }
}

impl KubeObject for Undecodable {
    fn metadata(&self) -> &ObjectMeta {
        &self.raw.metadata
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
    /// The raw object: what the apiserver holds, which is what a change comparison needs.
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self.raw.as_ref())
    }
}

/// `object` as an [`Undecodable`], when it is one.
pub fn as_undecodable(object: &SharedObject) -> Option<Arc<Undecodable>> {
    // Checked by reference first: almost every object decodes, and a failed `Arc` downcast
    // costs a reference count up and down.
    if !(object.as_ref() as &dyn Any).is::<Undecodable>() {
        return None;
    }
    downcast_shared::<Undecodable>(object)
}

/// Identifies one object within a kind: its namespace (none for cluster-scoped kinds) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `object`; an object without a name (never sent by the API server) gets `""`.
    pub fn of(object: &dyn KubeObject) -> Self {
        let meta = object.metadata();
        Self {
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    #[test]
    fn downcast_returns_the_same_allocation_or_none() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.namespace = Some("ns".into());
        let shared = share(cm);
        let typed = downcast_shared::<ConfigMap>(&shared).expect("a ConfigMap");
        assert_eq!(typed.metadata.name.as_deref(), Some("a"));
        assert!(std::ptr::addr_eq(Arc::as_ptr(&typed), Arc::as_ptr(&shared)));
        assert!(downcast_shared::<Secret>(&shared).is_none());
        assert_eq!(ObjectKey::of(shared.as_ref()).to_string(), "ns/a");
    }
}
