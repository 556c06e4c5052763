//! Setting up what a test needs inside the control plane: CRDs and namespaces.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResourceExt, ResourceExt};

use super::{TestEnv, TestEnvError};

/// How long a CRD may take to become Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(30);
/// The field manager of everything testenv applies.
const FIELD_MANAGER: &str = "kubeapp-testenv";

impl TestEnv {
    /// Installs the CRD of `K` (server-side apply, so installing twice is harmless) and waits
    /// until it is Established.
    pub async fn install_crd<K: CustomResourceExt>(&self) -> Result<(), TestEnvError> {
        self.install_crds([K::crd()]).await.map(drop)
    }

    /// Installs the CRD of `K` with a schema whose `spec` accepts any content
    /// (`x-kubernetes-preserve-unknown-fields`), and waits until it is Established: a test can
    /// then store objects that `K` cannot deserialize (a string where the type has a number, say),
    /// as happens when a CRD's schema changes under a running operator.
    pub async fn install_crd_with_open_spec<K: CustomResourceExt>(
        &self,
    ) -> Result<(), TestEnvError> {
        self.install_crds([with_open_spec(K::crd())])
            .await
            .map(drop)
    }

    /// Installs every CRD in `yaml` (one or more documents separated by `---`) and waits until
    /// each is Established. Returns the CRDs as stored.
    pub async fn install_crds_yaml(
        &self,
        yaml: &str,
    ) -> Result<Vec<CustomResourceDefinition>, TestEnvError> {
        let crds: Vec<CustomResourceDefinition> =
            serde_saphyr::from_multiple(yaml).map_err(|e| TestEnvError::InvalidYaml {
                what: "CustomResourceDefinition YAML".into(),
                message: e.to_string(),
            })?;
        self.install_crds(crds).await
    }

    /// Installs `crds` and waits until each is Established. Returns them as stored.
    pub async fn install_crds(
        &self,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Result<Vec<CustomResourceDefinition>, TestEnvError> {
        self.ensure_running()?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut stored = Vec::new();
        for crd in crds {
            let name = crd.name_any();
            let applied = api
                .patch(&name, &params, &Patch::Apply(&crd))
                .await
                .map_err(|source| TestEnvError::Kube {
                    action: format!("installing CRD {name}"),
                    source,
                })?;
            stored.push(applied);
        }
        for crd in &stored {
            let name = crd.name_any();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(CRD_TIMEOUT, established).await {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => {
                    return Err(TestEnvError::Watch {
                        what: format!("watching CRD {name} until Established"),
                        message: err.to_string(),
                    });
                }
                Err(_) => {
                    return Err(TestEnvError::Timeout {
                        what: format!("waiting for CRD {name} to be Established"),
                        waited: CRD_TIMEOUT,
                    });
                }
            }
        }
        Ok(stored)
    }

    /// Creates a namespace with a unique name starting with `prefix` and returns its name.
    /// Namespaces are never deleted (no controller-manager runs to finalize them); the whole
    /// control plane goes away with the `TestEnv`.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String, TestEnvError> {
        self.ensure_running()?;
        let mut namespace = Namespace::default();
        namespace.metadata.generate_name = Some(format!("{}-", prefix.trim_end_matches('-')));
        let created = Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|source| TestEnvError::Kube {
                action: format!("creating a namespace named {prefix}-*"),
                source,
            })?;
        Ok(created.name_any())
    }
}

/// `crd` with every version's schema replaced by one whose `spec` (and `status`) accept any
/// content.
fn with_open_spec(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let open = JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    };
    let schema = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(BTreeMap::from([
            ("spec".to_string(), open.clone()),
            ("status".to_string(), open),
        ])),
        ..JSONSchemaProps::default()
    };
    for version in &mut crd.spec.versions {
        version.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema.clone()),
        });
    }
    crd
}
