//! Webhook registrations from a manifest: the ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration of an app, and the client config of its CRDs' conversion webhook.
//!
//! The manifest says which kinds, versions and operations are validated and mutated
//! (`versions[].kinds[].admission`) and which kinds are converted (`conversion: true`); a
//! [`WebhookEndpoint`] says where the operator's webhook server is (a Service in the cluster, or a
//! URL) and which CA signed its certificate. The paths are those the Runner's webhook server
//! serves: `/validate`, `/mutate`, `/convert`.
//!
//! Rules of the generated configurations:
//!
//! - One configuration per app and type, named `{appName}-validation` / `{appName}-mutation`;
//!   `None` when no kind has that capability.
//! - One webhook per kind, named `{plural}.{group}` prefixed with `validate.` or `mutate.`,
//!   with one rule per version that declares the capability (its operations; `*` stays `*`), the
//!   kind's scope, `admissionReviewVersions: [v1]`, `sideEffects: None`, `failurePolicy: Fail`
//!   (an unreachable webhook refuses rather than lets unchecked objects in) and a 10 s timeout.
//!
//! ```
//! use kubeapp_sdk::manifest::ManifestData;
//! use kubeapp_sdk::webhooks::{WebhookEndpoint, admission_configurations};
//!
//! let manifest = ManifestData::from_yaml(r#"
//! appName: gadgets
//! group: gadgets.example.com
//! versions:
//!   - name: v1
//!     kinds:
//!       - kind: Gadget
//!         admission:
//!           validation: { operations: [CREATE, UPDATE] }
//! "#)?;
//! let endpoint = WebhookEndpoint::service("gadgets-system", "gadgets-operator", 8443, "-----BEGIN CERTIFICATE-----\n...");
//! let (validating, mutating) = admission_configurations(&manifest, &endpoint);
//! let validating = validating.expect("Gadget is validated");
//! assert_eq!(validating.metadata.name.as_deref(), Some("gadgets-validation"));
//! assert!(mutating.is_none());
//! # Ok::<(), kubeapp_sdk::manifest::ManifestError>(())
//! ```

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1 as admission;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::manifest::{AdmissionOperation, ManifestData, ManifestKind, Scope};

/// The path of the validating webhook.
pub const VALIDATE_PATH: &str = "/validate";
/// The path of the mutating webhook.
pub const MUTATE_PATH: &str = "/mutate";
/// The path of the conversion webhook.
pub const CONVERT_PATH: &str = "/convert";

/// Where kube-apiserver reaches the operator's webhook server, and the CA that signed its
/// serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookEndpoint {
    target: Target,
    ca_bundle_pem: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    Url(String),
}

impl WebhookEndpoint {
    /// A Service in the cluster (the usual deployment).
    pub fn service(
        namespace: impl Into<String>,
        name: impl Into<String>,
        port: i32,
        ca_bundle_pem: impl Into<String>,
    ) -> Self {
        Self {
            target: Target::Service {
                namespace: namespace.into(),
                name: name.into(),
                port,
            },
            ca_bundle_pem: ca_bundle_pem.into(),
        }
    }

    /// A base URL such as `https://127.0.0.1:8443` (an operator running outside the cluster, or a
    /// test); the paths are appended.
    pub fn url(base: impl Into<String>, ca_bundle_pem: impl Into<String>) -> Self {
        Self {
            target: Target::Url(base.into().trim_end_matches('/').to_string()),
            ca_bundle_pem: ca_bundle_pem.into(),
        }
    }

    fn ca_bundle(&self) -> ByteString {
        ByteString(self.ca_bundle_pem.as_bytes().to_vec())
    }

    /// The admission client config for `path`.
    pub(crate) fn admission_client(&self, path: &str) -> admission::WebhookClientConfig {
        match &self.target {
            Target::Service {
                namespace,
                name,
                port,
            } => admission::WebhookClientConfig {
                ca_bundle: Some(self.ca_bundle()),
                service: Some(admission::ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.into()),
                    port: Some(*port),
                }),
                url: None,
            },
            Target::Url(base) => admission::WebhookClientConfig {
                ca_bundle: Some(self.ca_bundle()),
                service: None,
                url: Some(format!("{base}{path}")),
            },
        }
    }

    /// The CRD conversion client config (for `CrdBuilder::conversion_webhook`).
    pub fn conversion_client(&self) -> apiext::WebhookClientConfig {
        match &self.target {
            Target::Service {
                namespace,
                name,
                port,
            } => apiext::WebhookClientConfig {
                ca_bundle: Some(self.ca_bundle()),
                service: Some(apiext::ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(CONVERT_PATH.into()),
                    port: Some(*port),
                }),
                url: None,
            },
            Target::Url(base) => apiext::WebhookClientConfig {
                ca_bundle: Some(self.ca_bundle()),
                service: None,
                url: Some(format!("{base}{CONVERT_PATH}")),
            },
        }
    }
}

/// Which capability a configuration is for.
#[derive(Clone, Copy)]
enum Capability {
    Validation,
    Mutation,
}

/// The rules of `kind` for one capability: one per version that declares it.
fn rules(
    group: &str,
    kind: &ManifestKind<'_>,
    capability: Capability,
) -> Vec<admission::RuleWithOperations> {
    let scope = match kind.scope {
        Scope::Namespaced => "Namespaced",
        Scope::Cluster => "Cluster",
    };
    kind.versions
        .iter()
        .filter_map(|v| {
            let admission = v.kind.admission.as_ref()?;
            let operations = match capability {
                Capability::Validation => &admission.validation.as_ref()?.operations,
                Capability::Mutation => &admission.mutation.as_ref()?.operations,
            };
            if operations.is_empty() {
                return None;
            }
            Some(admission::RuleWithOperations {
                api_groups: Some(vec![group.to_string()]),
                api_versions: Some(vec![v.version.name.clone()]),
                operations: Some(
                    operations
                        .iter()
                        .map(|op| operation_name(*op).to_string())
                        .collect(),
                ),
                resources: Some(vec![kind.plural.clone()]),
                scope: Some(scope.into()),
            })
        })
        .collect()
}

fn operation_name(op: AdmissionOperation) -> &'static str {
    match op {
        AdmissionOperation::Any => "*",
        AdmissionOperation::Create => "CREATE",
        AdmissionOperation::Update => "UPDATE",
        AdmissionOperation::Delete => "DELETE",
        AdmissionOperation::Connect => "CONNECT",
    }
}

/// The ValidatingWebhookConfiguration and MutatingWebhookConfiguration of `manifest`'s app, each
/// `None` when no kind has the capability. See the [module docs](self) for the rules.
pub fn admission_configurations(
    manifest: &ManifestData,
    endpoint: &WebhookEndpoint,
) -> (
    Option<admission::ValidatingWebhookConfiguration>,
    Option<admission::MutatingWebhookConfiguration>,
) {
    let kinds = manifest.kinds();
    let name = |prefix: &str, plural: &str| format!("{prefix}.{plural}.{}", manifest.group);
    let validating: Vec<admission::ValidatingWebhook> = kinds
        .iter()
        .filter_map(|kind| {
            let rules = rules(&manifest.group, kind, Capability::Validation);
            (!rules.is_empty()).then(|| admission::ValidatingWebhook {
                name: name("validate", &kind.plural),
                client_config: endpoint.admission_client(VALIDATE_PATH),
                rules: Some(rules),
                admission_review_versions: vec!["v1".into()],
                side_effects: "None".into(),
                failure_policy: Some("Fail".into()),
                timeout_seconds: Some(10),
                ..Default::default()
            })
        })
        .collect();
    let mutating: Vec<admission::MutatingWebhook> = kinds
        .iter()
        .filter_map(|kind| {
            let rules = rules(&manifest.group, kind, Capability::Mutation);
            (!rules.is_empty()).then(|| admission::MutatingWebhook {
                name: name("mutate", &kind.plural),
                client_config: endpoint.admission_client(MUTATE_PATH),
                rules: Some(rules),
                admission_review_versions: vec!["v1".into()],
                side_effects: "None".into(),
                failure_policy: Some("Fail".into()),
                reinvocation_policy: Some("Never".into()),
                timeout_seconds: Some(10),
                ..Default::default()
            })
        })
        .collect();
    let meta = |suffix: &str| ObjectMeta {
        name: Some(format!("{}-{suffix}", manifest.app_name)),
        ..ObjectMeta::default()
    };
    (
        (!validating.is_empty()).then(|| admission::ValidatingWebhookConfiguration {
            metadata: meta("validation"),
            webhooks: Some(validating),
        }),
        (!mutating.is_empty()).then(|| admission::MutatingWebhookConfiguration {
            metadata: meta("mutation"),
            webhooks: Some(mutating),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
appName: shop
group: shop.example.com
versions:
  - name: v1
    kinds:
      - kind: Order
        conversion: true
        admission:
          validation: { operations: [CREATE, UPDATE] }
          mutation: { operations: ["*"] }
      - kind: Item
        scope: Cluster
  - name: v2
    kinds:
      - kind: Order
        conversion: true
        admission:
          validation: { operations: [CREATE] }
"#;

    fn manifest() -> ManifestData {
        ManifestData::from_yaml(MANIFEST).expect("valid manifest")
    }

    #[test]
    fn validation_webhook_has_one_rule_per_version_with_its_operations() {
        let endpoint = WebhookEndpoint::url("https://127.0.0.1:8443/", "CA");
        let (validating, _) = admission_configurations(&manifest(), &endpoint);
        let validating = validating.expect("Order is validated");
        assert_eq!(validating.metadata.name.as_deref(), Some("shop-validation"));
        let webhooks = validating.webhooks.expect("webhooks");
        assert_eq!(webhooks.len(), 1, "Item has no admission");
        let hook = &webhooks[0];
        assert_eq!(hook.name, "validate.orders.shop.example.com");
        assert_eq!(
            hook.client_config.url.as_deref(),
            Some("https://127.0.0.1:8443/validate")
        );
        assert_eq!(
            hook.client_config.ca_bundle,
            Some(ByteString(b"CA".to_vec()))
        );
        let rules = hook.rules.as_ref().expect("rules");
        let summary: Vec<_> = rules
            .iter()
            .map(|r| {
                (
                    r.api_versions.clone(),
                    r.operations.clone(),
                    r.scope.clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    Some(vec!["v1".into()]),
                    Some(vec!["CREATE".into(), "UPDATE".into()]),
                    Some("Namespaced".into())
                ),
                (
                    Some(vec!["v2".into()]),
                    Some(vec!["CREATE".into()]),
                    Some("Namespaced".into())
                ),
            ]
        );
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hook.side_effects, "None");
    }

    #[test]
    fn mutation_webhook_covers_only_versions_that_declare_it() {
        let endpoint = WebhookEndpoint::service("shop-system", "shop-operator", 8443, "CA");
        let (_, mutating) = admission_configurations(&manifest(), &endpoint);
        let hook = mutating
            .expect("Order is mutated")
            .webhooks
            .expect("webhooks")
            .remove(0);
        assert_eq!(hook.name, "mutate.orders.shop.example.com");
        let service = hook.client_config.service.expect("service");
        assert_eq!(
            (service.namespace.as_str(), service.name.as_str()),
            ("shop-system", "shop-operator")
        );
        assert_eq!(
            (service.path.as_deref(), service.port),
            (Some("/mutate"), Some(8443))
        );
        let rules = hook.rules.expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].operations, Some(vec!["*".into()]));
    }

    #[test]
    fn no_capability_means_no_configuration() {
        let manifest = ManifestData::from_yaml(
            "appName: plain\ngroup: plain.example.com\nversions:\n  - name: v1\n    kinds:\n      - kind: Thing\n",
        )
        .expect("valid");
        let (validating, mutating) =
            admission_configurations(&manifest, &WebhookEndpoint::url("https://x", "CA"));
        assert!(validating.is_none() && mutating.is_none());
    }

    #[test]
    fn conversion_client_points_at_the_convert_path() {
        let url = WebhookEndpoint::url("https://127.0.0.1:9443", "CA").conversion_client();
        assert_eq!(url.url.as_deref(), Some("https://127.0.0.1:9443/convert"));
        let svc = WebhookEndpoint::service("ns", "op", 443, "CA").conversion_client();
        assert_eq!(
            svc.service.and_then(|s| s.path).as_deref(),
            Some("/convert")
        );
    }
}
