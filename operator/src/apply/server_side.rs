//! Server-side apply under a field manager: [`Applier`] and the [`Apply`] it builds.

use std::fmt::Debug;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use kube::api::{Patch, PatchParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::body::drop_nulls;
use super::error::{ApplyError, describe, is_conflict};
use super::owner::{Owner, set_controller};
use super::scope::KindScope;
use crate::own_writes::{OwnWrites, WrittenPart};

/// Applies objects and writes statuses under one field manager.
///
/// The standalone entry point of the apply helpers: a handler context wraps one (its field
/// manager is the controller's name). Cheap to clone.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    field_manager: String,
    /// Where status writes to the controller's own kind are recorded (handler contexts only).
    own_writes: Option<OwnWrites>,
}

impl Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

impl Applier {
    /// Applies through `client` as field manager `field_manager` (the name Kubernetes records in
    /// `metadata.managedFields`; use one stable name per controller).
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
            own_writes: None,
        }
    }

    /// The same applier, recording its status writes to objects of the controller's kind in
    /// `own_writes` (see [`own_writes`](crate::own_writes)).
    pub(crate) fn recording_into(mut self, own_writes: OwnWrites) -> Self {
        self.own_writes = Some(own_writes);
        self
    }

    /// Records a status write of `written` (of `group` / `kind`) as the controller's own.
    pub(crate) fn note_status_write(&self, group: &str, kind: &str, written: &ObjectMeta) {
        if let Some(own) = &self.own_writes
            && own.accepts(group, kind)
        {
            own.record(written, WrittenPart::Status);
        }
    }

    /// The client requests are sent with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The field manager requests are sent under.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// A server-side apply of a typed `object` (a k8s-openapi or `#[derive(CustomResource)]`
    /// type): finish it with [`Apply::owned_by`] if wanted, then `.await` it.
    pub fn apply<O: Resource<DynamicType = ()>>(&self, object: O) -> Apply<O> {
        self.apply_with(object, ())
    }

    /// A server-side apply of an object whose kind is given at run time, e.g. a `DynamicObject`
    /// with its `ApiResource`. A `DynamicObject` is applied in its `metadata.namespace` when set,
    /// cluster-wide otherwise (its type cannot say whether the kind is namespaced).
    pub fn apply_with<O: Resource>(&self, object: O, dyntype: O::DynamicType) -> Apply<O> {
        Apply {
            client: self.client.clone(),
            field_manager: self.field_manager.clone(),
            object,
            dyntype,
            own_writes: self.own_writes.clone(),
        }
    }
}

/// A server-side apply in the making: `applier.apply(config_map).owned_by(&widget)?.await`.
///
/// Sending it is one `PATCH` (`application/apply-patch+yaml`) that creates the object or updates
/// the fields this field manager declares; fields other managers own are left alone.
#[must_use = "an Apply does nothing until it is sent or awaited"]
pub struct Apply<O: Resource> {
    client: Client,
    field_manager: String,
    object: O,
    dyntype: O::DynamicType,
    /// The handler's kind's own writes, where the object's version is recorded when it is of
    /// another kind (so its Add event does not trigger that handler's kind again).
    own_writes: Option<OwnWrites>,
}

impl<O> Apply<O>
where
    O: Resource + Serialize + DeserializeOwned + Clone + Debug,
    O::Scope: KindScope,
{
    /// Sets a controller owner reference to `owner` (`controller: true`, `blockOwnerDeletion:
    /// true`), replacing an earlier reference to the same owner.
    ///
    /// # Errors
    ///
    /// [`ApplyError::OwnerWithoutUid`] when the owner has no uid (e.g. a dry run),
    /// [`ApplyError::CrossNamespaceOwner`] when a namespaced owner would own an object in another
    /// namespace or a cluster-scoped object (Kubernetes forbids both), and
    /// [`ApplyError::OtherController`] when another object already controls this one, and
    /// [`ApplyError::MissingNamespace`] for a namespaced child without a namespace.
    ///
    /// An owner built in memory has no uid and is refused. An owner returned by a server-side
    /// dry run (`dryRun=All`) does carry a uid (checked against kube-apiserver 1.36), one that no
    /// stored object has: a child applied for real with that reference would be garbage
    /// collected. Do not apply real children of dry-run owners.
    pub fn owned_by<P: Owner + ?Sized>(mut self, owner: &P) -> Result<Self, ApplyError> {
        let kind = O::kind(&self.dyntype).into_owned();
        set_controller(&mut self.object, &kind, O::Scope::namespaced(), owner)?;
        Ok(self)
    }

    /// Sends the apply under `manager` instead of the applier's field manager.
    pub fn field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = manager.into();
        self
    }

    /// The object as it will be applied (owner references included).
    pub fn object(&self) -> &O {
        &self.object
    }

    /// Creates or updates the object in one request and returns it as the API server stored it.
    ///
    /// A 409 Conflict (a field we declare is owned by another manager with a different value) is
    /// retried once with `force`: the object we apply is the state we want, so we take over the
    /// fields we declare. Fields we do not declare stay with their managers.
    ///
    /// # Errors
    ///
    /// [`ApplyError::MissingName`], [`ApplyError::MissingNamespace`] for a namespaced kind
    /// without `metadata.namespace`, [`ApplyError::Serialize`], and [`ApplyError::Api`] for a
    /// refused request.
    pub async fn send(self) -> Result<O, ApplyError> {
        let target = Target::of::<O>(&self.object, &self.dyntype)?;
        let mut body =
            serde_json::to_value(&self.object).map_err(|source| ApplyError::Serialize {
                object: target.describe(),
                source,
            })?;
        prepare_body(&mut body, &target);
        let url = O::url_path(&self.dyntype, target.namespace.as_deref());
        let written: O = send_apply(
            &self.client,
            &url,
            None,
            &target,
            &self.field_manager,
            &body,
            "apply",
        )
        .await?;
        if let Some(own) = &self.own_writes {
            let group = target.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            if !own.accepts(group, &target.kind) {
                own.record_creation(written.meta());
            }
        }
        Ok(written)
    }
}

impl<O> IntoFuture for Apply<O>
where
    O: Resource + Serialize + DeserializeOwned + Clone + Debug + Send + 'static,
    O::DynamicType: Send,
    O::Scope: KindScope,
{
    type Output = Result<O, ApplyError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// Where an object goes: its kind, name and namespace (none for cluster-scoped kinds).
pub(crate) struct Target {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
}

impl Target {
    pub(crate) fn of<O>(object: &O, dyntype: &O::DynamicType) -> Result<Self, ApplyError>
    where
        O: Resource,
        O::Scope: KindScope,
    {
        let kind = O::kind(dyntype).into_owned();
        let meta = object.meta();
        let Some(name) = meta.name.clone() else {
            return Err(ApplyError::MissingName { kind });
        };
        let namespace = match O::Scope::namespaced() {
            Some(true) => match meta.namespace.clone() {
                Some(ns) => Some(ns),
                None => return Err(ApplyError::MissingNamespace { kind, name }),
            },
            Some(false) => None,
            None => meta.namespace.clone(),
        };
        Ok(Self {
            api_version: O::api_version(dyntype).into_owned(),
            kind,
            name,
            namespace,
        })
    }

    pub(crate) fn describe(&self) -> String {
        describe(&self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// Makes `body` an apply configuration: `apiVersion` and `kind` present (types built with
/// `Default` may lack them), no `managedFields`, `resourceVersion` or (for cluster-scoped
/// kinds) `namespace`, which would make the API server reject or precondition the apply, and no
/// `null` fields (see [`drop_nulls`]).
fn prepare_body(body: &mut Value, target: &Target) {
    drop_nulls(body);
    let Some(root) = body.as_object_mut() else {
        return;
    };
    root.insert(
        "apiVersion".into(),
        Value::String(target.api_version.clone()),
    );
    root.insert("kind".into(), Value::String(target.kind.clone()));
    if let Some(metadata) = root.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        metadata.remove("resourceVersion");
        if target.namespace.is_none() {
            metadata.remove("namespace");
        }
    }
}

/// One apply `PATCH` of `body` to `url` (or its `subresource`), retried once with `force` on a
/// conflict.
pub(crate) async fn send_apply<O: DeserializeOwned>(
    client: &Client,
    url: &str,
    subresource: Option<&str>,
    target: &Target,
    field_manager: &str,
    body: &Value,
    operation: &'static str,
) -> Result<O, ApplyError> {
    let api_error = |source: kube::Error| ApplyError::Api {
        operation,
        object: target.describe(),
        field_manager: field_manager.to_string(),
        source: Box::new(source),
    };
    let request = Request::new(url);
    let patch = Patch::Apply(body);
    let build = |params: &PatchParams| match subresource {
        Some(sub) => request.patch_subresource(sub, &target.name, params, &patch),
        None => request.patch(&target.name, params, &patch),
    };
    let params = PatchParams::apply(field_manager);
    let first = build(&params).map_err(|e| api_error(kube::Error::BuildRequest(e)))?;
    match client.request::<O>(first).await {
        Err(error) if is_conflict(&error) => {
            tracing::debug!(
                object = %target.describe(),
                field_manager,
                operation,
                %error,
                "apply conflicts with another field manager; forcing (we own the fields we declare)"
            );
            let forced =
                build(&params.force()).map_err(|e| api_error(kube::Error::BuildRequest(e)))?;
            client.request::<O>(forced).await.map_err(api_error)
        }
        result => result.map_err(api_error),
    }
}
