//! The object a command is about, given as `KIND/NAME [-n NAMESPACE]`: the kind resolved by
//! discovery (its name or plural, optionally with `.GROUP`), with the API to read it through.
//! Shared by the gate commands and `trace`.

use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery::{Discovery, Scope};

/// An object on the cluster, resolved.
pub struct Target {
    /// The client it was resolved with.
    pub client: kube::Client,
    /// Its kind.
    pub resource: ApiResource,
    /// Its name.
    pub name: String,
    /// Its namespace (`None` for a cluster-scoped kind).
    pub namespace: Option<String>,
    /// Reads and writes objects of its kind in its namespace.
    pub api: Api<DynamicObject>,
    /// How messages name it: `kind/name in namespace`.
    pub described: String,
}

/// Why the object could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The object argument is not KIND/NAME.
    #[error("{0:?}: expected KIND/NAME, e.g. canary/web")]
    BadObject(String),
    /// No kubeconfig or in-cluster configuration.
    #[error("connecting to the cluster")]
    Client(#[source] kube::Error),
    /// Discovery failed.
    #[error("discovering the cluster's kinds")]
    Discovery(#[source] kube::Error),
    /// No served kind has that name.
    #[error("the cluster serves no kind named {0:?}")]
    UnknownKind(String),
    /// More than one served kind has that name.
    #[error("{kind:?} names more than one kind ({candidates}): add the group, KIND.GROUP/NAME")]
    AmbiguousKind {
        /// The name given.
        kind: String,
        /// The kinds it could be.
        candidates: String,
    },
}

/// Resolves `object` (KIND/NAME) in `namespace` (default: the kubeconfig context's) through the
/// default client.
pub async fn resolve(object: &str, namespace: Option<&str>) -> Result<Target, TargetError> {
    let (kind, name) = object
        .split_once('/')
        .filter(|(kind, name)| !kind.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| TargetError::BadObject(object.to_string()))?;
    let client = kube::Client::try_default()
        .await
        .map_err(TargetError::Client)?;
    let (resource, scope) = resolve_kind(&client, kind).await?;
    let lower = resource.kind.to_lowercase();
    let (api, namespace, described) = match scope {
        Scope::Cluster => (
            Api::all_with(client.clone(), &resource),
            None,
            format!("{lower}/{name}"),
        ),
        Scope::Namespaced => {
            let namespace = namespace.map_or_else(
                || client.default_namespace().to_string(),
                ToString::to_string,
            );
            (
                Api::namespaced_with(client.clone(), &namespace, &resource),
                Some(namespace.clone()),
                format!("{lower}/{name} in {namespace}"),
            )
        }
    };
    Ok(Target {
        client,
        resource,
        name: name.to_string(),
        namespace,
        api,
        described,
    })
}

/// The served kind `kind` names (its name or plural, optionally followed by `.GROUP`), and its
/// scope.
async fn resolve_kind(
    client: &kube::Client,
    kind: &str,
) -> Result<(ApiResource, Scope), TargetError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(TargetError::Discovery)?;
    let wanted = kind.to_lowercase();
    let matches: Vec<(ApiResource, Scope)> = discovery
        .groups()
        .flat_map(|group| group.recommended_resources())
        .map(|(resource, capabilities)| (resource, capabilities.scope))
        .filter(|(r, _)| {
            [r.kind.to_lowercase(), r.plural.clone()]
                .iter()
                .any(|name| wanted == *name || wanted == format!("{name}.{}", r.group))
        })
        .collect();
    match matches.as_slice() {
        [] => Err(TargetError::UnknownKind(kind.to_string())),
        [one] => Ok(one.clone()),
        many => Err(TargetError::AmbiguousKind {
            kind: kind.to_string(),
            candidates: many
                .iter()
                .map(|(r, _)| format!("{}.{}", r.plural, r.group))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}
