//! What a controller built on `kubeapp-operator` alone (an `InformerController` and typed
//! handlers, no Runner) compiles, issue #39 ("crates by concern"): no HTTP server framework
//! (axum), no server side of hyper or hyper-util (the webhook TLS server), no `tokio-rustls` but
//! the kube client's own TLS connector's, no certificate generator (rcgen) and no OTLP exporter.
//! Those are the dependencies of `kubeapp-runner` (and of `kubeapp-simple`, and of the SDK's
//! `testenv` feature), which build on `kubeapp-operator`.
//!
//! Read from `cargo tree` over the workspace's lock file, offline: the normal (not dev, not
//! build) dependency closure of `kubeapp-operator` with its features, as a user's build of it
//! resolves them.

use std::collections::BTreeSet;
use std::process::Command;

/// `cargo tree -p PACKAGE --offline --prefix none` with `args`: one package (or package
/// feature) per line, with the features that package's own build resolves.
fn tree(package: &str, args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(&cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", package, "--offline", "--prefix", "none"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} tree: {e}"));
    assert!(
        output.status.success(),
        "cargo tree -p {package} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo tree prints UTF-8")
}

/// [`tree`] of `kubeapp-operator`.
fn operator_tree(args: &[&str]) -> String {
    tree("kubeapp-operator", args)
}

/// Each line once, without `cargo tree`'s `(*)` mark of a repeat: `name vX.Y.Z` and
/// `name feature "f"`.
fn lines(tree: &str) -> BTreeSet<String> {
    tree.lines()
        .map(|line| line.trim_end_matches(" (*)").to_string())
        .collect()
}

#[test]
fn a_controller_without_the_runner_compiles_no_server_certificate_generator_or_exporter() {
    let packages: BTreeSet<String> = operator_tree(&["-e", "normal"])
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(
        packages.contains("kube-client") && packages.contains("hyper-rustls"),
        "the scan found too little (kube's client and its TLS connector are expected): \
         {packages:?}"
    );
    for absent in ["axum", "axum-core", "rcgen", "opentelemetry-otlp", "tonic"] {
        assert!(
            !packages.contains(absent),
            "kubeapp-operator depends on {absent}:\n{}",
            operator_tree(&["-e", "normal", "-i", absent])
        );
    }

    // hyper and hyper-util are kube's client's: their client side only.
    let features = lines(&operator_tree(&["-e", "normal,features"]));
    for server_side in [
        r#"hyper feature "server""#,
        r#"hyper-util feature "server""#,
        r#"hyper-util feature "server-auto""#,
        r#"hyper-util feature "server-graceful""#,
    ] {
        assert!(
            !features.contains(server_side),
            "a controller-only build enables {server_side}:\n{}",
            operator_tree(&["-e", "normal,features", "-i", "hyper-util"])
        );
    }

    // tokio-rustls only as the client's TLS connector (hyper-rustls), never the webhook server's.
    let dependents: BTreeSet<String> =
        operator_tree(&["-e", "normal", "-i", "tokio-rustls", "--depth", "1"])
            .lines()
            .skip(1)
            .filter_map(|line| line.split_whitespace().next())
            .map(str::to_string)
            .collect();
    assert_eq!(
        dependents,
        BTreeSet::from(["hyper-rustls".to_string()]),
        "what depends on tokio-rustls in a controller-only build"
    );
}

/// The names of the packages `package`'s build compiles (normal dependencies).
fn packages_of(package: &str) -> BTreeSet<String> {
    tree(package, &["-e", "normal"])
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Issue #40 ("compile time"): the one-page operator (`kubeapp` with `cli` only) compiles no
/// OTLP exporter (nor tonic, prost or reqwest, which only the exporters bring), no components,
/// no phases, no web framework (the Runner's servers are on hyper), no HTTP/2 (the
/// `webhook-http2` feature's), no terminal colours and no fault injection; the canary example, which enables
/// `phases`, compiles components and phases.
#[test]
fn the_one_page_operator_compiles_no_exporter_components_phases_web_framework_or_http2() {
    let minimal = packages_of("kubeapp-example-minimal");
    assert!(
        minimal.contains("kubeapp-simple") && minimal.contains("kubeapp-runner"),
        "the scan found too little: {minimal:?}"
    );
    for absent in [
        "opentelemetry-otlp",
        "opentelemetry_sdk",
        "tracing-opentelemetry",
        "tonic",
        "prost",
        "reqwest",
        "kubeapp-components",
        "kubeapp-phases",
        // Fault injection is for tests (`testenv`, a dev-dependency).
        "kubeapp-testing",
        // The Runner's servers are on hyper directly; HTTP/2 is the `webhook-http2` feature's;
        // clap comes without colours.
        "axum",
        "axum-core",
        "h2",
        "anstream",
    ] {
        assert!(
            !minimal.contains(absent),
            "the one-page operator compiles {absent}"
        );
    }
    let canary = packages_of("kubeapp-example-canary");
    for present in ["kubeapp-components", "kubeapp-phases"] {
        assert!(
            canary.contains(present),
            "the canary example lacks {present}"
        );
    }
}
