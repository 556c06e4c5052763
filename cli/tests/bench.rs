//! `kubeapp bench` end to end: on a generated reconciler project whose handler is filled in (an
//! owned ConfigMap and the status's `observedGeneration`, as `templates.rs` does), 30 objects
//! and a few churn updates against a real kube-apiserver + etcd; the JSON report must show
//! every object reconciled, latencies for every create and update (ordered), the requests the
//! operator makes for each object (its finalizer, ConfigMap and status writes) and a live
//! process (peak RSS, CPU). Bad flags, and a project without samples, are refused before
//! anything is built, naming the flag or the missing samples.

mod support;

use serde_json::Value;
use support::{cargo_lock, implemented, init, kubeapp, shown};

#[test]
fn bad_flags_are_refused_with_the_flag_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: [(&[&str], i32, &str); 6] = [
        (&["--objects", "0"], 2, "--objects"),
        (
            &["--churn", "fast", "--duration", "5s"],
            2,
            "not a rate such as 20/s",
        ),
        (&["--churn", "5/s"], 2, "--duration"),
        (
            &["--set", "metadata.name=a,b"],
            2,
            "not a dotted path into the spec",
        ),
        (&["--timeout", "soon"], 2, "not a duration"),
        (
            &["--churn", "5/s", "--duration", "2s"],
            1,
            "--churn needs a --set PATH=V1,V2,... with at least two values",
        ),
    ];
    for (flags, code, message) in cases {
        let output = kubeapp(dir.path(), &[&["bench"][..], flags].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{flags:?}: {}",
            shown(&output)
        );
        assert!(
            stderr.contains(message),
            "{flags:?}: {message:?} not in\n{stderr}"
        );
    }
}

fn number(report: &Value, pointer: &str) -> f64 {
    report
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer} is not a number in {report:#}"))
}

#[test]
fn bench_on_a_generated_project_reports_every_object_reconciled_with_its_requests_and_latencies() {
    let parent = tempfile::tempdir().expect("temp dir");
    let project = init(parent.path(), "bench-operator", "reconciler", "WebApp");
    let handler = project.join("src/web_app.rs");
    let stub = std::fs::read_to_string(&handler).expect("the handler");
    std::fs::write(&handler, implemented("reconciler", &stub)).expect("write the handler");

    let _one_build = cargo_lock();
    // The debug build: the suite's target directory has the dependencies built that way.
    let output = kubeapp(
        &project,
        &[
            "bench",
            "--debug",
            "--objects",
            "30",
            "--set",
            "spec.message=a,b,c",
            "--churn",
            "20/s",
            "--duration",
            "1s",
            "--timeout",
            "3m",
            "-o",
            "json",
        ],
    );
    assert!(output.status.success(), "kubeapp bench: {}", shown(&output));
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", shown(&output)));
    let show = format!("{report:#}");

    assert_eq!(report["schema"], "kubeapp.dev/bench/v1", "{show}");
    assert_eq!(report["project"], "bench-operator", "{show}");
    assert_eq!(
        report["kinds"],
        serde_json::json!(["WebApp.example.com"]),
        "{show}"
    );
    assert_eq!(report["ready"], "observed-generation", "{show}");
    assert_eq!(report["objects"], 30, "{show}");
    assert_eq!(report["reconciled"], 30, "{show}");

    // Every create has a latency; every update has one unless a newer one superseded it.
    assert_eq!(number(&report, "/create/latency/count"), 30.0, "{show}");
    let updates = number(&report, "/churn/writes");
    assert!(updates >= 1.0, "{show}");
    assert_eq!(
        number(&report, "/churn/latency/count") + number(&report, "/churn/superseded"),
        updates,
        "{show}"
    );
    for phase in ["create", "churn"] {
        let p50 = number(&report, &format!("/{phase}/latency/p50_ms"));
        let p99 = number(&report, &format!("/{phase}/latency/p99_ms"));
        let max = number(&report, &format!("/{phase}/latency/max_ms"));
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{phase}: {show}");
        assert!(
            number(&report, &format!("/{phase}/seconds_to_all_reconciled")) > 0.0,
            "{show}"
        );
    }

    // What the operator does for each object: its finalizer, its ConfigMap (server-side apply)
    // and its status for the create; the ConfigMap and the status again for each update.
    let by_kind = report["requests"]["by_kind"]
        .as_object()
        .unwrap_or_else(|| panic!("no requests.by_kind: {show}"));
    let count = |prefix: &str| -> f64 {
        by_kind
            .iter()
            .filter(|(kind, _)| kind.starts_with(prefix))
            .filter_map(|(_, n)| n.as_f64())
            .sum()
    };
    assert!(
        count("patch webapps/status 200") >= 30.0 + number(&report, "/churn/latency/count"),
        "{show}"
    );
    assert!(count("patch configmaps 20") >= 30.0, "{show}");
    assert!(count("patch webapps 200") >= 30.0, "finalizers: {show}");
    assert_eq!(number(&report, "/requests/errors"), 0.0, "{show}");
    let total = number(&report, "/requests/total");
    assert!(total >= 3.0 * 30.0, "{show}");
    assert!(
        (number(&report, "/requests_per_object") - total / 30.0).abs() < 1e-9,
        "{show}"
    );
    assert!(number(&report, "/reconciles_per_object") >= 1.0, "{show}");

    assert!(number(&report, "/operator/peak_rss_bytes") > 0.0, "{show}");
    assert!(number(&report, "/operator/cpu_seconds") > 0.0, "{show}");
}
