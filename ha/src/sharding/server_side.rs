//! The server-side shard selector: a replica asks the apiserver for its share only, when the
//! apiserver can do it.
//!
//! A shared informer made while [`shard_scopes`] are the registry's list scopes
//! ([`Informers::list_in`](kubeapp_operator::Informers::list_in)) lists in a [`ShardScope`], the
//! core's [`ListScope`] of a sharded kind: the slots its controller *wants* cached (a sharded
//! controller sets its owned slots at the start of each term; nothing else sets it) and the
//! slots its current list+watch is *filtered to*. The informer's watch (`scoped.rs`) follows
//! the wanted slots: when they change and the apiserver honours
//! the selector, it drops its list or watch and lists again through a client carrying
//! [`ShardSelectorLayer`](super::selector_layer::ShardSelectorLayer) with the new selector; the
//! re-list forgets cached objects outside the new slots without reporting them deleted.
//!
//! Whether the apiserver honours the selector is probed once per informer, the first time it
//! is wanted ([`probe`]); if it does not (or the probe fails), the informer keeps watching every
//! object and the controller's client-side filter does the sharding, as without this module.

use std::sync::{Arc, Mutex, PoisonError};

use http::Request;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use kubeapp_operator::list_scope::{ListRange, ListScope, ListScopes, Lister, RawWatch};
use kubeapp_operator::object::SharedObject;
use prometheus::IntGauge;
use tokio::sync::watch;

use super::assignment::{SlotSet, slot_of_uid};
use super::scoped::scoped_watch;
use super::selector_layer::{SHARD_SELECTOR_PARAM, ShardSelection};

/// What one shared informer caches: the slots wanted and the slots its watch is filtered to;
/// see the [module docs](self).
#[derive(Debug)]
pub(crate) struct ShardScope {
    /// The slots the controller wants cached (`None`: every object).
    wanted: watch::Sender<Option<SlotSet>>,
    /// The slots the current list+watch asks the apiserver for (`None`: every object). Set
    /// before that list+watch starts and not changed while it runs.
    filtered: Mutex<Option<SlotSet>>,
    /// The selector string of `filtered`, read by the client layer of the informer's requests.
    pub(crate) selection: ShardSelection,
    /// Set to 1 when the apiserver honours the selector, 0 when it does not.
    gauge: Mutex<Option<IntGauge>>,
}

impl Default for ShardScope {
    fn default() -> Self {
        Self {
            wanted: watch::Sender::new(None),
            filtered: Mutex::new(None),
            selection: ShardSelection::default(),
            gauge: Mutex::new(None),
        }
    }
}

impl ShardScope {
    /// Asks the informer to cache only `slots` (where the apiserver can filter).
    pub(crate) fn want(&self, slots: SlotSet) {
        self.wanted.send_if_modified(|wanted| {
            let changed = *wanted != Some(slots);
            *wanted = Some(slots);
            changed
        });
    }

    /// Follows the wanted slots.
    pub(crate) fn wanted(&self) -> watch::Receiver<Option<SlotSet>> {
        self.wanted.subscribe()
    }

    /// The slots the current list+watch is filtered to (`None`: every object).
    pub(crate) fn filtered(&self) -> Option<SlotSet> {
        *self.filtered.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `slots` the filter of the list+watch about to start.
    pub(crate) fn filter(&self, slots: Option<SlotSet>) {
        *self.filtered.lock().unwrap_or_else(PoisonError::into_inner) = slots;
        self.selection.set(slots.and_then(|slots| slots.selector()));
    }

    /// Reports the probe's answer in `gauge` (`shard_server_side_selector`).
    pub(crate) fn report_to(&self, gauge: IntGauge) {
        *self.gauge.lock().unwrap_or_else(PoisonError::into_inner) = Some(gauge);
    }

    /// Records the probe's answer in the gauge, if one was given.
    pub(crate) fn record(&self, honoured: bool) {
        if let Some(gauge) = &*self.gauge.lock().unwrap_or_else(PoisonError::into_inner) {
            gauge.set(i64::from(honoured));
        }
    }
}

/// The shard scope is the core's list scope of a sharded kind: its watch follows the wanted
/// slots (`scoped.rs`), and a list filtered to slots covers only the objects in them.
impl ListScope for ShardScope {
    fn watch(
        self: Arc<Self>,
        api: Api<DynamicObject>,
        resource: &ApiResource,
        config: watcher::Config,
        lister: Lister,
    ) -> RawWatch {
        scoped_watch(api, resource, config, self, lister)
    }

    fn list_range(&self) -> Option<ListRange> {
        let slots = self.filtered()?;
        Some(Arc::new(move |object: &SharedObject| {
            slots.contains(slot_of_uid(object.metadata().uid.as_deref().unwrap_or("")))
        }))
    }
}

/// The [`ListScopes`] of a sharded app: every shared informer made from here on gets
/// a shard scope (which watches every object until a sharded term asks for its share). Hand it
/// to [`Informers::list_in`](kubeapp_operator::Informers::list_in) before the kinds are
/// registered; without it, a sharded controller caches every object and filters them itself.
pub fn shard_scopes() -> ListScopes {
    Arc::new(|_: &ApiResource| -> Arc<dyn ListScope> { Arc::new(ShardScope::default()) })
}

/// A selector the apiserver's parser rejects (start not below end), to tell whether it parses
/// the parameter at all.
const INVALID_SELECTOR: &str =
    "shardRange(object.metadata.uid, '0x0000000000000001', '0x0000000000000000')";

/// Whether the apiserver filters lists and watches of `collection` by `shardSelector`.
///
/// Facts from kube-apiserver v1.36.3 (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`
/// `ListPredicate` and `Watch`): with the `ShardedListAndWatch` gate on, the parameter is parsed
/// and an invalid selector fails the request ("invalid shard selector"); with the gate off it is
/// decoded into `ListOptions` and ignored. A honoured list of a built-in kind echoes the
/// selector in `metadata.shardInfo`, but a custom resource's list (unstructured) has no such
/// field. So: a list with `selector` and `limit=1` that carries `metadata.shardInfo` says yes;
/// otherwise a list with an invalid selector that the apiserver rejects for it says yes, and
/// one it answers says no.
///
/// # Errors
///
/// When a probe request fails for another reason (network, authorization).
pub(crate) async fn probe(
    client: &kube::Client,
    collection: &str,
    selector: &str,
) -> Result<bool, kube::Error> {
    let list = |selector: &str| -> Result<Request<Vec<u8>>, kube::Error> {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("limit", "1")
            .append_pair(SHARD_SELECTOR_PARAM, selector)
            .finish();
        Request::get(format!("{collection}?{query}"))
            .body(Vec::new())
            .map_err(kube::Error::HttpError)
    };
    let text = client.request_text(list(selector)?).await?;
    let echoed = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|list| list.pointer("/metadata/shardInfo/selector").cloned());
    if echoed.is_some() {
        return Ok(true);
    }
    match client.request_text(list(INVALID_SELECTOR)?).await {
        Ok(_) => Ok(false),
        Err(kube::Error::Api(status)) if status.message.contains("shard") => Ok(true),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_sets_the_selection_the_layer_reads() {
        let scope = ShardScope::default();
        assert_eq!(scope.filtered(), None);
        let mut slots = SlotSet::EMPTY;
        slots.insert(3);
        scope.filter(Some(slots));
        assert_eq!(scope.filtered(), Some(slots));
        assert_eq!(
            scope.selection.get().as_deref(),
            Some("shardRange(object.metadata.uid, '0x0300000000000000', '0x0400000000000000')")
        );
        scope.filter(None);
        assert_eq!(scope.selection.get(), None);
    }

    #[test]
    fn wanting_the_same_slots_again_is_no_change() {
        let scope = ShardScope::default();
        let mut wanted = scope.wanted();
        let mut slots = SlotSet::EMPTY;
        slots.insert(7);
        scope.want(slots);
        assert!(wanted.has_changed().unwrap());
        wanted.borrow_and_update();
        scope.want(slots);
        assert!(!wanted.has_changed().unwrap());
    }
}
