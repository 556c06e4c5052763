//! What leader election reports: whether this replica leads.

use prometheus::core::Collector;
use prometheus::{IntGaugeVec, Opts};

use kubeapp_operator::metrics::{MetricSet, MetricsError};

/// `leader_election_master_status{name}`: 1 while this replica holds the leader Lease `name`,
/// else 0 (client-go's metric name, under the registry's prefix). A [`MetricSet`]:
/// `metrics.set::<ElectionMetrics>()` of a [`MetricsRegistry`](kubeapp_operator::MetricsRegistry), handed
/// to [`LeaderElector::report_to`](super::LeaderElector::report_to).
#[derive(Clone, Debug)]
pub struct ElectionMetrics {
    pub(super) master_status: IntGaugeVec,
}

impl MetricSet for ElectionMetrics {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        const NAME: &str = "leader_election_master_status";
        let master_status = IntGaugeVec::new(
            Opts::new(NAME, "1 while this replica holds the leader Lease, else 0.")
                .namespace(prefix.unwrap_or("")),
            &["name"],
        )
        .map_err(MetricsError::named(NAME))?;
        Ok(Self { master_status })
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![Box::new(self.master_status.clone())]
    }
}
