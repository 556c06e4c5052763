//! The assets as Kubernetes objects: the `PrometheusRule` and ServiceMonitor/PodMonitor of the
//! Prometheus operator (`monitoring.coreos.com/v1`) and the dashboard's ConfigMap for Grafana's
//! dashboard sidecar (label `grafana_dashboard: "1"`).

use serde_json::{Value, json};

use super::{MonitoringAssets, Scrape};
use crate::deploy::METRICS_PORT_NAME;

/// The labels every object carries; the first two are what the operator's Deployment, pods and
/// metrics Service are selected by.
fn labels(assets: &MonitoringAssets) -> Value {
    json!({
        "app.kubernetes.io/name": assets.name,
        "app.kubernetes.io/component": "operator",
        "app.kubernetes.io/managed-by": "kubeapp",
    })
}

fn selector(assets: &MonitoringAssets) -> Value {
    json!({"matchLabels": {
        "app.kubernetes.io/name": assets.name,
        "app.kubernetes.io/component": "operator",
    }})
}

/// The alerting rules for the Prometheus operator.
pub(super) fn prometheus_rule(assets: &MonitoringAssets) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": assets.name, "namespace": assets.namespace, "labels": labels(assets)},
        "spec": assets.rule_groups(),
    })
}

/// The dashboard in a ConfigMap that Grafana's sidecar imports.
pub(super) fn dashboard_config_map(assets: &MonitoringAssets) -> Value {
    let mut labels = labels(assets);
    labels["grafana_dashboard"] = json!("1");
    // `Value`'s Display is compact JSON and cannot fail.
    let dashboard = assets.dashboard.to_string();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("{}-dashboard", assets.name),
                     "namespace": assets.namespace, "labels": labels},
        "data": {format!("{}.json", assets.name): dashboard},
    })
}

/// The `app.kubernetes.io/component` label of the scraper's ServiceAccount, token Secret and
/// ClusterRoleBinding.
pub const SCRAPER_COMPONENT: &str = "metrics-scraper";

/// The scraper's ServiceAccount name.
fn scraper_name(assets: &MonitoringAssets) -> String {
    format!("{}-metrics-scraper", assets.name)
}

/// The name of the Secret holding the scraper's token.
fn scraper_token_name(assets: &MonitoringAssets) -> String {
    format!("{}-metrics-scraper-token", assets.name)
}

/// Who the monitor scrapes as when the metrics port needs a token: a ServiceAccount, a
/// long-lived token Secret for it (filled by the cluster's token controller; the Prometheus
/// operator reads it from the monitor's namespace) and a ClusterRoleBinding to the
/// `{name}-metrics-reader` ClusterRole of `manifests --metrics-auth`.
pub(super) fn scraper_identity(assets: &MonitoringAssets) -> Vec<Value> {
    let scraper = scraper_name(assets);
    let mut labels = labels(assets);
    // Not the operator: `kubeapp generate` files them with the monitoring objects.
    labels["app.kubernetes.io/component"] = json!(SCRAPER_COMPONENT);
    vec![
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": scraper, "namespace": assets.namespace, "labels": labels.clone()},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {"name": scraper_token_name(assets), "namespace": assets.namespace,
                         "labels": labels.clone(),
                         "annotations": {"kubernetes.io/service-account.name": scraper}},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": scraper, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": format!("{}-metrics-reader", assets.name)},
            "subjects": [{"kind": "ServiceAccount", "name": scraper,
                          "namespace": assets.namespace}],
        }),
    ]
}

/// The ServiceMonitor or PodMonitor, when asked for. Both name the job after the
/// `app.kubernetes.io/name` label, which is what the rules select.
pub(super) fn monitor(assets: &MonitoringAssets) -> Option<Value> {
    let metadata =
        json!({"name": assets.name, "namespace": assets.namespace, "labels": labels(assets)});
    let mut endpoint = json!({"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"});
    if assets.authenticated {
        // `authorization` from a Secret works for both kinds (PodMonitor has no
        // `bearerTokenFile`) and does not depend on the Prometheus server's own identity.
        endpoint["authorization"] = json!({
            "type": "Bearer",
            "credentials": {"name": scraper_token_name(assets), "key": "token"},
        });
    }
    match assets.scrape {
        Scrape::None => None,
        Scrape::ServiceMonitor => Some(json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": metadata,
            "spec": {"jobLabel": "app.kubernetes.io/name", "selector": selector(assets),
                     "endpoints": [endpoint]},
        })),
        Scrape::PodMonitor => Some(json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": metadata,
            "spec": {"jobLabel": "app.kubernetes.io/name", "selector": selector(assets),
                     "podMetricsEndpoints": [endpoint]},
        })),
    }
}
