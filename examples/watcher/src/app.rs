//! The operator's app: the simple SimpleApp with the `Probe` watcher, plus the example's own metric.
//!
//! [`probe_app`] builds the config of a [`kubeapp::simple::SimpleApp`] whose watcher counts into the
//! example's [`StepMetrics`], a set taken from the Runner's registry (so on its `/metrics`).

use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{AppConfig, ManagedKind};

use crate::kind::Probe;
use crate::metrics::StepMetrics;
use crate::watch::ProbeWatcher;

/// The operator's app from the embedded `manifest`: one managed kind, `Probe`, watched by an
/// opinionated [`ProbeWatcher`] counting into the example's own [`StepMetrics`] (a set of the
/// Runner's registry, so the Runner serves it on `/metrics`). The namespace, the controller's
/// grace and the Events' `reportingInstance` (`--instance`) come from the `run` flags, through the
/// `Operator`; the Events' `reportingController` is the manifest's `appName`.
pub fn probe_app(manifest: ManifestData, metrics: &StepMetrics) -> AppConfig {
    let probes = ManagedKind::<Probe>::new().watcher(ProbeWatcher::new(metrics.clone()));
    AppConfig::from_manifest(manifest).managed_kind(probes)
}

#[cfg(test)]
mod tests {
    use kube::Client;
    use kubeapp::operator::MetricsRegistry;
    use kubeapp::sdk::app::App as _;
    use kubeapp::simple::SimpleApp;

    use super::*;

    /// A client for an address nothing listens on: building the app talks to no cluster.
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn the_app_exports_the_step_metric_in_the_registry_of_the_controller_metrics() {
        let manifest = ManifestData::from_yaml(crate::kind::MANIFEST_YAML).expect("manifest");
        let metrics = MetricsRegistry::new(Some("probe")).expect("registry");
        let steps = metrics.set::<StepMetrics>().expect("the step set");
        let config = probe_app(manifest, &steps).metrics(metrics.clone());
        let app = SimpleApp::new(config, offline_client()).expect("the app matches its manifest");
        assert_eq!(app.name(), "probe-watcher");
        assert_eq!(app.managed_kinds()[0].plural, "probes");
        // Every set is registered in the one registry, so a clash with any of their names
        // is reported: each name is taken there.
        for name in [
            crate::metrics::STEPS_METRIC,
            "informer_events_total",
            "watcher_process_duration_seconds",
        ] {
            let taken =
                prometheus::IntCounter::new(format!("probe_{name}"), "taken?").expect("counter");
            assert!(
                metrics.registry().register(Box::new(taken)).is_err(),
                "probe_{name} is not in the registry"
            );
        }
        let checks: Vec<String> = app.health_checks().iter().map(|c| c.name()).collect();
        assert_eq!(checks, [kubeapp::simple::INFORMERS_SYNCED_CHECK]);
    }
}
