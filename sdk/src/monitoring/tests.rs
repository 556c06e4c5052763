use std::collections::BTreeSet;

use serde_json::Value;

use super::*;

/// A manifest with admission webhooks and a converting kind (shared with
/// `tests/monitoring_rules.rs`): every alert applies.
const WEBHOOKS: &str = include_str!("testdata/shop-manifest.yaml");

fn manifest() -> ManifestData {
    ManifestData::from_yaml(WEBHOOKS).expect("manifest")
}

fn full(manifest: &ManifestData) -> MonitoringAssets {
    Monitoring::new(manifest)
        .leader_election(true)
        .sharding(true)
        .build()
        .expect("assets")
}

/// The metric names an expression selects (every selector has braces).
fn names(expr: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = expr.as_bytes();
    for (end, _) in expr.match_indices('{') {
        let start = expr[..end]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        if start < end && !bytes[start].is_ascii_digit() {
            found.insert(expr[start..end].to_string());
        }
    }
    found
}

#[test]
fn the_dashboard_is_valid_json_with_its_variables_and_a_query_in_every_panel() {
    let assets = full(&manifest());
    let text = assets.dashboard_json().expect("json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard parses back");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "namespace", "job", "kind"]);
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut charts = 0;
    for panel in panels {
        assert!(ids.insert(panel["id"].as_u64().expect("id")), "ids unique");
        if panel["type"] == "row" {
            continue;
        }
        charts += 1;
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            assert!(!names(expr).is_empty(), "{expr} selects no metric");
            assert_eq!(target["datasource"]["uid"], "${datasource}");
        }
    }
    assert!(charts >= 15, "{charts} panels");
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert_eq!(
        rows,
        [
            "Reconciling",
            "Queue and retries",
            "Informers",
            "Kubernetes API client",
            "Leader election",
            "Sharding",
            "Webhooks"
        ]
    );
}

#[test]
fn the_dashboard_matches_its_golden_file() {
    // Regenerate with KUBEAPP_BLESS=1 after a deliberate change, and review the diff.
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/monitoring/testdata/dashboard.golden.json");
    let text = full(&manifest()).dashboard_json().expect("json") + "\n";
    if std::env::var_os("KUBEAPP_BLESS").is_some() {
        std::fs::write(&golden, &text).expect("write the golden file");
    }
    let expected = std::fs::read_to_string(&golden).expect("the golden file");
    assert!(
        text == expected,
        "the dashboard differs from {}; rerun with KUBEAPP_BLESS=1 if intended",
        golden.display()
    );
}

#[test]
fn every_query_names_only_catalogued_metrics_under_the_prefix() {
    let manifest = manifest();
    let assets = Monitoring::new(&manifest)
        .metrics_prefix(Some("shop"))
        .leader_election(true)
        .sharding(true)
        .build()
        .expect("assets");
    let known: BTreeSet<String> = [
        Metric::InformerEvents,
        Metric::InformerSynced,
        Metric::InformerQueueDepth,
        Metric::QueueOldestAge,
        Metric::ReconcilerDuration,
        Metric::EventWait,
        Metric::ReconcilerErrors,
        Metric::WatcherErrors,
        Metric::TerminalErrors,
        Metric::HandlerFailures,
        Metric::OngoingProcesses,
        Metric::RetriesPending,
        Metric::Retries,
        Metric::RetriesGivenUp,
        Metric::ObjectsFailing,
        Metric::OldestRetryAge,
        Metric::WatchEvents,
        Metric::WatchErrors,
        Metric::DecodeErrors,
        Metric::CacheDriftChecks,
        Metric::CacheDrift,
        Metric::ClientRequests,
        Metric::ClientRequestDuration,
        Metric::LeaderStatus,
        Metric::ShardMembers,
        Metric::ShardOwnedWidth,
        Metric::ShardActiveWidth,
        Metric::ShardHandoffsStarted,
        Metric::ShardHandoffsFinished,
        Metric::AdmissionWebhookDuration,
        Metric::AdmissionWebhookRejections,
        Metric::ConversionWebhookDuration,
    ]
    .into_iter()
    .flat_map(|m| {
        let base = m.series(Some("shop"));
        ["", "_bucket", "_count", "_sum"].map(|s| format!("{base}{s}"))
    })
    .collect();
    for (place, expr) in assets.expressions() {
        for name in names(&expr) {
            assert!(
                known.contains(&name),
                "{place}: unknown metric {name} in {expr}"
            );
            assert!(
                name.starts_with("shop_") || name.starts_with("apiserver_"),
                "{place}: {name} lacks the prefix"
            );
        }
    }
}

#[test]
fn the_rules_cover_the_signals_and_select_the_job() {
    let assets = full(&manifest());
    let alerts: Vec<&str> = assets.alerts.iter().map(|a| a.name).collect();
    assert_eq!(
        alerts,
        [
            "KubeappInformerNotSynced",
            "KubeappWatchErrors",
            "KubeappCacheDrift",
            "KubeappHandlerErrors",
            "KubeappTerminalErrors",
            "KubeappRetriesGivenUp",
            "KubeappQueueBacklog",
            "KubeappObjectsFailing",
            "KubeappObjectFailingLong",
            "KubeappClientErrors",
            "KubeappClientLatency",
            "KubeappLeaderChanges",
            "KubeappNoLeader",
            "KubeappShardHandoffStuck",
            "KubeappShardHandoffsFrequent",
            "KubeappWebhookLatency",
            "KubeappWebhookFailures",
            "KubeappConversionWebhookFailures",
        ]
    );
    let exprs: Vec<&str> = assets.alerts.iter().map(|a| a.expr.as_str()).collect();
    assert_eq!(
        exprs[0],
        r#"max by (job, namespace, kind) (informer_synced{job="shop-operator"}) == 0"#
    );
    assert!(
        exprs[16].contains(
            r"name=~`validate\.orders\.shop\.example\.com|mutate\.orders\.shop\.example\.com`"
        ),
        "{}",
        exprs[16]
    );
    assert!(
        exprs[17].contains(r"crd_name=~`orders\.shop\.example\.com`"),
        "{}",
        exprs[17]
    );
    // The rules file parses back to the same groups.
    let text = assets.rules_file().expect("yaml");
    let back: Value = serde_saphyr::from_str(&text).expect("the rules file parses");
    assert_eq!(back, assets.rule_groups());
    let plain = ManifestData::from_yaml(
        "appName: plain\ngroup: p.example.com\nversions: [{name: v1, kinds: [{kind: P}]}]\n",
    )
    .expect("manifest");
    let core = Monitoring::new(&plain).build().expect("assets");
    assert_eq!(core.alerts.len(), 11, "no leader, shard or webhook alerts");
    assert!(!core.dashboard_json().expect("json").contains("apiserver_"));
}

#[test]
fn thresholds_override_from_a_file_and_bad_ones_are_named() {
    let t = Thresholds::from_yaml("queueDepth: 5\npending: 2m\n", "t.yaml").expect("valid");
    assert_eq!((t.queue_depth, t.pending.as_str()), (5, "2m"));
    assert_eq!(t.objects_failing, Thresholds::default().objects_failing);
    let manifest = manifest();
    let assets = Monitoring::new(&manifest)
        .thresholds(t)
        .build()
        .expect("assets");
    let backlog = assets
        .alerts
        .iter()
        .find(|a| a.name == "KubeappQueueBacklog")
        .expect("alert");
    assert!(
        backlog.expr.ends_with("> 5") && backlog.pending == "2m",
        "{backlog:?}"
    );

    let unknown = Thresholds::from_yaml("queueDept: 5\n", "t.yaml").expect_err("typo");
    assert!(
        unknown.to_string().contains("t.yaml") && unknown.to_string().contains("queueDept"),
        "{unknown}"
    );
    let duration = Thresholds::from_yaml("pending: soon\n", "t.yaml").expect_err("duration");
    assert!(
        duration
            .to_string()
            .contains("pending: \"soon\" is not a Prometheus duration"),
        "{duration}"
    );
    let negative = Thresholds {
        client_error_ratio: -1.0,
        ..Thresholds::default()
    };
    let error = Monitoring::new(&manifest)
        .thresholds(negative)
        .build()
        .expect_err("negative");
    assert!(
        error.to_string().contains("clientErrorRatio: -1"),
        "{error}"
    );
    let prefix = Monitoring::new(&manifest)
        .metrics_prefix(Some("9x"))
        .build()
        .expect_err("prefix");
    assert!(prefix.to_string().contains("\"9x\""), "{prefix}");
}

#[test]
fn the_objects_are_a_prometheus_rule_a_dashboard_config_map_and_an_opt_in_monitor() {
    let manifest = manifest();
    let build = |scrape| {
        Monitoring::new(&manifest)
            .namespace("shop-system")
            .scrape(scrape)
            .build()
            .expect("assets")
            .to_values()
    };
    let none = build(Scrape::None);
    assert_eq!(none.len(), 2);
    assert_eq!(
        none[0]["spec"]["groups"][0]["rules"][0]["alert"],
        "KubeappInformerNotSynced"
    );
    assert_eq!(none[1]["metadata"]["labels"]["grafana_dashboard"], "1");
    let inner: Value = serde_json::from_str(
        none[1]["data"]["shop-operator.json"]
            .as_str()
            .expect("dashboard data"),
    )
    .expect("json");
    assert_eq!(inner["uid"], "kubeapp-shop");
    let service = build(Scrape::ServiceMonitor);
    assert_eq!(service[2]["kind"], "ServiceMonitor");
    assert_eq!(service[2]["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(service[2]["spec"]["jobLabel"], "app.kubernetes.io/name");
    assert_eq!(service[2]["metadata"]["namespace"], "shop-system");
    let pod = build(Scrape::PodMonitor);
    assert_eq!(pod[2]["kind"], "PodMonitor");
    assert_eq!(
        pod[2]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "shop-operator"
    );
}

#[test]
fn an_authenticated_monitor_sends_the_token_of_a_scraper_bound_to_the_reader_role() {
    let manifest = manifest();
    let build = |scrape, authenticated| {
        Monitoring::new(&manifest)
            .namespace("shop-system")
            .scrape(scrape)
            .authenticated(authenticated)
            .build()
            .expect("assets")
            .to_values()
    };
    assert_eq!(build(Scrape::None, true).len(), 2, "no monitor, no scraper");
    let open = build(Scrape::ServiceMonitor, false);
    assert!(open[2]["spec"]["endpoints"][0]["authorization"].is_null());
    for (scrape, endpoints) in [
        (Scrape::ServiceMonitor, "endpoints"),
        (Scrape::PodMonitor, "podMetricsEndpoints"),
    ] {
        let docs = build(scrape, true);
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds[2..5],
            ["ServiceAccount", "Secret", "ClusterRoleBinding"]
        );
        assert_eq!(docs.len(), 6, "{kinds:?}");
        let (account, secret, binding, monitor) = (&docs[2], &docs[3], &docs[4], &docs[5]);
        assert_eq!(account["metadata"]["name"], "shop-operator-metrics-scraper");
        assert_eq!(secret["type"], "kubernetes.io/service-account-token");
        assert_eq!(
            secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            "shop-operator-metrics-scraper"
        );
        assert_eq!(binding["roleRef"]["name"], "shop-operator-metrics-reader");
        assert_eq!(
            binding["subjects"][0],
            serde_json::json!({"kind": "ServiceAccount", "name": "shop-operator-metrics-scraper",
                               "namespace": "shop-system"})
        );
        for doc in [account, secret, binding] {
            assert_eq!(
                doc["metadata"]["labels"]["app.kubernetes.io/component"],
                SCRAPER_COMPONENT
            );
        }
        assert_eq!(
            monitor["spec"][endpoints][0]["authorization"],
            serde_json::json!({"type": "Bearer",
                               "credentials": {"name": "shop-operator-metrics-scraper-token",
                                               "key": "token"}})
        );
    }
}
