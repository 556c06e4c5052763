//! `manifests --monitoring`: the app's dashboard and alerts ([`kubeapp_sdk::monitoring`]) as
//! objects next to the deployment, for the way this deployment runs (leader election or
//! sharding, metrics prefix, namespace, Deployment name).

use kubeapp_sdk::manifest::ManifestData;
use kubeapp_sdk::monitoring::{Monitoring, Scrape, Thresholds};

use super::OperatorError;
use super::commands::{ManifestArgs, ScrapeObject};

/// The monitoring objects for `args` (none without `--monitoring`).
///
/// # Errors
///
/// An unreadable or invalid thresholds file, or an invalid metrics prefix.
pub(crate) fn objects(
    manifest: &ManifestData,
    name: &str,
    args: &ManifestArgs,
) -> Result<Vec<serde_json::Value>, OperatorError> {
    let settings = &args.monitoring;
    if !settings.monitoring {
        return Ok(Vec::new());
    }
    let thresholds = match &settings.alert_thresholds {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|source| OperatorError::ThresholdsFile {
                    path: path.clone(),
                    source,
                })?;
            Thresholds::from_yaml(&text, &path.display().to_string())?
        }
        None => Thresholds::default(),
    };
    let scrape = match settings.scrape {
        ScrapeObject::None => Scrape::None,
        ScrapeObject::ServiceMonitor => Scrape::ServiceMonitor,
        ScrapeObject::PodMonitor => Scrape::PodMonitor,
    };
    let assets = Monitoring::new(manifest)
        .name(name)
        .namespace(args.namespace.clone())
        .metrics_prefix(args.metrics_prefix.as_deref())
        .leader_election(args.replicas > 1 && !args.shard)
        .sharding(args.shard)
        .thresholds(thresholds)
        .scrape(scrape)
        .authenticated(args.metrics_auth)
        .build()?;
    Ok(assets.to_values())
}

#[cfg(test)]
mod tests {
    use super::super::commands::{MonitoringArgs, WebhookTargetArgs};
    use super::super::{NoArgs, Operator};
    use super::*;

    const MANIFEST: &str =
        "appName: shop\ngroup: shop.example.com\nversions: [{name: v1, kinds: [{kind: Order}]}]\n";

    fn args(replicas: i32, shard: bool, monitoring: MonitoringArgs) -> ManifestArgs {
        ManifestArgs {
            namespace: "shop-system".into(),
            image: Some("shop:1".into()),
            replicas,
            shard,
            webhook: WebhookTargetArgs::default(),
            metrics_prefix: Some("shop".into()),
            metrics_auth: false,
            monitoring,
        }
    }

    fn on(scrape: ScrapeObject) -> MonitoringArgs {
        MonitoringArgs {
            monitoring: true,
            scrape,
            alert_thresholds: None,
        }
    }

    fn kinds(yaml: &str) -> Vec<String> {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).expect("yaml");
        docs.iter()
            .filter_map(|d| d["kind"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn manifests_add_the_assets_for_how_the_deployment_runs_only_when_asked() {
        let operator = Operator::new(MANIFEST);
        let plain = operator
            .manifests_yaml(&args(1, false, MonitoringArgs::default()), &NoArgs)
            .expect("manifests");
        assert!(!kinds(&plain).iter().any(|k| k == "PrometheusRule"));
        assert!(plain.contains("--metrics-prefix"), "the prefix reaches run");

        let elected = operator
            .manifests_yaml(&args(2, false, on(ScrapeObject::ServiceMonitor)), &NoArgs)
            .expect("manifests");
        let found = kinds(&elected);
        assert_eq!(
            found[found.len() - 3..],
            ["PrometheusRule", "ConfigMap", "ServiceMonitor"]
        );
        assert!(
            elected.contains("KubeappNoLeader") && !elected.contains("KubeappShardHandoffStuck")
        );
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&elected).expect("yaml");
        let rule = docs
            .iter()
            .find(|d| d["kind"] == "PrometheusRule")
            .expect("rule");
        assert_eq!(
            rule["spec"]["groups"][0]["rules"][0]["expr"],
            r#"max by (job, namespace, kind) (shop_informer_synced{job="shop-operator"}) == 0"#
        );

        // With --metrics-auth the monitor scrapes as a ServiceAccount bound to the reader role
        // the same manifests define.
        let mut authenticated = args(1, false, on(ScrapeObject::ServiceMonitor));
        authenticated.metrics_auth = true;
        let yaml = operator
            .manifests_yaml(&authenticated, &NoArgs)
            .expect("manifests");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("yaml");
        let named = |kind: &str, name: &str| {
            docs.iter()
                .any(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        };
        assert!(
            named("ClusterRole", "shop-operator-metrics-reader"),
            "{yaml}"
        );
        assert!(
            named("ClusterRoleBinding", "shop-operator-metrics-scraper"),
            "{yaml}"
        );
        assert!(
            named("Secret", "shop-operator-metrics-scraper-token"),
            "{yaml}"
        );
        let monitor = docs
            .iter()
            .find(|d| d["kind"] == "ServiceMonitor")
            .expect("monitor");
        assert_eq!(
            monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"],
            "shop-operator-metrics-scraper-token"
        );

        let sharded = operator
            .manifests_yaml(&args(3, true, on(ScrapeObject::PodMonitor)), &NoArgs)
            .expect("manifests");
        assert!(kinds(&sharded).iter().any(|k| k == "PodMonitor"));
        assert!(
            sharded.contains("KubeappShardHandoffStuck") && !sharded.contains("KubeappNoLeader")
        );
    }

    #[test]
    fn a_bad_thresholds_file_is_named() {
        let dir = std::env::temp_dir().join(format!("kubeapp-thresholds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("thresholds.yaml");
        std::fs::write(&file, "queueDepth: many\n").expect("write");
        let mut monitoring = on(ScrapeObject::None);
        monitoring.alert_thresholds = Some(file.clone());
        let error = Operator::new(MANIFEST)
            .manifests_yaml(&args(1, false, monitoring.clone()), &NoArgs)
            .expect_err("invalid");
        let message = kubeapp_sdk::error::error_chain(&error);
        assert!(
            message.contains("thresholds.yaml") && message.contains("queueDepth"),
            "{message}"
        );
        monitoring.alert_thresholds = Some(dir.join("missing.yaml"));
        let error = Operator::new(MANIFEST)
            .manifests_yaml(&args(1, false, monitoring), &NoArgs)
            .expect_err("missing");
        assert!(error_message(&error).contains("missing.yaml"), "{error}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    fn error_message(error: &OperatorError) -> String {
        kubeapp_sdk::error::error_chain(error)
    }
}
