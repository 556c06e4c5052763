//! The operator's app: the simple App with the `Probe` watcher, plus the example's own metric.
//!
//! [`probe_app`] builds the config of a [`kubeapp::simple::App`] whose metric collectors include the example's
//! [`StepMetrics`] (`AppConfig::metric_collector`), which is how an app gets its own metrics onto
//! the Runner's `/metrics`.

use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{AppConfig, ManagedKind};

use crate::kind::Probe;
use crate::metrics::StepMetrics;
use crate::watch::ProbeWatcher;

/// The operator's app from the embedded `manifest`: one managed kind, `Probe`, watched by an
/// opinionated [`ProbeWatcher`], and the example's own [`StepMetrics`] among the app's
/// collectors, so the Runner serves them on `/metrics`. The namespace, the controller's grace and
/// the Events' `reportingInstance` (`--instance`) come from the `run` flags, through the
/// `Operator`; the Events' `reportingController` is the manifest's `appName`.
pub fn probe_app(manifest: ManifestData, metrics: &StepMetrics) -> AppConfig {
    let probes = ManagedKind::<Probe>::new().watcher(ProbeWatcher::new(metrics.clone()));
    AppConfig::from_manifest(manifest)
        .managed_kind(probes)
        .metric_collector(metrics.counter())
}

#[cfg(test)]
mod tests {
    use kube::Client;
    use kubeapp::sdk::app::App as _;
    use kubeapp::simple::App;

    use super::*;

    /// A client for an address nothing listens on: building the app talks to no cluster.
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn the_app_exports_the_step_metric_with_the_controller_metrics() {
        let manifest = ManifestData::from_yaml(crate::kind::MANIFEST_YAML).expect("manifest");
        let config = probe_app(manifest, &StepMetrics::new().expect("metrics"));
        let app = App::new(config, offline_client()).expect("the app matches its manifest");
        assert_eq!(app.name(), "probe-watcher");
        assert_eq!(app.managed_kinds()[0].plural, "probes");
        let names: Vec<String> = app
            .metric_collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect();
        for name in [
            crate::metrics::STEPS_METRIC,
            "informer_events_total",
            "watcher_process_duration_seconds",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
        let checks: Vec<String> = app.health_checks().iter().map(|c| c.name()).collect();
        assert_eq!(checks, [kubeapp::simple::INFORMERS_SYNCED_CHECK]);
    }
}
