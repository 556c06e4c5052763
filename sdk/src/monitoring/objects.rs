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

/// The ServiceMonitor or PodMonitor, when asked for. Both name the job after the
/// `app.kubernetes.io/name` label, which is what the rules select.
pub(super) fn monitor(assets: &MonitoringAssets) -> Option<Value> {
    let metadata =
        json!({"name": assets.name, "namespace": assets.namespace, "labels": labels(assets)});
    let endpoint = json!({"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"});
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
