//! Whether a kind is namespaced, read from its `Resource::Scope` type.

use kube::core::{ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope};
use kube::{Api, Resource};

/// A `kube::Resource::Scope` the apply helpers can read: namespaced, cluster-scoped, or (for
/// `DynamicObject`) unknown until the object is seen.
///
/// Implemented for k8s-openapi's and kube's scope types; typed kinds (k8s-openapi types and
/// `#[derive(CustomResource)]` types) are always known.
pub trait KindScope {
    /// `Some(true)` for namespaced kinds, `Some(false)` for cluster-scoped kinds, `None` when the
    /// type does not say (dynamic objects: then the object's `metadata.namespace` decides).
    fn namespaced() -> Option<bool>;

    /// `api` narrowed to `namespace` when the kind is namespaced (or may be); unchanged for a
    /// cluster-scoped kind. Lets generic code apply a "watch one namespace" setting to kinds of
    /// either scope.
    fn constrain<K: Resource<Scope = Self>>(api: Api<K>, namespace: &str) -> Api<K>
    where
        Self: Sized;
}

impl KindScope for NamespaceResourceScope {
    fn namespaced() -> Option<bool> {
        Some(true)
    }

    fn constrain<K: Resource<Scope = Self>>(api: Api<K>, namespace: &str) -> Api<K> {
        api.constrain(namespace)
    }
}

impl KindScope for ClusterResourceScope {
    fn namespaced() -> Option<bool> {
        Some(false)
    }

    fn constrain<K: Resource<Scope = Self>>(api: Api<K>, _namespace: &str) -> Api<K> {
        api
    }
}

impl KindScope for DynamicResourceScope {
    fn namespaced() -> Option<bool> {
        None
    }

    fn constrain<K: Resource<Scope = Self>>(api: Api<K>, namespace: &str) -> Api<K> {
        api.constrain(namespace)
    }
}
