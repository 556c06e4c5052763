//! The Grafana dashboard: rows of time-series panels over the golden signals, templated by the
//! Prometheus data source, `namespace`, `job` and `kind`. Plain JSON built with `serde_json`
//! (Grafana's model is a documented JSON document; no Grafana client crate is needed to write it).

use serde_json::{Value, json};

use super::{Metric, Queries};

/// One panel: a title, a unit and its queries (`(expr, legend)`).
pub(crate) struct Panel {
    pub(crate) title: &'static str,
    pub(crate) unit: &'static str,
    pub(crate) targets: Vec<(String, &'static str)>,
}

/// A row of panels.
pub(crate) struct Row {
    pub(crate) title: &'static str,
    pub(crate) panels: Vec<Panel>,
}

const RATE: &str = "$__rate_interval";
const KIND: &str = r#"kind=~"$kind""#;

fn panel(title: &'static str, unit: &'static str, targets: Vec<(String, &'static str)>) -> Panel {
    Panel {
        title,
        unit,
        targets,
    }
}

/// The rows for `q`'s app (the leader, shard and webhook rows when the operator uses them).
pub(crate) fn rows(q: &Queries<'_>) -> Vec<Row> {
    let k = "job, kind";
    let rate = |metric: Metric, by: &str, extra: &str| {
        format!("sum by ({by}) (rate({}[{RATE}]))", q.sel(metric, extra))
    };
    let p99 = |metric: Metric, by: &str, extra: &str| {
        format!(
            "histogram_quantile(0.99, sum by ({by}, le) (rate({}[{RATE}])))",
            q.sel_suffixed(metric, "_bucket", extra)
        )
    };
    let p50 = |metric: Metric, by: &str, extra: &str| {
        format!(
            "histogram_quantile(0.5, sum by ({by}, le) (rate({}[{RATE}])))",
            q.sel_suffixed(metric, "_bucket", extra)
        )
    };
    let gauge =
        |metric: Metric, by: &str, extra: &str| format!("max by ({by}) ({})", q.sel(metric, extra));
    let mut rows = vec![
        Row {
            title: "Reconciling",
            panels: vec![
                panel(
                    "Informer events",
                    "ops",
                    vec![(
                        rate(Metric::InformerEvents, "job, kind, event_type", KIND),
                        "{{kind}} {{event_type}}",
                    )],
                ),
                panel(
                    "Reconcile latency (p99, p50)",
                    "s",
                    vec![
                        (p99(Metric::ReconcilerDuration, k, KIND), "p99 {{kind}}"),
                        (p50(Metric::ReconcilerDuration, k, KIND), "p50 {{kind}}"),
                    ],
                ),
                panel(
                    "Event wait, receipt to handler start (p99, p50)",
                    "s",
                    vec![
                        (p99(Metric::EventWait, k, KIND), "p99 {{kind}}"),
                        (p50(Metric::EventWait, k, KIND), "p50 {{kind}}"),
                    ],
                ),
                panel(
                    "Handler errors",
                    "ops",
                    vec![
                        (
                            rate(Metric::ReconcilerErrors, k, KIND),
                            "reconciler {{kind}}",
                        ),
                        (rate(Metric::WatcherErrors, k, KIND), "watcher {{kind}}"),
                        (rate(Metric::TerminalErrors, k, KIND), "terminal {{kind}}"),
                    ],
                ),
                panel(
                    "Handler failures by cause",
                    "ops",
                    vec![(
                        rate(Metric::HandlerFailures, "job, kind, cause", KIND),
                        "{{kind}} {{cause}}",
                    )],
                ),
                panel(
                    "Handler calls running",
                    "short",
                    vec![(
                        format!("sum by ({k}) ({})", q.sel(Metric::OngoingProcesses, KIND)),
                        "{{kind}}",
                    )],
                ),
            ],
        },
        Row {
            title: "Queue and retries",
            panels: vec![
                panel(
                    "Queue depth",
                    "short",
                    vec![(gauge(Metric::InformerQueueDepth, k, KIND), "{{kind}}")],
                ),
                panel(
                    "Oldest queued age (waiting for a worker)",
                    "s",
                    vec![(gauge(Metric::QueueOldestAge, k, KIND), "{{kind}}")],
                ),
                panel(
                    "Retries",
                    "ops",
                    vec![
                        (
                            rate(Metric::Retries, "job, kind, result", KIND),
                            "{{kind}} {{result}}",
                        ),
                        (rate(Metric::RetriesGivenUp, k, KIND), "given up {{kind}}"),
                    ],
                ),
                panel(
                    "Retries pending, objects failing",
                    "short",
                    vec![
                        (gauge(Metric::RetriesPending, k, KIND), "pending {{kind}}"),
                        (gauge(Metric::ObjectsFailing, k, KIND), "failing {{kind}}"),
                    ],
                ),
                panel(
                    "Oldest retry age",
                    "s",
                    vec![(gauge(Metric::OldestRetryAge, k, KIND), "{{kind}}")],
                ),
            ],
        },
        Row {
            title: "Informers",
            panels: vec![
                panel(
                    "Synced",
                    "short",
                    vec![(
                        gauge(Metric::InformerSynced, "job, instance, kind", KIND),
                        "{{instance}} {{kind}}",
                    )],
                ),
                panel(
                    "Watch events and errors",
                    "ops",
                    vec![
                        (rate(Metric::WatchEvents, k, KIND), "events {{kind}}"),
                        (rate(Metric::WatchErrors, k, KIND), "errors {{kind}}"),
                        (rate(Metric::DecodeErrors, k, KIND), "undecodable {{kind}}"),
                        (rate(Metric::CacheDrift, k, KIND), "cache drift {{kind}}"),
                    ],
                ),
            ],
        },
        Row {
            title: "Kubernetes API client",
            panels: vec![
                panel(
                    "Requests by verb and status",
                    "reqps",
                    vec![(
                        rate(Metric::ClientRequests, "job, verb, status_code", ""),
                        "{{verb}} {{status_code}}",
                    )],
                ),
                panel(
                    "Request errors (share)",
                    "percentunit",
                    vec![(
                        format!(
                            "{} / {}",
                            rate(
                                Metric::ClientRequests,
                                "job",
                                r#"status_code=~"5..|429|error""#
                            ),
                            rate(Metric::ClientRequests, "job", "")
                        ),
                        "{{job}}",
                    )],
                ),
                panel(
                    "Request latency (p99)",
                    "s",
                    vec![(
                        p99(Metric::ClientRequestDuration, "job, verb", ""),
                        "{{verb}}",
                    )],
                ),
            ],
        },
    ];
    if q.leader_election {
        rows.push(Row {
            title: "Leader election",
            panels: vec![panel(
                "Leader (1 = this replica leads)",
                "short",
                vec![(
                    format!(
                        "max by (job, instance, name) ({})",
                        q.sel(Metric::LeaderStatus, "")
                    ),
                    "{{instance}} {{name}}",
                )],
            )],
        });
    }
    if q.sharding {
        rows.push(Row {
            title: "Sharding",
            panels: vec![
                panel(
                    "Ring members",
                    "short",
                    vec![(
                        gauge(Metric::ShardMembers, "job, instance", ""),
                        "{{instance}}",
                    )],
                ),
                panel(
                    "Owned and active share",
                    "percentunit",
                    vec![
                        (
                            gauge(Metric::ShardOwnedWidth, "job, instance", ""),
                            "owned {{instance}}",
                        ),
                        (
                            gauge(Metric::ShardActiveWidth, "job, instance", ""),
                            "active {{instance}}",
                        ),
                    ],
                ),
                panel(
                    "Handoffs",
                    "ops",
                    vec![
                        (
                            rate(Metric::ShardHandoffsStarted, "job, instance", ""),
                            "started {{instance}}",
                        ),
                        (
                            rate(Metric::ShardHandoffsFinished, "job, instance", ""),
                            "finished {{instance}}",
                        ),
                    ],
                ),
            ],
        });
    }
    let mut webhooks = Vec::new();
    if let Some(names) = &q.admission_webhooks {
        let name = format!("name=~`{names}`");
        webhooks.push(panel(
            "Admission webhook latency (p99, apiserver)",
            "s",
            vec![(
                p99(Metric::AdmissionWebhookDuration, "name", &name),
                "{{name}}",
            )],
        ));
        webhooks.push(panel(
            "Admission webhook call failures (apiserver)",
            "ops",
            vec![(
                rate(
                    Metric::AdmissionWebhookRejections,
                    "name, error_type",
                    &format!("{name},error_type!=\"no_error\""),
                ),
                "{{name}} {{error_type}}",
            )],
        ));
    }
    if let Some(crds) = &q.conversion_crds {
        let crd = format!("crd_name=~`{crds}`");
        webhooks.push(panel(
            "Conversion webhook calls (apiserver)",
            "ops",
            vec![(
                format!(
                    "sum by (crd_name, succeeded) (rate({}[{RATE}]))",
                    q.sel_suffixed(Metric::ConversionWebhookDuration, "_count", &crd)
                ),
                "{{crd_name}} succeeded={{succeeded}}",
            )],
        ));
    }
    if !webhooks.is_empty() {
        rows.push(Row {
            title: "Webhooks",
            panels: webhooks,
        });
    }
    rows
}

/// The dashboard document: `title`, `uid`, the variables and `rows` laid out two panels wide.
pub(crate) fn document(q: &Queries<'_>, title: &str, uid: &str, rows: &[Row]) -> Value {
    let mut panels = Vec::new();
    let mut id = 1;
    let mut y = 0;
    for row in rows {
        panels.push(json!({
            "type": "row", "id": id, "title": row.title, "collapsed": false,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "panels": [],
        }));
        id += 1;
        y += 1;
        for (index, panel) in row.panels.iter().enumerate() {
            let x = if index % 2 == 0 { 0 } else { 12 };
            let targets: Vec<Value> = panel
                .targets
                .iter()
                .zip('A'..='Z')
                .map(|((expr, legend), ref_id)| {
                    json!({
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "expr": expr, "legendFormat": legend, "refId": ref_id.to_string(),
                    })
                })
                .collect();
            panels.push(json!({
                "type": "timeseries", "id": id, "title": panel.title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": true},
                            "tooltip": {"mode": "multi", "sort": "desc"}},
                "targets": targets,
            }));
            id += 1;
            if index % 2 == 1 || index + 1 == row.panels.len() {
                y += 8;
            }
        }
    }
    let synced = Metric::InformerSynced.series(q.prefix);
    let query_variable = |name: &str, label: &str, query: String, all: bool, current: Value| {
        json!({
            "name": name, "label": label, "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": format!("{name}-variable")},
            "definition": query,
            "refresh": 2, "sort": 1, "multi": all, "includeAll": all,
            "allValue": if all { json!(".*") } else { Value::Null },
            "current": current,
        })
    };
    let all = json!({"selected": true, "text": "All", "value": "$__all"});
    json!({
        "title": title,
        "uid": uid,
        "description": format!("The golden signals of the {} operator, generated by kubeapp.", q.app),
        "tags": ["kubeapp", q.app],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": true,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "refresh": 1, "hide": 0, "current": {}},
            query_variable("namespace", "Namespace",
                format!("label_values({synced}, namespace)"), true, all.clone()),
            query_variable("job", "Operator (job)",
                format!("label_values({synced}{{namespace=~\"$namespace\"}}, job)"), false,
                json!({"selected": true, "text": q.job, "value": q.job})),
            query_variable("kind", "Kind",
                format!("label_values({synced}{{job=~\"$job\"}}, kind)"), true, all),
        ]},
        "panels": panels,
    })
}
