//! An app that serves only a validating admission webhook: no controller, no informer.
//!
//! What it shows: an `App` implemented by hand (`kubeapp::sdk::app::App`) whose `run` only
//! waits for the stop and whose `validate` decodes the request as the typed kind
//! (`sdk::admission::typed_request`) and refuses a `Bucket` larger than 100 GB or one that
//! shrinks (`AdmissionError::denied`: the user sees the message). The `Runner` serves it over
//! HTTPS (`RunnerConfig::webhook`) next to `/metrics`, `/livez` and `/readyz`; the webhook
//! configuration comes from the app's manifest (`sdk::webhooks::admission_configurations`).
//!
//! Run it against the cluster of the current kubeconfig. The apiserver must reach HOST and trust
//! the CA that signed the serving certificate (HOST 127.0.0.1 works for a local control plane
//! such as the one of `scripts/quickstart` or `kubeapp run`):
//!
//! ```sh
//! openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=demo-ca -keyout ca.key -out ca.crt
//! openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=webhook -CA ca.crt -CAkey ca.key \
//!   -addext subjectAltName=IP:127.0.0.1 -keyout tls.key -out tls.crt
//! cargo run --example webhook_only -- crd | kubectl apply -f -
//! cargo run --example webhook_only -- webhooks https://127.0.0.1:8443 ca.crt | kubectl apply -f -
//! cargo run --example webhook_only -- run tls.crt tls.key     # Ctrl-C stops it
//! kubectl apply -f - <<<'{"apiVersion": "examples.kubeapp.dev/v1", "kind": "Bucket",
//!   "metadata": {"name": "big"}, "spec": {"sizeGb": 500}}'
//! ```
//!
//! What to look at: the create is refused with `admission webhook "validate.buckets...."
//! denied the request: 500 GB is more than the 100 GB a Bucket may have`; `sizeGb: 50` is
//! admitted, and shrinking it to 10 is refused. The webhook's failure policy is `Fail`: while
//! the example is stopped, Buckets cannot be written at all (`kubectl delete
//! validatingwebhookconfiguration bucket-policy-validation` undoes it).

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject};
use kube::core::admission::AdmissionRequest;
use kubeapp::prelude::*;
use kubeapp::runner::webhook::WebhookConfig;
use kubeapp::sdk::admission::typed_request;
use kubeapp::sdk::app::{AdmissionError, App, AppError};
use kubeapp::sdk::webhooks::{WebhookEndpoint, admission_configurations};

/// The app's name and kinds, and which of its kinds' operations are validated.
const MANIFEST: &str = "appName: bucket-policy
group: examples.kubeapp.dev
versions: [{ name: v1, kinds: [{ kind: Bucket, admission: { validation: { operations: [CREATE, UPDATE] } } }] }]
";

/// The largest Bucket admitted.
const MAX_GB: i64 = 100;

/// Storage someone asks for.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.kubeapp.dev",
    version = "v1",
    kind = "Bucket",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct BucketSpec {
    /// The size, in GB.
    #[schemars(range(min = 1))]
    pub size_gb: i64,
}

/// The webhook-only app.
struct BucketPolicy;

#[async_trait]
impl App for BucketPolicy {
    fn name(&self) -> &str {
        "bucket-policy"
    }

    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![ApiResource::erase::<Bucket>(&())]
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        stop.cancelled().await; // nothing to run: the Runner serves the webhook
        Ok(())
    }

    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        let request = typed_request::<Bucket>(request)?;
        let (Some(new), old) = (request.object, request.old_object) else {
            return Ok(()); // a DELETE: nothing to check
        };
        let size = new.spec.size_gb;
        println!(
            "{:?} {}/{}: {size} GB",
            request.operation,
            request.namespace.unwrap_or_default(),
            request.name
        );
        if size > MAX_GB {
            let message = format!("{size} GB is more than the {MAX_GB} GB a Bucket may have");
            return Err(AdmissionError::denied(message));
        }
        match old {
            Some(old) if size < old.spec.size_gb => Err(AdmissionError::denied(format!(
                "a Bucket cannot shrink ({} GB -> {size} GB)",
                old.spec.size_gb
            ))),
            _ => Ok(()),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["crd"] => print!("{}", kubeapp::sdk::crd::to_yaml(&[Bucket::crd()])?),
        ["webhooks", url, ca_file] => {
            let manifest = ManifestData::from_yaml(MANIFEST)?;
            let endpoint = WebhookEndpoint::url(*url, std::fs::read_to_string(ca_file)?);
            let (validating, _mutating) = admission_configurations(&manifest, &endpoint);
            let validating = validating.ok_or("the manifest declares validation")?;
            print!(
                "{}",
                kubeapp::sdk::manifest::to_yaml_documents(&[validating])?
            );
        }
        ["run", cert, key] => {
            let webhook = WebhookConfig::new(cert, key).addr(([0, 0, 0, 0], 8443).into());
            let config = RunnerConfig::default()
                .metrics_addr(([127, 0, 0, 1], 9091).into())
                .webhook(webhook);
            Runner::new(config)?.app(BucketPolicy).run().await?;
        }
        _ => return Err("usage: webhook_only crd | webhooks URL CA_FILE | run CERT KEY".into()),
    }
    Ok(())
}
