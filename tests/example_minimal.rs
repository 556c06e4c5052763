//! End-to-end test of `examples/minimal`, the one-page operator, as its users run it: the binary's
//! `crd` output is installed into a real kube-apiserver + etcd, `run` is started with only a
//! kubeconfig and a metrics address, and then:
//!
//! - `/readyz` answers 200 once the informers synced, `/metrics` carries the reconciler's counts;
//! - a `Greeting` gets its ConfigMap, with the message and a controller owner reference;
//! - an edit of the ConfigMap is undone and a deleted ConfigMap is re-created at once (`owns`;
//!   nothing requeues);
//! - deleting the `Greeting` runs its cleanup and removes the finalizer (the ConfigMap is left:
//!   the plain testenv has no garbage collector; `tests/cluster_gc.rs` shows the cluster mode's
//!   deleting it through the owner reference);
//! - SIGTERM stops it with exit code 0.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::net::SocketAddr;
use std::process::Stdio;

use example_support::{binary, eventually, free_port, get, output_of, send_signal};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::TestEnv;

const MINIMAL: &str = "kubeapp-example-minimal";

fn greetings(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn message(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("message").map(String::as_str)
}

#[test]
fn the_binary_has_the_four_commands_and_the_operator_flags() {
    let minimal = binary(MINIMAL, MINIMAL);
    let help = output_of(&minimal, &["--help"]);
    for needle in ["The greeter operator", "crd", "rbac", "manifests", "run"] {
        assert!(
            help.contains(needle),
            "{needle} missing from --help:\n{help}"
        );
    }
    let help = output_of(&minimal, &["run", "--help"]);
    for flag in [
        "--metrics-addr",
        "METRICS_ADDR",
        "--namespace",
        "WATCH_NAMESPACE",
        "--log-format",
        "--otlp-endpoint",
        "--shutdown-timeout",
        "--webhook-cert-file",
    ] {
        assert!(
            help.contains(flag),
            "{flag} missing from run --help:\n{help}"
        );
    }
    let bad = std::process::Command::new(&minimal)
        .args(["run", "--shutdown-timeout", "soon"])
        .output()
        .expect("run the binary");
    assert_eq!(bad.status.code(), Some(2), "a usage error exits 2");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("--shutdown-timeout"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_operator_renders_keeps_and_cleans_up_and_stops_on_sigterm() {
    let minimal = binary(MINIMAL, MINIMAL);
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds_yaml(&output_of(&minimal, &["crd"]))
        .await
        .expect("the generated CRD installs");
    let ns = env.create_namespace("minimal").await.expect("namespace");
    let client = env.client();

    let log_path = env.dir().join("minimal.log");
    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut operator = tokio::process::Command::new(&minimal)
        .args(["run", "--metrics-addr", &metrics_addr.to_string()])
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("RUST_LOG", "info")
        .env_remove("WATCH_NAMESPACE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("start the minimal operator");
    let pid = operator.id().expect("a pid");
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();

    eventually("/readyz answers 200", logs, || async {
        get(metrics_addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;

    let greeting: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "minimal.kubeapp.dev/v1",
        "kind": "Greeting",
        "metadata": { "name": "hello", "namespace": ns },
        "spec": { "message": "hello, world" }
    }))
    .expect("a Greeting");
    let created = greetings(&client, &ns)
        .create(&PostParams::default(), &greeting)
        .await
        .expect("create the Greeting");
    let uid = created.uid().expect("a uid");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let rendered = eventually("the ConfigMap is rendered", logs, || async {
        config_maps
            .get_opt("hello")
            .await
            .ok()
            .flatten()
            .filter(|cm| message(cm) == Some("hello, world"))
    })
    .await;
    assert!(
        rendered
            .owner_references()
            .iter()
            .any(|o| o.uid == uid && o.controller == Some(true)),
        "owned by the Greeting: {:?}",
        rendered.owner_references()
    );

    let edit = serde_json::json!({ "data": { "message": "tampered" } });
    config_maps
        .patch("hello", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit the ConfigMap");
    eventually("the edit is undone", logs, || async {
        config_maps
            .get_opt("hello")
            .await
            .ok()
            .flatten()
            .filter(|cm| message(cm) == Some("hello, world"))
    })
    .await;
    let old_uid = rendered.uid();
    config_maps
        .delete("hello", &DeleteParams::default())
        .await
        .expect("delete the ConfigMap");
    eventually("the ConfigMap is re-created", logs, || async {
        config_maps
            .get_opt("hello")
            .await
            .ok()
            .flatten()
            .filter(|cm| cm.uid() != old_uid && message(cm) == Some("hello, world"))
    })
    .await;

    let metrics = eventually("/metrics counts the reconciles", logs, || async {
        get(metrics_addr, "/metrics")
            .await
            .filter(|(status, body)| *status == 200 && body.contains("reconciler_"))
    })
    .await;
    assert!(
        metrics.1.contains("greetings"),
        "the reconciles are labelled by kind:\n{}",
        metrics.1
    );

    greetings(&client, &ns)
        .delete("hello", &DeleteParams::default())
        .await
        .expect("delete the Greeting");
    eventually(
        "the Greeting is gone (cleanup ran, finalizer removed)",
        logs,
        || async {
            match greetings(&client, &ns).get_opt("hello").await {
                Ok(None) => Some(()),
                _ => None,
            }
        },
    )
    .await;

    send_signal(pid, "TERM");
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), operator.wait())
        .await
        .expect("stops within a minute of SIGTERM")
        .expect("wait for the operator");
    assert!(status.success(), "exit status {status}\n{}", logs());
}

/// The README and the facade crate's docs show the example as it is, and it stays one page.
#[test]
fn the_readme_and_the_crate_docs_carry_the_example_verbatim_and_it_fits_a_page() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
    };
    let main = read("examples/minimal/src/main.rs");
    assert!(
        main.lines().count() <= 60,
        "examples/minimal/src/main.rs has {} lines; the promise is one page of at most 60",
        main.lines().count()
    );
    let readme = read("README.md");
    let first_heading = readme.find("\n## ").expect("a second-level heading");
    assert!(
        readme[..first_heading].contains(&main),
        "the README's opening does not carry examples/minimal/src/main.rs verbatim"
    );
    let docs: String = read("src/lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n");
    for line in main.lines().filter(|line| !line.contains("include_str!")) {
        assert!(
            docs.contains(line),
            "the crate docs' example lacks the line {line:?} of examples/minimal/src/main.rs"
        );
    }
}
