//! The operator's app: the simple App with the `Probe` watcher, plus the example's own metric.
//!
//! [`ProbeApp`] is a thin [`App`](kubeapp::sdk::app::App) around a [`kubeapp::simple::App`]: it
//! delegates everything and adds [`StepMetrics`] to the metric collectors, which is how an app
//! gets its own metrics onto the Runner's `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use kube::api::{ApiResource, DynamicObject};
use kube::core::admission::AdmissionRequest;
use kube::runtime::events::Reporter;
use kubeapp::operator::{CancellationToken, ControllerConfig, InformerOptions};
use kubeapp::sdk::app::{AdmissionError, App as SdkApp, AppError, ConversionError, HealthCheck};
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{AppConfig, AppConfigError, ManagedKind};

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

/// The operator's app; see the [module docs](self).
pub struct ProbeApp {
    inner: kubeapp::simple::App,
    metrics: StepMetrics,
}

impl ProbeApp {
    /// Builds the app from the embedded `manifest`: one managed kind, `Probe`, watched by an
    /// opinionated [`ProbeWatcher`] that reports as the manifest's `appName`.
    ///
    /// # Errors
    ///
    /// When the app does not match the manifest (see [`kubeapp::simple::validate`]).
    pub fn new(
        manifest: ManifestData,
        client: Client,
        metrics: StepMetrics,
        settings: &ProbeAppSettings,
    ) -> Result<Self, AppConfigError> {
        let reporter = Reporter {
            controller: manifest.app_name.clone(),
            instance: settings.instance.clone(),
        };
        let mut options = InformerOptions::default();
        if let Some(namespace) = &settings.namespace {
            options = options.namespace(namespace);
        }
        let probes = ManagedKind::<Probe>::new()
            .options(options)
            .watcher(ProbeWatcher::new(client.clone(), reporter, metrics.clone()));
        let config = AppConfig::new(manifest.app_name.clone())
            .manifest(manifest)
            .controller(ControllerConfig::default().shutdown_grace(settings.shutdown_grace))
            .managed_kind(probes);
        let inner = kubeapp::simple::App::new(config, client)?;
        Ok(Self { inner, metrics })
    }
}

impl std::fmt::Debug for ProbeApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeApp")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl SdkApp for ProbeApp {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn managed_kinds(&self) -> Vec<ApiResource> {
        self.inner.managed_kinds()
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        self.inner.run(stop).await
    }

    fn health_checks(&self) -> Vec<Arc<dyn HealthCheck>> {
        self.inner.health_checks()
    }

    fn metric_collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut collectors = self.inner.metric_collectors();
        collectors.extend(self.metrics.collectors());
        collectors
    }

    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        self.inner.validate(request).await
    }

    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        self.inner.mutate(request).await
    }

    async fn convert(
        &self,
        object: serde_json::Value,
        desired_api_version: &str,
    ) -> Result<serde_json::Value, ConversionError> {
        self.inner.convert(object, desired_api_version).await
    }
}

#[cfg(test)]
mod tests {
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
        let app = ProbeApp::new(
            manifest,
            offline_client(),
            StepMetrics::new().expect("metrics"),
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
