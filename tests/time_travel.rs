//! Sieve's "time travel" (OSDI '22) is prevented by consistent lists: an operator that starts
//! (or restarts) behind an apiserver whose watch cache lags does not act on the older state,
//! because kubeapp's informers list with kube-runtime's default `ListSemantic::MostRecent` (no
//! `resourceVersion`: a consistent read from etcd), which no cache may answer.
//!
//! The lagging cache is played by the fault proxy (`FaultProxy::serve_stale_lists`): armed after
//! 60 ConfigMaps exist, it answers every list a cache may answer (one with a `resourceVersion`)
//! with those 60 as they were, while 20 are then deleted and 20 changed. Real apiservers answer
//! such lists from their watch cache; in an HA control plane that cache can lag.
//!
//! - A kubeapp controller started behind it sees none of the deleted ConfigMaps and every
//!   changed one at its new value (its watcher gets one add per live ConfigMap, and nothing
//!   else), and sent no list the cache could answer.
//! - The control: kube-runtime's watcher with `ListSemantic::Any` and no page size
//!   (`resourceVersion=0`) behind the same kind of proxy lists the deleted ConfigMaps and the old
//!   values: the fault is real, and the first test would fail if kubeapp listed that way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self as kube_watcher, Event};
use kubeapp::prelude::*;
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::testing::FaultProxy;

const OBJECTS: usize = 60;
/// `cm-000` to `cm-019` are deleted after the stale lists are armed.
const DELETED: usize = 20;
/// `cm-020` to `cm-039` get `value: new`.
const CHANGED: usize = 40;
const TIMEOUT: Duration = Duration::from_secs(60);

fn name(index: usize) -> String {
    format!("cm-{index:03}")
}

fn value(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|data| data.get("value"))
        .cloned()
        .unwrap_or_default()
}

/// A namespace with 60 ConfigMaps, a proxy that answers cacheable lists of them as they were
/// then, and after that 20 deleted and 20 changed.
async fn lagging_cache(env: &TestEnv, namespace: &str) -> FaultProxy {
    let mut object = Namespace::default();
    object.metadata.name = Some(namespace.to_owned());
    Api::<Namespace>::all(env.client())
        .create(&PostParams::default(), &object)
        .await
        .expect("the namespace");
    let api: Api<ConfigMap> = Api::namespaced(env.client(), namespace);
    for index in 0..OBJECTS {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name(index));
        cm.data = Some([("value".to_owned(), "old".to_owned())].into());
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let proxy = FaultProxy::start(env.client()).await.expect("the proxy");
    proxy
        .serve_stale_lists(&ApiResource::erase::<ConfigMap>(&()), namespace)
        .await
        .expect("the stale list");
    for index in 0..DELETED {
        api.delete(&name(index), &DeleteParams::default())
            .await
            .expect("delete");
    }
    let patch = serde_json::json!({ "data": { "value": "new" } });
    for index in DELETED..CHANGED {
        api.patch(&name(index), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("change");
    }
    proxy
}

/// One call of the watcher: which, the name, the value.
type Call = (&'static str, String, String);

/// Every call of the watcher, and a count of them to wait on.
#[derive(Clone)]
struct Calls {
    calls: Arc<Mutex<Vec<Call>>>,
    count: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for Calls {
    fn default() -> Self {
        Self {
            calls: Arc::default(),
            count: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

impl Calls {
    fn push(&self, call: &'static str, cm: &ConfigMap) {
        let count = {
            let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            calls.push((call, cm.name_any(), value(cm)));
            calls.len()
        };
        self.count.send_replace(count);
    }

    fn seen(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Resolves once at least `count` calls were made.
    async fn reached(&self, count: usize) {
        let mut counted = self.count.subscribe();
        // The sender lives in `self`: the channel cannot close while we wait.
        let _ = counted.wait_for(|made| *made >= count).await;
    }

    /// The adds, by name.
    fn added(&self) -> BTreeMap<String, String> {
        self.seen()
            .into_iter()
            .filter(|(call, _, _)| *call == "add")
            .map(|(_, name, value)| (name, value))
            .collect()
    }
}

impl Watcher<ConfigMap> for Calls {
    async fn add(&self, cm: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        self.push("add", &cm);
        Ok(())
    }

    async fn update(
        &self,
        _old: Arc<ConfigMap>,
        new: Arc<ConfigMap>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        self.push("update", &new);
        Ok(())
    }

    async fn delete(&self, cm: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        self.push("delete", &cm);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeapp_controller_behind_a_lagging_cache_does_not_travel_back_in_time() {
    let env = TestEnv::start().await.expect("control plane");
    let namespace = "time-travel-kubeapp";
    let proxy = lagging_cache(&env, namespace).await;
    let controller = InformerController::new(ControllerConfig::default().name("time-travel"));
    let calls = Calls::default();
    let kind = controller.kind(
        Api::<ConfigMap>::namespaced(proxy.client().expect("a client"), namespace),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let _watch = kind.watch(calls.clone());
    let stop = CancellationToken::new();
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { controller.run(stop).await }
    });
    let expected = OBJECTS - DELETED;
    let waited = tokio::time::timeout(TIMEOUT, calls.reached(expected)).await;
    stop.cancel();
    let _ = run.await;
    let seen = calls.added();
    assert!(
        waited.is_ok(),
        "the controller added {} of {expected} ConfigMaps in {TIMEOUT:?}",
        seen.len()
    );
    let deleted: BTreeSet<String> = (0..DELETED).map(name).collect();
    let travelled: Vec<&String> = seen.keys().filter(|name| deleted.contains(*name)).collect();
    assert!(
        travelled.is_empty(),
        "it saw deleted ConfigMaps: {travelled:?}"
    );
    let old: Vec<&String> = (DELETED..CHANGED)
        .map(name)
        .filter_map(|name| seen.get_key_value(&name))
        .filter(|(_, value)| value.as_str() != "new")
        .map(|(name, _)| name)
        .collect();
    assert!(old.is_empty(), "it saw old values of {old:?}");
    assert_eq!(seen.len(), expected, "one add per live ConfigMap: {seen:?}");
    // Nothing changed after it started: an update or a delete would be a correction of an
    // older state it had been given.
    assert_eq!(
        calls.seen().len(),
        expected,
        "only adds: {:?}",
        calls.seen()
    );
    assert_eq!(
        proxy.stale_lists_served(),
        0,
        "it sent a list the lagging cache answered"
    );
    assert!(
        proxy.consistent_lists() >= 1,
        "its lists did not reach the armed proxy ({} consistent)",
        proxy.consistent_lists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_a_list_at_resource_version_0_behind_the_same_cache_does() {
    let env = TestEnv::start().await.expect("control plane");
    let namespace = "time-travel-control";
    let proxy = lagging_cache(&env, namespace).await;
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().expect("a client"), namespace);
    // Without a page size: kube's ListParams drops `resourceVersion=0` when a limit is set
    // (kube-core 5, `ListParams::populate_qp`), so `any_semantic()` with the default page size
    // of 500 is a consistent list after all.
    let mut config = kube_watcher::Config::default().any_semantic();
    config.page_size = None;
    let stream = kube_watcher::watcher(api, config);
    let mut stream = std::pin::pin!(stream);
    let mut listed = BTreeMap::new();
    let listing = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = stream.next().await {
            match event.expect("a watch event") {
                Event::InitApply(cm) => {
                    listed.insert(cm.name_any(), value(&cm));
                }
                Event::InitDone => break,
                _ => {}
            }
        }
    })
    .await;
    assert!(
        listing.is_ok(),
        "the initial list did not end in {TIMEOUT:?}"
    );
    assert!(
        proxy.stale_lists_served() >= 1,
        "no list was answered stale ({} consistent lists; listed {listed:?})",
        proxy.consistent_lists()
    );
    assert_eq!(
        listed.len(),
        OBJECTS,
        "the stale list holds all 60: {listed:?}"
    );
    assert!(
        (0..DELETED).all(|index| listed.contains_key(&name(index))),
        "the deleted ConfigMaps are listed (time travel)"
    );
    assert!(
        (DELETED..CHANGED).all(|index| listed.get(&name(index)).map(String::as_str) == Some("old")),
        "the changed ConfigMaps are listed at their old value"
    );
}
