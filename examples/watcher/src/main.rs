//! kubeapp example operator: records each lifecycle step of a `Probe` as a Kubernetes Event and
//! in a Prometheus metric.
//!
//! What it shows:
//!
//! - a custom kind ([`kind`]) and an app manifest embedded in the binary, against which the app
//!   is validated;
//! - a watcher behind the simple App's opinionated wrapper ([`watch`]): `add`, `update`, `delete`
//!   and `sync` each become an `events.k8s.io/v1` Event about the Probe ([`lifecycle`]), and
//!   deletions made while the operator was down are still seen, through the wrapper's finalizer;
//! - an app-specific metric, `probe_lifecycle_events_total{step}` ([`metrics`]), handed to the
//!   Runner's registry as a set of its own ([`metrics`]), next to the SDK's metrics, and a
//!   Kubernetes client whose requests are counted there too;
//! - the operator binary from `kubeapp::simple::operator::Operator` (feature `cli`): `crd`,
//!   `rbac` (including Events), `manifests` (a Deployment with probes, `POD_NAME` from the pod,
//!   and a metrics Service) and `run` (flags with environment fallbacks, `--instance` for the
//!   Events' `reportingInstance`, telemetry, the Runner serving `/metrics`, `/livez` and
//!   `/readyz`, and a graceful stop on SIGTERM/SIGINT that lets in-flight steps finish: the
//!   controller's grace is 90% of `--shutdown-timeout`).
//!
//! Exit codes: 0 after a clean shutdown or a printed command, 1 on any error (the message goes to
//! stderr), 2 on a usage error.

mod app;
mod kind;
mod lifecycle;
mod metrics;
mod watch;

use kubeapp::prelude::*;

use crate::metrics::StepMetrics;

/// The name of the Deployment, its ServiceAccount and role, and the metrics Service.
pub const NAME: &str = "kubeapp-example-watcher";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    Operator::from_manifest(ManifestData::from_yaml(kind::MANIFEST_YAML))
        .name(NAME)
        .crd::<kind::Probe>()
        .app_with_context(move |context| {
            let metrics = context.metrics.set::<StepMetrics>()?;
            Ok(app::probe_app(context.manifest, &metrics))
        })
        .main()
        .await
}
