//! Controller owner references, set from the owner object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use super::error::{ApplyError, describe, qualified};
use crate::projection::{Projected, Projection};

/// What can be the controller owner of another object: an object of any typed kind, and a
/// [projection](crate::projection) of one (a child may be owned by an object its handler only
/// caches in part; the reference needs only the kind, the name and the uid).
pub trait Owner {
    /// The owner kind's `apiVersion` and `kind`.
    fn owner_type(&self) -> (String, String);
    /// The owner's metadata (name, namespace, uid).
    fn owner_meta(&self) -> &ObjectMeta;
}

impl<R: Resource<DynamicType = ()>> Owner for R {
    fn owner_type(&self) -> (String, String) {
        (R::api_version(&()).into_owned(), R::kind(&()).into_owned())
    }
    fn owner_meta(&self) -> &ObjectMeta {
        self.meta()
    }
}

impl<P: Projection> Owner for Projected<P> {
    fn owner_type(&self) -> (String, String) {
        (
            P::Of::api_version(&()).into_owned(),
            P::Of::kind(&()).into_owned(),
        )
    }
    fn owner_meta(&self) -> &ObjectMeta {
        self.meta()
    }
}

/// A controller owner reference to `owner` (`controller: true`, `blockOwnerDeletion: true`), or
/// `None` when the owner has no name or no uid (it was never stored, e.g. in a dry run).
pub fn owner_reference<P: Owner + ?Sized>(owner: &P) -> Option<OwnerReference> {
    let meta = owner.owner_meta();
    let (api_version, kind) = owner.owner_type();
    Some(OwnerReference {
        api_version,
        kind,
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Makes `owner` the controller of `object`: adds (or refreshes) the owner reference.
///
/// Refuses an owner without a uid, a namespaced owner of an object in another namespace or of a
/// cluster-scoped object (`object_namespaced` says whether `object` is namespaced when its kind
/// tells; otherwise its `metadata.namespace` decides), and an object already controlled by
/// another owner.
pub(crate) fn set_controller<P, O>(
    object: &mut O,
    object_kind: &str,
    object_namespaced: Option<bool>,
    owner: &P,
) -> Result<(), ApplyError>
where
    P: Owner + ?Sized,
    O: Resource,
{
    let (_, owner_kind) = owner.owner_type();
    let owner_meta = owner.owner_meta();
    let owner_name = owner_meta.name.clone().unwrap_or_default();
    let owner_ns = owner_meta.namespace.as_deref();
    let meta = object.meta();
    let object_ns = meta.namespace.as_deref();
    let object_name = describe(object_kind, object_ns, meta.name.as_deref().unwrap_or(""));
    let owner_desc = describe(&owner_kind, owner_ns, &owner_name);

    let Some(reference) = owner_reference(owner) else {
        return Err(ApplyError::OwnerWithoutUid {
            owner_kind,
            owner: qualified(owner_ns, &owner_name),
            object: object_name,
        });
    };
    if object_namespaced == Some(true) && object_ns.is_none() {
        // Say what is wrong with the child rather than call it a cross-namespace reference.
        return Err(ApplyError::MissingNamespace {
            kind: object_kind.to_string(),
            name: meta.name.clone().unwrap_or_default(),
        });
    }
    if let Some(owner_ns) = owner_ns {
        // A namespaced owner: the child must be namespaced and in the same namespace.
        let child_cluster_scoped = object_namespaced == Some(false) || object_ns.is_none();
        if child_cluster_scoped || object_ns != Some(owner_ns) {
            return Err(ApplyError::CrossNamespaceOwner {
                owner_kind,
                owner: qualified(Some(owner_ns), &owner_name),
                object: object_name,
            });
        }
    }
    let references = object
        .meta_mut()
        .owner_references
        .get_or_insert_with(Vec::new);
    references.retain(|r| r.uid != reference.uid);
    if let Some(current) = references.iter().find(|r| r.controller == Some(true)) {
        return Err(ApplyError::OtherController {
            owner: owner_desc,
            object: object_name,
            current: describe(&current.kind, None, &current.name),
        });
    }
    references.push(reference);
    Ok(())
}
