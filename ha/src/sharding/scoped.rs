//! The list+watch of a shared informer that follows its [`ShardScope`]: when the wanted slots
//! change and the apiserver honours the shard selector, the current list or watch is dropped
//! and a new one starts (a full list first) with the new selector. The new list begins with
//! `Event::Init`, which the informer turns into a list whose end forgets the cached objects
//! outside the new slots (the core's informer cache asks the scope's
//! [`list_range`](kubeapp_operator::list_scope::ListScope::list_range) as the list starts).

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use kubeapp_operator::list_scope::{Lister, RawWatch as RawEvents};
use tokio::sync::watch;

use super::assignment::{SLOTS, SlotSet};
use super::selector_layer::{ShardSelectorLayer, layered_client};
use super::server_side::{ShardScope, probe};

/// The raw events of `api` with `config`, following `scope`; see the [module docs](self).
pub(crate) fn scoped_watch(
    api: Api<DynamicObject>,
    resource: &ApiResource,
    config: watcher::Config,
    scope: Arc<ShardScope>,
    lister: Lister,
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
        current: lister.watch(layered.clone(), config.clone()),
        wanted: scope.wanted(),
        layered,
        config,
        lister,
        client,
        collection,
        scope,
        honoured: None,
        kind: resource.kind.clone(),
    };
    futures::stream::unfold(state, Scoped::next).boxed()
}

struct Scoped {
    current: RawEvents,
    wanted: watch::Receiver<Option<SlotSet>>,
    /// The informer's `Api` over a client carrying the shard selector layer.
    layered: Api<DynamicObject>,
    config: watcher::Config,
    /// Starts each list+watch (the informer's, reading objects into its type).
    lister: Lister,
    /// The plain client, for the probe.
    client: kube::Client,
    collection: String,
    scope: Arc<ShardScope>,
    /// The probe's answer, once it gave one.
    honoured: Option<bool>,
    kind: String,
}

type Item = Result<watcher::Event<kubeapp_operator::list_scope::ListedObject>, watcher::Error>;

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
            slots = target.map_or(SLOTS, |s| s.len()),
            "sharding: the shard range changed; listing again with the new shard selector"
        );
        self.scope.filter(target);
        // Dropping the old stream drops its request in flight; the new one starts with a list.
        self.current = self.lister.watch(self.layered.clone(), self.config.clone());
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::StreamExt;
    use http::{Request, Response};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ApiResource;

    use kubeapp_operator::list_watch::{Informer, ListWatchOptions};
    use kubeapp_operator::store::InformerEvent;

    use crate::sharding::assignment::{SlotSet, slot_of_uid};
    use crate::sharding::server_side::ShardScope;

    fn config_map(name: &str, uid: &str, rv: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
        })
    }

    fn list(items: &[serde_json::Value], rv: &str, shard_info: bool) -> String {
        let mut metadata = serde_json::json!({"resourceVersion": rv});
        if shard_info {
            metadata["shardInfo"] = serde_json::json!({"selector": "echoed"});
        }
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": metadata, "items": items})
            .to_string()
    }

    /// An apiserver that honours the shard selector: unfiltered, it lists a, b and e; filtered
    /// (the new range), a and c, and its watch sends d; the probe's list echoes `shardInfo`.
    fn fake_apiserver(requests: Arc<Mutex<Vec<String>>>) -> kube::Client {
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            requests.lock().unwrap().push(uri.clone());
            let sharded = uri.contains("shardSelector=");
            let body = if uri.contains("watch=true") {
                if sharded {
                    // The filtered watch: one new object in the range, then the stream ends.
                    let event = serde_json::json!({"type": "ADDED", "object": config_map("d", "d-uid", "21")});
                    format!("{event}\n")
                } else {
                    String::new()
                }
            } else if uri.contains("limit=1&") {
                list(&[], "20", true)
            } else if sharded {
                // The new range holds a (unchanged) and c; b left the range, e was deleted.
                list(
                    &[
                        config_map("a", "a-uid", "10"),
                        config_map("c", "c-uid", "12"),
                    ],
                    "20",
                    true,
                )
            } else {
                list(
                    &[
                        config_map("a", "a-uid", "10"),
                        config_map("b", "b-uid", "11"),
                        config_map("e", "e-uid", "13"),
                    ],
                    "13",
                    false,
                )
            };
            std::future::ready(Ok::<_, std::convert::Infallible>(Response::new(
                kube::client::Body::from(body.into_bytes()),
            )))
        });
        kube::Client::new(service, "ns")
    }

    fn describe(event: &InformerEvent) -> String {
        format!(
            "{:?} {}",
            event.action(),
            event.object().metadata().name.as_deref().unwrap_or("")
        )
    }

    #[tokio::test]
    async fn a_range_change_lists_and_watches_again_with_the_selector_and_forgets_what_left() {
        let mut within = SlotSet::EMPTY;
        for uid in ["a-uid", "c-uid", "d-uid", "e-uid"] {
            within.insert(slot_of_uid(uid));
        }
        assert!(!within.contains(slot_of_uid("b-uid")), "pick other uids");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let resource = ApiResource::erase::<ConfigMap>(&());
        let scope = Arc::new(ShardScope::default());
        let informer = Informer::dynamic_in(
            fake_apiserver(Arc::clone(&requests)),
            resource,
            ListWatchOptions::default(),
            Arc::clone(&scope) as _,
        );
        let mut events = informer.into_stream().unwrap();
        // A failure guard, not a timing: a stream that does not restart would wait forever.
        let mut next = async || {
            let event = tokio::time::timeout(std::time::Duration::from_secs(30), events.next());
            describe(&event.await.expect("an event").expect("the stream goes on"))
        };
        assert_eq!(
            [next().await, next().await, next().await],
            ["Created a", "Created b", "Created e"]
        );
        assert!(
            requests
                .lock()
                .unwrap()
                .iter()
                .all(|uri| !uri.contains("shardSelector"))
        );

        scope.want(within);
        // c enters; e, inside the range, was deleted meanwhile; b left the range: forgotten,
        // no event; then the filtered watch's first event.
        assert_eq!(
            [next().await, next().await, next().await],
            ["Created c", "Deleted e", "Created d"]
        );
        let requests = requests.lock().unwrap().clone();
        let selector = form_urlencoded::Serializer::new(String::new())
            .append_pair("shardSelector", &within.selector().unwrap())
            .finish();
        let after: Vec<&String> = requests
            .iter()
            .skip_while(|uri| !uri.contains("shardSelector"))
            .collect();
        assert!(after.len() >= 3, "probe, list, watch: {after:?}");
        assert!(
            after[0].contains("limit=1&"),
            "the probe first: {}",
            after[0]
        );
        assert!(
            after[1..].iter().all(|uri| uri.contains(&selector)),
            "the re-list and the watch carry the selector: {after:?}"
        );
        assert!(after[2].contains("watch=true"));
        assert_eq!(scope.filtered(), Some(within));
    }
}
