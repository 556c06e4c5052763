//! The list+watch of a shared informer that follows its [`ShardScope`]: when the wanted slots
//! change and the apiserver honours the shard selector, the current list or watch is dropped
//! and a new one starts (a full list first) with the new selector. The new list begins with
//! `Event::Init`, which the informer turns into a list whose end forgets the cached objects
//! outside the new slots (see `cache.rs`).

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use tokio::sync::watch;

use super::{RawEvents, backoff};
use crate::sharding::assignment::SlotSet;
use crate::sharding::selector_layer::{ShardSelectorLayer, layered_client};
use crate::sharding::server_side::{ShardScope, probe};

/// The raw events of `api` with `config`, following `scope`; see the [module docs](self).
pub(super) fn scoped_watch(
    api: Api<DynamicObject>,
    resource: &ApiResource,
    config: watcher::Config,
    scope: Arc<ShardScope>,
) -> RawEvents {
    let collection = api.resource_url().to_string();
    let client = api.clone().into_client();
    let layered = layered_client(
        client.clone(),
        ShardSelectorLayer::new(collection.clone(), scope.selection.clone()),
    );
    let layered = match api.namespace() {
        Some(ns) => Api::namespaced_with(layered, ns, resource),
        None => Api::all_with(layered, resource),
    };
    let state = Scoped {
        current: start(&layered, &config),
        wanted: scope.wanted(),
        layered,
        config,
        client,
        collection,
        scope,
        honoured: None,
        kind: resource.kind.clone(),
    };
    futures::stream::unfold(state, Scoped::next).boxed()
}

fn start(api: &Api<DynamicObject>, config: &watcher::Config) -> RawEvents {
    backoff::backoff_until_data(watcher::watcher(api.clone(), config.clone()).boxed())
}

struct Scoped {
    current: RawEvents,
    wanted: watch::Receiver<Option<SlotSet>>,
    /// The informer's `Api` over a client carrying the shard selector layer.
    layered: Api<DynamicObject>,
    config: watcher::Config,
    /// The plain client, for the probe.
    client: kube::Client,
    collection: String,
    scope: Arc<ShardScope>,
    /// The probe's answer, once it gave one.
    honoured: Option<bool>,
    kind: String,
}

type Item = Result<watcher::Event<DynamicObject>, watcher::Error>;

impl Scoped {
    async fn next(mut self) -> Option<(Item, Self)> {
        loop {
            tokio::select! {
                biased;
                // The sender lives in the scope, which this stream holds: never closed.
                Ok(()) = self.wanted.changed() => self.rescope().await,
                item = self.current.next() => return item.map(|item| (item, self)),
            }
        }
    }

    /// Restarts the list+watch when the slots to ask the apiserver for changed.
    async fn rescope(&mut self) {
        let wanted = *self.wanted.borrow_and_update();
        let target = match wanted {
            // No selector expresses an empty set: keep the current filter.
            Some(slots) if slots.is_empty() => return,
            Some(slots) if self.honours(&slots).await => Some(slots),
            _ => None,
        };
        if target == self.scope.filtered() {
            return;
        }
        tracing::info!(
            kind = %self.kind,
            slots = target.map_or(crate::sharding::assignment::SLOTS, |s| s.len()),
            "sharding: the shard range changed; listing again with the new shard selector"
        );
        self.scope.filter(target);
        // Dropping the old stream drops its request in flight; the new one starts with a list.
        self.current = start(&self.layered, &self.config);
    }

    /// Whether the apiserver honours the shard selector (probed once; a failed probe counts
    /// as no and is tried again at the next change).
    async fn honours(&mut self, slots: &SlotSet) -> bool {
        if let Some(honoured) = self.honoured {
            return honoured;
        }
        let Some(selector) = slots.selector() else {
            return false;
        };
        match probe(&self.client, &self.collection, &selector).await {
            Ok(honoured) => {
                self.honoured = Some(honoured);
                self.scope.record(honoured);
                if honoured {
                    tracing::info!(
                        kind = %self.kind,
                        "sharding: the apiserver honours shardSelector; caching only this replica's share"
                    );
                } else {
                    tracing::info!(
                        kind = %self.kind,
                        "sharding: the apiserver ignores shardSelector (feature gate ShardedListAndWatch off); watching every object and filtering here"
                    );
                }
                honoured
            }
            Err(error) => {
                tracing::warn!(
                    kind = %self.kind,
                    %error,
                    "sharding: probing for the server-side shard selector failed; watching every object for now"
                );
                false
            }
        }
    }
}
