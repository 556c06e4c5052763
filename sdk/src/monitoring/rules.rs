//! The alerting rules: one [`Alert`] per golden signal, rendered as the `groups:` document
//! Prometheus and `promtool` read, and as a `PrometheusRule` for the Prometheus operator.

use serde_json::{Value, json};

use super::Metric;
use super::Queries;

/// How urgent an alert is (its `severity` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Someone should look today.
    Warning,
    /// The operator is not doing its job; someone should look now.
    Critical,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// One alerting rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// The alert's name, e.g. `KubeappInformerNotSynced`.
    pub name: &'static str,
    /// The PromQL expression; the alert fires for each series it returns.
    pub expr: String,
    /// How long the expression must hold (a Prometheus duration; `0s` fires at once).
    pub pending: String,
    /// Its `severity` label.
    pub severity: Severity,
    /// One line for a human, with `{{ $labels.x }}` templates.
    pub summary: String,
    /// The metrics it reads.
    pub metrics: Vec<Metric>,
}

impl Alert {
    /// The rule as Prometheus reads it, with the app's name as label `app`.
    pub(crate) fn to_rule(&self, app: &str) -> Value {
        json!({
            "alert": self.name,
            "expr": self.expr,
            "for": self.pending,
            "labels": {"severity": self.severity.as_str(), "app": app},
            "annotations": {
                "summary": self.summary,
                "description": format!(
                    "{} See the kubeapp monitoring guide (docs/monitoring.md, alert {}).",
                    self.summary, self.name
                ),
            },
        })
    }
}

/// The alerts for `queries`' app: the core ones always, the leader, shard and webhook ones when
/// the operator uses them.
pub(crate) fn alerts(q: &Queries<'_>) -> Vec<Alert> {
    let t = q.thresholds;
    let by = "job, namespace, kind";
    let mut alerts = vec![
        Alert {
            name: "KubeappInformerNotSynced",
            expr: format!("max by ({by}) ({}) == 0", q.sel(Metric::InformerSynced, "")),
            pending: t.informer_not_synced_for.clone(),
            severity: Severity::Critical,
            summary: "The {{ $labels.kind }} informer of {{ $labels.job }} has not completed its list: nothing of that kind is handled.".into(),
            metrics: vec![Metric::InformerSynced],
        },
        Alert {
            name: "KubeappWatchErrors",
            expr: format!(
                "sum by ({by}) (rate({}[5m])) > {}",
                q.sel(Metric::WatchErrors, ""),
                t.watch_errors_per_second
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "The {{ $labels.kind }} watch of {{ $labels.job }} keeps failing ({{ $value }}/s): events arrive late.".into(),
            metrics: vec![Metric::WatchErrors],
        },
        Alert {
            name: "KubeappCacheDrift",
            expr: format!(
                "sum by ({by}) (increase({}[{}])) > {}",
                q.sel(Metric::CacheDrift, ""),
                t.cache_drift_window,
                t.cache_drift
            ),
            pending: "0s".into(),
            severity: Severity::Warning,
            summary: "The {{ $labels.kind }} cache of {{ $labels.job }} drifted from the apiserver {{ $value }} times (its watch stopped delivering; it re-listed): look for a proxy or load balancer cutting watches.".into(),
            metrics: vec![Metric::CacheDrift],
        },
        Alert {
            name: "KubeappHandlerErrors",
            expr: format!(
                "sum by ({by}) (rate({}[5m])) > {}",
                q.sel(Metric::HandlerFailures, ""),
                t.handler_errors_per_second
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "{{ $labels.job }}: {{ $value }} failed {{ $labels.kind }} handler calls per second.".into(),
            metrics: vec![Metric::HandlerFailures],
        },
        Alert {
            name: "KubeappTerminalErrors",
            expr: format!(
                "sum by ({by}) (increase({}[{}])) > {}",
                q.sel(Metric::TerminalErrors, ""),
                t.pending,
                t.terminal_errors
            ),
            pending: "0s".into(),
            severity: Severity::Warning,
            summary: "{{ $labels.job }}: {{ $value }} {{ $labels.kind }} reconciles failed with a terminal error (never retried).".into(),
            metrics: vec![Metric::TerminalErrors],
        },
        Alert {
            name: "KubeappRetriesGivenUp",
            expr: format!(
                "sum by ({by}) (increase({}[{}])) > {}",
                q.sel(Metric::RetriesGivenUp, ""),
                t.pending,
                t.retries_given_up
            ),
            pending: "0s".into(),
            severity: Severity::Warning,
            summary: "{{ $labels.job }} gave up on {{ $value }} {{ $labels.kind }} handler calls after the last retry.".into(),
            metrics: vec![Metric::RetriesGivenUp],
        },
        Alert {
            name: "KubeappQueueBacklog",
            expr: format!(
                "max by ({by}) ({}) > {}",
                q.sel(Metric::InformerQueueDepth, ""),
                t.queue_depth
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "{{ $value }} {{ $labels.kind }} events wait in the lanes of {{ $labels.job }}.".into(),
            metrics: vec![Metric::InformerQueueDepth],
        },
        Alert {
            name: "KubeappObjectsFailing",
            expr: format!(
                "max by ({by}) ({}) > {}",
                q.sel(Metric::ObjectsFailing, ""),
                t.objects_failing
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "{{ $value }} {{ $labels.kind }} objects of {{ $labels.job }} wait for a retry after failing.".into(),
            metrics: vec![Metric::ObjectsFailing],
        },
        Alert {
            name: "KubeappObjectFailingLong",
            expr: format!(
                "max by ({by}) ({}) > {}",
                q.sel(Metric::OldestRetryAge, ""),
                t.oldest_retry_age_seconds
            ),
            pending: "5m".into(),
            severity: Severity::Warning,
            summary: "A {{ $labels.kind }} object of {{ $labels.job }} has been failing for {{ $value }} s.".into(),
            metrics: vec![Metric::OldestRetryAge],
        },
        Alert {
            name: "KubeappClientErrors",
            expr: format!(
                "sum by (job, namespace) (rate({}[5m])) / sum by (job, namespace) (rate({}[5m])) > {}",
                q.sel(Metric::ClientRequests, r#"status_code=~"5..|429|error""#),
                q.sel(Metric::ClientRequests, ""),
                t.client_error_ratio
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "{{ $labels.job }}: {{ $value }} of its Kubernetes API requests fail (5xx, 429 or no answer).".into(),
            metrics: vec![Metric::ClientRequests],
        },
        Alert {
            name: "KubeappClientLatency",
            expr: format!(
                "histogram_quantile(0.99, sum by (job, namespace, verb, le) (rate({}[5m]))) > {}",
                q.sel_suffixed(Metric::ClientRequestDuration, "_bucket", ""),
                t.client_latency_p99_seconds
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "{{ $labels.job }}: the 99th percentile of {{ $labels.verb }} requests to the Kubernetes API takes {{ $value }} s.".into(),
            metrics: vec![Metric::ClientRequestDuration],
        },
    ];
    if q.leader_election {
        alerts.push(Alert {
            name: "KubeappLeaderChanges",
            expr: format!(
                "sum by (job, namespace, name) (changes({}[1h])) > {}",
                q.sel(Metric::LeaderStatus, ""),
                t.leader_changes_per_hour
            ),
            pending: "0s".into(),
            severity: Severity::Warning,
            summary: "The leader Lease {{ $labels.name }} of {{ $labels.job }} changed hands {{ $value }} times in an hour.".into(),
            metrics: vec![Metric::LeaderStatus],
        });
        alerts.push(Alert {
            name: "KubeappNoLeader",
            expr: format!(
                "max by (job, namespace, name) ({}) == 0",
                q.sel(Metric::LeaderStatus, "")
            ),
            pending: t.no_leader_for.clone(),
            severity: Severity::Critical,
            summary: "No replica of {{ $labels.job }} holds the leader Lease {{ $labels.name }}: nothing is handled.".into(),
            metrics: vec![Metric::LeaderStatus],
        });
    }
    if q.sharding {
        alerts.push(Alert {
            name: "KubeappShardHandoffStuck",
            expr: format!(
                "{} < {}",
                q.sel(Metric::ShardActiveWidth, ""),
                q.sel(Metric::ShardOwnedWidth, "")
            ),
            pending: t.shard_handoff_for.clone(),
            severity: Severity::Warning,
            summary: "{{ $labels.instance }} of {{ $labels.job }} acts on less of the shard ring than it owns: a handoff does not finish.".into(),
            metrics: vec![Metric::ShardActiveWidth, Metric::ShardOwnedWidth],
        });
        alerts.push(Alert {
            name: "KubeappShardHandoffsFrequent",
            expr: format!(
                "sum by (job, namespace) (increase({}[1h])) > {}",
                q.sel(Metric::ShardHandoffsStarted, ""),
                t.shard_handoffs_per_hour
            ),
            pending: "0s".into(),
            severity: Severity::Warning,
            summary: "The shard ring of {{ $labels.job }} changed membership {{ $value }} times in an hour.".into(),
            metrics: vec![Metric::ShardHandoffsStarted],
        });
    }
    if let Some(names) = &q.admission_webhooks {
        let name = format!("name=~`{names}`");
        alerts.push(Alert {
            name: "KubeappWebhookLatency",
            expr: format!(
                "histogram_quantile(0.99, sum by (name, le) (rate({}[5m]))) > {}",
                q.sel_suffixed(Metric::AdmissionWebhookDuration, "_bucket", &name),
                t.webhook_latency_p99_seconds
            ),
            pending: t.pending.clone(),
            severity: Severity::Warning,
            summary: "The 99th percentile of the webhook {{ $labels.name }}'s calls takes {{ $value }} s (the apiserver's measure).".into(),
            metrics: vec![Metric::AdmissionWebhookDuration],
        });
        alerts.push(Alert {
            name: "KubeappWebhookFailures",
            expr: format!(
                "sum by (name) (rate({}[5m])) > {}",
                q.sel(
                    Metric::AdmissionWebhookRejections,
                    &format!(r#"{name},error_type="calling_webhook_error""#)
                ),
                t.webhook_failures_per_second
            ),
            pending: "5m".into(),
            severity: Severity::Critical,
            summary: "The apiserver cannot call the webhook {{ $labels.name }} ({{ $value }}/s): writes of the app's kinds are refused.".into(),
            metrics: vec![Metric::AdmissionWebhookRejections],
        });
    }
    if let Some(crds) = &q.conversion_crds {
        alerts.push(Alert {
            name: "KubeappConversionWebhookFailures",
            expr: format!(
                "sum by (crd_name) (rate({}[5m])) > {}",
                q.sel_suffixed(
                    Metric::ConversionWebhookDuration,
                    "_count",
                    &format!(r#"crd_name=~`{crds}`,succeeded="false""#)
                ),
                t.webhook_failures_per_second
            ),
            pending: "5m".into(),
            severity: Severity::Critical,
            summary: "Conversions of {{ $labels.crd_name }} fail ({{ $value }}/s): reads in other versions fail.".into(),
            metrics: vec![Metric::ConversionWebhookDuration],
        });
    }
    alerts
}
