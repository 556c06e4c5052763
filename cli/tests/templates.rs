//! `kubeapp init`, for each template, from a temporary directory outside the repository and
//! without `--kubeapp-path` (the project depends on the checkout the `kubeapp` binary was built
//! from): the generated project shares the suite's target directory and lock file, passes
//! `cargo build`, `cargo fmt --check` and `cargo clippy --all-targets -- -D warnings`; its
//! `cargo test` (an end-to-end test running the operator against kube-apiserver + etcd from
//! testenv) fails while the handler is the generated stub, with a message pointing at it, and
//! passes once this test fills in a minimal implementation (an owned ConfigMap, the status's
//! `observedGeneration`, a `tracing` log line); then `kind add` of a second kind in another
//! version keeps it formatted and lint-free. The builds run one at a time.

mod support;

use std::path::Path;

use support::{cargo, cargo_output, implemented, init, kubeapp, shown};

/// The files every project gets, for the kind `WebApp`.
const FILES: &[&str] = &[
    "Cargo.toml",
    "manifest.yaml",
    "README.md",
    "AGENTS.md",
    "Dockerfile",
    ".dockerignore",
    ".gitignore",
    "src/main.rs",
    "src/kinds.rs",
    "src/web_app.rs",
    "samples/web_app.yaml",
    "tests/e2e.rs",
    "tests/faults.rs",
];

fn a_project_fails_its_test_with_the_stub_and_passes_it_once_implemented(template: &str) {
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
    let cargo_toml = std::fs::read_to_string(project.join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        cargo_toml.contains("kubeapp = { path = ") && cargo_toml.contains("\ntracing = "),
        "{cargo_toml}"
    );
    let handler_path = project.join("src/web_app.rs");
    let stub = std::fs::read_to_string(&handler_path).expect("handler");
    assert!(stub.contains("not implemented yet"), "{stub}");
    assert!(!stub.contains("todo!") && !stub.contains("unimplemented!"));
    cargo(&project, &["build", "--offline"]);
    operator_commands_of_agents_md_exist(&project, &format!("{template}-operator"));
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

    // As generated: red, saying that the handler is the stub.
    let red = cargo_output(&project, &["test", "--offline"]);
    assert!(!red.status.success(), "{template}: {}", shown(&red));
    let said = String::from_utf8_lossy(&red.stdout);
    assert!(
        said.contains("the handler in src/web_app.rs is still the generated stub"),
        "{template}: {}",
        shown(&red)
    );

    // With a minimal implementation: green.
    std::fs::write(&handler_path, implemented(template, &stub)).expect("write the handler");
    cargo(&project, &["test", "--offline"]);

    // A second kind, with the same template: still formatted and lint-free.
    std::fs::write(&handler_path, &stub).expect("the stub back (the fill-in is unformatted)");
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
fn the_reconciler_template_fails_its_test_with_the_stub_and_passes_it_once_implemented() {
    a_project_fails_its_test_with_the_stub_and_passes_it_once_implemented("reconciler");
}

#[test]
fn the_watcher_template_fails_its_test_with_the_stub_and_passes_it_once_implemented() {
    a_project_fails_its_test_with_the_stub_and_passes_it_once_implemented("watcher");
}

#[test]
fn the_components_template_fails_its_test_with_the_stub_and_passes_it_once_implemented() {
    a_project_fails_its_test_with_the_stub_and_passes_it_once_implemented("components");
}

#[test]
fn the_phases_template_fails_its_test_with_the_stub_and_passes_it_once_implemented() {
    a_project_fails_its_test_with_the_stub_and_passes_it_once_implemented("phases");
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

/// The text of every inline code span (`...`) of a Markdown text.
fn code_spans(markdown: &str) -> Vec<&str> {
    markdown.split('`').skip(1).step_by(2).collect()
}

/// The `kubeapp ...` commands a text names: for each, its subcommand words (up to the first
/// argument that is not a lowercase word) and the `--flags` after them.
fn kubeapp_commands(markdown: &str) -> Vec<(Vec<&str>, Vec<&str>)> {
    code_spans(markdown)
        .into_iter()
        .filter_map(|span| span.strip_prefix("kubeapp "))
        .map(|rest| {
            let tokens: Vec<&str> = rest.split_whitespace().collect();
            let words = tokens
                .iter()
                .take_while(|token| {
                    token.starts_with(|c: char| c.is_ascii_lowercase())
                        && token.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                })
                .copied()
                .collect();
            let flags = tokens
                .iter()
                .filter(|token| token.starts_with("--"))
                .copied()
                .collect();
            (words, flags)
        })
        .collect()
}

/// The generated project's AGENTS.md names the operator binary's own commands as `cargo run --
/// <command>`: each is one the built binary has (`<command> --help` succeeds).
fn operator_commands_of_agents_md_exist(project: &Path, binary: &str) {
    let agents = std::fs::read_to_string(project.join("AGENTS.md")).expect("AGENTS.md");
    let operator = support::target_dir().join("debug").join(binary);
    let commands: Vec<&str> = code_spans(&agents)
        .into_iter()
        .filter_map(|span| span.strip_prefix("cargo run -- "))
        .collect();
    assert!(commands.len() >= 4, "{agents}");
    for command in commands {
        let args: Vec<&str> = command.split_whitespace().chain(["--help"]).collect();
        let output = std::process::Command::new(&operator)
            .args(&args)
            .output()
            .expect("run the operator binary");
        assert!(
            output.status.success(),
            "AGENTS.md names `cargo run -- {command}`: {}",
            shown(&output)
        );
    }
}

/// `kubeapp init` writes an AGENTS.md for every template, and every `kubeapp ...` command it
/// names is one this binary has: `kubeapp <words> --help` succeeds and its help shows each
/// `--flag` named with it. A renamed or removed command or flag fails this test.
#[test]
fn init_writes_an_agents_md_naming_only_real_commands() {
    let parent = tempfile::tempdir().expect("temp dir");
    for template in ["reconciler", "watcher", "components", "phases"] {
        let name = format!("{template}-agents");
        let args = [
            "init",
            &name,
            "--kind",
            "WebApp",
            "--group",
            "example.com",
            "--template",
            template,
        ];
        support::kubeapp_ok(parent.path(), &args);
        let project = parent.path().join(&name);
        let agents = std::fs::read_to_string(project.join("AGENTS.md"))
            .unwrap_or_else(|e| panic!("{template}: AGENTS.md: {e}"));
        assert!(
            agents.contains(&format!("# AGENTS.md: working on {name}")),
            "{agents}"
        );
        let commands = kubeapp_commands(&agents);
        let named: Vec<String> = commands.iter().map(|(words, _)| words.join(" ")).collect();
        for expected in [
            "testenv install",
            "run",
            "generate",
            "deploy",
            "kind add",
            "dry-run",
            "trace",
        ] {
            assert!(
                named.iter().any(|command| command == expected),
                "{template}: AGENTS.md names no `kubeapp {expected}`: {named:?}"
            );
        }
        for (words, flags) in &commands {
            let help = kubeapp(&project, &[&words[..], &["--help"]].concat());
            assert!(
                help.status.success(),
                "AGENTS.md names `kubeapp {}`: {}",
                words.join(" "),
                shown(&help)
            );
            let text = String::from_utf8_lossy(&help.stdout);
            for flag in flags {
                assert!(
                    text.contains(flag),
                    "AGENTS.md names `kubeapp {} {flag}`, which its --help does not show",
                    words.join(" ")
                );
            }
        }
    }
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
        &["dry-run"],
        &["pause"],
        &["resume"],
        &["promote"],
        &["abort"],
        &["trace"],
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

#[test]
fn gate_and_trace_commands_name_an_object_that_is_not_kind_slash_name() {
    let dir = std::env::temp_dir();
    let output = kubeapp(&dir, &["promote", "canary"]);
    assert_eq!(output.status.code(), Some(1), "{}", shown(&output));
    assert_eq!(
        last_error_line(&output),
        "error: \"canary\": expected KIND/NAME, e.g. canary/web"
    );
    let output = kubeapp(&dir, &["abort", "canary/web", "--timeout", "soon"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a usage error: {}",
        shown(&output)
    );
    let output = kubeapp(&dir, &["trace", "canary"]);
    assert_eq!(output.status.code(), Some(1), "{}", shown(&output));
    assert_eq!(
        last_error_line(&output),
        "error: \"canary\": expected KIND/NAME, e.g. canary/web"
    );
    for usage in [
        &["trace", "canary/web", "-o", "yaml"][..],
        &["trace", "canary/web", "--wait", "soon"],
    ] {
        let output = kubeapp(&dir, usage);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{usage:?}: {}",
            shown(&output)
        );
    }
}

/// The last line of `output`'s stderr (the one-line error; cargo's own messages come above it).
fn last_error_line(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn bad_kinds_missing_manifests_and_projects_that_do_not_build_get_one_line_errors() {
    let parent = tempfile::tempdir().expect("temp dir");
    let bad_kind = kubeapp(
        parent.path(),
        &[
            "init",
            "lower",
            "--kind",
            "widget",
            "--group",
            "example.com",
        ],
    );
    assert_eq!(bad_kind.status.code(), Some(1), "{}", shown(&bad_kind));
    let line = last_error_line(&bad_kind);
    assert!(
        line.starts_with("error: ") && line.contains("--kind \"widget\""),
        "{}",
        shown(&bad_kind)
    );
    let usage = kubeapp(parent.path(), &["init", "nokind", "--group", "example.com"]);
    assert_eq!(usage.status.code(), Some(2), "{}", shown(&usage));

    let project = init(parent.path(), "broken", "reconciler", "Widget");
    let manifest = project.join("manifest.yaml");
    let text = std::fs::read_to_string(&manifest).expect("the manifest");
    std::fs::remove_file(&manifest).expect("remove the manifest");
    let missing = kubeapp(&project, &["generate"]);
    assert_eq!(missing.status.code(), Some(1), "{}", shown(&missing));
    let line = last_error_line(&missing);
    assert!(
        line.starts_with("error: ") && line.contains("manifest.yaml"),
        "{}",
        shown(&missing)
    );

    std::fs::write(&manifest, text).expect("restore the manifest");
    std::fs::write(
        project.join("src/main.rs"),
        "fn main() { this does not compile }\n",
    )
    .expect("break main.rs");
    let _one_cargo_at_a_time = support::cargo_lock();
    let broken = kubeapp(&project, &["generate"]);
    assert_eq!(broken.status.code(), Some(1), "{}", shown(&broken));
    let line = last_error_line(&broken);
    assert!(
        line.starts_with("error: cargo build of broken") && line.contains("its errors are above"),
        "{}",
        shown(&broken)
    );
    assert!(
        !project.join("deploy").exists(),
        "nothing generated from a project that does not build"
    );
}
