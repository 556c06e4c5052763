//! `kubeapp init`, for each template: the generated project depends on this checkout, shares
//! the suite's target directory and lock file, and passes `cargo build`, `cargo fmt --check`,
//! `cargo clippy --all-targets -- -D warnings` and `cargo test` (its end-to-end test runs the
//! operator against kube-apiserver + etcd from testenv); then `kind add` of a second kind in
//! another version keeps it formatted and lint-free. The builds run one at a time.

mod support;

use std::path::Path;

use support::{cargo, init, kubeapp, shown};

/// The files every project gets, for the kind `WebApp`.
const FILES: &[&str] = &[
    "Cargo.toml",
    "manifest.yaml",
    "README.md",
    "Dockerfile",
    ".dockerignore",
    ".gitignore",
    "src/main.rs",
    "src/kinds.rs",
    "src/web_app.rs",
    "samples/web_app.yaml",
    "tests/e2e.rs",
];

fn a_project_builds_lints_and_passes_its_test(template: &str) {
    let parent = tempfile::tempdir().expect("temp dir");
    let project = init(
        parent.path(),
        &format!("{template}-operator"),
        template,
        "WebApp",
    );
    for file in FILES {
        assert!(project.join(file).is_file(), "{template}: {file} missing");
    }
    let handler = std::fs::read_to_string(project.join("src/web_app.rs")).expect("handler");
    assert!(handler.contains("not implemented yet"), "{handler}");
    assert!(!handler.contains("todo!") && !handler.contains("unimplemented!"));
    cargo(&project, &["build", "--offline"]);
    cargo(&project, &["fmt", "--check"]);
    cargo(
        &project,
        &[
            "clippy",
            "--offline",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    );
    cargo(&project, &["test", "--offline"]);

    // A second kind, with the same template: still formatted and lint-free.
    let added = support::kubeapp_ok(
        &project,
        &["kind", "add", "--kind", "Gadget", "--version", "v2"],
    );
    assert!(added.contains("src/gadget.rs"), "{added}");
    let manifest = std::fs::read_to_string(project.join("manifest.yaml")).expect("manifest");
    assert!(
        manifest.contains("- name: v2") && manifest.contains("- kind: Gadget"),
        "{manifest}"
    );
    cargo(&project, &["fmt", "--check"]);
    cargo(
        &project,
        &[
            "clippy",
            "--offline",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    );
}

#[test]
fn the_reconciler_template_builds_lints_and_passes_its_test() {
    a_project_builds_lints_and_passes_its_test("reconciler");
}

#[test]
fn the_watcher_template_builds_lints_and_passes_its_test() {
    a_project_builds_lints_and_passes_its_test("watcher");
}

#[test]
fn the_components_template_builds_lints_and_passes_its_test() {
    a_project_builds_lints_and_passes_its_test("components");
}

#[test]
fn the_phases_template_builds_lints_and_passes_its_test() {
    a_project_builds_lints_and_passes_its_test("phases");
}

#[test]
fn init_refuses_a_non_empty_directory_and_names_bad_flags() {
    let parent = tempfile::tempdir().expect("temp dir");
    let dir = parent.path().join("mine");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("notes.txt"), "mine").expect("write");
    let args = ["init", "mine", "--kind", "Widget", "--group", "example.com"];
    let refused = kubeapp(parent.path(), &args);
    assert_eq!(refused.status.code(), Some(1), "{}", shown(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("mine: the directory is not empty"),
        "{stderr}"
    );
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(!dir.join("Cargo.toml").exists(), "nothing written");
    let forced = kubeapp(parent.path(), &[&args[..], &["--force"]].concat());
    assert!(forced.status.success(), "{}", shown(&forced));
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).expect("kept"),
        "mine"
    );

    let bad = kubeapp(
        parent.path(),
        &["init", "other", "--kind", "Widget", "--group", "example"],
    );
    assert_eq!(bad.status.code(), Some(1), "{}", shown(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--group \"example\""),
        "{}",
        shown(&bad)
    );
    assert!(!Path::new(&parent.path().join("other")).exists());
}

#[test]
fn every_command_has_help() {
    let dir = std::env::temp_dir();
    for command in [
        &[][..],
        &["init"],
        &["kind"],
        &["kind", "add"],
        &["generate"],
        &["testenv"],
        &["testenv", "install"],
        &["run"],
        &["deploy"],
    ] {
        let output = kubeapp(&dir, &[command, &["--help"]].concat());
        assert!(output.status.success(), "{command:?}: {}", shown(&output));
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("Usage: kubeapp"),
            "{command:?}: {}",
            shown(&output)
        );
    }
}
