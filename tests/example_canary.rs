//! End-to-end test of `examples/canary` (a phase machine with a declarative analysis)
//! as its users run it: the binary's `crd` output installed into a real kube-apiserver + etcd,
//! `run` started as a child process against a **real Prometheus** (Debian's `prometheus`
//! package) that scrapes the operator's own `/metrics`, then:
//!
//! - `good`'s analysis is `max(up{job="canary-operator"})` (1 once Prometheus scraped the
//!   operator; no value before, which is no measurement), `>= 0.9`, two measurements a second
//!   apart: it walks Initializing -> Waiting -> Evaluating -> Promoting -> Succeeded with both
//!   measurements (value, time, result) in `status.analysis`. `bad`'s query is `vector(0.5)`
//!   (a value chosen by the query: PromQL's `vector(x)` is x) against `>= 0.9`: ... -> Evaluating
//!   -> RollingBack -> Failed. testenv runs in cluster mode: the canary and primary Deployments
//!   roll out through the real controllers, scheduler and a kwok node (the test writes no
//!   status) while Waiting waits for both. Each transition shows in `status.phase`, in
//!   `PhaseChanged` Events and in `phase_transitions_total`; the outputs carry owner references;
//! - `stuck`'s canary Deployment has pods that never become ready (kwok) and a 2 s progress
//!   deadline: the Deployment controller reports `ProgressDeadlineExceeded` and Waiting rolls
//!   back (Waiting -> RollingBack -> Failed, never evaluated, the canary scaled to zero);
//! - `third`'s query has no value until a second operator is scraped (`max(up{job=
//!   "canary-operator-2"} == 1)`, an hour apart): it stays in Evaluating; deleting its traffic
//!   ConfigMap re-creates it (the `owns` trigger: the interval cannot have);
//! - the operator is killed (SIGKILL) while `third` is in Evaluating; `kubeapp promote
//!   canary/third --timeout 1s` then exits 3 (no operator applies it; the test removes the
//!   annotation), the test shortens `third`'s interval to 1s, and the operator is restarted on
//!   the second scraped address: `third` resumes at Evaluating and reaches Succeeded by its
//!   measured value 1 without repeating a finished phase (no second `Initializing -> Waiting`
//!   Event, the restarted operator counts no transition out of them);
//! - `kubeapp trace --wait 120s`, started while they are on their way, exits 0 for `good` and 4
//!   for `bad` once each settled; `kubeapp trace` exits 0 for `good` (its four transitions, oldest first, and its analysis
//!   in the output, text and `-o json`), 4 for `bad` (`Ready=False`, `PhaseFailed`) and 3 for
//!   `third` (still on its way);
//! - deleting `good` runs the finalizer hook exactly once (one "canary finalized" log line);
//! - SIGTERM stops it with exit code 0.
//!
//! Inconclusive analyses and the gates (pause, resume, promote, abort, by annotation and by
//! `kubeapp`, with the generated role) are `tests/example_canary_gates.rs`.
//!
//! The binaries must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::net::SocketAddr;

use example_support::canary::{
    GATE, Running, analysis, canaries, canary, image, phase, start_prometheus, transitions,
};
use example_support::{binary, eventually, free_port, kubeapp, output_of};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeapp::sdk::testenv::TestEnv;
use kubeapp::sdk::testenv::cluster::{NEVER_READY, POD_BEHAVIOUR_LABEL};
use serde_json::json;

const EXAMPLE: &str = "kubeapp-example-canary";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_are_analysed_by_prometheus_resume_after_a_kill_and_finalize_once() {
    let example = binary(EXAMPLE, EXAMPLE);
    let env = TestEnv::builder()
        .cluster()
        .start()
        .await
        .expect("control plane in cluster mode");
    env.install_crds_yaml(&output_of(&example, &["crd"]))
        .await
        .expect("the generated CRD installs");
    let ns = env.create_namespace("canary").await.expect("namespace");
    let client = env.client();
    let apps = canaries(&client, &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    let metrics_1 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics_2 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let prometheus_port = free_port();
    let prometheus_dir = env.dir().join("prometheus");
    std::fs::create_dir_all(&prometheus_dir).expect("dir");
    let prometheus = start_prometheus(
        &prometheus_dir,
        prometheus_port,
        &[
            ("canary-operator", metrics_1),
            ("canary-operator-2", metrics_2),
        ],
    )
    .await;
    let url = format!("http://127.0.0.1:{prometheus_port}");
    let operator = Running::start(
        &example,
        &env,
        env.dir().join("canary-1.log"),
        metrics_1,
        &["--prometheus-url", &url],
    )
    .await;
    let logs = || operator.logs();
    let created = [
        (
            "good",
            analysis("max(up{job=\"canary-operator\"})", 2, "1s"),
        ),
        ("bad", analysis("vector(0.5)", 1, "1s")),
        (
            "third",
            analysis("max(up{job=\"canary-operator-2\"} == 1)", 1, "1h"),
        ),
    ];
    let mut uids = Vec::new();
    for (name, analysis) in created {
        let created = apps
            .create(
                &PostParams::default(),
                &canary(&ns, name, analysis, json!({})),
            )
            .await
            .expect("create a Canary");
        uids.push(created.uid().expect("uid"));
    }
    for name in ["good", "bad", "third"] {
        let deployment = format!("{name}-canary");
        let found = eventually("the canary Deployment", logs, || async {
            deployments.get_opt(&deployment).await.ok().flatten()
        })
        .await;
        assert!(
            found
                .owner_references()
                .iter()
                .any(|o| o.name == name && o.controller == Some(true)),
            "{deployment} is owned by its Canary"
        );
    }
    // `kubeapp trace --wait`, started while both are on their way: it returns once each is
    // settled, with the exit code of where it ended.
    for (name, exit) in [("good", 0), ("bad", 4)] {
        let object = format!("canary/{name}");
        let args = ["trace", &object, "-n", &ns, "--wait", "120s", "-o", "json"];
        let (code, stdout, stderr) = kubeapp(env.kubeconfig_path(), &args).await;
        assert_eq!(code, exit, "{object}: {stdout}{stderr}\n{}", logs());
    }
    for (name, last) in [("good", "Succeeded"), ("bad", "Failed")] {
        eventually("a final phase", logs, || async {
            apps.get(name).await.ok().filter(|c| phase(c) == last)
        })
        .await;
    }
    let good = apps.get("good").await.expect("good");
    let run = &good.data["status"]["analysis"];
    assert_eq!(
        (&run["outcome"], &run["measured"], &run["phase"]),
        (&json!("Successful"), &json!(2), &json!("Evaluating")),
        "{run}"
    );
    for measurement in run["measurements"].as_array().expect("measurements") {
        assert_eq!(
            measurement["value"], 1.0,
            "up of the scraped operator: {run}"
        );
        assert_eq!(measurement["result"], "Successful");
        assert!(
            measurement["time"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{run}"
        );
    }
    let bad = apps.get("bad").await.expect("bad");
    assert_eq!(bad.data["status"]["analysis"]["outcome"], "Failed");
    assert_eq!(
        bad.data["status"]["analysis"]["measurements"][0]["value"],
        0.5
    );
    // The phase's Event is posted after its status is written: the last one may still be on
    // its way when the final phase is seen.
    for (name, steps) in [
        (
            "good",
            &[
                "Initializing -> Waiting",
                "Waiting -> Evaluating",
                "Evaluating -> Promoting",
                "Promoting -> Succeeded",
            ][..],
        ),
        (
            "bad",
            &["Evaluating -> RollingBack", "RollingBack -> Failed"][..],
        ),
    ] {
        eventually("every phase change reported as an Event", logs, || async {
            let seen = transitions(&events, name).await;
            steps
                .iter()
                .all(|step| seen.iter().any(|n| n == step))
                .then_some(())
        })
        .await;
    }
    // `kubeapp trace`: the exit code CI gates on, and what it shows.
    let kubeconfig = env.kubeconfig_path();
    let (code, stdout, stderr) = kubeapp(kubeconfig, &["trace", "canary/good", "-n", &ns]).await;
    assert_eq!(code, 0, "trace of a succeeded canary: {stdout}{stderr}");
    eprintln!("kubeapp trace canary/good:\n{stdout}");
    for shown in [
        format!("canary/good in {ns}: READY: Ready=True (PhaseCompleted)"),
        "phase: Succeeded".to_string(),
        "Evaluating -> Promoting".to_string(),
        "analysis: Successful in phase Evaluating".to_string(),
        "owner: last reported by ".to_string(),
    ] {
        assert!(stdout.contains(&shown), "{shown:?} in:\n{stdout}");
    }
    let (code, stdout, stderr) = kubeapp(
        kubeconfig,
        &["trace", "canary/good", "-n", &ns, "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let traced: serde_json::Value = serde_json::from_str(&stdout).expect("trace -o json");
    let history: Vec<&str> = traced["phases"]["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|t| t["change"].as_str())
        .collect();
    assert_eq!(
        history,
        [
            "Initializing -> Waiting",
            "Waiting -> Evaluating",
            "Evaluating -> Promoting",
            "Promoting -> Succeeded"
        ],
        "the phase history, oldest first: {stdout}"
    );
    assert_eq!(
        (
            &traced["verdict"],
            &traced["phases"]["analysis"]["measured"]
        ),
        (&json!("Ready"), &json!(2)),
        "{stdout}"
    );
    assert!(
        traced["owner"]["lastReportedBy"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{stdout}"
    );
    let (code, stdout, stderr) = kubeapp(kubeconfig, &["trace", "canary/bad", "-n", &ns]).await;
    assert_eq!(code, 4, "trace of a rolled-back canary: {stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "canary/bad in {ns}: FAILED: Ready=False (PhaseFailed): phase Failed (failed)"
        )) && stdout.contains("analysis: Failed in phase Evaluating"),
        "{stdout}"
    );
    let (code, stdout, stderr) = kubeapp(kubeconfig, &["trace", "canary/third", "-n", &ns]).await;
    assert_eq!(
        code, 3,
        "trace of a canary still on its way: {stdout}{stderr}"
    );
    assert!(
        stdout.contains(&format!("canary/third in {ns}: NOT READY")),
        "{stdout}"
    );

    let promoted = deployments.get("good-primary").await.expect("primary");
    assert_eq!(
        image(&promoted),
        "shop:2",
        "Promoting moved the primary to the new image"
    );
    let traffic = config_maps.get("bad-traffic").await.expect("traffic");
    assert_eq!(
        traffic
            .data
            .as_ref()
            .and_then(|d| d.get("canary"))
            .map(String::as_str),
        Some("0"),
        "RollingBack sent all traffic to the primary"
    );
    let metrics = operator.metrics().await;
    for line in [
        "phase_transitions_total{from=\"Evaluating\",kind=\"Canary\",to=\"Promoting\"} 1",
        "phase_transitions_total{from=\"Evaluating\",kind=\"Canary\",to=\"RollingBack\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics");
    }

    // `stuck`: its canary's pods never become ready (kwok's never-ready label, put on the pod
    // template by the test before the operator applies the Deployment; server-side apply keeps
    // another writer's fields), so the rollout passes its progress deadline and the real
    // Deployment controller reports ProgressDeadlineExceeded: Waiting rolls back, with no
    // evaluation.
    let stuck: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "stuck-canary"},
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": 2,
            "selector": {"matchLabels": {"app": "stuck", "track": "stuck-canary"}},
            "template": {
                "metadata": {"labels": {"app": "stuck", "track": "stuck-canary",
                                        POD_BEHAVIOUR_LABEL: NEVER_READY}},
                "spec": {"containers": [{"name": "app", "image": "shop:2"}]}
            }
        }
    }))
    .expect("a Deployment");
    deployments
        .create(&PostParams::default(), &stuck)
        .await
        .expect("create the canary Deployment whose pods never become ready");
    let stuck_canary = canary(&ns, "stuck", analysis("vector(1)", 1, "1s"), json!({}));
    apps.create(&PostParams::default(), &stuck_canary)
        .await
        .expect("create the stuck Canary");
    let failed = eventually("stuck is rolled back", logs, || async {
        apps.get("stuck")
            .await
            .ok()
            .filter(|c| phase(c) == "Failed")
    })
    .await;
    eventually("stuck's phase changes as Events", logs, || async {
        let seen = transitions(&events, "stuck").await;
        (seen.iter().any(|n| n == "Waiting -> RollingBack")
            && seen.iter().any(|n| n == "RollingBack -> Failed"))
        .then_some(seen)
    })
    .await;
    assert!(
        !transitions(&events, "stuck")
            .await
            .iter()
            .any(|n| n.starts_with("Evaluating")),
        "a failed rollout is never evaluated"
    );
    let scaled_down = deployments.get("stuck-canary").await.expect("canary");
    assert_eq!(
        scaled_down.spec.as_ref().and_then(|s| s.replicas),
        Some(0),
        "RollingBack scaled the canary to zero: {:?}\n{}",
        failed.data["status"],
        logs()
    );

    // `third` has no value yet: it stays in Evaluating (interval: one hour).
    eventually("third evaluates", logs, || async {
        apps.get("third")
            .await
            .ok()
            .filter(|c| phase(c) == "Evaluating")
    })
    .await;
    let old = config_maps
        .get("third-traffic")
        .await
        .expect("traffic")
        .uid();
    config_maps
        .delete("third-traffic", &DeleteParams::default())
        .await
        .expect("delete an output");
    eventually("the deleted output is re-created", logs, || async {
        config_maps
            .get_opt("third-traffic")
            .await
            .ok()
            .flatten()
            .filter(|m| m.uid() != old)
    })
    .await;

    // Killed mid-Evaluating. With no operator, a gate is not applied: the command times out.
    operator.kill().await;
    let (code, stdout, stderr) = kubeapp(
        env.kubeconfig_path(),
        &["promote", "canary/third", "-n", &ns, "--timeout", "1s"],
    )
    .await;
    assert_eq!(code, 3, "no operator: timed out: {stdout}{stderr}");
    assert!(stderr.contains("promote not applied within 1s"), "{stderr}");
    let unannotate = json!({"metadata": {"annotations": {GATE: null}},
                            "spec": {"analysis": {"interval": "1s"}}});
    apps.patch("third", &PatchParams::default(), &Patch::Merge(&unannotate))
        .await
        .expect("remove the gate, measure every second");
    // Restarted on the address Prometheus scrapes as `canary-operator-2`: `third`'s query has a
    // value once it was scraped.
    let operator = Running::start(
        &example,
        &env,
        env.dir().join("canary-2.log"),
        metrics_2,
        &["--prometheus-url", &url],
    )
    .await;
    let logs = || operator.logs();
    let resumed = eventually("third resumes and succeeds", logs, || async {
        apps.get("third")
            .await
            .ok()
            .filter(|c| phase(c) == "Succeeded")
    })
    .await;
    let run = &resumed.data["status"]["analysis"];
    assert_eq!(
        (&run["outcome"], run["measurements"][0]["value"].as_f64()),
        (&json!("Successful"), Some(1.0)),
        "the value is Prometheus' answer (up of the scraped operator): {run}"
    );
    drop(prometheus);
    let third = transitions(&events, "third").await;
    assert_eq!(
        third
            .iter()
            .filter(|n| *n == "Initializing -> Waiting")
            .count(),
        1,
        "no finished phase ran again: {third:?}"
    );
    let metrics = operator.metrics().await;
    assert!(
        !metrics.contains("from=\"Initializing\"") && !metrics.contains("from=\"Waiting\""),
        "the restarted operator moved nothing out of a finished phase"
    );

    // Deleting a canary runs its finalizer hook once.
    apps.delete("good", &DeleteParams::default())
        .await
        .expect("delete good");
    eventually("good is gone", logs, || async {
        matches!(apps.get_opt("good").await, Ok(None)).then_some(())
    })
    .await;
    let finalized = operator
        .logs()
        .lines()
        .filter(|l| l.contains("canary finalized") && l.contains("good"))
        .count();
    assert_eq!(
        finalized,
        1,
        "the hook ran exactly once\n{}",
        operator.logs()
    );
    operator.stop().await;
}
