//! A phases operator: each `Canary` walks Initializing -> Waiting -> Evaluating -> Promoting or
//! RollingBack -> Succeeded or Failed (`kubeapp::phases`, Autopilot's model). Its outputs are two
//! Deployments (primary, canary) and a ConfigMap of traffic weights; Evaluating waits on the
//! canary's `spec.analysis`, measured by the Prometheus at `--prometheus-url`: successful
//! promotes, failed rolls back, inconclusive pauses until a gate (`kubeapp promote|abort|resume
//! canary/NAME`, or the `phases.kubeapp.dev/gate` annotation).
//! Commands: `crd`, `rbac` (`rbac --gate-users`: the ClusterRole of the people who gate
//! canaries), `manifests`, `run [--prometheus-url URL]`.

mod rollout;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::phases::{Analysis, PhaseStatus};
use kubeapp::prelude::*;

/// A canary rollout of `image` over `stableImage`.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "canary.kubeapp.dev",
    version = "v1",
    kind = "Canary",
    namespaced,
    status = "PhaseStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// The image in production.
    pub stable_image: String,
    /// The image to roll out.
    pub image: String,
    /// What decides: a successful analysis promotes the image, a failed one rolls it back, an
    /// inconclusive one pauses the canary until a gate.
    pub analysis: Analysis,
}

const MANIFEST: &str = include_str!("../manifest.yaml");

/// The operator's own flags, next to the common ones (given before or after the subcommand).
#[derive(Debug, clap::Args)]
struct CanaryArgs {
    /// Base URL of the Prometheus-compatible query API that measures the analyses.
    #[arg(
        long,
        env = "PROMETHEUS_URL",
        value_name = "URL",
        default_value = "http://localhost:9090"
    )]
    prometheus_url: String,
    /// How long one query may take before it fails (and is retried).
    #[arg(long, env = "PROMETHEUS_TIMEOUT", default_value = "10s",
          value_parser = humantime::parse_duration, value_name = "DURATION")]
    prometheus_timeout: std::time::Duration,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let owned =
        || watcher::Config::default().labels("app.kubernetes.io/managed-by=canary-operator");
    Operator::new(MANIFEST)
        .manifest_file("manifest.yaml")
        .crd::<Canary>()
        .args::<CanaryArgs>()
        .app_with_context(move |context| {
            let args = &context.args;
            let machine = rollout::machine()
                .prometheus(&args.prometheus_url, args.prometheus_timeout)?
                // Counted in the Runner's registry, under its --metrics-prefix.
                .metrics_in(&context.metrics)?;
            let scheduler = machine.build()?;
            Ok(AppConfig::from_manifest(context.manifest).managed_kind(
                ManagedKind::<Canary>::new()
                    .reconciler(scheduler)
                    .owns::<Deployment>(owned())
                    .owns::<ConfigMap>(owned()),
            ))
        })
        .main()
        .await
}
