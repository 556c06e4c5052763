//! What the cache contenders of `kubeapp-bench cache` share: their flags ([`CacheContenderArgs`]:
//! those of [`ContenderArgs`], `--workers` unused, and `--object`, the kind to cache,
//! [`CacheObject`]) and a `/metrics` endpoint with two gauges the tool polls, [`CACHE_OBJECTS`]
//! (objects in the cache) and [`CACHE_SYNCED`] (1 once the first complete list is in it).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use prometheus::IntGauge;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::contender_cli::{ContenderArgs, client_from};
use crate::contender_metrics::ContenderMetrics;
use crate::kind::{BenchObject, PLURAL};

/// The kind of object the cache benchmark creates and every cache contender caches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CacheObject {
    /// The bench kind (`BenchObject`, a 32-byte payload): ConfigMap-sized objects.
    #[default]
    Bench,
    /// Core `v1` Pods with a full spec and a status (7.4 KB of JSON each, 4.2 KB without
    /// `managedFields`).
    Pod,
}

impl CacheObject {
    /// The value of `--object` that names this kind.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Bench => "bench",
            Self::Pod => "pod",
        }
    }

    /// The plural resource name (what the audit log's `objectRef.resource` says).
    pub fn plural(self) -> &'static str {
        match self {
            Self::Bench => PLURAL,
            Self::Pod => "pods",
        }
    }
}

impl fmt::Display for CacheObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag())
    }
}

/// The flags of a cache contender binary: `BINARY --kubeconfig FILE --namespace NS
/// --metrics-port P --object bench|pod`.
#[derive(Clone, Debug, clap::Parser)]
pub struct CacheContenderArgs {
    /// The flags every contender takes.
    #[command(flatten)]
    pub contender: ContenderArgs,
    /// The kind to cache.
    #[arg(long, value_enum, default_value_t = CacheObject::Bench)]
    pub object: CacheObject,
}

/// The gauge of objects in the contender's cache.
pub const CACHE_OBJECTS: &str = "kubeapp_bench_cache_objects";
/// The gauge that is 1 once the contender's cache holds its first complete list.
pub const CACHE_SYNCED: &str = "kubeapp_bench_cache_synced";

/// What a kube-runtime cache contender removes from each object before its `Store`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strip {
    /// Nothing: the reflector's default.
    Nothing,
    /// `metadata.managedFields`, set to `None` (`managed_fields_mut().clear()` would keep the
    /// deserialized `Vec`'s buffer, room for 4 entries, in every cached object).
    ManagedFields,
}

/// The kube-runtime cache contenders: a `reflector` over a `watcher` (default `watcher::Config`,
/// default backoff) of `args.object` in `args.namespace` into a reflector `Store`, objects
/// stripped as `strip` says; serves the gauges until the process is stopped.
///
/// # Errors
///
/// When the kubeconfig is unusable, or the gauges cannot be served.
pub async fn cache_with_reflector(args: &CacheContenderArgs, strip: Strip) -> anyhow::Result<()> {
    let client = client_from(&args.contender.kubeconfig).await?;
    match args.object {
        CacheObject::Bench => reflect::<BenchObject>(client, &args.contender, strip).await,
        CacheObject::Pod => reflect::<Pod>(client, &args.contender, strip).await,
    }
}

async fn reflect<K>(client: kube::Client, args: &ContenderArgs, strip: Strip) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api = Api::<K>::namespaced(client, &args.namespace);
    let (reader, writer) = reflector::store();
    let events = watcher(api, watcher::Config::default()).modify(move |object: &mut K| {
        if strip == Strip::ManagedFields {
            object.meta_mut().managed_fields = None;
        }
    });
    let stream = reflector(writer, events).default_backoff();
    tokio::spawn(stream.for_each(|event| async move {
        if let Err(error) = event {
            tracing::warn!(%error, "the watch failed; resuming");
        }
    }));
    let synced = Arc::new(AtomicBool::new(false));
    let ready = reader.clone();
    let flag = Arc::clone(&synced);
    tokio::spawn(async move {
        if ready.wait_until_ready().await.is_ok() {
            flag.store(true, Ordering::Release);
        }
    });
    serve_cache_gauges(
        args.metrics_port,
        || reader.len(),
        || synced.load(Ordering::Acquire),
    )
    .await
}

/// How often the gauges are refreshed.
const REFRESH: Duration = Duration::from_millis(50);

/// Serves the gauges on `port` and refreshes them from `objects` and `synced` until the process
/// is stopped.
///
/// # Errors
///
/// When the gauges cannot be registered or the port cannot be bound.
pub async fn serve_cache_gauges(
    port: u16,
    objects: impl Fn() -> usize,
    synced: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let metrics = ContenderMetrics::new()?;
    let objects_gauge = IntGauge::new(CACHE_OBJECTS, "Objects in the cache.")
        .context("creating the objects gauge")?;
    let synced_gauge = IntGauge::new(CACHE_SYNCED, "1 once the first complete list is cached.")
        .context("creating the synced gauge")?;
    for gauge in [&objects_gauge, &synced_gauge] {
        metrics
            .registry()
            .register(Box::new(gauge.clone()))
            .context("registering a cache gauge")?;
    }
    metrics.serve(port).await?;
    let mut tick = tokio::time::interval(REFRESH);
    loop {
        tick.tick().await;
        objects_gauge.set(i64::try_from(objects()).unwrap_or(i64::MAX));
        synced_gauge.set(i64::from(synced()));
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn the_object_flag_defaults_to_bench_and_takes_pod() {
        let base = [
            "contender",
            "--kubeconfig",
            "/k",
            "--namespace",
            "ns",
            "--metrics-port",
            "9",
        ];
        let args = CacheContenderArgs::try_parse_from(base).expect("parses");
        assert_eq!(args.object, CacheObject::Bench);
        assert_eq!(args.contender.namespace, "ns");
        assert_eq!(args.contender.metrics_port, 9);
        let pod = CacheContenderArgs::try_parse_from(base.iter().chain(&["--object", "pod"]))
            .expect("parses");
        assert_eq!(pod.object, CacheObject::Pod);
        assert!(
            CacheContenderArgs::try_parse_from(base.iter().chain(&["--object", "node"])).is_err()
        );
    }

    #[test]
    fn clearing_managed_fields_keeps_the_buffer_and_none_frees_it() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "a", "managedFields": [{ "manager": "m", "operation": "Update" }] }
        }))
        .expect("a pod");
        let mut cleared = pod.clone();
        // The deserialized `Vec` grew from empty: room for 4 entries.
        let capacity = pod
            .metadata
            .managed_fields
            .as_ref()
            .map_or(0, Vec::capacity);
        assert!(capacity >= 1, "{capacity}");
        kube::ResourceExt::managed_fields_mut(&mut cleared).clear();
        assert!(
            cleared
                .metadata
                .managed_fields
                .as_ref()
                .is_some_and(|f| f.is_empty() && f.capacity() >= 1)
        );
        pod.metadata.managed_fields = None;
        assert!(pod.metadata.managed_fields.is_none());
    }

    #[test]
    fn each_kind_names_its_flag_and_plural() {
        assert_eq!(CacheObject::Bench.to_string(), "bench");
        assert_eq!(CacheObject::Bench.plural(), "benchobjects");
        assert_eq!(CacheObject::Pod.to_string(), "pod");
        assert_eq!(CacheObject::Pod.plural(), "pods");
    }
}
