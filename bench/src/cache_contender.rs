//! What the two cache contenders of `kubeapp-bench cache` share: their flags (those of
//! [`ContenderArgs`](crate::contender_cli::ContenderArgs); `--workers` is unused) and a
//! `/metrics` endpoint with two gauges the tool polls, [`CACHE_OBJECTS`] (objects in the cache)
//! and [`CACHE_SYNCED`] (1 once the first complete list is in it).

use std::time::Duration;

use anyhow::Context as _;
use prometheus::IntGauge;

use crate::contender_metrics::ContenderMetrics;

/// The gauge of objects in the contender's cache.
pub const CACHE_OBJECTS: &str = "kubeapp_bench_cache_objects";
/// The gauge that is 1 once the contender's cache holds its first complete list.
pub const CACHE_SYNCED: &str = "kubeapp_bench_cache_synced";

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
