//! A phases operator: each `Canary` walks Initializing -> Waiting -> Evaluating -> Promoting or
//! RollingBack -> Succeeded or Failed (`kubeapp::phases`, Autopilot's model). Its outputs are two
//! Deployments (primary, canary) and a ConfigMap of traffic weights; Evaluating compares a success
//! rate (from `--prometheus-url`, or else from a ConfigMap) with `spec.minSuccessRate`.
//! Commands: `crd`, `rbac`, `manifests`, `run [--prometheus-url URL]`.

mod rollout;
mod success_rate;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::phases::PhaseStatus;
use kubeapp::prelude::*;

use crate::success_rate::SuccessRateSource;

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
    /// Promote when the canary's success rate is at least this (0 to 1).
    pub min_success_rate: f64,
    /// The PromQL giving the canary's success rate (default: 1 - 5xx ratio of its requests).
    pub success_rate_query: Option<String>,
}

impl Canary {
    /// The success-rate query of this canary.
    pub fn query(&self) -> String {
        self.spec.success_rate_query.clone().unwrap_or_else(|| {
            let app = self.name_any();
            format!(
                "sum(rate(http_requests_total{{app=\"{app}\",track=\"{app}-canary\",code!~\"5..\"}}[1m])) \
                 / sum(rate(http_requests_total{{app=\"{app}\",track=\"{app}-canary\"}}[1m]))"
            )
        })
    }
}

const MANIFEST: &str = include_str!("../manifest.yaml");

/// The operator's own flags, next to the common ones (given before or after the subcommand).
#[derive(Debug, clap::Args)]
struct CanaryArgs {
    /// Base URL of a Prometheus-compatible query API to read success rates from; without it,
    /// from the ConfigMap `<canary>-success-rate` (key `rate`).
    #[arg(long, env = "PROMETHEUS_URL", value_name = "URL")]
    prometheus_url: Option<String>,
    /// How often an Evaluating canary without a decision is evaluated again (e.g. 30s, 5m).
    #[arg(long, env = "EVALUATION_INTERVAL", default_value = "30s",
          value_parser = humantime::parse_duration, value_name = "DURATION")]
    evaluation_interval: std::time::Duration,
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
            let source = match context.args.prometheus_url.clone() {
                Some(url) => SuccessRateSource::Prometheus(url),
                None => SuccessRateSource::ConfigMap,
            };
            let machine = rollout::machine(source, context.args.evaluation_interval)
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
