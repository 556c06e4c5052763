//! The example's custom kind, `Probe`, and its embedded app manifest.
//!
//! A `Probe` (group `watcher.example.kubeapp.dev`, version `v1`, namespaced) names a target and
//! how long the watcher works on each of its lifecycle steps before recording it. It has no
//! status: what the operator observed is written as Kubernetes Events about the object.

use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The app manifest, embedded from `manifest.yaml` in the crate directory.
pub const MANIFEST_YAML: &str = include_str!("../manifest.yaml");

/// The largest `spec.processingMillis` the CRD accepts (one minute), so that a step always
/// finishes well within a reasonable shutdown timeout.
pub const MAX_PROCESSING_MILLIS: u32 = 60_000;

/// The spec of a `Probe`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "watcher.example.kubeapp.dev",
    version = "v1",
    kind = "Probe",
    plural = "probes",
    namespaced,
    shortname = "prb",
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.target"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSpec {
    /// What the probe looks at (free text; it appears in the recorded Events).
    pub target: String,
    /// How long the watcher works on each lifecycle step of this object before recording it, in
    /// milliseconds (0 to 60000). It stands in for real work, and lets a step be in flight when
    /// the operator is asked to stop.
    #[serde(default)]
    #[schemars(range(max = 60000))]
    pub processing_millis: u32,
}

impl ProbeSpec {
    /// `processingMillis` as a duration, capped at [`MAX_PROCESSING_MILLIS`] (the CRD already
    /// refuses more; the cap covers objects written before that rule or without the CRD).
    pub fn processing_time(&self) -> Duration {
        Duration::from_millis(u64::from(self.processing_millis.min(MAX_PROCESSING_MILLIS)))
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use kubeapp::sdk::manifest::ManifestData;

    use super::*;

    #[test]
    fn the_manifest_parses_and_names_the_kind() {
        let manifest = ManifestData::from_yaml(MANIFEST_YAML).expect("manifest.yaml parses");
        assert_eq!(manifest.app_name, "probe-watcher");
        assert_eq!(manifest.group, "watcher.example.kubeapp.dev");
        assert_eq!(manifest.kinds()[0].kind, "Probe");
    }

    #[test]
    fn the_schema_bounds_processing_millis() {
        let crd = Probe::crd();
        assert_eq!(crd.spec.names.kind, "Probe");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
        let millis =
            &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["processingMillis"];
        assert_eq!(millis["maximum"], 60000.0, "{millis}");
        assert_eq!(millis["minimum"], 0.0, "{millis}");
    }

    #[test]
    fn processing_time_is_capped() {
        let spec = |millis| ProbeSpec {
            target: "t".into(),
            processing_millis: millis,
        };
        assert_eq!(spec(250).processing_time(), Duration::from_millis(250));
        assert_eq!(spec(u32::MAX).processing_time(), Duration::from_secs(60));
    }

    #[test]
    fn the_sample_is_a_probe() {
        let sample: Probe =
            serde_saphyr::from_str(include_str!("../samples/probe.yaml")).expect("sample");
        assert_eq!(sample.spec.target, "https://example.com/healthz");
        assert_eq!(sample.spec.processing_millis, 250);
    }
}
