//! Whether a kind is namespaced, read from its `Resource::Scope` type.

use kube::core::{ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope};

/// A `kube::Resource::Scope` the apply helpers can read: namespaced, cluster-scoped, or (for
/// `DynamicObject`) unknown until the object is seen.
///
/// Implemented for k8s-openapi's and kube's scope types; typed kinds (k8s-openapi types and
/// `#[derive(CustomResource)]` types) are always known.
pub trait KindScope {
    /// `Some(true)` for namespaced kinds, `Some(false)` for cluster-scoped kinds, `None` when the
    /// type does not say (dynamic objects: then the object's `metadata.namespace` decides).
    fn namespaced() -> Option<bool>;
}

impl KindScope for NamespaceResourceScope {
    fn namespaced() -> Option<bool> {
        Some(true)
    }
}

impl KindScope for ClusterResourceScope {
    fn namespaced() -> Option<bool> {
        Some(false)
    }
}

impl KindScope for DynamicResourceScope {
    fn namespaced() -> Option<bool> {
        None
    }
}
