//! Reading each listed or watched object straight from the response's bytes into the informer's
//! type.
//!
//! kube-runtime's watcher decodes list pages and watch events with `serde_json::from_str` into
//! the type it is given. Given `DynamicObject`, that costs three trees per object: kube-core's
//! `DynamicObject` has two `#[serde(flatten)]` fields, so serde first buffers the object in its
//! private `Content` tree, builds the metadata and a `serde_json::Value` body from it, and the
//! informer then reads the typed object out of the `Value` (`decode.rs`). A profile of a sync of
//! 10,000 Pods put 1.74x kube-runtime's CPU on that (`docs/performance/README.md`).
//!
//! So the watcher is given [`Read<R>`] instead: its `Deserialize` borrows the object's JSON text
//! from the list page (as serde_json's `RawValue` does, no copy), reads the informer's type
//! from it in one pass (`R`: a typed kind, or a projection and its metadata), and only when that
//! fails reads the text again as a `DynamicObject`, so that an object that does not fit the type
//! still fails alone, as an [`Undecodable`]. A watch event's object is borrowed the same way,
//! as the apiserver writes its `type` before its `object`. kube's `WatchEvent` is an adjacently
//! tagged enum, and serde buffers the object of one written the other way round (before it
//! knows the variant); such an object is read from a `serde_json::Value` of that buffer.
//!
//! `managedFields` are dropped and the typed transform runs after the read (a `Deserialize` has
//! no options), by [`lister`]. An informer with a transform of the raw `DynamicObject`
//! ([`ListWatchOptions::transform`](super::ListWatchOptions::transform)) and untyped kinds keep
//! listing dynamically ([`Lister::dynamic`]).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta};
use kube::core::DynamicResourceScope;
use kube::runtime::watcher;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize};

use super::TypedTransform;
use crate::list_scope::{Listed, ListedObject, Lister, map_event};
use crate::object::{KubeObject, ObjectKey, Undecodable, share};
use crate::projection::{Projected, Projection};

/// How an informer's type is read from one object's JSON text.
pub(crate) trait ReadObject: Send + Sync + 'static {
    /// What the informer caches.
    type Out: KubeObject + Clone;

    /// `text` (one object's JSON) as `Out`.
    fn read(text: &str) -> serde_json::Result<Self::Out>;

    /// `value` (one object, already parsed) as `Out`.
    fn read_value(value: &serde_json::Value) -> serde_json::Result<Self::Out>;

    /// The object's metadata, to drop `managedFields` after the read.
    fn meta_mut(out: &mut Self::Out) -> &mut ObjectMeta;

    /// The Rust type an object did not fit, for its [`Undecodable`].
    fn expected() -> &'static str;
}

/// Reads the typed kind `K`.
pub(crate) struct Typed<K>(PhantomData<fn() -> K>);

impl<K> ReadObject for Typed<K>
where
    K: kube::Resource + DeserializeOwned + Serialize + Clone + fmt::Debug + Send + Sync + 'static,
{
    type Out = K;

    fn read(text: &str) -> serde_json::Result<K> {
        serde_json::from_str(text)
    }

    fn read_value(value: &serde_json::Value) -> serde_json::Result<K> {
        K::deserialize(value)
    }

    fn meta_mut(out: &mut K) -> &mut ObjectMeta {
        out.meta_mut()
    }

    fn expected() -> &'static str {
        std::any::type_name::<K>()
    }
}

/// Reads the projection `P` and the object's metadata (two passes over the text, each skipping
/// what it does not name).
pub(crate) struct ProjectionOf<P>(PhantomData<fn() -> P>);

/// The metadata of an object, every other field skipped.
#[derive(Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl<P: Projection> ReadObject for ProjectionOf<P> {
    type Out = Projected<P>;

    fn read(text: &str) -> serde_json::Result<Projected<P>> {
        let fields = serde_json::from_str::<P>(text)?;
        let MetadataOnly { metadata } = serde_json::from_str(text)?;
        Ok(Projected::new(metadata, fields))
    }

    fn read_value(value: &serde_json::Value) -> serde_json::Result<Projected<P>> {
        let fields = P::deserialize(value)?;
        let MetadataOnly { metadata } = MetadataOnly::deserialize(value)?;
        Ok(Projected::new(metadata, fields))
    }

    fn meta_mut(out: &mut Projected<P>) -> &mut ObjectMeta {
        out.metadata_mut()
    }

    fn expected() -> &'static str {
        std::any::type_name::<P>()
    }
}

/// One object as kube-runtime's watcher decodes it for a [`lister`]: read into `R::Out`, or the
/// object as a `DynamicObject` with the reason it did not fit.
pub(crate) struct Read<R: ReadObject>(Result<R::Out, Arc<Unfit>>);

/// An object that does not fit the informer's type.
pub(crate) struct Unfit {
    object: DynamicObject,
    error: serde_json::Error,
}

impl<R: ReadObject> Clone for Read<R> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<R: ReadObject> fmt::Debug for Read<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(object) => f.debug_tuple("Read").field(object).finish(),
            Err(unfit) => f
                .debug_struct("Unfit")
                .field("object", &unfit.object)
                .field("error", &unfit.error)
                .finish(),
        }
    }
}

impl<'de, R: ReadObject> Deserialize<'de> for Read<R> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = match deserializer.deserialize_newtype_struct(RAW_VALUE_TOKEN, TextVisitor)? {
            Text::Borrowed(text) => R::read(text).map_err(|error| {
                serde_json::from_str::<DynamicObject>(text).map(|object| (object, error))
            }),
            Text::Parsed(value) => R::read_value(&value)
                .map_err(|error| serde_json::from_value(value).map(|object| (object, error))),
        };
        match read {
            Ok(object) => Ok(Self(Ok(object))),
            Err(Ok((object, error))) => Ok(Self(Err(Arc::new(Unfit { object, error })))),
            // Not an object at all: a dynamic list fails on it the same way.
            Err(Err(not_an_object)) => Err(D::Error::custom(not_an_object)),
        }
    }
}

/// The name under which serde_json hands a value's text to `RawValue` (its `raw.rs`); asked
/// for it, serde_json's deserializer calls `visit_map` with one entry whose value is the text,
/// while any other deserializer (serde's buffer) calls `visit_newtype_struct`.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// One object's JSON: its text borrowed from the response, or already parsed (serde buffered
/// it: a watch event whose `object` comes before its `type`).
enum Text<'de> {
    Borrowed(&'de str),
    Parsed(serde_json::Value),
}

struct TextVisitor;

impl<'de> serde::de::Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    /// serde_json's answer: one entry, the key naming the token, the value the text.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
        if map.next_key::<serde::de::IgnoredAny>()?.is_none() {
            return Err(A::Error::custom("no raw value in the map"));
        }
        map.next_value::<&'de str>().map(Text::Borrowed)
    }

    /// Any other deserializer.
    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Text<'de>, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Text::Parsed)
    }
}

impl<R: ReadObject> kube::Resource for Read<R> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(object) => object.metadata(),
            Err(unfit) => &unfit.object.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => R::meta_mut(object),
            Err(unfit) => &mut unique(unfit).object.metadata,
        }
    }
}

impl Unfit {
    /// A copy, for the rare shared one (the watcher never clones its objects):
    /// `serde_json::Error` is not `Clone`, so the copy keeps the error's message.
    fn copy(&self) -> Self {
        Self {
            object: self.object.clone(),
            error: serde_json::Error::custom(self.error.to_string()),
        }
    }
}

/// `unfit` made unique to change it.
fn unique(unfit: &mut Arc<Unfit>) -> &mut Unfit {
    if Arc::get_mut(unfit).is_none() {
        *unfit = Arc::new(unfit.copy());
    }
    Arc::get_mut(unfit).unwrap_or_else(|| unreachable!("replaced by a unique copy above"))
}

/// The lister of an informer of `resource` that reads each object as `R` (see the
/// [module docs](self)), then drops `managedFields` unless `keep_managed_fields` and runs
/// `transform`.
pub(crate) fn lister<R: ReadObject>(
    resource: ApiResource,
    keep_managed_fields: bool,
    transform: Option<TypedTransform<R::Out>>,
) -> Lister {
    Lister::new(move |api: Api<DynamicObject>, config: watcher::Config| {
        let namespace = api.namespace().map(str::to_string);
        let client = api.into_client();
        let api: Api<Read<R>> = match &namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let transform = transform.clone();
        watcher::watcher(api, config)
            .map(move |item| {
                item.map(|event| {
                    map_event(event, |read| {
                        listed::<R>(read, keep_managed_fields, &transform)
                    })
                })
            })
            .boxed()
    })
}

/// `read` as the informer caches it.
fn listed<R: ReadObject>(
    read: Read<R>,
    keep_managed_fields: bool,
    transform: &Option<TypedTransform<R::Out>>,
) -> ListedObject {
    let object = match read.0 {
        Ok(mut object) => {
            if !keep_managed_fields {
                R::meta_mut(&mut object).managed_fields = None;
            }
            if let Some(transform) = transform {
                transform(&mut object);
            }
            share(object)
        }
        Err(unfit) => {
            let Unfit { mut object, error } =
                Arc::try_unwrap(unfit).unwrap_or_else(|shared| shared.copy());
            if !keep_managed_fields {
                object.metadata.managed_fields = None;
            }
            share(Undecodable::new(object, &error, R::expected()))
        }
    };
    ListedObject(Listed::Read {
        key: ObjectKey::of(object.as_ref()),
        object,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How an object's JSON reached [`TextVisitor`].
    #[derive(Clone, Debug, PartialEq)]
    enum Reached {
        Borrowed(String),
        Parsed,
    }

    #[derive(Clone)]
    struct Probe(Reached);

    impl<'de> Deserialize<'de> for Probe {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            Ok(Probe(
                match deserializer.deserialize_newtype_struct(RAW_VALUE_TOKEN, TextVisitor)? {
                    Text::Borrowed(text) => Reached::Borrowed(text.to_string()),
                    Text::Parsed(_) => Reached::Parsed,
                },
            ))
        }
    }

    /// The fast path is taken where it can be: a list item's text is borrowed (if serde_json
    /// stopped answering the token, every list would silently take the slow path).
    #[test]
    fn list_items_and_watch_events_are_borrowed_unless_serde_buffers_them() {
        let list = r#"{"metadata": {}, "items": [ {"a": [1, 2]} ]}"#;
        let list: kube::core::ObjectList<Probe> = serde_json::from_str(list).expect("a list");
        let items: Vec<&Reached> = list.items.iter().map(|probe| &probe.0).collect();
        assert_eq!(items, [&Reached::Borrowed(r#"{"a": [1, 2]}"#.to_string())]);

        let reached = |line: &str| {
            let event: kube::core::WatchEvent<Probe> =
                serde_json::from_str(line).expect("an event");
            let kube::core::WatchEvent::Added(Probe(reached)) = event else {
                panic!("an Added event");
            };
            reached
        };
        // The apiserver writes the type first: serde reads the object straight from the line.
        assert_eq!(
            reached(r#"{"type": "ADDED", "object": {"a": 1}}"#),
            Reached::Borrowed(r#"{"a": 1}"#.to_string())
        );
        // The other order makes serde buffer the object before it knows the variant.
        assert_eq!(
            reached(r#"{"object": {"a": 1}, "type": "ADDED"}"#),
            Reached::Parsed
        );
    }
}
