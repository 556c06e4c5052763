//! End-to-end test of `kubeapp dry-run` (issue #38's checked dry run with no cluster given): the
//! `kubeapp` binary renders `examples/components` for one WebApp through the operator's own
//! `dry-run` command and, with `--check` and no `--kubeconfig`, starts a local kube-apiserver +
//! etcd, installs the operator's CRDs from its `crd` command and has that apiserver check every
//! rendered object:
//!
//! - a valid WebApp: exit 0, "the apiserver accepted every object", one file per object;
//! - `minAvailable: -1`: exit 1, the refusal names the component, the object and the field;
//! - without `--check`: rendered, nothing checked; `--kubeconfig` without `--check`: a usage
//!   error (exit 2).
//!
//! The binaries must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::path::Path;
use std::process::Output;

use example_support::binary;
use serde_json::{Value, json};

fn web_app(min_available: i64) -> Value {
    json!({
        "apiVersion": "webapps.kubeapp.dev/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"image": "nginx:1.27", "page": "<h1>shop</h1>", "expose": true,
                 "host": "shop.example.com", "minAvailable": min_available}
    })
}

/// Runs `kubeapp dry-run --dir examples/components` for `object` with `extra` flags.
fn kubeapp_dry_run(dir: &Path, object: &Value, name: &str, extra: &[&str]) -> Output {
    binary("kubeapp-example-components", "kubeapp-example-components");
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, serde_json::to_string(object).expect("json")).expect("write");
    std::process::Command::new(binary("kubeapp", "kubeapp-cli"))
        .args(["dry-run", "--dir", "examples/components", "--object"])
        .arg(&file)
        .arg("--out")
        .arg(dir.join(name))
        .args(extra)
        // The check must not depend on a cluster of the environment.
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run kubeapp dry-run")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn dry_run_check_starts_a_local_apiserver_with_the_operators_crds_when_no_cluster_is_given() {
    let dir = tempfile::tempdir().expect("temp dir");

    let accepted = kubeapp_dry_run(dir.path(), &web_app(1), "valid", &["--check"]);
    let (stdout, stderr) = (text(&accepted.stdout), text(&accepted.stderr));
    assert!(
        accepted.status.success() && stdout.contains("the apiserver accepted every object"),
        "kubeapp dry-run --check of a valid WebApp: {}\nstdout: {stdout}\nstderr: {stderr}",
        accepted.status
    );
    let written = walk(&dir.path().join("valid"));
    assert!(
        written.len() >= 4,
        "one file per rendered object: {written:?}"
    );

    let refused = kubeapp_dry_run(dir.path(), &web_app(-1), "refused", &["--check"]);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("deployment: policy/v1 PodDisruptionBudget default/shop: spec.minAvailable"),
        "the refusal names the component, the object and the field: {stderr}"
    );

    let unchecked = kubeapp_dry_run(dir.path(), &web_app(-1), "unchecked", &[]);
    let stdout = text(&unchecked.stdout);
    assert!(
        unchecked.status.success() && !stdout.contains("apiserver"),
        "without --check nothing is checked: {}\n{stdout}\n{}",
        unchecked.status,
        text(&unchecked.stderr)
    );

    let usage = kubeapp_dry_run(dir.path(), &web_app(1), "usage", &["--kubeconfig", "x"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage.stderr));
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
