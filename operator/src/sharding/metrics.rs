//! What a sharded replica reports: members seen, the share it owns and acts on, objects in it,
//! handoffs and how long acknowledging took.

use prometheus::{Gauge, Histogram, HistogramOpts, IntCounter, IntGauge, Opts};

/// The sharding collectors of one replica (registered in a [`MetricsRegistry`](crate::MetricsRegistry)).
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
}

impl ShardMetrics {
    /// The collectors, named under `prefix`, registered in `registry` (re-registering returns
    /// the error; create them once per registry).
    ///
    /// # Errors
    ///
    /// When a collector cannot be created or registered.
    pub fn register(metrics: &crate::MetricsRegistry) -> Result<Self, prometheus::Error> {
        let prefix = metrics.prefix().unwrap_or("");
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(prefix);
        let this = Self {
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
        };
        let registry = metrics.registry();
        registry.register(Box::new(this.members.clone()))?;
        registry.register(Box::new(this.owned_width.clone()))?;
        registry.register(Box::new(this.active_width.clone()))?;
        registry.register(Box::new(this.objects.clone()))?;
        registry.register(Box::new(this.handoffs_started.clone()))?;
        registry.register(Box::new(this.handoffs_finished.clone()))?;
        registry.register(Box::new(this.acknowledge_seconds.clone()))?;
        Ok(this)
    }
}
