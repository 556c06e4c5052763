//! The bench kind, `BenchObject` (group `bench.kubeapp.dev`, version `v1`, namespaced, with a
//! status subresource), shared by the tool and the Rust contenders. The Go contender defines the
//! same kind by hand (`bench/go-operator/main.go`); the tool installs the CRD from this type.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the bench kind.
pub const GROUP: &str = "bench.kubeapp.dev";
/// The plural of the bench kind.
pub const PLURAL: &str = "benchobjects";
/// The app name of the simple-App contenders (kubeapp and grafana-app-sdk).
pub const APP_NAME: &str = "bench";
/// The finalizer every contender puts on every object. Domain-qualified, because kube-apiserver
/// answers a write of the simple Apps' default (`bench-benchobjects-finalizer` in earlier releases) with a warning,
/// which client-go logs and kube-rs ignores: an unequal cost that is no part of the benchmark.
pub const FINALIZER: &str = "bench.kubeapp.dev/finalizer";

/// The app manifest of the kubeapp contender.
pub const MANIFEST_YAML: &str = "\
appName: bench
group: bench.kubeapp.dev
preferredVersion: v1
versions:
  - name: v1
    kinds:
      - kind: BenchObject
        plural: benchobjects
        scope: Namespaced
";

/// The spec of a `BenchObject`: a payload no contender reads.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "bench.kubeapp.dev",
    version = "v1",
    kind = "BenchObject",
    plural = "benchobjects",
    namespaced,
    status = "BenchStatus"
)]
pub struct BenchSpec {
    /// Opaque data, so that objects have a realistic size.
    #[serde(default)]
    pub payload: String,
}

/// What the contenders write.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BenchStatus {
    /// The `metadata.generation` the operator last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl BenchObject {
    /// True when the status reports the object's current generation.
    pub fn is_reconciled(&self) -> bool {
        self.metadata.generation.is_some()
            && self.status.as_ref().and_then(|s| s.observed_generation) == self.metadata.generation
    }

    /// True when the object carries [`FINALIZER`].
    pub fn has_finalizer(&self) -> bool {
        self.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
    }
}

/// The merge patch of the status subresource that the Rust contenders and the floor send.
pub fn status_patch(generation: i64) -> serde_json::Value {
    serde_json::json!({ "status": { "observedGeneration": generation } })
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn the_crd_is_namespaced_with_a_status_subresource() {
        let crd = BenchObject::crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.plural, PLURAL);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert!(
            crd.spec.versions[0]
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
    }

    #[test]
    fn the_manifest_names_the_kind() {
        let manifest = kubeapp::sdk::manifest::ManifestData::from_yaml(MANIFEST_YAML)
            .expect("the manifest parses");
        assert_eq!(manifest.app_name, APP_NAME);
        assert_eq!(manifest.kinds()[0].kind, "BenchObject");
    }

    #[test]
    fn reconciled_means_observed_generation_equals_generation() {
        let mut object = BenchObject::new("a", BenchSpec::default());
        assert!(!object.is_reconciled());
        object.metadata.generation = Some(2);
        object.status = Some(BenchStatus {
            observed_generation: Some(1),
        });
        assert!(!object.is_reconciled());
        object.status = Some(BenchStatus {
            observed_generation: Some(2),
        });
        assert!(object.is_reconciled());
        assert!(!object.has_finalizer());
        object.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
        assert!(object.has_finalizer());
    }
}
