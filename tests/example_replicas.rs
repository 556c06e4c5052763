//! Two replicas of `examples/minimal` run with `--leader-elect` against a real kube-apiserver +
//! etcd, as child processes:
//!
//! - only the replica holding the Lease reconciles (the other's reconciler count stays 0); with
//!   `--leader-ready` only the leader's `/readyz` passes, and `leader_election_master_status` is 1
//!   on the leader and 0 on the other;
//! - `kubeapp trace` names the Lease and its holder as the object's leader;
//! - the leader is paused with SIGSTOP past its Lease: the other takes the Lease and reconciles a
//!   new Greeting; after SIGCONT the paused one starts no handler call (its reconciler count does
//!   not move while the other one keeps working) until it holds the Lease again;
//! - SIGTERM stops both with exit code 0, and the leader releases the Lease;
//! - three replicas, the leader SIGKILLed in the middle of 2,100 changes (creates, updates,
//!   deletes of 200 Greetings): another replica takes over once the Lease expired, every kept
//!   Greeting's ConfigMap reaches its final message and every deleted Greeting's cleanup runs (its
//!   finalizer goes, so does it).
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use example_support::replica::{LEADER_ELECTED, MINIMAL, Replica};
use example_support::{binary, eventually, get, kubeapp, output_of, send_signal};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::TestEnv;

/// How many reconciler calls `replica` made (`None` until `/metrics` answers).
async fn reconciles(replica: &Replica) -> Option<f64> {
    replica
        .metric("reconciler_process_duration_seconds_count")
        .await
}

/// Waits until no handler call of `replica` runs and its reconcile count holds still for a
/// second: the replica is idle (a call in flight when a process is paused may finish after it
/// resumes; the promise is about calls started after).
async fn idle(replica: &Replica) -> f64 {
    let mut last = None;
    loop {
        let calls = reconciles(replica).await;
        let running = replica.metric("ongoing_reconcile_processes").await;
        if calls.is_some() && calls == last && running == Some(0.0) {
            return calls.unwrap_or_default();
        }
        last = calls;
        // Polling for stillness: two equal readings a second apart.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("greeter-leader")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

async fn greet(client: &kube::Client, ns: &str, name: &str) {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    let greeting: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "minimal.kubeapp.dev/v1", "kind": "Greeting",
        "metadata": {"name": name, "namespace": ns}, "spec": {"message": "hi"}
    }))
    .expect("a Greeting");
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource)
        .create(&PostParams::default(), &greeting)
        .await
        .expect("create a Greeting");
}

async fn rendered(config_maps: &Api<ConfigMap>, name: &str) -> Option<()> {
    config_maps.get_opt(name).await.ok().flatten().map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_paused_leader_starts_nothing_after_it_resumes() {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds_yaml(&output_of(&binary(MINIMAL, MINIMAL), &["crd"]))
        .await
        .expect("the CRD installs");
    let ns = env.create_namespace("replicas").await.expect("namespace");
    let client = env.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let a = Replica::start(&env, &ns, "replica-a", LEADER_ELECTED, "info");
    let b = Replica::start(&env, &ns, "replica-b", LEADER_ELECTED, "info");
    let logs = || format!("{}\n---\n{}", a.log(), b.log());
    let leader = eventually("a replica holds the Lease", logs, || holder(&leases)).await;
    let (leading, standing_by) = if leader == a.name { (&a, &b) } else { (&b, &a) };

    greet(&client, &ns, "first").await;
    eventually("the leader renders the first Greeting", logs, || {
        rendered(&config_maps, "first")
    })
    .await;
    let standby_calls = eventually("the standby serves /metrics", logs, || {
        reconciles(standing_by)
    })
    .await;
    assert_eq!(standby_calls, 0.0, "the standby reconciled nothing");
    // `kubeapp trace` finds the leader through the Lease's label, without being told its name.
    let (_, stdout, stderr) = kubeapp(
        env.kubeconfig_path(),
        &["trace", "greeting/first", "-n", &ns, "-o", "json"],
    )
    .await;
    let traced: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    assert_eq!(
        traced["owner"]["leaders"],
        serde_json::json!([{"lease": format!("{ns}/greeter-leader"), "holder": leader}]),
        "{stdout}"
    );
    let status = |body: &str| {
        body.lines()
            .find(|l| l.starts_with("leader_election_master_status{name=\"greeter-leader\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    let leader_metrics = get(leading.metrics, "/metrics").await.expect("/metrics").1;
    let standby_metrics = get(standing_by.metrics, "/metrics")
        .await
        .expect("/metrics")
        .1;
    assert_eq!(status(&leader_metrics).as_deref(), Some("1"));
    assert_eq!(status(&standby_metrics).as_deref(), Some("0"));
    assert_eq!(
        get(leading.metrics, "/readyz").await.map(|(s, _)| s),
        Some(200),
        "--leader-ready: the leader is ready"
    );
    assert_eq!(
        get(standing_by.metrics, "/readyz").await.map(|(s, _)| s),
        Some(503),
        "--leader-ready: the standby is not"
    );

    // Pause the idle leader past its Lease: the standby takes over.
    let paused_calls = tokio::time::timeout(std::time::Duration::from_secs(60), idle(leading))
        .await
        .expect("the leader becomes idle");
    send_signal(leading.pid, "STOP");
    eventually("the standby takes the Lease", logs, || async {
        holder(&leases)
            .await
            .filter(|h| h == standing_by.name)
            .map(|_| ())
    })
    .await;
    greet(&client, &ns, "second").await;
    eventually("the new leader renders the second Greeting", logs, || {
        rendered(&config_maps, "second")
    })
    .await;

    // Resumed, the old leader starts no handler call while the new one keeps working.
    send_signal(leading.pid, "CONT");
    greet(&client, &ns, "third").await;
    eventually("the new leader renders the third Greeting", logs, || {
        rendered(&config_maps, "third")
    })
    .await;
    let after = eventually("the resumed replica's count", logs, || reconciles(leading)).await;
    assert_eq!(
        after, paused_calls,
        "the resumed replica started no reconcile without the Lease"
    );
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(standing_by.name),
        "the Lease stays with the new leader"
    );

    let new_leader = standing_by.name;
    let (a_name, b_name) = (a.name, b.name);
    a.stop().await;
    b.stop().await;
    let released = holder(&leases).await;
    assert!(
        released.is_none(),
        "{new_leader} released the Lease on SIGTERM ({a_name}, {b_name}): {released:?}"
    );
}

/// The message each Greeting ends with, after its updates.
fn final_message(i: usize) -> String {
    format!("final {i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_burst_loses_nothing_its_successor_reaches_every_final_state_and_delete()
 {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds_yaml(&output_of(&binary(MINIMAL, MINIMAL), &["crd"]))
        .await
        .expect("the CRD installs");
    let ns = env.create_namespace("burst").await.expect("namespace");
    let client = env.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut replicas: Vec<Replica> = ["replica-a", "replica-b", "replica-c"]
        .into_iter()
        .map(|name| Replica::start(&env, &ns, name, LEADER_ELECTED, "info"))
        .collect();
    let logs = || String::new();
    let leader = eventually("a replica holds the Lease", logs, || holder(&leases)).await;

    // 2,100 changes: 200 creates, 1,800 updates (9 per Greeting), 100 deletes (the second half
    // of the Greetings, with their finalizer: the cleanup must run before they go).
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    let greetings: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let objects = 200;
    let burst = {
        let greetings = greetings.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            futures::stream::iter(0..objects)
                .for_each_concurrent(10, |i| {
                    let (greetings, client, ns) = (greetings.clone(), client.clone(), ns.clone());
                    async move {
                        greet(&client, &ns, &format!("g{i}")).await;
                        for step in 0..9 {
                            let message = if step == 8 {
                                final_message(i)
                            } else {
                                format!("step {step}")
                            };
                            let patch = serde_json::json!({"spec": {"message": message}});
                            greetings
                                .patch(
                                    &format!("g{i}"),
                                    &kube::api::PatchParams::default(),
                                    &kube::api::Patch::Merge(&patch),
                                )
                                .await
                                .expect("update a Greeting");
                        }
                        if i >= objects / 2 {
                            greetings
                                .delete(&format!("g{i}"), &kube::api::DeleteParams::default())
                                .await
                                .expect("delete a Greeting");
                        }
                    }
                })
                .await;
        })
    };
    // Kill the leader mid-burst: its Lease must expire before another takes over.
    eventually("the burst is under way", logs, || async {
        let maps = config_maps.list(&Default::default()).await.ok()?;
        (maps.items.len() >= 20).then_some(())
    })
    .await;
    let index = replicas
        .iter()
        .position(|r| r.name == leader)
        .expect("the leader is ours");
    let mut killed = replicas.remove(index);
    send_signal(killed.pid, "KILL");
    let _ = killed.child.wait().await;
    burst.await.expect("the burst completes");

    let successor = eventually("another replica takes the Lease", logs, || async {
        holder(&leases).await.filter(|h| *h != leader)
    })
    .await;
    for i in 0..objects / 2 {
        let name = format!("g{i}");
        let expected = final_message(i);
        eventually(
            "every kept Greeting's final state is rendered",
            logs,
            || async {
                let map = config_maps.get_opt(&name).await.ok().flatten()?;
                (map.data.as_ref()?.get("message")? == &expected).then_some(())
            },
        )
        .await;
    }
    for i in objects / 2..objects {
        let name = format!("g{i}");
        eventually(
            "every deleted Greeting's cleanup ran (its finalizer is gone, so is it)",
            logs,
            || async { matches!(greetings.get_opt(&name).await, Ok(None)).then_some(()) },
        )
        .await;
    }
    eprintln!("{leader} killed mid-burst; {successor} finished the work");
    for replica in replicas {
        replica.stop().await;
    }
}
