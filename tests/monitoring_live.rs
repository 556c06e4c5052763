//! The generated dashboard and alerts against a running operator: the reconciler example (its
//! manifest has admission webhooks and a converting kind) runs as two child processes, one
//! sharded and serving the webhooks, one leader-elected, against a real kube-apiserver + etcd;
//! they reconcile Templates, one of which fails on every attempt. A real Prometheus (Debian's
//! package) scrapes both and kube-apiserver's webhook metrics (through a relay in the test), and
//! loads the generated rules. Then:
//!
//! - every metric name used by a dashboard query or an alert expression of the example's own
//!   `manifests --monitoring` output (its leader-elected and sharded forms) appears in a live
//!   scrape (the operators' `/metrics`, or kube-apiserver's for the webhook metrics), so a renamed
//!   metric breaks this test;
//! - every query and expression, evaluated by that Prometheus (`/api/v1/query`), parses and runs,
//!   and the core panels return data;
//! - Prometheus evaluates every generated rule without error (`/api/v1/rules`: health `ok`).
//!
//! Needs `prometheus` (Debian's package, `apt-get install prometheus`; `.ci/run` installs it) and
//! the example binary built first (`cargo build --workspace --all-features --bins`).

mod example_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubeapp::sdk::testenv::TestEnv;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use example_support::canary::start_prometheus_with;
use example_support::{
    Operator, eventually, free_port, get, output_of, reconciled, reconciler_binary, template,
    templates, until_ready,
};

/// The job the rules select: the operator's Deployment name.
const JOB: &str = "template-reconciler-operator";
/// Templates each operator reconciles.
const TEMPLATES: usize = 10;
/// The dashboard panels that must return data here (the others may be empty: no failures of
/// that kind happened).
const CORE_PANELS: &[&str] = &[
    "Informer events",
    "Reconcile latency (p99, p50)",
    "Handler errors",
    "Handler failures by cause",
    "Queue depth",
    "Retries",
    "Retries pending, objects failing",
    "Oldest retry age",
    "Synced",
    "Watch events and errors",
    "Requests by verb and status",
    "Request latency (p99)",
    "Leader (1 = this replica leads)",
    "Ring members",
    "Owned and active share",
    "Handoffs",
    "Admission webhook latency (p99, apiserver)",
    "Conversion webhook calls (apiserver)",
];

/// The labels Prometheus adds to every scraped series (not the exporter's).
const TARGET_LABELS: &[&str] = &["job", "instance", "namespace"];

/// The selectors of an expression: each metric name with the label names its matchers use
/// (every generated selector has braces).
fn selectors(expr: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut found = Vec::new();
    for (open, _) in expr.match_indices('{') {
        let start = expr[..open]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        if start == open || expr.as_bytes()[start].is_ascii_digit() {
            continue;
        }
        let close = open + expr[open..].find('}').expect("a closing brace");
        found.push((
            expr[start..open].to_string(),
            label_names(&expr[open + 1..close]),
        ));
    }
    found
}

/// The label names in `a="x",b=~`y`` or in a sample's `{a="x",b="y"}` (quoted values skipped).
fn label_names(matchers: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut name = String::new();
    let mut quote = None;
    let mut escaped = false;
    for c in matchers.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '"' || c == '`' => quote = Some(c),
            None if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
            None if matches!(c, '=' | '!' | '~') => {
                if !name.is_empty() {
                    names.insert(std::mem::take(&mut name));
                }
            }
            None => name.clear(),
        }
    }
    names
}

/// The sample names of a Prometheus text exposition, with every label name seen on each.
fn exposed(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some(name) = line.split(['{', ' ']).next() else {
            continue;
        };
        let labels = match (line.find('{'), line.rfind('}')) {
            (Some(open), Some(close)) if open < close => label_names(&line[open + 1..close]),
            _ => BTreeSet::new(),
        };
        found.entry(name.to_string()).or_default().extend(labels);
    }
    found
}

/// Percent-encodes a query for a URL.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `/api/v1/query` of `query` on the Prometheus at `addr`.
async fn query(addr: SocketAddr, query: &str) -> Value {
    let (_, body) = get(addr, &format!("/api/v1/query?query={}", encode(query)))
        .await
        .expect("Prometheus answers");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A dashboard query with the variables as Grafana would fill them for this operator.
fn fill(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$namespace", ".*")
        .replace("$kind", ".*")
        .replace("$job", JOB)
}

/// The expressions of one `manifests --monitoring` output: (where, expr, is a dashboard query).
fn expressions(yaml: &str) -> (Vec<(String, String, bool)>, Value) {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("the output parses");
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    let mut found = Vec::new();
    for rule in rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
    {
        found.push((
            format!("alert {}", rule["alert"].as_str().expect("name")),
            rule["expr"].as_str().expect("expr").to_string(),
            false,
        ));
    }
    let board = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("the dashboard ConfigMap");
    let text = board["data"]
        .as_object()
        .and_then(|data| data.values().next())
        .and_then(Value::as_str)
        .expect("the dashboard");
    let dashboard: Value = serde_json::from_str(text).expect("JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            found.push((
                format!("panel {}", panel["title"].as_str().expect("title")),
                target["expr"].as_str().expect("expr").to_string(),
                true,
            ));
        }
    }
    (found, rule["spec"].clone())
}

/// Serves kube-apiserver's `/metrics` (read with the test's admin client), webhook and
/// conversion families only, on a loopback port: Prometheus scrapes it as the apiserver.
async fn apiserver_relay(client: kube::Client) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the relay");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let client = client.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let request = http::Request::get("/metrics")
                    .body(Vec::new())
                    .expect("request");
                let body = client.request_text(request).await.unwrap_or_default();
                let kept: String = body
                    .lines()
                    .filter(|l| {
                        l.contains("apiserver_admission_webhook_")
                            || l.contains("apiserver_crd_conversion_webhook_")
                    })
                    .map(|l| format!("{l}\n"))
                    .collect();
                let response = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{kept}",
                    kept.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_and_alert_reads_live_metrics_of_a_running_operator() {
    let env = TestEnv::start().await.expect("testenv");
    let client = env.client();
    let sharded_ns = env
        .create_namespace("mon-sharded")
        .await
        .expect("namespace");
    let elected_ns = env
        .create_namespace("mon-elected")
        .await
        .expect("namespace");

    // The sharded replica serves the webhooks the apiserver calls.
    let sharded = Operator::start(
        &env,
        &sharded_ns,
        &[
            "--shard",
            "--instance",
            "sharded-0",
            "--leader-election-namespace",
            &sharded_ns,
        ],
    );
    sharded.install_crd(&env).await;
    sharded.install_webhook_configurations(&env).await;
    until_ready(sharded.metrics_addr, || sharded.logs()).await;
    sharded.wait_for_webhooks(&client, &sharded_ns).await;
    let elected = Operator::start_with_certs_in(
        &env,
        &elected_ns,
        &[
            "--leader-elect",
            "--instance",
            "elected-0",
            "--leader-election-namespace",
            &elected_ns,
        ],
        &env.dir().join("elected-tls"),
    );
    until_ready(elected.metrics_addr, || elected.logs()).await;

    // Work: Templates reconciled by each, and one that fails on every attempt (its ConfigMap
    // exists, immutable, with other data).
    let create = PostParams::default();
    for (ns, operator) in [(&sharded_ns, &sharded), (&elected_ns, &elected)] {
        let api = templates(&client, ns, "v1");
        for i in 0..TEMPLATES {
            let body = template(
                "v1",
                &format!("t{i}"),
                json!({"data": {"k": format!("{i}")}}),
            );
            api.create(&create, &body).await.expect("create a Template");
        }
        eventually(
            "every Template is reconciled",
            || operator.logs(),
            || async {
                let list = api.list(&Default::default()).await.ok()?;
                (list.items.len() == TEMPLATES && list.items.iter().all(reconciled)).then_some(())
            },
        )
        .await;
    }
    let stuck: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "stuck", "namespace": sharded_ns},
        "immutable": true, "data": {"k": "theirs"}
    }))
    .expect("ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), &sharded_ns)
        .create(&create, &stuck)
        .await
        .expect("create the immutable ConfigMap");
    templates(&client, &sharded_ns, "v1")
        .create(
            &create,
            &template("v1", "stuck", json!({"data": {"k": "mine"}})),
        )
        .await
        .expect("create the failing Template");

    // The assets, from the example binary itself, in both forms.
    let dir = tempfile::tempdir().expect("dir");
    let ca = sharded.certs.ca_file.display().to_string();
    let mut checked = Vec::new();
    let mut rule_files = Vec::new();
    for (form, flags) in [
        ("elected", &["--replicas", "2"][..]),
        ("sharded", &["--shard"][..]),
    ] {
        let mut args = vec![
            "manifests",
            "--image",
            "example:test",
            "--webhook-ca-file",
            &ca,
            "--monitoring",
        ];
        args.extend(flags);
        let (found, groups) = expressions(&output_of(&reconciler_binary(), &args));
        checked.extend(found);
        let file = dir.path().join(format!("{form}.rules.yaml"));
        std::fs::write(&file, serde_saphyr::to_string(&groups).expect("yaml")).expect("write");
        rule_files.push(file);
    }

    // Every metric name exists in a live scrape.
    let failing = eventually(
        "the failing Template is counted",
        || sharded.logs(),
        || async {
            let (_, text) = get(sharded.metrics_addr, "/metrics").await?;
            text.contains("handler_failures_total{").then_some(text)
        },
    )
    .await;
    let mut operator_series = exposed(&failing);
    let (_, elected_text) = get(elected.metrics_addr, "/metrics")
        .await
        .expect("/metrics");
    for (name, labels) in exposed(&elected_text) {
        operator_series.entry(name).or_default().extend(labels);
    }
    let relay = apiserver_relay(client.clone()).await;
    let (_, apiserver_text) = get(relay, "/metrics").await.expect("the relay");
    let apiserver_series = exposed(&apiserver_text);
    // name (or name and label) -> where it is used
    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (place, expr, _) in &checked {
        for (name, labels) in selectors(expr) {
            let scraped = if name.starts_with("apiserver_") {
                &apiserver_series
            } else {
                &operator_series
            };
            let Some(has) = scraped.get(&name) else {
                missing.entry(name).or_default().insert(place.clone());
                continue;
            };
            for label in labels {
                if !has.contains(&label) && !TARGET_LABELS.contains(&label.as_str()) {
                    let key = format!("{name} label {label}");
                    missing.entry(key).or_default().insert(place.clone());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "metric names (and label names) used by the generated dashboard or alerts but absent \
         from the live scrape (what: where used): {missing:#?}\noperator series: \
         {operator_series:?}\napiserver series: {apiserver_series:?}"
    );
    assert!(
        checked
            .iter()
            .any(|c| c.1.contains("apiserver_crd_conversion"))
            && checked.iter().any(|c| c.1.contains("leader_election"))
            && checked.iter().any(|c| c.1.contains("shard_")),
        "the webhook, leader and shard signals are all checked"
    );

    // Every query and expression runs in a real Prometheus; the core panels return data.
    let port = free_port();
    let scrape = format!(
        "  - job_name: {JOB}\n    static_configs:\n      - targets: ['{}', '{}']\n  \
         - job_name: apiserver\n    static_configs:\n      - targets: ['{relay}']\n",
        sharded.metrics_addr, elected.metrics_addr
    );
    let rules: Vec<&std::path::Path> = rule_files.iter().map(|p| p.as_path()).collect();
    let _prometheus = start_prometheus_with(dir.path(), port, &scrape, &rules).await;
    let prometheus = SocketAddr::from(([127, 0, 0, 1], port));
    let logs = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    for (place, expr, dashboard) in &checked {
        let filled = if *dashboard { fill(expr) } else { expr.clone() };
        let core = *dashboard && CORE_PANELS.iter().any(|p| place == &format!("panel {p}"));
        eventually(
            &format!(
                "{place}: `{filled}` runs{}",
                if core { " and returns data" } else { "" }
            ),
            logs,
            || async {
                let answer = query(prometheus, &filled).await;
                assert_eq!(answer["status"], "success", "{place}: `{filled}`: {answer}");
                let data = answer["data"]["result"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty());
                (data || !core).then_some(())
            },
        )
        .await;
    }
    eventually(
        "Prometheus evaluated every rule without error",
        logs,
        || async {
            let (_, body) = get(prometheus, "/api/v1/rules").await?;
            let answer: Value = serde_json::from_str(&body).ok()?;
            let rules: Vec<&Value> = answer["data"]["groups"]
                .as_array()?
                .iter()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            let evaluated = rules
                .iter()
                .all(|r| r["lastEvaluation"] != "0001-01-01T00:00:00Z");
            for rule in &rules {
                assert_ne!(
                    rule["health"], "err",
                    "rule {}: {}",
                    rule["name"], rule["lastError"]
                );
            }
            (rules.len() == checked.iter().filter(|c| !c.2).count() && evaluated).then_some(())
        },
    )
    .await;

    sharded.signal("TERM");
    elected.signal("TERM");
}
