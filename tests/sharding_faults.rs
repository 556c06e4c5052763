//! Sharding under the faults a replica meets, end to end: three replicas of `examples/minimal`
//! with `--shard` (lease 6 s, renew deadline 4 s, retry 1 s) as child processes against a real
//! kube-apiserver + etcd, 1,500 Greetings updated all along:
//!
//! - **partition**: one replica reaches the apiserver through a TCP proxy the test cuts, twice
//!   for longer than the lease (the others take its share) and once for longer than the renew
//!   deadline but shorter than the lease; after each heal it must wait for the others to let go;
//! - **pauses**: one replica SIGSTOPped for longer than the lease, then starved by a
//!   SIGSTOP/SIGCONT duty cycle.
//!
//! Each test reads every replica's log (handler calls, terms with their active slots, the own
//! Lease's renewals: `example_support::shard_log`) and checks that no call starts outside a term
//! that is still valid (a paused replica's term ends at its renew deadline, whenever it writes
//! its end line), and that the replicas' active slots never sum past 256. The partition test
//! also checks that no two replicas ran a call for the same Greeting at overlapping times; with
//! pauses a call already in flight may finish late (Leases give no fencing): those are counted
//! and printed. Every Greeting's last update must be rendered at the end.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use example_support::proxy::CutProxy;
use example_support::replica::{MINIMAL, Options, Replica, SHARDED};
use example_support::shard_log::{self, ReplicaLog};
use example_support::{binary, eventually, output_of, send_signal};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::testenv::TestEnv;
use tokio_util::sync::CancellationToken;

const OBJECTS: usize = 1_500;
const TIMINGS: [&str; 3] = ["6s", "4s", "1s"];
const RENEW_DEADLINE_US: i64 = 4_000_000;
const RUST_LOG: &str = "info,kubeapp::calls=debug,kubeapp_ha::sharding=debug";
const NAMES: [&str; 3] = ["replica-a", "replica-b", "replica-c"];

fn greeting(ns: &str, name: &str, message: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "minimal.kubeapp.dev/v1",
        "kind": "Greeting",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"message": message},
    }))
    .expect("a Greeting")
}

/// The cluster, the Greetings and the three replicas (the third possibly behind a proxy).
struct Setup {
    env: TestEnv,
    greetings: Api<DynamicObject>,
    config_maps: Api<ConfigMap>,
    replicas: Vec<Replica>,
    /// The proxy the third replica reaches the apiserver through, if any.
    proxy: Option<CutProxy>,
    /// The last message written to each Greeting.
    last: Arc<Mutex<HashMap<String, String>>>,
}

fn nothing() -> String {
    String::new()
}

impl Setup {
    /// Creates the Greetings, then starts the replicas (the third through a cuttable proxy when
    /// `proxied`) and waits until they share the ring and every Greeting is rendered.
    async fn start(proxied: bool) -> Self {
        let env = TestEnv::start().await.expect("control plane");
        let proxy = if proxied {
            Some(CutProxy::start(apiserver_addr(&env)).await)
        } else {
            None
        };
        env.install_crds_yaml(&output_of(&binary(MINIMAL, MINIMAL), &["crd"]))
            .await
            .expect("the CRD installs");
        let ns = env.create_namespace("faults").await.expect("namespace");
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
            "greetings",
        );
        let greetings: Api<DynamicObject> = Api::namespaced_with(env.client(), &ns, &resource);
        let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
        let last = Arc::new(Mutex::new(HashMap::new()));
        futures::stream::iter(0..OBJECTS)
            .for_each_concurrent(16, |i| {
                let (greetings, ns, last) = (greetings.clone(), ns.clone(), Arc::clone(&last));
                async move {
                    let name = format!("g{i:04}");
                    greetings
                        .create(&PostParams::default(), &greeting(&ns, &name, "first"))
                        .await
                        .expect("create a Greeting");
                    last.lock().expect("last").insert(name, "first".to_string());
                }
            })
            .await;
        let mut replicas = Vec::new();
        for name in NAMES {
            let kubeconfig = proxy
                .as_ref()
                .filter(|_| name == "replica-c")
                .map(|p| p.kubeconfig(env.kubeconfig_path(), &env.server_url(), env.dir()));
            let options = Options {
                timings: TIMINGS,
                kubeconfig,
            };
            replicas.push(Replica::start_with(
                &env, &ns, name, SHARDED, RUST_LOG, &options,
            ));
        }
        let setup = Self {
            env,
            greetings,
            config_maps,
            replicas,
            proxy,
            last,
        };
        setup.until_sharing(&[0, 1, 2], &[]).await;
        setup.until_rendered().await;
        setup
    }

    /// Waits until exactly the replicas `active` act on slots and together cover the ring (a
    /// replica in `paused` is not asked: it cannot answer).
    async fn until_sharing(&self, active: &[usize], paused: &[usize]) {
        let what = format!("replicas {active:?} share the whole ring");
        // What the last probe read, and the replicas' term lines, for the failure message.
        let widths = Mutex::new(Vec::new());
        let context = || {
            let mut out = format!(
                "last active widths read: {:?}\n",
                widths.lock().expect("widths")
            );
            for replica in &self.replicas {
                let log = replica.log();
                let terms: Vec<&str> = log
                    .lines()
                    .filter(|line| line.contains("term") || line.contains("lapsed"))
                    .collect();
                let tail = &terms[terms.len().saturating_sub(8)..];
                out.push_str(&format!(
                    "{}'s last term lines:\n{}\n",
                    replica.name,
                    tail.join("\n")
                ));
            }
            out
        };
        eventually(&what, context, || async {
            let mut sum = 0.0;
            let mut read = Vec::new();
            let mut sharing = true;
            for (i, replica) in self.replicas.iter().enumerate() {
                if paused.contains(&i) {
                    read.push(None);
                    continue;
                }
                let width = replica.metric("shard_active_range_width").await;
                read.push(width);
                sharing &= width.is_some();
                let width = width.unwrap_or(0.0);
                sharing &= active.contains(&i) == (width > 0.0);
                sum += width;
            }
            *widths.lock().expect("widths") = read;
            (sharing && (sum - 1.0_f64).abs() < 1e-9).then_some(())
        })
        .await;
    }

    /// Waits until every Greeting's ConfigMap shows its last message.
    async fn until_rendered(&self) {
        eventually(
            "every Greeting's last message is rendered",
            nothing,
            || async {
                let maps = self.config_maps.list(&ListParams::default()).await.ok()?;
                let rendered: HashMap<String, String> = maps
                    .items
                    .into_iter()
                    .filter_map(|m| {
                        let message = m.data.as_ref()?.get("message")?.clone();
                        Some((m.metadata.name?, message))
                    })
                    .collect();
                let last = self.last.lock().expect("last").clone();
                last.iter()
                    .all(|(name, message)| rendered.get(name) == Some(message))
                    .then_some(())
            },
        )
        .await;
    }

    /// Updates Greetings (four writers, paced) until the returned token is cancelled.
    fn churn(&self) -> (CancellationToken, tokio::task::JoinHandle<usize>) {
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (greetings, last, stop) =
                (self.greetings.clone(), Arc::clone(&self.last), stop.clone());
            async move {
                let writers = (0..4).map(|writer| {
                    let (greetings, last, stop) =
                        (greetings.clone(), Arc::clone(&last), stop.clone());
                    async move {
                        let mut written = 0;
                        let mut n = writer;
                        while !stop.is_cancelled() {
                            let name = format!("g{:04}", (n * 7919) % OBJECTS);
                            let message = format!("update {n}");
                            let patch = serde_json::json!({"spec": {"message": message}});
                            if greetings
                                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                                .await
                                .is_ok()
                            {
                                last.lock().expect("last").insert(name, message);
                                written += 1;
                            }
                            n += 4;
                            // Pacing, not synchronisation: a steady load below the apiserver's
                            // limit on a small machine.
                            tokio::time::sleep(Duration::from_millis(40)).await;
                        }
                        written
                    }
                });
                futures::future::join_all(writers).await.into_iter().sum()
            }
        });
        (stop, task)
    }

    /// Stops the churn, waits for the last states, stops the replicas and reads their logs.
    async fn finish(
        self,
        churn: (CancellationToken, tokio::task::JoinHandle<usize>),
    ) -> (Vec<ReplicaLog>, usize) {
        churn.0.cancel();
        let updates = churn.1.await.expect("the churn ends");
        self.until_rendered().await;
        let mut logs = Vec::new();
        for replica in self.replicas {
            let path = replica.log.clone();
            let name = replica.name;
            replica.stop().await;
            let text = std::fs::read_to_string(path).expect("a replica's log");
            if let Ok(dir) = std::env::var("KUBEAPP_KEEP_LOGS") {
                let _ = std::fs::write(format!("{dir}/{name}.log"), &text);
            }
            logs.push(shard_log::read(name, &text, None));
        }
        drop(self.env);
        (logs, updates)
    }
}

/// The apiserver's address, from its URL.
fn apiserver_addr(env: &TestEnv) -> SocketAddr {
    let url = env.server_url();
    let authority = url.trim_start_matches("https://");
    authority.parse().expect("an IP:port apiserver address")
}

fn summary(logs: &[ReplicaLog]) -> String {
    logs.iter()
        .map(|l| {
            format!(
                "{}: {} calls, {} refused at a deadline, {} terms",
                l.replica,
                l.calls.len(),
                l.refused,
                l.terms.len()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_longer_and_shorter_than_its_lease_never_overlaps_the_others() {
    let setup = Setup::start(true).await;
    let proxy = setup.proxy.as_ref().expect("a proxy");
    let churn = setup.churn();
    // Longer than the lease, twice: the others take the share of the cut replica.
    for _ in 0..2 {
        proxy.cut();
        setup.until_sharing(&[0, 1], &[]).await;
        proxy.heal();
        setup.until_sharing(&[0, 1, 2], &[]).await;
    }
    // Past the renew deadline, shorter than the lease: the cut replica stops acting (its term
    // ends, its active width drops to 0) and the heal comes before the others could count it
    // gone.
    proxy.cut();
    eventually(
        "the cut replica stops acting at its renew deadline",
        nothing,
        || async {
            let width = setup.replicas[2].metric("shard_active_range_width").await?;
            (width == 0.0).then_some(())
        },
    )
    .await;
    proxy.heal();
    setup.until_sharing(&[0, 1, 2], &[]).await;

    let (logs, updates) = setup.finish(churn).await;
    let calls: Vec<_> = logs.iter().flat_map(|l| l.calls.clone()).collect();
    let (overlaps, handed_over) = shard_log::check_overlaps(&calls);
    let (problems, late) = shard_log::check_terms(&logs, RENEW_DEADLINE_US);
    eprintln!(
        "{updates} updates; {}; {handed_over} hand-overs of an object between replicas; \
         {} calls in flight past their term's end (the longest by {} ms)",
        summary(&logs),
        late.calls,
        late.longest_us / 1000
    );
    assert!(overlaps.is_empty(), "overlapping calls: {overlaps:#?}");
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(handed_over > 0, "objects moved between replicas");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_or_starved_replica_starts_no_call_past_its_renew_deadline() {
    let setup = Setup::start(false).await;
    let churn = setup.churn();
    let paused = setup.replicas[2].pid;
    // Paused for longer than the lease: the others take its share; resumed, it must find out
    // before it acts again.
    send_signal(paused, "STOP");
    setup.until_sharing(&[0, 1], &[2]).await;
    send_signal(paused, "CONT");
    setup.until_sharing(&[0, 1, 2], &[]).await;
    // Starved: stopped most of the time, for periods around the renew deadline and the lease.
    for stopped_ms in [2_500, 5_000, 3_500, 7_000, 4_500, 3_000] {
        send_signal(paused, "STOP");
        // The fault itself lasts this long; nothing is awaited here.
        tokio::time::sleep(Duration::from_millis(stopped_ms)).await;
        send_signal(paused, "CONT");
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }
    setup.until_sharing(&[0, 1, 2], &[]).await;

    let (logs, updates) = setup.finish(churn).await;
    let calls: Vec<_> = logs.iter().flat_map(|l| l.calls.clone()).collect();
    let (overlaps, handed_over) = shard_log::check_overlaps(&calls);
    let (problems, late) = shard_log::check_terms(&logs, RENEW_DEADLINE_US);
    eprintln!(
        "{updates} updates; {}; {handed_over} hand-overs of an object between replicas; \
         {} calls in flight past their term's end, the longest by {} ms (Leases give no \
         fencing); {} overlapping pairs",
        summary(&logs),
        late.calls,
        late.longest_us / 1000,
        overlaps.len()
    );
    assert!(problems.is_empty(), "{problems:#?}");
}
