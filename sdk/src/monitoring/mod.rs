//! The observability assets of an app: a Grafana dashboard and Prometheus alerting rules over
//! the golden signals of its operator, derived from the app's manifest and metrics prefix.
//!
//! [`Monitoring`] renders, into [`MonitoringAssets`]:
//!
//! - a Grafana dashboard ([`MonitoringAssets::dashboard`], JSON, importable), templated by the
//!   Prometheus data source and the `namespace`, `job` and `kind` variables, with rows for
//!   reconciling, queue and retries, informers, the Kubernetes API client and, when used, leader
//!   election, sharding and webhooks;
//! - alerting rules ([`MonitoringAssets::alerts`]) as the `groups:` file Prometheus and `promtool`
//!   read ([`MonitoringAssets::rules_file`]) and as a `PrometheusRule` for the Prometheus operator;
//! - the dashboard as a ConfigMap labelled `grafana_dashboard: "1"` (for Grafana's dashboard
//!   sidecar) and, opt-in ([`Monitoring::scrape`]), a ServiceMonitor or PodMonitor.
//!
//! Every query names only metrics in [`Metric`]; the alerts fire at [`Thresholds`] (documented
//! defaults, overridable). docs/monitoring.md lists the signals and how each asset is checked.
//!
//! ```
//! use kubeapp_sdk::manifest::ManifestData;
//! use kubeapp_sdk::monitoring::{Monitoring, Scrape, Thresholds};
//!
//! let manifest = ManifestData::from_yaml(r#"
//! appName: gadgets
//! group: gadgets.example.com
//! versions:
//!   - { name: v1, kinds: [{ kind: Gadget, plural: gadgets }] }
//! "#)?;
//! let assets = Monitoring::new(&manifest)
//!     .namespace("gadgets-system")
//!     .metrics_prefix(Some("gadgets"))
//!     .thresholds(Thresholds { queue_depth: 500, ..Thresholds::default() })
//!     .scrape(Scrape::ServiceMonitor)
//!     .build()?;
//! assert!(assets.rules_file()?.contains("gadgets_informer_synced{job=\"gadgets-operator\"}"));
//! assert!(assets.alerts.iter().any(|a| a.expr.ends_with("> 500")));
//! let kinds: Vec<_> = assets.to_values().iter().map(|o| o["kind"].clone()).collect();
//! assert_eq!(kinds, ["PrometheusRule", "ConfigMap", "ServiceMonitor"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Series are selected by `job`: the rules by `job="{name}"` (the operator's Deployment name,
//! `{appName}-operator` by default, which the generated ServiceMonitor/PodMonitor make the job
//! name through `jobLabel: app.kubernetes.io/name`), the dashboard by its `job` variable. Webhook
//! signals come from kube-apiserver's own metrics (`apiserver_admission_webhook_*`,
//! `apiserver_crd_conversion_webhook_*`, filtered by the app's webhook and CRD names), which
//! measure what callers see, network included; the apiserver must be scraped for those panels.

mod dashboard;
mod metric;
mod objects;
mod rules;
#[cfg(test)]
mod tests;
mod thresholds;

use serde_json::{Value, json};

pub use self::metric::{Metric, MetricSource};
pub use self::objects::SCRAPER_COMPONENT;
pub use self::rules::{Alert, Severity};
pub use self::thresholds::Thresholds;
use crate::manifest::ManifestData;
use crate::webhooks::{WebhookEndpoint, admission_configurations};

/// Which Prometheus-operator object scrapes the operator (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scrape {
    /// No scrape object: the cluster's Prometheus finds the metrics Service its own way.
    #[default]
    None,
    /// A ServiceMonitor selecting the operator's metrics Service.
    ServiceMonitor,
    /// A PodMonitor selecting the operator's pods.
    PodMonitor,
}

/// Why the assets could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MonitoringError {
    /// A threshold is not valid.
    #[error("alert thresholds ({origin}): {message}")]
    Thresholds {
        /// Where the thresholds came from (a file, or `code`).
        origin: String,
        /// The field and what is wrong with it.
        message: String,
    },
    /// The metrics prefix cannot start a metric name.
    #[error(
        "invalid metrics prefix {prefix:?}: use letters, digits, `_` and `:`, not starting with a digit"
    )]
    InvalidPrefix {
        /// The rejected prefix.
        prefix: String,
    },
    /// A document could not be serialized.
    #[error("serializing the {what}: {message}")]
    Serialize {
        /// The document.
        what: &'static str,
        /// The serializer's message.
        message: String,
    },
}

/// Renders the dashboard and alerts of a manifest's app; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Monitoring<'m> {
    manifest: &'m ManifestData,
    name: Option<String>,
    namespace: String,
    prefix: Option<String>,
    thresholds: Thresholds,
    leader_election: bool,
    sharding: bool,
    scrape: Scrape,
    authenticated: bool,
}

impl<'m> Monitoring<'m> {
    /// The assets of `manifest`'s app, everything else defaulted.
    pub fn new(manifest: &'m ManifestData) -> Self {
        Self {
            manifest,
            name: None,
            namespace: "default".into(),
            prefix: None,
            thresholds: Thresholds::default(),
            leader_election: false,
            sharding: false,
            scrape: Scrape::None,
            authenticated: false,
        }
    }

    /// The operator's Deployment name (default `{appName}-operator`): the rules' `job`, the
    /// objects' names.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The namespace of the PrometheusRule, ConfigMap and monitor (default `default`).
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The operator's `--metrics-prefix` (its metrics are named `{prefix}_...`).
    #[must_use]
    pub fn metrics_prefix(mut self, prefix: Option<&str>) -> Self {
        self.prefix = prefix.map(str::to_string);
        self
    }

    /// When the alerts fire (default [`Thresholds::default`]).
    #[must_use]
    pub fn thresholds(mut self, thresholds: Thresholds) -> Self {
        self.thresholds = thresholds;
        self
    }

    /// The operator runs with leader election: adds its panel and `KubeappLeaderChanges`,
    /// `KubeappNoLeader`.
    #[must_use]
    pub fn leader_election(mut self, on: bool) -> Self {
        self.leader_election = on;
        self
    }

    /// The operator runs sharded: adds the sharding row and `KubeappShardHandoffStuck`,
    /// `KubeappShardHandoffsFrequent`.
    #[must_use]
    pub fn sharding(mut self, on: bool) -> Self {
        self.sharding = on;
        self
    }

    /// Which scrape object to add (default none).
    #[must_use]
    pub fn scrape(mut self, scrape: Scrape) -> Self {
        self.scrape = scrape;
        self
    }

    /// The operator's metrics port needs a bearer token (`--metrics-auth`): the scrape object
    /// sends the token of a ServiceAccount `{name}-metrics-scraper` made for it (a
    /// `kubernetes.io/service-account-token` Secret, bound to the ClusterRole
    /// `{name}-metrics-reader` that `manifests --metrics-auth` writes). Default off.
    #[must_use]
    pub fn authenticated(mut self, on: bool) -> Self {
        self.authenticated = on;
        self
    }

    /// Renders the dashboard, the alerts and the objects.
    ///
    /// # Errors
    ///
    /// Invalid [`Thresholds`] or metrics prefix.
    pub fn build(&self) -> Result<MonitoringAssets, MonitoringError> {
        self.thresholds
            .validate()
            .map_err(|message| MonitoringError::Thresholds {
                origin: "code".into(),
                message,
            })?;
        if let Some(prefix) = &self.prefix
            && !valid_prefix(prefix)
        {
            return Err(MonitoringError::InvalidPrefix {
                prefix: prefix.clone(),
            });
        }
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-operator", self.manifest.app_name));
        let mut queries = Queries {
            app: &self.manifest.app_name,
            job: &name,
            prefix: self.prefix.as_deref(),
            thresholds: &self.thresholds,
            leader_election: self.leader_election,
            sharding: self.sharding,
            admission_webhooks: admission_webhook_pattern(self.manifest),
            conversion_crds: conversion_crd_pattern(self.manifest),
            selector: format!("job=\"{name}\""),
        };
        let alerts = rules::alerts(&queries);
        queries.selector = r#"job=~"$job",namespace=~"$namespace""#.into();
        let rows = dashboard::rows(&queries);
        let uid: String = format!("kubeapp-{}", self.manifest.app_name)
            .chars()
            .take(40)
            .collect();
        let title = format!("{} operator", self.manifest.app_name);
        let dashboard = dashboard::document(&queries, &title, &uid, &rows);
        Ok(MonitoringAssets {
            app: self.manifest.app_name.clone(),
            name,
            namespace: self.namespace.clone(),
            dashboard,
            alerts,
            scrape: self.scrape,
            authenticated: self.authenticated,
        })
    }
}

/// The rendered assets; see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct MonitoringAssets {
    /// The app's name (the alerts' `app` label).
    pub app: String,
    /// The operator's Deployment name (the rules' `job`, the objects' names).
    pub name: String,
    /// The objects' namespace.
    pub namespace: String,
    /// The Grafana dashboard (JSON model, importable).
    pub dashboard: Value,
    /// The alerting rules.
    pub alerts: Vec<Alert>,
    /// Which scrape object [`to_values`](Self::to_values) adds.
    pub scrape: Scrape,
    /// Whether that object sends a bearer token (see [`Monitoring::authenticated`]).
    pub authenticated: bool,
}

impl MonitoringAssets {
    /// The rule groups (`{"groups": [...]}`), as Prometheus's rule files and the
    /// `PrometheusRule`'s spec hold them.
    pub fn rule_groups(&self) -> Value {
        let rules: Vec<Value> = self.alerts.iter().map(|a| a.to_rule(&self.app)).collect();
        json!({"groups": [{"name": format!("{}.kubeapp", self.name), "rules": rules}]})
    }

    /// The rules file (YAML) for Prometheus's `rule_files` and `promtool check rules`.
    ///
    /// # Errors
    ///
    /// The YAML serializer failing.
    pub fn rules_file(&self) -> Result<String, MonitoringError> {
        serde_saphyr::to_string(&self.rule_groups()).map_err(|e| MonitoringError::Serialize {
            what: "rules file",
            message: e.to_string(),
        })
    }

    /// The dashboard as pretty JSON, for Grafana's "Import dashboard".
    ///
    /// # Errors
    ///
    /// The JSON serializer failing.
    pub fn dashboard_json(&self) -> Result<String, MonitoringError> {
        serde_json::to_string_pretty(&self.dashboard).map_err(|e| MonitoringError::Serialize {
            what: "dashboard",
            message: e.to_string(),
        })
    }

    /// Every query of the dashboard and every alert expression, with where it is (`dashboard:
    /// <panel>` or `alert: <name>`), for checks.
    pub fn expressions(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for panel in self.dashboard["panels"].as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let (Some(title), Some(expr)) =
                    (panel["title"].as_str(), target["expr"].as_str())
                {
                    found.push((format!("dashboard: {title}"), expr.to_string()));
                }
            }
        }
        for alert in &self.alerts {
            found.push((format!("alert: {}", alert.name), alert.expr.clone()));
        }
        found
    }

    /// The Kubernetes objects, in apply order: the `PrometheusRule`, the dashboard's ConfigMap
    /// and the ServiceMonitor or PodMonitor when asked for (after the scraper's ServiceAccount,
    /// token Secret and ClusterRoleBinding when [authenticated](Monitoring::authenticated)).
    pub fn to_values(&self) -> Vec<Value> {
        let mut docs = vec![
            objects::prometheus_rule(self),
            objects::dashboard_config_map(self),
        ];
        if self.scrape != Scrape::None && self.authenticated {
            docs.extend(objects::scraper_identity(self));
        }
        docs.extend(objects::monitor(self));
        docs
    }
}

/// What the queries of one app are built from.
pub(crate) struct Queries<'a> {
    pub(crate) app: &'a str,
    pub(crate) job: &'a str,
    pub(crate) prefix: Option<&'a str>,
    pub(crate) thresholds: &'a Thresholds,
    pub(crate) leader_election: bool,
    pub(crate) sharding: bool,
    /// The app's admission webhook names as a regex, when it has any.
    pub(crate) admission_webhooks: Option<String>,
    /// The app's converting CRD names as a regex, when it has any.
    pub(crate) conversion_crds: Option<String>,
    /// The matchers that select the operator's series.
    pub(crate) selector: String,
}

impl Queries<'_> {
    /// `metric{selector,extra}` (the selector only for the operator's own metrics).
    pub(crate) fn sel(&self, metric: Metric, extra: &str) -> String {
        self.sel_suffixed(metric, "", extra)
    }

    /// [`sel`](Self::sel) of a histogram's `_bucket`, `_count` or `_sum` series.
    pub(crate) fn sel_suffixed(&self, metric: Metric, suffix: &str, extra: &str) -> String {
        let mut matchers = Vec::new();
        if metric.source() == MetricSource::Operator {
            matchers.push(self.selector.as_str());
        }
        if !extra.is_empty() {
            matchers.push(extra);
        }
        format!(
            "{}{suffix}{{{}}}",
            metric.series(self.prefix),
            matchers.join(",")
        )
    }
}

/// The names of the app's admission webhooks as an anchored regex (dots escaped).
fn admission_webhook_pattern(manifest: &ManifestData) -> Option<String> {
    let endpoint = WebhookEndpoint::url("https://unused.invalid", "");
    let (validating, mutating) = admission_configurations(manifest, &endpoint);
    let mut names: Vec<String> = validating
        .into_iter()
        .flat_map(|c| c.webhooks.unwrap_or_default())
        .map(|w| w.name)
        .collect();
    names.extend(
        mutating
            .into_iter()
            .flat_map(|c| c.webhooks.unwrap_or_default())
            .map(|w| w.name),
    );
    pattern(names)
}

/// The names of the app's CRDs that convert between versions, as an anchored regex.
fn conversion_crd_pattern(manifest: &ManifestData) -> Option<String> {
    pattern(
        manifest
            .kinds()
            .iter()
            .filter(|kind| kind.conversion && kind.versions.len() > 1)
            .map(|kind| format!("{}.{}", kind.plural, manifest.group))
            .collect(),
    )
}

/// `a\.b|c\.d` for names `a.b`, `c.d` (PromQL anchors regexes); `None` for none.
fn pattern(names: Vec<String>) -> Option<String> {
    (!names.is_empty()).then(|| {
        names
            .iter()
            .map(|name| name.replace('.', r"\."))
            .collect::<Vec<_>>()
            .join("|")
    })
}

/// Letters, digits, `_` and `:`, not starting with a digit (as the operator's registry checks).
fn valid_prefix(prefix: &str) -> bool {
    let mut chars = prefix.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}
