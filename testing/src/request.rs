//! What an apiserver request is about, read from its method, path and query: the resource (group
//! and plural), the namespace and name, and whether it is a watch, a read or a write. The proxy
//! matches its faults against this.

use std::fmt;

/// A resource of the API, as its requests name it: group (empty for the core group) and plural.
/// The version is left out, so a fault on a kind holds for every version of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// The API group, `""` for the core group (`/api/v1`).
    pub group: String,
    /// The plural resource name, e.g. `configmaps`.
    pub plural: String,
}

impl ResourceKey {
    /// The resource of a kube-rs kind, e.g. `ResourceKey::of::<ConfigMap>()`.
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Self {
            group: K::group(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
        }
    }

    /// A resource by group and plural (`""` for the core group).
    pub fn new(group: impl Into<String>, plural: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            plural: plural.into(),
        }
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// What a request does, as far as faults care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// A GET with `watch=true` (or `watch=1`): a stream of events.
    Watch,
    /// Any other GET (a get or a list), or a HEAD.
    Read,
    /// A POST, PUT, PATCH or DELETE.
    Write,
}

/// One request to a resource, read from its method, path and query. Requests that name no
/// resource (discovery, `/version`, `/healthz`) have none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    /// The resource.
    pub resource: ResourceKey,
    /// The namespace, for a namespaced path.
    pub namespace: Option<String>,
    /// The object's name, unless the request is for a collection.
    pub name: Option<String>,
    /// The subresource (`status`, `scale`, ...), if any.
    pub subresource: Option<String>,
    /// What it does.
    pub verb: Verb,
}

impl ResourceRequest {
    /// Reads a request; `None` for one that names no resource.
    pub fn parse(method: &http::Method, path: &str, query: Option<&str>) -> Option<Self> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        // /api/v1/... or /apis/<group>/<version>/...
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            // `namespaces/<ns>/<plural>...`; `namespaces/<ns>` alone, or with the Namespace's
            // own subresources, is a request for the Namespace object itself.
            ["namespaces", namespace, plural, tail @ ..]
                if !matches!(*plural, "status" | "finalize") =>
            {
                (Some(*namespace), [&[*plural][..], tail].concat())
            }
            _ => (None, rest.to_vec()),
        };
        let (plural, name, subresource) = match rest.as_slice() {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(*name), None),
            [plural, name, subresource] => (*plural, Some(*name), Some(*subresource)),
            _ => return None,
        };
        if plural.is_empty() {
            return None;
        }
        let verb = match *method {
            http::Method::GET if is_watch(query) => Verb::Watch,
            http::Method::GET | http::Method::HEAD => Verb::Read,
            http::Method::POST | http::Method::PUT | http::Method::PATCH | http::Method::DELETE => {
                Verb::Write
            }
            _ => return None,
        };
        Some(Self {
            resource: ResourceKey::new(group, plural),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
            verb,
        })
    }
}

/// Whether a query asks for a watch (`watch=true` or `watch=1`, as the apiserver accepts).
fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn parse(method: Method, path: &str, query: Option<&str>) -> Option<ResourceRequest> {
        ResourceRequest::parse(&method, path, query)
    }

    #[test]
    fn core_and_group_paths_name_their_resource_namespace_and_object() {
        let get = parse(Method::GET, "/api/v1/namespaces/ns/configmaps/cm", None).expect("a get");
        assert_eq!(get.resource, ResourceKey::new("", "configmaps"));
        assert_eq!(get.namespace.as_deref(), Some("ns"));
        assert_eq!(get.name.as_deref(), Some("cm"));
        assert_eq!(get.verb, Verb::Read);

        let status = parse(
            Method::PATCH,
            "/apis/example.com/v1/namespaces/ns/webapps/a/status",
            None,
        )
        .expect("a status patch");
        assert_eq!(status.resource, ResourceKey::new("example.com", "webapps"));
        assert_eq!(status.subresource.as_deref(), Some("status"));
        assert_eq!(status.verb, Verb::Write);

        let watch = parse(
            Method::GET,
            "/apis/apps/v1/deployments",
            Some("resourceVersion=5&watch=true"),
        )
        .expect("a watch");
        assert_eq!(watch.resource.to_string(), "deployments.apps");
        assert_eq!(watch.namespace, None);
        assert_eq!(watch.name, None);
        assert_eq!(watch.verb, Verb::Watch);
    }

    #[test]
    fn namespaces_themselves_are_a_resource() {
        let namespace = parse(Method::DELETE, "/api/v1/namespaces/ns", None).expect("a delete");
        assert_eq!(namespace.resource.plural, "namespaces");
        assert_eq!(namespace.name.as_deref(), Some("ns"));
        assert_eq!(namespace.namespace, None);
        let finalize = parse(Method::PUT, "/api/v1/namespaces/ns/finalize", None).expect("a put");
        assert_eq!(finalize.resource.plural, "namespaces");
        assert_eq!(finalize.subresource.as_deref(), Some("finalize"));
    }

    #[test]
    fn discovery_and_health_name_no_resource() {
        assert_eq!(parse(Method::GET, "/version", None), None);
        assert_eq!(parse(Method::GET, "/apis", None), None);
        assert_eq!(parse(Method::GET, "/api/v1", None), None);
        assert_eq!(parse(Method::GET, "/healthz", None), None);
    }
}
