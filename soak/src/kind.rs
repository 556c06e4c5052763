//! The soak kind, `Churn` (group `soak.kubeapp.dev`, version `v1`, namespaced): its spec is a
//! revision number that the workload raises, so the checker can tell which spec a handler saw.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the soak kind.
pub const GROUP: &str = "soak.kubeapp.dev";
/// The annotation the conflict writer ([`crate::faults`]) changes: a metadata write that bumps
/// the `resourceVersion` without changing the generation.
pub const POKE_ANNOTATION: &str = "soak.kubeapp.dev/poke";

/// The spec of a `Churn` object.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema,
)]
#[kube(
    group = "soak.kubeapp.dev",
    version = "v1",
    kind = "Churn",
    plural = "churns",
    namespaced
)]
pub struct ChurnSpec {
    /// Starts at 0 and goes up by one with every spec update the workload makes.
    pub revision: u32,
}

impl Churn {
    /// A new object `name` at revision 0.
    pub fn initial(name: &str) -> Self {
        Self::new(name, ChurnSpec { revision: 0 })
    }
}

/// The merge patch that sets the spec's revision (idempotent, so a request whose answer was lost
/// to an apiserver restart can be sent again).
pub fn revision_patch(revision: u32) -> serde_json::Value {
    serde_json::json!({ "spec": { "revision": revision } })
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn the_crd_is_namespaced_in_the_soak_group() {
        let crd = Churn::crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.plural, "churns");
        assert_eq!(crd.spec.scope, "Namespaced");
    }

    #[test]
    fn the_revision_patch_sets_only_the_revision() {
        assert_eq!(
            revision_patch(3),
            serde_json::json!({ "spec": { "revision": 3 } })
        );
        assert_eq!(Churn::initial("a").spec.revision, 0);
    }
}
