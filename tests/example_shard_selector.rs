//! The server-side shard selector end to end: replicas of `examples/minimal` run with
//! `--shard` against a real kube-apiserver + etcd, as child processes, over 3,000 Greetings.
//!
//! - With the `ShardedListAndWatch` feature gate on, each replica's informer caches exactly the
//!   Greetings of its own share (`shard_cached_objects` from its `/metrics`, against the share
//!   computed from the ring's assignment and the Greetings' uids: each well under the total, the
//!   sum equal to it), through 2 -> 3 -> 2 replicas (a replica added: the others
//!   list again and forget what left their range; one stopped: the survivors list its share),
//!   every Greeting is reconciled after each change, and no replica's controller sees a delete.
//!   This fails if the selector is not sent (each replica would cache everything).
//! - Without the gate, the same replicas cache every Greeting (the fallback: the client-side
//!   filter shards) and still reconcile every one.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use example_support::replica::{MINIMAL, Replica, SHARDED};
use example_support::{binary, eventually, output_of};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::ha::sharding::assignment::{owned_by, slot_of_uid};
use kubeapp::sdk::testenv::TestEnv;

const OBJECTS: usize = 3_000;
const GATE: &str = "--feature-gates=ShardedListAndWatch=true";

fn greeting(ns: &str, name: &str, message: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "minimal.kubeapp.dev/v1",
        "kind": "Greeting",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"message": message},
    }))
    .expect("a Greeting")
}

struct Setup {
    env: TestEnv,
    ns: String,
    greetings: Api<DynamicObject>,
    config_maps: Api<ConfigMap>,
}

/// A control plane (with `apiserver_args`), the CRD, a namespace and `OBJECTS` Greetings.
async fn setup(apiserver_args: &[&str]) -> Setup {
    let mut builder = TestEnv::builder();
    for arg in apiserver_args {
        builder = builder.apiserver_arg(*arg);
    }
    let env = builder.start().await.expect("control plane");
    env.install_crds_yaml(&output_of(&binary(MINIMAL, MINIMAL), &["crd"]))
        .await
        .expect("the CRD installs");
    let ns = env.create_namespace("selector").await.expect("namespace");
    let client = env.client();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    let greetings: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let config_maps: Api<ConfigMap> = Api::namespaced(client, &ns);
    for_each_greeting(|i| {
        let (greetings, ns) = (greetings.clone(), ns.clone());
        async move {
            greetings
                .create(
                    &PostParams::default(),
                    &greeting(&ns, &format!("g{i}"), "first"),
                )
                .await
                .expect("create a Greeting");
        }
    })
    .await;
    Setup {
        env,
        ns,
        greetings,
        config_maps,
    }
}

async fn for_each_greeting<F, Fut>(f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use futures::StreamExt;
    futures::stream::iter(0..OBJECTS)
        .for_each_concurrent(16, f)
        .await;
}

/// Sets every Greeting's message to `message`.
async fn update_all(greetings: &Api<DynamicObject>, message: &str) {
    for_each_greeting(|i| {
        let greetings = greetings.clone();
        let patch = serde_json::json!({"spec": {"message": message}});
        async move {
            greetings
                .patch(
                    &format!("g{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .expect("update a Greeting");
        }
    })
    .await;
}

/// Waits until every Greeting's ConfigMap says `message`.
async fn all_rendered(config_maps: &Api<ConfigMap>, message: &str, logs: impl Fn() -> String) {
    eventually(
        &format!("every Greeting is rendered with {message:?}"),
        logs,
        || async {
            let maps = config_maps.list(&ListParams::default()).await.ok()?;
            let rendered = maps
                .items
                .iter()
                .filter(|m| {
                    m.data
                        .as_ref()
                        .and_then(|d| d.get("message"))
                        .map(String::as_str)
                        == Some(message)
                })
                .count();
            (rendered == OBJECTS).then_some(())
        },
    )
    .await;
}

/// How many Greetings fall in the share each of `replicas` owns (by the ring's assignment of
/// their identities and the Greetings' uids).
async fn shares(greetings: &Api<DynamicObject>, replicas: &[&Replica]) -> Vec<usize> {
    let uids: Vec<String> = greetings
        .list(&ListParams::default())
        .await
        .expect("list the Greetings")
        .items
        .into_iter()
        .filter_map(|g| g.metadata.uid)
        .collect();
    assert_eq!(uids.len(), OBJECTS);
    let members: Vec<String> = replicas.iter().map(|r| r.name.to_string()).collect();
    members
        .iter()
        .map(|member| {
            let owned = owned_by(&members, member);
            uids.iter()
                .filter(|uid| owned.contains(slot_of_uid(uid)))
                .count()
        })
        .collect()
}

/// Waits until `replicas` split the ring and cache, with the server-side selector, exactly the
/// Greetings of their own shares (each well under all, the sum all of them), without it every
/// Greeting each; returns each one's cached count.
async fn stable_split(
    greetings: &Api<DynamicObject>,
    replicas: &[&Replica],
    server_side: bool,
) -> Vec<usize> {
    let expected = if server_side {
        let shares = shares(greetings, replicas).await;
        assert_eq!(shares.iter().sum::<usize>(), OBJECTS);
        assert!(shares.iter().all(|share| share * 10 < OBJECTS * 8));
        shares
    } else {
        vec![OBJECTS; replicas.len()]
    };
    let logs = || {
        replicas
            .iter()
            .map(|r| format!("--- {}:\n{}", r.name, r.log()))
            .collect::<String>()
    };
    eventually(
        &format!(
            "{} replicas split the ring and cache {}",
            replicas.len(),
            if server_side {
                "their shares"
            } else {
                "every Greeting each"
            }
        ),
        logs,
        || async {
            let mut width = 0.0;
            let mut counts = Vec::new();
            for replica in replicas {
                let active = replica.metric("shard_active_range_width").await?;
                let selector = replica.metric("shard_server_side_selector").await?;
                let cached = replica.metric("shard_cached_objects").await?;
                if active <= 0.0 || selector != f64::from(u8::from(server_side)) {
                    return None;
                }
                width += active;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                counts.push(cached as usize);
            }
            let whole = (width - 1.0).abs() < 1e-9;
            (whole && counts == expected).then_some(counts)
        },
    )
    .await
}

/// Deletes the controller of `replica` saw (none of these tests deletes a Greeting).
async fn deletes_seen(replica: &Replica) -> f64 {
    replica
        .metric_where("informer_events_total", "event_type=\"DELETE\"")
        .await
        .expect("metrics answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gate_each_replica_caches_only_its_share_through_2_3_2_replicas() {
    let Setup {
        env,
        ns,
        greetings,
        config_maps,
    } = setup(&[GATE]).await;
    let a = Replica::start(&env, &ns, "replica-a", SHARDED, "info");
    let b = Replica::start(&env, &ns, "replica-b", SHARDED, "info");
    let two = stable_split(&greetings, &[&a, &b], true).await;
    all_rendered(&config_maps, "first", || a.log()).await;

    // A third replica joins: a and b list again with smaller ranges and forget the rest.
    let c = Replica::start(&env, &ns, "replica-c", SHARDED, "info");
    let three = stable_split(&greetings, &[&a, &b, &c], true).await;
    update_all(&greetings, "second").await;
    all_rendered(&config_maps, "second", || c.log()).await;
    for replica in [&a, &b, &c] {
        assert_eq!(
            deletes_seen(replica).await,
            0.0,
            "{} saw a delete",
            replica.name
        );
    }

    // b leaves: a and c take its share (listing again with larger ranges).
    b.stop().await;
    let survivors = stable_split(&greetings, &[&a, &c], true).await;
    update_all(&greetings, "third").await;
    all_rendered(&config_maps, "third", || a.log()).await;
    for replica in [&a, &c] {
        assert_eq!(
            deletes_seen(replica).await,
            0.0,
            "{} saw a delete",
            replica.name
        );
    }
    eprintln!(
        "server-side selector, {OBJECTS} Greetings: cached per replica with 2 replicas {two:?}, \
         with 3 {three:?}, after one left {survivors:?}"
    );
    a.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_every_replica_caches_every_object_and_the_client_side_filter_shards() {
    let Setup {
        env,
        ns,
        greetings,
        config_maps,
    } = setup(&[]).await;
    let a = Replica::start(&env, &ns, "replica-a", SHARDED, "info");
    let b = Replica::start(&env, &ns, "replica-b", SHARDED, "info");
    let c = Replica::start(&env, &ns, "replica-c", SHARDED, "info");
    let counts = stable_split(&greetings, &[&a, &b, &c], false).await;
    all_rendered(&config_maps, "first", || a.log()).await;
    update_all(&greetings, "second").await;
    all_rendered(&config_maps, "second", || b.log()).await;
    assert!(
        a.log().contains("ignores shardSelector"),
        "the fallback is logged"
    );
    eprintln!("no server-side selector, {OBJECTS} Greetings: cached per replica {counts:?}");
    for replica in [a, b, c] {
        replica.stop().await;
    }
}
