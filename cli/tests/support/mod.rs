//! Helpers of the `kubeapp` command's tests: the binary, the checkout, and generated projects
//! built with the suite's own target directory and lock file (so their dependencies are the
//! ones already built, and `--offline` works).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The `kubeapp` binary under test.
pub const KUBEAPP: &str = env!("CARGO_BIN_EXE_kubeapp");

/// The kubeapp checkout (the workspace root).
pub fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// The target directory of the suite running this test: `$CARGO_TARGET_DIR`, else the
/// workspace's `target/`. Generated projects build there, reusing the built dependencies.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| checkout().join("target"), PathBuf::from)
}

/// One cargo build at a time from this test binary: the machine may have two cores, and the
/// builds share one target directory anyway.
pub fn cargo_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `kubeapp args` in `dir`.
pub fn kubeapp(dir: &Path, args: &[&str]) -> Output {
    Command::new(KUBEAPP)
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .expect("run kubeapp")
}

/// The text of a command's stdout and stderr, for failure messages.
pub fn shown(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `kubeapp args` in `dir` and asserts it succeeds; returns its stdout.
pub fn kubeapp_ok(dir: &Path, args: &[&str]) -> String {
    let output = kubeapp(dir, args);
    assert!(
        output.status.success(),
        "kubeapp {args:?}: {}",
        shown(&output)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// `kubeapp init` of a `template` project named `name` under `parent` (a temporary directory,
/// outside the checkout), with the checkout's Cargo.lock; returns its directory. No
/// `--kubeapp-path`: the project depends on the checkout the `kubeapp` binary was built from,
/// this one.
pub fn init(parent: &Path, name: &str, template: &str, kind: &str) -> PathBuf {
    init_with(parent, name, template, kind, &[])
}

/// [`init`] with more flags.
pub fn init_with(parent: &Path, name: &str, template: &str, kind: &str, more: &[&str]) -> PathBuf {
    let dir = parent.join(name);
    let checkout = checkout();
    let args = [
        "init",
        name,
        "--kind",
        kind,
        "--group",
        "example.com",
        "--template",
        template,
    ];
    kubeapp_ok(parent, &[&args[..], more].concat());
    std::fs::copy(checkout.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    dir
}

/// Runs `cargo args` in `project` with the suite's target directory, offline; asserts it
/// succeeds and prints how long it took.
pub fn cargo(project: &Path, args: &[&str]) {
    let output = cargo_output(project, args);
    assert!(
        output.status.success(),
        "cargo {args:?} in {}: {}",
        project.display(),
        shown(&output)
    );
}

/// Runs `cargo args` in `project` as [`cargo`] does, and returns how it went.
pub fn cargo_output(project: &Path, args: &[&str]) -> Output {
    let _one_at_a_time = cargo_lock();
    let start = Instant::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(args)
        .current_dir(project)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .expect("run cargo");
    eprintln!(
        "cargo {} in {}: {:.1} s ({})",
        args.join(" "),
        project.display(),
        start.elapsed().as_secs_f64(),
        output.status
    );
    output
}

/// The ConfigMap a minimal `WebApp` handler makes, as JSON for `Rendered::value`.
const CONFIG_MAP_JSON: &str = r#"serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": object.name_any(), "namespace": object.namespace()},
            "data": {"message": object.spec.message},
        })"#;

/// Replaces the item of `text` that starts with `start` (up to the first line after it that
/// closes it at the same indentation) with `with`; fails when the template changed shape.
pub fn replace_item(text: &str, start: &str, with: &str) -> String {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("the stub has no {start:?}:\n{text}"));
    let indent: String = start.chars().take_while(|c| *c == ' ').collect();
    let close = format!("\n{indent}}}\n");
    let end = at
        + text[at..]
            .find(&close)
            .unwrap_or_else(|| panic!("{start:?} is not closed:\n{text}"))
        + close.len();
    format!("{}{with}{}", &text[..at], &text[end..])
}

/// `src/web_app.rs` with its stub replaced by a minimal working handler for `template`.
pub fn implemented(template: &str, stub: &str) -> String {
    let publish = r#"
/// Publishes the message in a ConfigMap the WebApp owns, and reports the generation handled.
async fn publish(object: &WebApp, ctx: &Context) -> Result<(), BoxError> {
    tracing::info!(name = %object.name_any(), "publishing the message");
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: object.metadata.name.clone(),
            namespace: object.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        data: Some([("message".to_string(), object.spec.message.clone())].into()),
        ..ConfigMap::default()
    };
    ctx.apply(config_map).owned_by(object)?.send().await?;
    let status = WebAppStatus {
        observed_generation: object.metadata.generation,
    };
    ctx.status(object).write(status).await?;
    Ok(())
}
"#;
    let uses = "use k8s_openapi::api::core::v1::ConfigMap;\nuse kubeapp::prelude::*;";
    match template {
        "reconciler" => {
            let apply = r#"async fn apply(object: Arc<WebApp>, ctx: Context) -> Result<ReconcileResult, ReconcileError> {
    publish(&object, &ctx).await?;
    Ok(ReconcileResult::done())
}
"#;
            let text = replace_item(stub, "async fn apply(", apply);
            format!(
                "{}{publish}",
                text.replacen("use kubeapp::prelude::*;", uses, 1)
            )
        }
        "watcher" => {
            let add = r#"    async fn add(&self, object: Arc<WebApp>, ctx: &Context) -> Result<(), BoxError> {
        publish(&object, ctx).await
    }
"#;
            let update = r#"    async fn update(
        &self,
        _old: Arc<WebApp>,
        new: Arc<WebApp>,
        ctx: &Context,
    ) -> Result<(), BoxError> {
        publish(&new, ctx).await
    }
"#;
            let text = replace_item(stub, "    async fn add(", add);
            let text = replace_item(&text, "    async fn update(", update);
            let text = replace_item(&text, "fn not_implemented(", "");
            format!(
                "{}{publish}",
                text.replacen("use kubeapp::prelude::*;", uses, 1)
            )
        }
        "components" => {
            let render = format!(
                r#"fn render_config(session: &Session<WebApp>) -> Result<Vec<Rendered>, ComponentError> {{
    let object = session.object();
    tracing::info!(name = %object.name_any(), "rendering the ConfigMap");
    Ok(vec![Rendered::value({CONFIG_MAP_JSON})])
}}
"#
            );
            replace_item(stub, "fn render_config(", &render)
        }
        "phases" => {
            let pending = format!(
                r#"async fn pending(
    work: Work<WebApp, WebAppPhase>,
    _ctx: Context,
) -> Result<Transition<WebAppPhase>, ReconcileError> {{
    let object = &work.object;
    tracing::info!(name = %object.name_any(), "rendering the ConfigMap");
    Ok(Transition::to(WebAppPhase::Done).output(Rendered::value({CONFIG_MAP_JSON})))
}}
"#
            );
            replace_item(stub, "async fn pending(", &pending).replacen(
                "use kubeapp::prelude::*;",
                "use kubeapp::components::Rendered;\nuse kubeapp::prelude::*;",
                1,
            )
        }
        other => panic!("no implementation for the {other} template"),
    }
}
