//! What a sharded replica reports: members seen, the share it owns and acts on, objects in it,
//! handoffs and how long acknowledging took.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, Histogram, HistogramOpts, IntCounter, IntGauge, IntGaugeVec, Opts};

use kubeapp_operator::metrics::{MetricSet, MetricsError};
use kubeapp_operator::store::KindCache;

/// The sharding collectors of one replica: a [`MetricSet`], so
/// `metrics.set::<ShardMetrics>()` of a [`MetricsRegistry`](kubeapp_operator::MetricsRegistry).
#[derive(Clone, Debug)]
pub struct ShardMetrics {
    /// `shard_members`: live members of the ring this replica sees (itself included).
    pub members: IntGauge,
    /// `shard_owned_range_width`: the share of the uid hash space this replica owns under the
    /// membership it acknowledged (0 to 1).
    pub owned_width: Gauge,
    /// `shard_active_range_width`: the share it acts on now (owned, and handed over by the
    /// previous owners).
    pub active_width: Gauge,
    /// `shard_objects`: cached objects of the sharded kinds in the active share (counted at each
    /// handoff step).
    pub objects: IntGauge,
    /// `shard_handoffs_started_total`: membership changes this replica began to follow.
    pub handoffs_started: IntCounter,
    /// `shard_handoffs_finished_total`: handoffs after which it acts on its whole owned share.
    pub handoffs_finished: IntCounter,
    /// `shard_acknowledge_seconds`: from seeing a membership change to having acknowledged it
    /// (its work on lost ranges drained and cancelled, the acknowledgement written).
    pub acknowledge_seconds: Histogram,
    /// `shard_server_side_selector`: 1 when the apiserver filters this replica's lists and
    /// watches by its shard selector (it caches only its share), 0 when it does not (it caches
    /// every object and filters itself, or has not probed yet).
    pub server_side_selector: IntGauge,
    /// `shard_cached_objects{kind}`: objects in the informer cache of each sharded kind, read
    /// at each scrape.
    pub cached_objects: CachedObjects,
}

/// The `shard_cached_objects{kind}` collector: the size of each tracked informer cache, read
/// when scraped (so it is exact at every scrape, with no task updating it).
#[derive(Clone)]
pub struct CachedObjects {
    gauge: IntGaugeVec,
    /// The tracked caches (a [`KindCache`] does not keep its cache alive).
    caches: Arc<Mutex<Vec<KindCache>>>,
}

impl CachedObjects {
    /// Reports the size of `cache` under its kind (a cache tracked already is not added twice).
    pub(crate) fn track(&self, cache: &KindCache) {
        let mut caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        caches.retain(KindCache::is_alive);
        if !caches.iter().any(|tracked| tracked.is_same(cache)) {
            caches.push(cache.clone());
        }
    }
}

impl std::fmt::Debug for CachedObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedObjects").finish_non_exhaustive()
    }
}

impl Collector for CachedObjects {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        for cache in caches.iter().filter(|cache| cache.is_alive()) {
            self.gauge
                .with_label_values(&[cache.kind()])
                .set(i64::try_from(cache.len()).unwrap_or(i64::MAX));
        }
        self.gauge.collect()
    }
}

/// Made once per registry by [`MetricsRegistry::set`](kubeapp_operator::MetricsRegistry::set).
impl MetricSet for ShardMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        let prefix = prefix.unwrap_or("");
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(prefix);
        Self::create_with(prefix, opts).map_err(MetricsError::named("shard_*"))
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.members.clone()),
            Box::new(self.owned_width.clone()),
            Box::new(self.active_width.clone()),
            Box::new(self.objects.clone()),
            Box::new(self.handoffs_started.clone()),
            Box::new(self.handoffs_finished.clone()),
            Box::new(self.acknowledge_seconds.clone()),
            Box::new(self.server_side_selector.clone()),
            Box::new(self.cached_objects.clone()),
        ]
    }
}

impl ShardMetrics {
    /// The collectors, named under `prefix` (through `opts`), registered nowhere.
    fn create_with(
        prefix: &str,
        opts: impl Fn(&str, &str) -> Opts,
    ) -> Result<Self, prometheus::Error> {
        Ok(Self {
            members: IntGauge::with_opts(opts(
                "shard_members",
                "Live members of the shard ring this replica sees, itself included.",
            ))?,
            owned_width: Gauge::with_opts(opts(
                "shard_owned_range_width",
                "Share of the uid hash space this replica owns under the membership it acknowledged (0 to 1).",
            ))?,
            active_width: Gauge::with_opts(opts(
                "shard_active_range_width",
                "Share of the uid hash space this replica acts on now (0 to 1).",
            ))?,
            objects: IntGauge::with_opts(opts(
                "shard_objects",
                "Cached objects of the sharded kinds in the share this replica acts on.",
            ))?,
            handoffs_started: IntCounter::with_opts(opts(
                "shard_handoffs_started_total",
                "Membership changes this replica began to follow.",
            ))?,
            handoffs_finished: IntCounter::with_opts(opts(
                "shard_handoffs_finished_total",
                "Handoffs after which this replica acts on its whole owned share.",
            ))?,
            acknowledge_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "shard_acknowledge_seconds",
                    "From seeing a membership change to having acknowledged it (work on lost ranges drained).",
                )
                .namespace(prefix)
                .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            )?,
            server_side_selector: IntGauge::with_opts(opts(
                "shard_server_side_selector",
                "1 when the apiserver filters this replica's lists and watches to its share (shardSelector), 0 when it does not.",
            ))?,
            cached_objects: CachedObjects {
                gauge: IntGaugeVec::new(
                    opts(
                        "shard_cached_objects",
                        "Objects in the informer cache of a sharded kind.",
                    ),
                    &["kind"],
                )?,
                caches: Arc::default(),
            },
        })
    }
}
