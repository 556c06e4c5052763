//! Server-side apply, owner references, status writes and conditions: what a reconciler uses to
//! make the cluster look like its object says.
//!
//! - [`Applier`]: a client and a field manager (one stable name per controller). [`Applier::apply`]
//!   starts an [`Apply`]: `.owned_by(&owner)?` adds a controller owner reference, `.await` sends
//!   one server-side apply `PATCH` that creates or updates the object. A conflict with another
//!   field manager is retried once with `force`, because the object we apply is the state we
//!   declare; fields we do not declare stay with their managers. `metadata.managedFields` and
//!   `metadata.resourceVersion` are stripped from the applied object (an apply is not an
//!   optimistic update), and so are `null` fields: a Rust `None` is a field this manager does not
//!   declare, while an applied `null` would clear the value another manager set. Namespaced kinds are applied in `metadata.namespace` (an error when it is
//!   missing), cluster-scoped kinds cluster-wide; [`Applier::apply_with`] takes a
//!   `DynamicObject` and its `ApiResource`.
//! - [`owner_reference`]: a controller owner reference (`controller` and `blockOwnerDeletion`
//!   true) to any [`Owner`]: an object of a typed kind or a projection of one; [`Apply::owned_by`] refuses an owner without a uid (e.g. from a dry run) and a
//!   namespaced owner of an object in another namespace or of a cluster-scoped object.
//! - [`StatusWriter`] ([`Applier::status`]): writes a status through the status subresource,
//!   as a server-side apply under the field manager, only when it differs from the object's
//!   current status ignoring condition `lastTransitionTime`s (and `null` fields, which are not
//!   applied); otherwise no request is sent and
//!   [`StatusWrite::Unchanged`] is returned. It needs `kube::core::object::HasStatus`, which
//!   `#[derive(CustomResource)]` implements for kinds declared with `status = "..."`.
//! - [`conditions`]: `Ready` and other standard conditions on k8s-openapi's `Condition`, and the
//!   schema that makes `conditions` a list map keyed by `type`.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
//! use kube::CustomResource;
//! use kubeapp_operator::apply::{Applier, conditions};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Widget", namespaced, status = "WidgetStatus")]
//! pub struct WidgetSpec { pub greeting: String }
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! pub struct WidgetStatus {
//!     #[serde(default)]
//!     #[schemars(schema_with = "kubeapp_operator::apply::conditions::schema")]
//!     pub conditions: Vec<Condition>,
//! }
//!
//! async fn reconcile(widget: &Widget, applier: &Applier) -> Result<(), kubeapp_operator::apply::ApplyError> {
//!     let config_map = ConfigMap {
//!         metadata: ObjectMeta {
//!             name: widget.metadata.name.clone(),
//!             namespace: widget.metadata.namespace.clone(),
//!             ..Default::default()
//!         },
//!         data: Some([("greeting".to_string(), widget.spec.greeting.clone())].into()),
//!         ..Default::default()
//!     };
//!     applier.apply(config_map).owned_by(widget)?.await?;
//!
//!     let mut status = widget.status.clone().unwrap_or_default();
//!     conditions::set(
//!         &mut status.conditions,
//!         conditions::ready(true, "ConfigMapApplied", "the greeting is published"),
//!         widget.metadata.generation,
//!     );
//!     // No request when the status is what the widget already has.
//!     applier.status(widget).write(status).await?;
//!     Ok(())
//! }
//!
//! # async fn run() -> anyhow::Result<()> {
//! let client = kube::Client::try_default().await?;
//! let applier = Applier::new(client, "widget-controller");
//! # Ok(()) }
//! ```

mod body;
pub mod conditions;
mod error;
mod owner;
mod scope;
mod server_side;
mod status;

pub use error::ApplyError;
pub use owner::{Owner, owner_reference};
pub use scope::KindScope;
pub use server_side::{Applier, Apply};
pub use status::{StatusWrite, StatusWriter};

#[cfg(test)]
mod tests;
