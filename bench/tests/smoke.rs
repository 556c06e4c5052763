//! Smoke test of the benchmark tool: the Rust contenders and the floor, 30 objects each, against
//! real control planes, also as a ServiceAccount with etcd fsync on; the cache mode with a few
//! bench objects and a few Pods; and a contender that does nothing must fail the run. No timing is asserted, and the
//! Go contender is left out (building it takes minutes).
//!
//! The tool and the contender binaries are the ones cargo builds for this package's tests
//! (`target/<profile>/kubeapp-bench*`); the test never runs cargo itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const OBJECTS: u64 = 30;
const CONTENDERS: [&str; 3] = ["kubeapp", "kube-runtime", "floor"];

/// The tool, built by cargo next to this test; fails loudly when it is missing.
fn tool() -> PathBuf {
    let tool = PathBuf::from(env!("CARGO_BIN_EXE_kubeapp-bench"));
    assert!(
        tool.is_file(),
        "the benchmark tool {} is missing: build it with `cargo build -p kubeapp-bench --bins` \
         (same profile and target dir as the tests)",
        tool.display()
    );
    tool
}

fn run_tool(args: &[&str]) -> Output {
    Command::new(tool())
        .args(args)
        .output()
        .expect("run kubeapp-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_rust_contenders_and_the_floor_reconcile_everything_and_the_json_has_every_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let work = dir.path().join("work");
    let output = run_tool(&[
        "--objects",
        &OBJECTS.to_string(),
        "--contenders",
        &CONTENDERS.join(","),
        "--json",
        json.to_str().expect("UTF-8 path"),
        "--work-dir",
        work.to_str().expect("UTF-8 path"),
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "kubeapp-bench failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    for name in CONTENDERS {
        assert!(
            stdout.contains(&format!("| {name} |")),
            "{name} missing from:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("| kubeapp / floor |"),
        "no ratio row:\n{stdout}"
    );

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    assert_eq!(report["settings"]["objects"], OBJECTS);
    assert!(report["machine"]["cpus"].as_u64().expect("cpus") > 0);
    let contenders = report["contenders"].as_array().expect("contenders");
    let names: Vec<&str> = contenders
        .iter()
        .map(|c| c["contender"].as_str().expect("name"))
        .collect();
    assert_eq!(names, CONTENDERS);
    for contender in contenders {
        let name = &contender["contender"];
        for field in [
            "seconds",
            "create_seconds",
            "events_per_second",
            "objects_per_second",
            "peak_rss_mib",
            "requests_per_object",
            "conflicts_per_object",
            "reconciles_per_object",
        ] {
            let value = contender[field].as_f64();
            assert!(
                value.is_some_and(|v| v.is_finite() && v >= 0.0),
                "{name}: {field} is {value:?}"
            );
        }
        assert!(
            contender["peak_rss_mib"].as_f64().expect("rss") > 0.0,
            "{name}: no RSS"
        );
        // Every contender reconciles every object at least once, and says how often.
        assert!(
            contender["reconciles_per_object"]
                .as_f64()
                .expect("reconciles")
                >= 1.0,
            "{name}: fewer than one reconcile per object"
        );
        // Every contender writes at least the finalizer and the status of every object.
        assert!(
            contender["requests_per_object"].as_f64().expect("requests") >= 2.0,
            "{name}: fewer than two requests per object"
        );
        let runs = contender["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 1, "{name}: one round");
        let run = &runs[0];
        assert_eq!(run["objects"], OBJECTS, "{name}");
        assert_eq!(
            run["reconciled"], OBJECTS,
            "{name}: not every object reconciled"
        );
        assert_eq!(
            run["with_finalizer"], OBJECTS,
            "{name}: not every object has the finalizer"
        );
        assert_eq!(run["requests"]["errors"], 0, "{name}: failed requests");
        assert!(
            run["events"].as_u64().expect("events") >= 2 * OBJECTS,
            "{name}: a create and at least one write per object are events"
        );
        assert!(
            run["requests"]["by_kind"]["patch benchobjects/status 200"].as_u64() >= Some(OBJECTS),
            "{name}: status patches {}",
            run["requests"]["by_kind"]
        );
    }
    let ratios = report["ratios"].as_array().expect("ratios");
    let ratio_names: Vec<&str> = ratios
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert_eq!(ratio_names, ["kubeapp / kube-runtime", "kubeapp / floor"]);
    for ratio in ratios {
        for field in [
            "time",
            "events_per_second",
            "peak_rss",
            "requests_per_object",
            "reconciles_per_object",
        ] {
            assert!(ratio[field].as_f64().is_some_and(f64::is_finite), "{ratio}");
        }
    }
}

#[test]
fn a_service_account_run_with_etcd_fsync_is_a_real_cluster_figure_of_the_accounts_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let output = run_tool(&[
        "--objects",
        "10",
        "--contenders",
        &CONTENDERS.join(","),
        "--identity",
        "service-account",
        "--etcd-fsync",
        "--json",
        json.to_str().expect("UTF-8 path"),
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "kubeapp-bench failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    assert!(stdout.starts_with("**Real cluster figures**"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    assert_eq!(report["settings"]["identity"], "service-account");
    assert_eq!(report["settings"]["etcd_fsync"], true);
    for contender in report["contenders"].as_array().expect("contenders") {
        let run = &contender["runs"][0];
        // The tool fails a run whose requests came from admin; the user is the account.
        let user = run["user"].as_str().expect("user");
        assert!(
            user.starts_with("system:serviceaccount:") && user.ends_with(":kubeapp-bench-operator"),
            "{}: {user}",
            contender["contender"]
        );
        assert!(run["requests"]["total"].as_u64().expect("requests") >= 20);
    }
}

#[test]
fn the_cache_mode_syncs_relists_and_reports_every_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cache.json");
    let output = run_tool(&[
        "cache",
        "--objects",
        "40",
        "--settle-secs",
        "1",
        "--timeout-secs",
        "120",
        "--json",
        json.to_str().expect("UTF-8 path"),
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "kubeapp-bench cache failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    assert!(stdout.contains("| kubeapp / kube-runtime |"), "{stdout}");
    assert!(
        stdout.contains("| kubeapp / kube-runtime-stripped |"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    let names = contender_names(&report);
    assert_eq!(
        names,
        [
            "kubeapp",
            "kubeapp-projection",
            "kube-runtime",
            "kube-runtime-stripped"
        ]
    );
    assert_eq!(report["object"], "bench");
    assert!(
        report["object_size"]["json_bytes"]
            .as_u64()
            .is_some_and(|b| b > 100)
    );
    for contender in report["contenders"].as_array().expect("contenders") {
        assert_eq!(contender["objects"], 40);
        // CPU time is counted in clock ticks (10 ms): syncing 40 objects can take less than
        // one, so it is only required to be there and not negative.
        let cpu = &contender["sync_cpu_seconds"];
        assert!(
            cpu.as_f64().is_some_and(|v| v >= 0.0),
            "{}: sync_cpu_seconds = {cpu}",
            contender["contender"]
        );
        for field in [
            "sync_seconds",
            "empty_rss_mib",
            "steady_rss_mib",
            "peak_rss_mib",
            "relist_peak_rss_mib",
            "relist_seconds",
        ] {
            assert!(
                contender[field].as_f64().is_some_and(|v| v > 0.0),
                "{}: {field} = {}",
                contender["contender"],
                contender[field]
            );
        }
    }
    for ratio in report["ratios"].as_array().expect("ratios") {
        assert!(
            ratio["steady_rss"].as_f64().is_some_and(f64::is_finite),
            "{ratio}"
        );
    }
    assert_eq!(report["ratios"].as_array().map(Vec::len), Some(4));
    assert!(
        stdout.contains("| kubeapp-projection / kubeapp |"),
        "{stdout}"
    );
}

#[test]
fn the_cache_mode_caches_pods_of_a_few_kilobytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cache-pods.json");
    let output = run_tool(&[
        "cache",
        "--object",
        "pod",
        "--contender",
        "kubeapp",
        "--contender",
        "kubeapp-projection",
        "--objects",
        "20",
        "--settle-secs",
        "1",
        "--timeout-secs",
        "120",
        "--json",
        json.to_str().expect("UTF-8 path"),
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "kubeapp-bench cache --object pod failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    assert_eq!(report["object"], "pod");
    // 7,371 bytes with kube-apiserver v1.36.3, 4,194 without managedFields.
    let bytes = report["object_size"]["json_bytes"].as_u64().expect("size");
    assert!((6_000..=9_000).contains(&bytes), "a Pod is {bytes} bytes");
    let stripped = report["object_size"]["json_bytes_without_managed_fields"]
        .as_u64()
        .expect("size");
    assert!(
        (3_500..=5_000).contains(&stripped),
        "a Pod is {stripped} bytes without managedFields"
    );
    for contender in report["contenders"].as_array().expect("contenders") {
        assert_eq!(contender["objects"], 20, "{contender}");
    }
    // `--contender` runs only the contenders named, and the projection caches every Pod too.
    let names = contender_names(&report);
    assert_eq!(names, ["kubeapp", "kubeapp-projection"]);
    assert!(
        stdout.contains("| kubeapp-projection / kubeapp |"),
        "{stdout}"
    );
}

/// The contenders of a cache report, in the order they ran.
fn contender_names(report: &serde_json::Value) -> Vec<&str> {
    report["contenders"]
        .as_array()
        .expect("contenders")
        .iter()
        .map(|c| c["contender"].as_str().expect("name"))
        .collect()
}

/// A directory holding a "floor" that never writes anything.
fn idle_contender(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let fake = bin.join("kubeapp-bench-floor");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 600\n").expect("write the fake");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

#[test]
fn a_contender_that_reconciles_nothing_fails_the_run_and_writes_no_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = idle_contender(dir.path());
    let json = dir.path().join("report.json");
    let work = dir.path().join("work");
    let output = run_tool(&[
        "--objects",
        "5",
        "--contenders",
        "floor",
        "--timeout-secs",
        "5",
        "--bin-dir",
        bin.to_str().expect("UTF-8 path"),
        "--json",
        json.to_str().expect("UTF-8 path"),
        "--work-dir",
        work.to_str().expect("UTF-8 path"),
    ]);
    let stderr = text(&output.stderr);
    assert!(
        !output.status.success(),
        "an idle contender passed:\n{stderr}"
    );
    assert!(
        stderr.contains("floor: warm-up: not done within 5s"),
        "unexpected failure:\n{stderr}"
    );
    assert!(!json.exists(), "a failed benchmark wrote a report");
}

#[test]
fn a_missing_contender_binary_names_the_build_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = run_tool(&[
        "--contenders",
        "kubeapp",
        "--bin-dir",
        dir.path().to_str().expect("UTF-8 path"),
    ]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("cargo build --release -p kubeapp-bench --bins"),
        "{stderr}"
    );
}
