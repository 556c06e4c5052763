//! The generated alerting rules, checked by Prometheus's own tool: `promtool check rules` on the
//! rules of a manifest with every signal (and on each example operator's `manifests --monitoring`
//! output, in its plain, leader-elected and sharded forms), and `promtool test rules` with one
//! unit-test file per alert (tests/monitoring/alerts/<Alert>.yaml): synthetic series under which
//! the alert fires when it should and not otherwise. The test files name the metrics literally,
//! so renaming a metric in the generator breaks them; the live check that every name exists is
//! tests/monitoring_live.rs.
//!
//! Needs `promtool` (Debian's `prometheus` package: `apt-get install prometheus`; `.ci/run`
//! installs it) or `PROMTOOL` set to its path; without it the test fails saying so.

mod example_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::monitoring::{Monitoring, MonitoringAssets};
use serde_json::Value;

/// A manifest with admission webhooks and a converting kind: every alert applies.
const SHOP: &str = include_str!("../sdk/src/monitoring/testdata/shop-manifest.yaml");

/// The examples, by binary and package name.
const EXAMPLES: &[&str] = &[
    "kubeapp-example-minimal",
    "kubeapp-example-components",
    "kubeapp-example-canary",
    "kubeapp-example-reconciler",
    "kubeapp-example-watcher",
];

fn promtool() -> String {
    std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into())
}

/// Runs promtool with `args` in `dir`; returns (success, stdout + stderr).
fn run_promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {} ({error}): install it with `apt-get install prometheus` (Debian's \
                 package has promtool; .ci/run installs it), or set PROMTOOL to its path",
                promtool()
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn shop_assets() -> MonitoringAssets {
    let manifest = ManifestData::from_yaml(SHOP).expect("manifest");
    Monitoring::new(&manifest)
        .namespace("shop")
        .leader_election(true)
        .sharding(true)
        .build()
        .expect("assets")
}

fn write_yaml(path: &Path, value: &Value) {
    std::fs::write(path, serde_saphyr::to_string(value).expect("yaml")).expect("write");
}

#[test]
fn promtool_checks_the_rules_of_every_signal() {
    let dir = tempfile::tempdir().expect("dir");
    let assets = shop_assets();
    std::fs::write(
        dir.path().join("rules.yaml"),
        assets.rules_file().expect("yaml"),
    )
    .expect("write");
    let (ok, text) = run_promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "promtool check rules failed:\n{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", assets.alerts.len())),
        "{text}"
    );
}

#[test]
fn promtool_unit_tests_fire_each_alert_when_it_should_and_not_otherwise() {
    let tests_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/monitoring/alerts");
    let dir = tempfile::tempdir().expect("dir");
    let assets = shop_assets();
    // promtool compares annotations exactly; the unit tests are about when an alert fires and
    // with which labels, so they run on the rules without annotations (whose templates `promtool
    // check rules` checks above).
    let mut groups = assets.rule_groups();
    for rule in groups["groups"][0]["rules"].as_array_mut().expect("rules") {
        rule.as_object_mut().expect("rule").remove("annotations");
    }
    write_yaml(&dir.path().join("rules.yaml"), &groups);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&tests_dir)
        .expect("tests/monitoring/alerts")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let tested: BTreeSet<String> = files
        .iter()
        .filter_map(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    let alerts: BTreeSet<String> = assets.alerts.iter().map(|a| a.name.to_string()).collect();
    assert_eq!(
        tested,
        alerts,
        "one unit-test file per alert in {}",
        tests_dir.display()
    );
    let mut names = Vec::new();
    for file in &files {
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        std::fs::copy(file, dir.path().join(&name)).expect("copy");
        names.push(name);
    }
    let mut args = vec!["test", "rules"];
    args.extend(names.iter().map(String::as_str));
    let (ok, text) = run_promtool(dir.path(), &args);
    assert!(ok, "promtool test rules failed:\n{text}");
}

#[test]
fn every_example_renders_a_dashboard_and_rules_promtool_accepts() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = dir.path().join("ca.crt");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n",
    )
    .expect("write CA");
    let ca = ca.display().to_string();
    for example in EXAMPLES {
        let binary = example_support::binary(example, example);
        for variant in [&[][..], &["--replicas", "2"][..], &["--shard"][..]] {
            let mut args = vec![
                "manifests",
                "--image",
                "example:test",
                "--webhook-ca-file",
                &ca,
                "--monitoring",
                "--scrape",
                "service-monitor",
            ];
            args.extend(variant);
            let yaml = example_support::output_of(&binary, &args);
            let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("the output parses");
            let rule = docs
                .iter()
                .find(|d| d["kind"] == "PrometheusRule")
                .unwrap_or_else(|| panic!("{example} {variant:?}: no PrometheusRule"));
            let file = format!("{example}.rules.yaml");
            write_yaml(&dir.path().join(&file), &rule["spec"]);
            let (ok, text) = run_promtool(dir.path(), &["check", "rules", &file]);
            assert!(
                ok,
                "{example} {variant:?}: promtool check rules failed:\n{text}"
            );
            let board = docs
                .iter()
                .find(|d| {
                    d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1"
                })
                .unwrap_or_else(|| panic!("{example} {variant:?}: no dashboard ConfigMap"));
            let data = board["data"].as_object().expect("data");
            let dashboard: Value = serde_json::from_str(
                data.values()
                    .next()
                    .and_then(Value::as_str)
                    .expect("one dashboard"),
            )
            .expect("the dashboard is JSON");
            assert!(
                dashboard["panels"].as_array().is_some_and(|p| p.len() > 10),
                "{example}"
            );
            assert!(
                docs.iter().any(|d| d["kind"] == "ServiceMonitor"),
                "{example}"
            );
        }
    }
}
