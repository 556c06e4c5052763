//! The operator's app: the simple App with the `Probe` watcher, plus the example's own metric.
//!
//! [`probe_app`] builds the config of a [`kubeapp::simple::App`] whose watcher counts into the
//! example's [`StepMetrics`], a set taken from the Runner's registry (so on its `/metrics`).

use kube::runtime::events::Reporter;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{AppConfig, ManagedKind};

use crate::kind::Probe;
use crate::metrics::StepMetrics;
use crate::watch::ProbeWatcher;

/// The operator's app from the embedded `manifest`: one managed kind, `Probe`, watched by an
/// opinionated [`ProbeWatcher`] that reports as the manifest's `appName` (and `instance`, the
/// replica's name, when given), counting into the example's own [`StepMetrics`] (a set of the
/// Runner's registry, so the Runner serves it on `/metrics`). The namespace and the controller's grace come from
/// the `run` flags, through the `Operator`.
pub fn probe_app(
    manifest: ManifestData,
    metrics: &StepMetrics,
    instance: Option<String>,
) -> AppConfig {
    let reporter = Reporter {
        controller: manifest.app_name.clone(),
        instance,
    };
    let probes = ManagedKind::<Probe>::new().watcher(ProbeWatcher::new(reporter, metrics.clone()));
    AppConfig::from_manifest(manifest).managed_kind(probes)
}

#[cfg(test)]
mod tests {
    use kube::Client;
    use kubeapp::operator::MetricsRegistry;
    use kubeapp::sdk::app::App as _;
    use kubeapp::simple::App;

    use super::*;

    /// A client for an address nothing listens on: building the app talks to no cluster.
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn the_app_exports_the_step_metric_in_the_registry_of_the_controller_metrics() {
        let manifest = crate::kind::manifest().expect("manifest");
        let metrics = MetricsRegistry::new(Some("probe")).expect("registry");
        let steps = metrics.set::<StepMetrics>().expect("the step set");
        let config = probe_app(manifest, &steps, None).metrics(metrics.clone());
        let app = App::new(config, offline_client()).expect("the app matches its manifest");
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
