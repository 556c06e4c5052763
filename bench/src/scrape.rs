//! Reading a contender's `/metrics` (with `kubeapp::sdk::benchmark::metrics_text`): the sum of one
//! metric's series, e.g. the reconcile calls.
//!
//! Which metric counts a contender's reconcile calls:
//!
//! - kubeapp: its Runner's `reconciler_process_duration_seconds_count` (one observation per
//!   reconciler call, every label set summed);
//! - grafana-app-sdk: the same histogram of its runner (kubeapp's metric names follow the Go
//!   SDK's), under any prefix; absent: "n/a";
//! - kube-runtime and the floor: [`RECONCILES_TOTAL`], counted by the contender itself.

use std::net::{Ipv4Addr, SocketAddr};

pub use kubeapp::sdk::benchmark::metrics_text::sum_of;
use kubeapp::sdk::benchmark::metrics_text::{self, FetchError, RECONCILER_CALLS};

use crate::contender::Contender;
use crate::contender_metrics::RECONCILES_TOTAL;

/// The series name suffix of a handler-call histogram's count.
const HANDLER_CALLS: &str = RECONCILER_CALLS;

/// Reading a contender's metrics failed.
pub type ScrapeError = FetchError;

/// The reconcile calls in a contender's metrics text, or `None` when it exports no such metric.
pub fn reconciles_in(contender: Contender, text: &str) -> Option<u64> {
    let sum = match contender {
        Contender::Kubeapp => sum_of(text, |name| name == HANDLER_CALLS),
        Contender::GrafanaAppSdk => sum_of(text, |name| name.ends_with(HANDLER_CALLS)),
        Contender::KubeRuntime | Contender::Floor => sum_of(text, |name| name == RECONCILES_TOTAL),
    }?;
    // Counts are whole numbers; the text format writes them as floats.
    Some(sum.round() as u64)
}

/// GETs `http://127.0.0.1:port/metrics`.
///
/// # Errors
///
/// When the request fails or is not answered 200.
pub async fn metrics_text(port: u16) -> Result<String, ScrapeError> {
    metrics_text::fetch(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEAPP: &str = "\
# HELP reconciler_process_duration_seconds Time of one reconciler call.
# TYPE reconciler_process_duration_seconds histogram
reconciler_process_duration_seconds_bucket{event_type=\"CREATE\",kind=\"BenchObject\",le=\"0.005\"} 3
reconciler_process_duration_seconds_sum{event_type=\"CREATE\",kind=\"BenchObject\"} 0.5
reconciler_process_duration_seconds_count{event_type=\"CREATE\",kind=\"BenchObject\"} 2001
reconciler_process_duration_seconds_count{event_type=\"UPDATE\",kind=\"BenchObject\"} 1999
watcher_process_duration_seconds_count{event_type=\"UPDATE\",kind=\"BenchObject\"} 7
";

    #[test]
    fn kubeapp_reconciles_are_the_handler_calls_of_every_event_type() {
        assert_eq!(reconciles_in(Contender::Kubeapp, KUBEAPP), Some(4000));
    }

    #[test]
    fn the_go_sdk_histogram_counts_under_a_prefix_and_is_none_when_absent() {
        let prefixed = KUBEAPP.replace("reconciler_process", "grafana_app_sdk_reconciler_process");
        assert_eq!(
            reconciles_in(Contender::GrafanaAppSdk, &prefixed),
            Some(4000)
        );
        assert_eq!(
            reconciles_in(Contender::GrafanaAppSdk, "go_goroutines 12\n"),
            None
        );
    }

    #[test]
    fn the_bench_counter_of_kube_runtime_and_the_floor() {
        let text =
            "# TYPE kubeapp_bench_reconciles_total counter\nkubeapp_bench_reconciles_total 4001\n";
        assert_eq!(reconciles_in(Contender::KubeRuntime, text), Some(4001));
        assert_eq!(reconciles_in(Contender::Floor, text), Some(4001));
        assert_eq!(reconciles_in(Contender::Floor, KUBEAPP), None);
    }
}
