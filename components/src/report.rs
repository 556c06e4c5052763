//! What a run of a [`ComponentGraph`](crate::ComponentGraph) did, per component: the deploy
//! [`Outcome`], the [`Verified`] result, and the [`ComponentObject`]s it applied, gathered in a
//! [`RunReport`]. The vocabulary that [`run`](mod@crate::run) produces and that the
//! [inventory](crate::inventory), the [metrics](crate::metrics) and the
//! [status](crate::status) read; it imports only [`component`](crate::component).

use kube::api::{ApiResource, GroupVersionKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::component::Rendered;

/// One object a component applied, as recorded in `status.components.objects`.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ComponentObject {
    /// The component that applied it.
    pub component: String,
    /// Its `apiVersion` (`apps/v1`, `v1`).
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its resource's plural (`deployments`), for the delete request.
    pub plural: String,
    /// Its namespace; none for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl ComponentObject {
    /// The record of `stored` (an object as the cluster returned it) applied as `rendered` by
    /// `component`; `None` when the object has no name.
    pub fn of(component: &str, rendered: &Rendered, stored: &Value) -> Option<Self> {
        let metadata = &stored["metadata"];
        let name = metadata["name"]
            .as_str()
            .or_else(|| rendered.object["metadata"]["name"].as_str())?;
        let namespace = metadata["namespace"]
            .as_str()
            .or_else(|| rendered.object["metadata"]["namespace"].as_str());
        Some(Self {
            component: component.to_string(),
            api_version: rendered.resource.api_version.clone(),
            kind: rendered.resource.kind.clone(),
            plural: rendered.resource.plural.clone(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        })
    }

    /// The object as a [`Rendered`] carrying only its identity, for a delete.
    pub fn to_rendered(&self) -> Rendered {
        let (group, version) = self
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", self.api_version.as_str()));
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, &self.kind),
            &self.plural,
        );
        let mut metadata = json!({"name": self.name});
        if let Some(namespace) = &self.namespace {
            metadata["namespace"] = namespace.clone().into();
        }
        Rendered::with_resource(
            json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}),
            resource,
        )
    }

    /// The identity without the component (the same object recorded under two components, after
    /// a move, is one object).
    pub(crate) fn identity(&self) -> (&str, &str, Option<&str>, &str) {
        (
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }
}

/// What the deploy phase did with one component.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Applied; the objects as the cluster returned them.
    Deployed(Vec<Value>),
    /// Disabled by the spec; its objects were deleted.
    Disabled,
    /// An expected wait (a prerequisite or an edge check); not an error.
    Waiting(String),
    /// Failed (rendering or applying).
    Failed(String),
    /// Not attempted: the named dependency did not deploy.
    Halted {
        /// The dependency that stopped it.
        by: String,
    },
}

/// What the verify phase found for one component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verified {
    /// Every object is ready.
    Ready,
    /// An object is not ready yet (`Kind/name: reason`).
    NotReady(String),
    /// An object will not become ready without a change.
    Failed(String),
    /// Not checked: a dependency is not verified, or the component did not deploy.
    Skipped,
}

/// The outcome of a reconcile's two phases, per component, in declaration order.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// Component names, declaration order.
    pub names: Vec<String>,
    /// Deploy outcomes, same order.
    pub deployed: Vec<Outcome>,
    /// Verify outcomes, same order.
    pub verified: Vec<Verified>,
    /// The objects each component applied (empty unless it deployed), same order: what the
    /// [inventory](crate::inventory) records.
    pub objects: Vec<Vec<ComponentObject>>,
}

impl RunReport {
    /// Whether every enabled component deployed (the deploy phase completed).
    pub(crate) fn all_deployed(&self) -> bool {
        self.deployed
            .iter()
            .all(|d| matches!(d, Outcome::Disabled | Outcome::Deployed(_)))
    }

    /// Whether every enabled component deployed and verified.
    pub(crate) fn all_ready(&self) -> bool {
        self.deployed
            .iter()
            .zip(&self.verified)
            .all(|(d, v)| matches!(d, Outcome::Disabled) || matches!(v, Verified::Ready))
    }

    /// Names of the components whose outcome matches `pick`.
    pub fn names_where(&self, pick: impl Fn(&Outcome, &Verified) -> bool) -> Vec<&str> {
        self.names
            .iter()
            .zip(self.deployed.iter().zip(&self.verified))
            .filter(|(_, (d, v))| pick(d, v))
            .map(|(name, _)| name.as_str())
            .collect()
    }
}
