//! What can go wrong applying an object or writing its status.

/// An apply, owner-reference or status write that did not happen.
///
/// Every variant names the object (`kind namespace/name`, or `kind name` when cluster-scoped) so a
/// log line or a reconcile error says which object failed without more context.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The object has no `metadata.name`: server-side apply addresses an object by name
    /// (`generateName` cannot be applied).
    #[error("cannot apply a {kind} without metadata.name")]
    MissingName {
        /// The object's kind.
        kind: String,
    },
    /// A namespaced kind without `metadata.namespace`: the helpers never guess a namespace.
    #[error("cannot apply {kind} {name}: the kind is namespaced and metadata.namespace is not set")]
    MissingNamespace {
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// The owner has no uid (it was never stored: a dry run or an object built in memory), so no
    /// owner reference can point at it.
    #[error(
        "cannot make {owner_kind} {owner} the owner of {object}: the owner has no metadata.uid"
    )]
    OwnerWithoutUid {
        /// The owner's kind.
        owner_kind: String,
        /// The owner's `namespace/name` or name.
        owner: String,
        /// The owned object (`kind namespace/name`).
        object: String,
    },
    /// A namespaced owner of an object in another namespace, or of a cluster-scoped object:
    /// Kubernetes' garbage collector treats such a reference as unresolvable.
    #[error(
        "cannot make {owner_kind} {owner} the owner of {object}: a namespaced owner can only own \
         objects in its own namespace"
    )]
    CrossNamespaceOwner {
        /// The owner's kind.
        owner_kind: String,
        /// The owner's `namespace/name`.
        owner: String,
        /// The owned object (`kind namespace/name`, or `kind name` when cluster-scoped).
        object: String,
    },
    /// The object already has a controller owner reference to another object; Kubernetes allows
    /// one controller per object.
    #[error(
        "cannot make {owner} the controller of {object}: it is already controlled by {current}"
    )]
    OtherController {
        /// The requested owner (`kind name`).
        owner: String,
        /// The owned object.
        object: String,
        /// The current controller (`kind name`).
        current: String,
    },
    /// The object could not be turned into JSON.
    #[error("cannot serialize {object} for apply")]
    Serialize {
        /// The object (`kind namespace/name`).
        object: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The API server refused the request or could not be reached.
    #[error("{operation} of {object} under field manager {field_manager:?} failed")]
    Api {
        /// `apply` or `status write`.
        operation: &'static str,
        /// The object (`kind namespace/name`).
        object: String,
        /// The field manager the request was sent under.
        field_manager: String,
        /// The client's error (for an API error, its status code and message); boxed, it is large.
        #[source]
        source: Box<kube::Error>,
    },
}

/// `kind namespace/name`, or `kind name` without a namespace: how errors and logs name objects.
pub(crate) fn describe(kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{kind} {}", qualified(namespace, name))
}

/// `namespace/name`, or `name` without a namespace.
pub(crate) fn qualified(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// Whether `error` is the API server's 409 Conflict (a field owned by another manager, for an
/// apply).
pub(crate) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}
