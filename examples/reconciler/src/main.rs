//! kubeapp example operator: renders a ConfigMap from each `Template`.
//!
//! What it shows:
//!
//! - a custom kind in two versions with a status subresource ([`kind`]) and an app manifest
//!   embedded in the binary, against which the app is validated;
//! - a reconciler behind the simple App's opinionated wrapper ([`reconcile`]): server-side apply
//!   of a ConfigMap, status with `observedGeneration` and a `Ready` condition, drift corrected
//!   at once because the app `owns` the rendered ConfigMaps (no periodic requeue), and cleanup on
//!   delete through the wrapper's finalizer;
//! - admission webhooks ([`admission`]): a validator that rejects specs which cannot render a
//!   ConfigMap, and a mutator that labels Templates; a conversion webhook between `v1` and `v2`
//!   ([`convert`]); the Runner serves them over HTTPS, required because the manifest declares
//!   them;
//! - the operator binary from `kubeapp::simple::operator::Operator` (feature `cli`): `crd` (both
//!   versions, the conversion webhook), `rbac`, `manifests` (RBAC, Deployment with probes,
//!   metrics and webhook Services, the certificate Secret's mount, the webhook configurations;
//!   with `--webhook-url`, the configurations only, for an operator outside the cluster) and
//!   `run` (flags with environment fallbacks, telemetry, the Runner serving `/metrics`, `/livez`
//!   and `/readyz` and stopping cleanly on SIGTERM/SIGINT).
//!
//! Exit codes: 0 after a clean shutdown or a printed command, 1 on any error (the message goes to
//! stderr), 2 on a usage error.

mod admission;
mod convert;
mod kind;
mod reconcile;

use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::prelude::*;

use crate::admission::{TemplateMutator, TemplateValidator};
use crate::kind::{Template, v1, v2};
use crate::reconcile::{TEMPLATE_LABEL, TemplateReconciler};

/// The name of the Deployment, ServiceAccount and role; the webhook Service is
/// `kubeapp-example-reconciler-webhook`, the certificate Secret
/// `kubeapp-example-reconciler-webhook-tls`.
pub const NAME: &str = "kubeapp-example-reconciler";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    Operator::from_manifest(ManifestData::from_yaml(kind::MANIFEST_YAML))
        .name(NAME)
        .crd::<v1::Template>()
        .crd::<v2::Template>()
        .app(app)
        .main()
        .await
}

/// The app: `Template`s reconciled into the ConfigMaps they own (label-selected, so only the
/// operator's ConfigMaps are cached), with their validator, mutator and converter.
fn app(manifest: ManifestData) -> AppConfig {
    let templates = ManagedKind::<Template>::new()
        .reconciler(TemplateReconciler)
        .owns::<ConfigMap>(watcher::Config::default().labels(TEMPLATE_LABEL))
        .validator(TemplateValidator)
        .mutator(TemplateMutator::new(manifest.app_name.clone()))
        .converter(convert::converter());
    AppConfig::from_manifest(manifest).managed_kind(templates)
}
