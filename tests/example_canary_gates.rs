//! End-to-end test of `examples/canary`'s gates and inconclusive analyses, as its users run them:
//! the binary's `crd` output installed into a real kube-apiserver + etcd (cluster mode), `run`
//! started as a child process against a **real Prometheus** (Debian's `prometheus` package),
//! each canary's analysis a query whose value the query itself chooses (PromQL's `vector(x)` is
//! x), then:
//!
//! - `incon`'s `vector(0.7)` is between `>= 0.9` (success) and `< 0.5` (failure): inconclusive,
//!   the canary is paused (`Paused=True`, reason `Inconclusive`, in Evaluating) and measures no
//!   more (while `aborted` measures twice more); `kubeapp promote canary/incon`, run as a user
//!   with no rights, exits 1 (forbidden); run as a user bound to the role the example's `rbac --gate-users` prints
//!   output (the ClusterRole `canary-gates`: get, list, watch, patch on canaries, from
//!   `sdk::rbac::gate_users_role`) it sets the gate, waits, exits 0: Succeeded, the analysis
//!   `Promoted`, the primary on the new image;
//! - `held` is created with the annotation `phases.kubeapp.dev/gate: pause`: it stays in
//!   Initializing with `Paused=True` (reason `Gate`), the annotation removed, no Deployment;
//!   `kubeapp resume canary/held` exits 0 and it walks to Succeeded;
//! - `aborted` measures `vector(0.99)` a thousand times a second apart; `kubeapp pause` pauses
//!   it (exit 0, `Paused=True` by `Gate`), then the annotation `abort` (written as `kubectl
//!   annotate` would) rolls it back: RollingBack -> Failed, the analysis `Aborted`, the canary
//!   scaled to zero, the annotation removed by the operator.
//!
//! The analyses that pass and fail, the kill and the finalizer are `tests/example_canary.rs`.
//! The binaries must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::net::SocketAddr;

use example_support::canary::{
    GATE, Running, analysis, canaries, canary, condition, image, phase, start_prometheus,
    transitions,
};
use example_support::{binary, eventually, free_port, kubeapp, output_of};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kubeapp::sdk::testenv::TestEnv;
use serde_json::json;

const EXAMPLE: &str = "kubeapp-example-canary";

/// How many measurements `name`'s analysis took.
async fn measured(apps: &Api<DynamicObject>, name: &str) -> u64 {
    apps.get(name).await.expect("a Canary").data["status"]["analysis"]["measured"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inconclusive_analyses_pause_and_gates_pause_resume_promote_and_abort() {
    let example = binary(EXAMPLE, EXAMPLE);
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    env.install_crds_yaml(&output_of(&example, &["crd"]))
        .await
        .expect("the generated CRD installs");
    let ns = env.create_namespace("gates").await.expect("namespace");
    let client = env.client();
    let apps = canaries(&client, &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let prometheus_port = free_port();
    let prometheus_dir = env.dir().join("prometheus");
    std::fs::create_dir_all(&prometheus_dir).expect("dir");
    let _prometheus = start_prometheus(
        &prometheus_dir,
        prometheus_port,
        &[("canary-operator", metrics)],
    )
    .await;
    let url = format!("http://127.0.0.1:{prometheus_port}");
    let operator = Running::start(
        &example,
        &env,
        env.dir().join("canary.log"),
        metrics,
        &["--prometheus-url", &url],
    )
    .await;
    let logs = || operator.logs();
    let inconclusive = json!({"metric": "successRate", "query": "vector(0.7)",
                              "success": ">= 0.9", "failure": "< 0.5", "interval": "1s"});
    for (name, analysis, annotations) in [
        ("incon", inconclusive, json!({})),
        (
            "held",
            analysis("vector(0.99)", 1, "1s"),
            json!({GATE: "pause"}),
        ),
        ("aborted", analysis("vector(0.99)", 1000, "1s"), json!({})),
    ] {
        apps.create(
            &PostParams::default(),
            &canary(&ns, name, analysis, annotations),
        )
        .await
        .expect("create a Canary");
    }

    // `incon`: inconclusive, paused in Evaluating; measured once and no more.
    let paused = eventually("incon is paused as inconclusive", logs, || async {
        apps.get("incon")
            .await
            .ok()
            .filter(|c| condition(c, "Paused")["status"] == "True")
    })
    .await;
    let why = condition(&paused, "Paused");
    assert_eq!(
        (phase(&paused), &why["reason"]),
        ("Evaluating", &json!("Inconclusive"))
    );
    assert!(
        why["message"]
            .as_str()
            .is_some_and(|m| m.contains("successRate = 0.7 is inconclusive")),
        "{why}"
    );
    assert_eq!(paused.data["status"]["analysis"]["outcome"], "Inconclusive");
    // Two more of `aborted`'s measurements a second apart: time for `incon` to measure again,
    // had it not been paused, and for `held` to work.
    let before = measured(&apps, "aborted").await;
    eventually("aborted measures twice more", logs, || async {
        (measured(&apps, "aborted").await >= before + 2).then_some(())
    })
    .await;
    // `held`: paused by its annotation before anything ran.
    let held = apps.get("held").await.expect("held");
    assert_eq!(
        (phase(&held), &condition(&held, "Paused")["reason"]),
        ("Initializing", &json!("Gate")),
        "{:?}",
        held.data["status"]
    );
    assert!(
        held.annotations().get(GATE).is_none(),
        "the operator removed the gate it applied"
    );
    assert!(
        deployments
            .get_opt("held-canary")
            .await
            .expect("get")
            .is_none(),
        "a paused canary did no work"
    );
    assert_eq!(
        apps.get("incon").await.expect("incon").data["status"]["analysis"]["measured"],
        1,
        "a paused canary measures no more"
    );

    // Promoted by a release manager with exactly the role of `rbac --gate-users` (get, list, watch,
    // patch on canaries): refused before the role is bound, applied after.
    let manager = env
        .identity("release-manager", &[])
        .await
        .expect("an identity");
    let promote = ["promote", "canary/incon", "-n", &ns, "--timeout", "60s"];
    let (code, _, stderr) = kubeapp(&manager.kubeconfig_path, &promote).await;
    assert_eq!(code, 1, "no rights yet: {stderr}");
    assert!(stderr.contains("forbidden"), "{stderr}");
    let role: ClusterRole = serde_saphyr::from_str(&output_of(&example, &["rbac", "--gate-users"]))
        .expect("a ClusterRole");
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create the gate role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "release-manager-gates"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role.metadata.name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "release-manager"}]
    }))
    .expect("a ClusterRoleBinding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind it");
    let as_manager = canaries(&manager.client, &ns);
    eventually("the binding is in force", logs, || async {
        as_manager.get("incon").await.ok()
    })
    .await;
    let (code, stdout, stderr) = kubeapp(&manager.kubeconfig_path, &promote).await;
    assert_eq!(code, 0, "kubeapp promote: {stdout}{stderr}\n{}", logs());
    assert!(
        stdout.contains("promote applied: Evaluating -> "),
        "{stdout}"
    );
    let incon = eventually("incon is promoted", logs, || async {
        apps.get("incon")
            .await
            .ok()
            .filter(|c| phase(c) == "Succeeded")
    })
    .await;
    assert_eq!(incon.data["status"]["analysis"]["outcome"], "Promoted");
    assert_eq!(condition(&incon, "Paused")["status"], "False");
    assert_eq!(
        image(&deployments.get("incon-primary").await.expect("primary")),
        "shop:2"
    );

    let (code, stdout, stderr) =
        kubeapp(env.kubeconfig_path(), &["resume", "canary/held", "-n", &ns]).await;
    assert_eq!(code, 0, "kubeapp resume: {stdout}{stderr}\n{}", logs());
    eventually("held walks to Succeeded once resumed", logs, || async {
        apps.get("held")
            .await
            .ok()
            .filter(|c| phase(c) == "Succeeded")
    })
    .await;

    // `aborted`: paused by the command while measuring, then aborted by the annotation.
    let (code, stdout, stderr) = kubeapp(
        env.kubeconfig_path(),
        &["pause", "canary/aborted", "-n", &ns],
    )
    .await;
    assert_eq!(code, 0, "kubeapp pause: {stdout}{stderr}\n{}", logs());
    let paused = apps.get("aborted").await.expect("aborted");
    assert_eq!(condition(&paused, "Paused")["reason"], "Gate");
    let annotate = json!({"metadata": {"annotations": {GATE: "abort"}}});
    apps.patch("aborted", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .expect("annotate abort");
    let aborted = eventually("aborted rolls back", logs, || async {
        apps.get("aborted")
            .await
            .ok()
            .filter(|c| phase(c) == "Failed")
    })
    .await;
    assert_eq!(aborted.data["status"]["analysis"]["outcome"], "Aborted");
    assert!(aborted.annotations().get(GATE).is_none(), "acknowledged");
    eventually("aborted's rollback as Events", logs, || async {
        let seen = transitions(&events, "aborted").await;
        seen.iter()
            .any(|n| n == "Evaluating -> RollingBack")
            .then_some(())
    })
    .await;
    assert_eq!(
        deployments
            .get("aborted-canary")
            .await
            .expect("canary")
            .spec
            .and_then(|s| s.replicas),
        Some(0),
        "the abort scaled the canary to zero"
    );

    operator.stop().await;
}
