//! Reading a contender's `/metrics`: the sum of one metric's series, e.g. the reconcile calls.
//!
//! Which metric counts a contender's reconcile calls:
//!
//! - kubeapp: its Runner's `reconciler_process_duration_seconds_count` (one observation per
//!   reconciler call, every label set summed);
//! - grafana-app-sdk: the same histogram of its runner (kubeapp's metric names follow the Go
//!   SDK's), under any prefix; absent: "n/a";
//! - kube-runtime and the floor: [`RECONCILES_TOTAL`], counted by the contender itself.

use std::time::Duration;

use crate::contender::Contender;
use crate::contender_metrics::RECONCILES_TOTAL;

/// The series name suffix of a handler-call histogram's count.
const HANDLER_CALLS: &str = "reconciler_process_duration_seconds_count";

/// Reading a contender's metrics failed.
#[derive(Debug, thiserror::Error)]
#[error("reading http://127.0.0.1:{port}/metrics")]
pub struct ScrapeError {
    /// The contender's metrics port.
    pub port: u16,
    /// The cause.
    pub source: reqwest::Error,
}

/// The sum of every series whose metric name `matches` in Prometheus text `text`, or `None`
/// when there is no such series.
pub fn sum_of(text: &str, matches: impl Fn(&str) -> bool) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if !matches(&line[..name_end]) {
            continue;
        }
        // The value follows the labels (which may hold spaces inside quotes): after the `}`.
        let rest = match line[name_end..].rfind('}') {
            Some(close) => &line[name_end + close + 1..],
            None => &line[name_end..],
        };
        if let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += value;
        }
    }
    found
}

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
    let error = |source| ScrapeError { port, source };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(error)?;
    client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(error)?
        .text()
        .await
        .map_err(error)
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

    #[test]
    fn labels_with_spaces_do_not_hide_the_value() {
        let text = "m{a=\"x y\",b=\"}\"} 5\nm 2\n";
        assert_eq!(sum_of(text, |n| n == "m"), Some(7.0));
    }
}
