//! [`Component<K>`]: what a component is (the objects it renders for a custom object, whether it
//! is enabled, how its readiness is judged), and [`Session<K>`], what one reconcile shares among
//! its components.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use kube::api::{ApiResource, GroupVersionKind};
use kubeapp_operator::Store;
use serde::Serialize;
use serde_json::Value;

use crate::readiness::{Readiness, readiness};

/// One object a component renders, as the JSON that is applied (`apiVersion` and `kind` set),
/// and its resource (group, version, kind, plural) for the request.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The object.
    pub object: Value,
    /// Where it is applied.
    pub resource: ApiResource,
}

/// [`Rendered::value`]: a `json!` object is an output as it is.
impl From<Value> for Rendered {
    fn from(object: Value) -> Self {
        Self::value(object)
    }
}

impl Rendered {
    /// A typed object (a k8s-openapi type, a derived custom resource).
    ///
    /// # Errors
    ///
    /// [`ComponentError::Failed`] when the object does not serialize.
    pub fn of<R>(object: &R) -> Result<Self, ComponentError>
    where
        R: kube::Resource<DynamicType = ()> + Serialize,
    {
        let mut value = serde_json::to_value(object)
            .map_err(|e| ComponentError::Failed(format!("serializing a {}: {e}", R::kind(&()))))?;
        value["apiVersion"] = R::api_version(&()).into_owned().into();
        value["kind"] = R::kind(&()).into_owned().into();
        Ok(Self {
            object: value,
            resource: ApiResource::erase::<R>(&()),
        })
    }

    /// An untyped object; it must carry its own `apiVersion` and `kind`. Its plural is guessed
    /// from the kind as kube-rs guesses it (`ApiResource::from_gvk`): give irregular kinds as
    /// [`Rendered::with_resource`].
    pub fn value(object: Value) -> Self {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = object["kind"].as_str().unwrap_or_default();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        Self { object, resource }
    }

    /// A `DynamicObject` of `resource` (its `apiVersion` and `kind` are set from `resource`).
    ///
    /// # Errors
    ///
    /// [`ComponentError::Failed`] when the object does not serialize.
    pub fn dynamic(
        object: &kube::api::DynamicObject,
        resource: ApiResource,
    ) -> Result<Self, ComponentError> {
        let mut value = serde_json::to_value(object)
            .map_err(|e| ComponentError::Failed(format!("serializing a {}: {e}", resource.kind)))?;
        value["apiVersion"] = resource.api_version.clone().into();
        value["kind"] = resource.kind.clone().into();
        Ok(Self {
            object: value,
            resource,
        })
    }

    /// An untyped object with its resource.
    pub fn with_resource(object: Value, resource: ApiResource) -> Self {
        Self { object, resource }
    }

    /// `Kind/name` for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}/{}",
            self.object["kind"].as_str().unwrap_or("?"),
            self.object["metadata"]["name"].as_str().unwrap_or("?")
        )
    }
}

/// Why a component did not render, deploy or become ready.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// An expected wait: a prerequisite is not there yet (a Secret another operator writes, a
    /// result another component publishes). Halts the component and what depends on it without
    /// being an error; the reconcile is retried.
    #[error("waiting: {0}")]
    Waiting(String),
    /// A failure: halts the component and everything downstream, and is reported.
    #[error("{0}")]
    Failed(String),
}

/// A component of `K`'s graph, boxed: what a [`ComponentGraph`](crate::ComponentGraph) holds
/// unless told otherwise.
pub type BoxComponent<K> = Box<dyn Component<K>>;

/// A component of kind `K`'s graph; see the [module docs](self).
pub trait Component<K>: Send + Sync + 'static {
    /// Whether the component is wanted for this object (a spec toggle, say). A disabled
    /// component's objects are deleted. Default: enabled.
    fn enabled(&self, session: &Session<K>) -> bool {
        let _ = session;
        true
    }

    /// The objects to apply, rendered from the custom object and what other components
    /// published in the session.
    ///
    /// # Errors
    ///
    /// [`ComponentError::Waiting`] for a missing prerequisite, [`ComponentError::Failed`]
    /// otherwise.
    fn render(&self, session: &Session<K>) -> Result<Vec<Rendered>, ComponentError>;

    /// Whether one deployed object (as the apiserver returned it) is ready. Default: the
    /// built-in rules of [`readiness`](mod@crate::readiness).
    fn ready(&self, object: &Value) -> Readiness {
        readiness(object)
    }
}

/// A [`Component`] from a render closure, enabled always (see [`component_fn`]).
pub struct ComponentFn<F>(F);

/// A component from `|session| Ok(vec![Rendered::of(&object)?])`.
pub fn component_fn<K, F>(render: F) -> ComponentFn<F>
where
    F: Fn(&Session<K>) -> Result<Vec<Rendered>, ComponentError> + Send + Sync + 'static,
{
    ComponentFn(render)
}

impl<K, F> Component<K> for ComponentFn<F>
where
    K: 'static,
    F: Fn(&Session<K>) -> Result<Vec<Rendered>, ComponentError> + Send + Sync + 'static,
{
    fn render(&self, session: &Session<K>) -> Result<Vec<Rendered>, ComponentError> {
        (self.0)(session)
    }
}

/// A component enabled only when `enabled` says so for the custom object (a spec toggle); see
/// [`GraphBuilder::render_when`](crate::GraphBuilder::render_when).
pub struct EnabledWhen<C, E> {
    component: C,
    enabled: E,
}

impl<C, E> EnabledWhen<C, E> {
    /// `component`, enabled when `enabled(object)`.
    pub fn new(component: C, enabled: E) -> Self {
        Self { component, enabled }
    }
}

impl<K, C, E> Component<K> for EnabledWhen<C, E>
where
    K: 'static,
    C: Component<K>,
    E: Fn(&K) -> bool + Send + Sync + 'static,
{
    fn enabled(&self, session: &Session<K>) -> bool {
        (self.enabled)(session.object()) && self.component.enabled(session)
    }

    fn render(&self, session: &Session<K>) -> Result<Vec<Rendered>, ComponentError> {
        self.component.render(session)
    }

    fn ready(&self, object: &Value) -> Readiness {
        self.component.ready(object)
    }
}

/// The informer caches components may read, one [`Store<T>`] per object type (given to
/// [`ComponentsReconciler::reads`](crate::ComponentsReconciler::reads)).
#[derive(Clone, Default)]
pub struct Stores {
    stores: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Stores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stores")
            .field("count", &self.stores.len())
            .finish()
    }
}

impl Stores {
    /// Adds (or replaces) the store of `T`.
    pub fn insert<T: 'static>(&mut self, store: Store<T>) {
        self.stores.insert(TypeId::of::<T>(), Arc::new(store));
    }

    /// The store of `T`, if one was given.
    pub fn get<T: 'static>(&self) -> Option<&Store<T>> {
        self.stores.get(&TypeId::of::<T>())?.downcast_ref()
    }
}

/// What one reconcile's components share: the custom object, read access to the informer
/// caches the reconciler was given, and typed results components publish for each other (one
/// value per type; a later publish replaces it).
pub struct Session<K> {
    object: Arc<K>,
    stores: Arc<Stores>,
    results: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl<K> fmt::Debug for Session<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl<K> Session<K> {
    /// A session for reconciling `object`, with no caches to read (a dry run, a unit test).
    pub fn new(object: Arc<K>) -> Self {
        Self::with_stores(object, Arc::default())
    }

    /// A session for reconciling `object` that reads `stores`.
    pub(crate) fn with_stores(object: Arc<K>, stores: Arc<Stores>) -> Self {
        Self {
            object,
            stores,
            results: Mutex::default(),
        }
    }

    /// The informer cache of `T` objects (read-only: `get`, `list`, indexes).
    ///
    /// # Errors
    ///
    /// [`ComponentError::Failed`] naming `T` when the reconciler was given no store of `T`
    /// (always so in a dry run, which has no cluster).
    pub fn store<T: 'static>(&self) -> Result<&Store<T>, ComponentError> {
        self.stores.get::<T>().ok_or_else(|| {
            ComponentError::Failed(format!(
                "no cache of {} to read: give its store to ComponentsReconciler::reads (a dry run \
                 has none)",
                std::any::type_name::<T>()
            ))
        })
    }

    /// The custom object being reconciled.
    pub fn object(&self) -> &K {
        &self.object
    }

    /// Publishes a result for the components that depend on this one.
    pub fn publish<T: Any + Send + Sync>(&self, value: T) {
        self.results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// A result published earlier in this reconcile.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = self
            .results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&TypeId::of::<T>())
            .cloned()?;
        value.downcast::<T>().ok()
    }

    /// A result published earlier, or [`ComponentError::Waiting`] naming what is missing.
    ///
    /// # Errors
    ///
    /// When nothing of type `T` was published.
    pub fn require<T: Any + Send + Sync>(&self) -> Result<Arc<T>, ComponentError> {
        self.get::<T>().ok_or_else(|| {
            ComponentError::Waiting(format!("no {} published yet", std::any::type_name::<T>()))
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn rendered_typed_objects_carry_api_version_and_kind() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("settings".into());
        let rendered = Rendered::of(&cm).expect("serializes");
        assert_eq!(rendered.object["apiVersion"], "v1");
        assert_eq!(rendered.object["kind"], "ConfigMap");
        assert_eq!(rendered.describe(), "ConfigMap/settings");
    }

    #[test]
    fn dynamic_objects_carry_their_resources_api_version_and_kind() {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
            "gadgets",
        );
        let object = kube::api::DynamicObject::new("g", &resource);
        let rendered = Rendered::dynamic(&object, resource).expect("serializes");
        assert_eq!(rendered.object["apiVersion"], "example.com/v1");
        assert_eq!(rendered.resource.plural, "gadgets");
        assert_eq!(rendered.describe(), "Gadget/g");
    }

    #[test]
    fn a_session_shares_typed_results_and_names_a_missing_one() {
        #[derive(Debug, PartialEq)]
        struct DatabaseUrl(String);
        let session = Session::new(Arc::new(()));
        let missing = session.require::<DatabaseUrl>().expect_err("not yet");
        assert!(matches!(missing, ComponentError::Waiting(ref m) if m.contains("DatabaseUrl")));
        session.publish(DatabaseUrl("postgres://db".into()));
        assert_eq!(
            session.require::<DatabaseUrl>().expect("published").0,
            "postgres://db"
        );
        assert!(session.get::<String>().is_none(), "results are typed");
    }

    #[test]
    fn a_json_value_converts_as_rendered_value_does() {
        let object = serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                                        "metadata": {"name": "web"}});
        let rendered: Rendered = object.clone().into();
        assert_eq!(rendered, Rendered::value(object));
        assert_eq!(rendered.resource.plural, "ingresses");
    }
}
