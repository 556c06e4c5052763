//! The operator's app: the simple App with the `Probe` watcher, plus the example's own metric.
//!
//! [`probe_app`] builds a [`kubeapp::simple::App`] whose metric collectors include the example's
//! [`StepMetrics`] (`AppConfig::metric_collector`), which is how an app gets its own metrics onto
//! the Runner's `/metrics`.

use std::time::Duration;

use kube::Client;
use kube::runtime::events::Reporter;
use kubeapp::operator::ControllerConfig;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{App, AppConfig, AppConfigError, ManagedKind};

use crate::kind::Probe;
use crate::metrics::StepMetrics;
use crate::watch::ProbeWatcher;

/// What the app is built from.
#[derive(Clone, Debug)]
pub struct ProbeAppSettings {
    /// Watch Probes in this namespace only; all namespaces when `None`.
    pub namespace: Option<String>,
    /// The Events' `reportingInstance` (e.g. the pod name); the app name when `None`.
    pub instance: Option<String>,
    /// How long in-flight watcher calls may run on after a stop was requested.
    pub shutdown_grace: Duration,
}

/// Builds the operator's app from the embedded `manifest`: one managed kind, `Probe`, watched by
/// an opinionated [`ProbeWatcher`] that reports as the manifest's `appName`, and the example's own
/// [`StepMetrics`] among the app's collectors, so the Runner serves them on `/metrics`.
///
/// # Errors
///
/// When the app does not match the manifest (see [`kubeapp::simple::validate`]).
pub fn probe_app(
    manifest: ManifestData,
    client: Client,
    metrics: &StepMetrics,
    settings: &ProbeAppSettings,
) -> Result<App, AppConfigError> {
    let reporter = Reporter {
        controller: manifest.app_name.clone(),
        instance: settings.instance.clone(),
    };
    let mut probes = ManagedKind::<Probe>::new();
    if let Some(namespace) = &settings.namespace {
        probes = probes.namespace(namespace);
    }
    let probes = probes.watcher(ProbeWatcher::new(client.clone(), reporter, metrics.clone()));
    let config = AppConfig::new(manifest.app_name.clone())
        .manifest(manifest)
        .controller(ControllerConfig::default().shutdown_grace(settings.shutdown_grace))
        .managed_kind(probes)
        .metric_collector(metrics.counter());
    App::new(config, client)
}

#[cfg(test)]
mod tests {
    use kubeapp::sdk::app::App as _;

    use super::*;

    /// A client for an address nothing listens on: building the app talks to no cluster.
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn the_app_exports_the_step_metric_with_the_controller_metrics() {
        let manifest = crate::kind::manifest().expect("manifest");
        let settings = ProbeAppSettings {
            namespace: Some("demo".into()),
            instance: None,
            shutdown_grace: Duration::from_secs(5),
        };
        let app = probe_app(
            manifest,
            offline_client(),
            &StepMetrics::new().expect("metrics"),
            &settings,
        )
        .expect("the app matches its manifest");
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
