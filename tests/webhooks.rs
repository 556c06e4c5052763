//! End to end: kube-apiserver calls the operator's HTTPS webhook server on loopback for
//! validation, mutation and conversion, with configurations generated from the app's manifest.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::admission::AdmissionRequest;
use kube::{CustomResource, ResourceExt};
use kubeapp::runner::webhook::{WebhookConfig, WebhookServer};
use kubeapp::sdk::app::{AdmissionError, App, AppError, ConversionError};
use kubeapp::sdk::crd::CrdBuilder;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::testenv::{CertificateAuthority, TestEnv};
use kubeapp::sdk::webhooks::{WebhookEndpoint, admission_configurations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod v1 {
    use super::*;
    /// Version 1: a size.
    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "hooks.kubeapp.dev",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    pub struct GadgetSpec {
        pub size: i64,
    }
}

mod v2 {
    use super::*;
    /// Version 2: the size is called dimension.
    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "hooks.kubeapp.dev",
        version = "v2",
        kind = "Gadget",
        namespaced
    )]
    pub struct GadgetSpec {
        pub dimension: i64,
    }
}

const MANIFEST: &str = r#"
appName: hooks
group: hooks.kubeapp.dev
preferredVersion: v1
versions:
  - name: v1
    kinds:
      - kind: Gadget
        conversion: true
        admission:
          validation: { operations: [CREATE, UPDATE] }
          mutation: { operations: [CREATE] }
  - name: v2
    kinds:
      - kind: Gadget
        conversion: true
        admission:
          validation: { operations: [CREATE, UPDATE] }
          mutation: { operations: [CREATE] }
"#;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Validates `size <= 10` (in either version), labels new objects, converts v1 <-> v2.
struct GadgetApp;

fn size_of(object: &DynamicObject) -> i64 {
    let spec = &object.data["spec"];
    spec["size"]
        .as_i64()
        .or_else(|| spec["dimension"].as_i64())
        .unwrap_or(0)
}

#[async_trait]
impl App for GadgetApp {
    fn name(&self) -> &str {
        "hooks"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![ApiResource::erase::<v1::Gadget>(&())]
    }
    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        stop.cancelled().await;
        Ok(())
    }
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        let size = request.object.as_ref().map_or(0, size_of);
        if size > 10 {
            return Err(AdmissionError::denied(format!(
                "size {size} is larger than 10"
            )));
        }
        Ok(())
    }
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        let mut object = request
            .object
            .clone()
            .ok_or_else(|| AdmissionError::Internal("no object".into()))?;
        object
            .labels_mut()
            .insert("hooks.kubeapp.dev/mutated".into(), "yes".into());
        Ok(object)
    }
    async fn convert(&self, mut object: Value, desired: &str) -> Result<Value, ConversionError> {
        let spec = object["spec"].take();
        object["spec"] = match desired {
            "hooks.kubeapp.dev/v1" => json!({ "size": spec.get("dimension").or(spec.get("size")) }),
            "hooks.kubeapp.dev/v2" => {
                json!({ "dimension": spec.get("size").or(spec.get("dimension")) })
            }
            other => {
                return Err(ConversionError::Failed {
                    kind: "Gadget".into(),
                    desired_api_version: other.into(),
                    message: "unknown version".into(),
                });
            }
        };
        object["apiVersion"] = json!(desired);
        Ok(object)
    }
}

/// A control plane whose apiserver calls a running webhook server for Gadgets.
struct Setup {
    env: TestEnv,
    ns: String,
    stop: CancellationToken,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn setup() -> Setup {
    let env = TestEnv::start().await.expect("start control plane");
    let manifest = ManifestData::from_yaml(MANIFEST).expect("manifest");

    // The webhook server, with a certificate for 127.0.0.1 from a CA the apiserver is told about.
    let ca = CertificateAuthority::new("hooks-webhook-ca").expect("ca");
    let serving = ca.issue_serving(&["127.0.0.1"]).expect("serving cert");
    let dir = env.dir().join("webhook-tls");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("tls.crt"), &serving.cert_pem).expect("write cert");
    std::fs::write(dir.join("tls.key"), &serving.key_pem).expect("write key");
    let config = WebhookConfig::new(dir.join("tls.crt"), dir.join("tls.key"))
        .addr(([127, 0, 0, 1], 0).into());
    let server = WebhookServer::bind(config, vec![Arc::new(GadgetApp)])
        .await
        .expect("bind");
    let endpoint = WebhookEndpoint::url(format!("https://{}", server.local_addr()), ca.cert_pem());
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(stop.clone()));

    // CRDs with the conversion webhook, and the admission configurations, all from the manifest.
    let crds = CrdBuilder::new(&manifest)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .conversion_webhook(endpoint.conversion_client())
        .build()
        .expect("CRDs");
    env.install_crds(crds).await.expect("install CRDs");
    let (validating, mutating) = admission_configurations(&manifest, &endpoint);
    let pp = PostParams::default();
    Api::<ValidatingWebhookConfiguration>::all(env.client())
        .create(&pp, &validating.expect("validation declared"))
        .await
        .expect("create validating configuration");
    Api::<MutatingWebhookConfiguration>::all(env.client())
        .create(&pp, &mutating.expect("mutation declared"))
        .await
        .expect("create mutating configuration");
    let ns = env.create_namespace("hooks").await.expect("namespace");

    // The apiserver picks each configuration up asynchronously, on its own: a dry-run create of
    // a valid object comes back mutated once the mutating webhook is live, and one of an invalid
    // object is refused once the validating webhook is.
    let api: Api<v1::Gadget> = Api::namespaced(env.client(), &ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let probe = v1::Gadget::new("probe", v1::GadgetSpec { size: 1 });
        let mutating_live = api
            .create(&dry, &probe)
            .await
            .is_ok_and(|created| created.labels().contains_key("hooks.kubeapp.dev/mutated"));
        let invalid = v1::Gadget::new("probe", v1::GadgetSpec { size: 11 });
        let validating_live = matches!(
            api.create(&dry, &invalid).await,
            Err(kube::Error::Api(status)) if status.message.contains("larger than 10")
        );
        if mutating_live && validating_live {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhooks never became active"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Setup { env, ns, stop }
}

#[tokio::test]
async fn an_invalid_object_is_rejected_with_the_validators_message() {
    let setup = setup().await;
    let api: Api<v1::Gadget> = Api::namespaced(setup.env.client(), &setup.ns);
    let err = api
        .create(
            &PostParams::default(),
            &v1::Gadget::new("big", v1::GadgetSpec { size: 11 }),
        )
        .await
        .expect_err("size 11 is invalid");
    let kube::Error::Api(status) = &err else {
        panic!("not an API error: {err:?}")
    };
    assert!(
        status.message.contains("size 11 is larger than 10"),
        "{status:?}"
    );
    assert!(
        api.get_opt("big").await.expect("get").is_none(),
        "nothing stored"
    );

    // The other version is validated by the same hook.
    let v2api: Api<v2::Gadget> = Api::namespaced(setup.env.client(), &setup.ns);
    let err = v2api
        .create(
            &PostParams::default(),
            &v2::Gadget::new("big2", v2::GadgetSpec { dimension: 12 }),
        )
        .await
        .expect_err("dimension 12 is invalid");
    assert!(
        err.to_string().contains("size 12 is larger than 10"),
        "{err}"
    );
}

#[tokio::test]
async fn the_mutation_is_applied_to_stored_objects() {
    let setup = setup().await;
    let api: Api<v1::Gadget> = Api::namespaced(setup.env.client(), &setup.ns);
    api.create(
        &PostParams::default(),
        &v1::Gadget::new("small", v1::GadgetSpec { size: 2 }),
    )
    .await
    .expect("valid object");
    let stored = api.get("small").await.expect("stored");
    assert_eq!(
        stored
            .labels()
            .get("hooks.kubeapp.dev/mutated")
            .map(String::as_str),
        Some("yes")
    );
}

#[tokio::test]
async fn objects_read_back_converted_in_both_directions() {
    let setup = setup().await;
    let (client, ns) = (setup.env.client(), setup.ns.as_str());
    let as_v1: Api<v1::Gadget> = Api::namespaced(client.clone(), ns);
    let as_v2: Api<v2::Gadget> = Api::namespaced(client, ns);

    // Created as v1 (the storage version), read as v2: converted by the webhook.
    as_v1
        .create(
            &PostParams::default(),
            &v1::Gadget::new("one", v1::GadgetSpec { size: 3 }),
        )
        .await
        .expect("create v1");
    assert_eq!(
        as_v2.get("one").await.expect("read as v2").spec.dimension,
        3
    );

    // Created as v2: converted to v1 for storage, and read back as either.
    as_v2
        .create(
            &PostParams::default(),
            &v2::Gadget::new("two", v2::GadgetSpec { dimension: 4 }),
        )
        .await
        .expect("create v2");
    assert_eq!(as_v1.get("two").await.expect("read as v1").spec.size, 4);
    assert_eq!(
        as_v2.get("two").await.expect("read as v2").spec.dimension,
        4
    );
}
