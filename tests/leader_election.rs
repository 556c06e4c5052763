//! End-to-end tests of `kubeapp::ha::election` against a real kube-apiserver + etcd:
//!
//! - of three candidates exactly one leads (never two at any sampled moment), and the Lease names
//!   it; stopping the leader releases the Lease and a follower takes it through its watch, long
//!   before its next retry (the retry period is 40 s, the wait 20 s);
//! - a leader whose connection is cut steps down at its renew deadline, before its Lease can
//!   expire for the others: sampled every 10 ms, the two candidates never lead at once, and the
//!   other one takes over once the Lease expired; back on the network, the old leader reads the
//!   Lease again and never leads (nor writes the Lease) while the other renews it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeapp::ha::RunInTerms as _;
use kubeapp::ha::election::{ElectionConfig, LeaderElector, Leadership, LeaseTimings};
use kubeapp::operator::CancellationToken;
use kubeapp::sdk::testenv::TestEnv;

const WAIT: Duration = Duration::from_secs(60);

struct Candidate {
    leadership: Leadership,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn start(client: kube::Client, config: ElectionConfig) -> Candidate {
    let elector = LeaderElector::new(client, config).expect("valid settings");
    let leadership = elector.leadership();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    Candidate {
        leadership,
        stop,
        task,
    }
}

/// A client over `inner` whose every request fails once the returned switch is set: a
/// candidate's connection cut by the test. The counter counts the requests that went through.
fn cuttable_client(inner: kube::Client) -> (kube::Client, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let cut = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let (switch, counter) = (Arc::clone(&cut), Arc::clone(&sent));
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (inner, cut, counter) = (inner.clone(), Arc::clone(&switch), Arc::clone(&counter));
        async move {
            if cut.load(Ordering::SeqCst) {
                return Err::<
                    http::Response<kube::client::Body>,
                    Box<dyn std::error::Error + Send + Sync>,
                >("connection cut by the test".into());
            }
            counter.fetch_add(1, Ordering::SeqCst);
            inner.send(request).await.map_err(Into::into)
        }
    });
    (kube::Client::new(service, "default"), cut, sent)
}

/// Polls until `pick` is true, sampling every 10 ms; fails with `what` after `within`.
async fn until_within(what: &str, within: Duration, mut pick: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !pick() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn until(what: &str, pick: impl FnMut() -> bool) {
    until_within(what, WAIT, pick).await;
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get(name)
        .await
        .expect("the Lease")
        .spec
        .and_then(|s| s.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_a_released_lease_is_taken_through_the_watch() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("election").await.expect("namespace");
    // A 40 s retry period: only the watch can bring a follower in within the 20 s below.
    let config = |identity: &str| {
        ElectionConfig::new(&ns, "shop-leader", identity).with_timings(LeaseTimings::new(
            Duration::from_secs(60),
            Duration::from_secs(50),
            Duration::from_secs(40),
        ))
    };
    let candidates: Vec<Candidate> = ["a", "b", "c"]
        .iter()
        .map(|id| start(env.client(), config(id)))
        .collect();
    let leaders = |c: &[Candidate]| c.iter().filter(|c| c.leadership.is_leader()).count();
    until("a leader", || leaders(&candidates) == 1).await;
    for _ in 0..200 {
        assert_eq!(leaders(&candidates), 1, "exactly one leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let leader = candidates
        .iter()
        .position(|c| c.leadership.is_leader())
        .expect("a leader");
    let leases: Api<Lease> = Api::namespaced(env.client(), &ns);
    let ids = ["a", "b", "c"];
    assert_eq!(
        holder(&leases, "shop-leader").await.as_deref(),
        Some(ids[leader])
    );

    let mut candidates = candidates;
    let old = candidates.remove(leader);
    old.stop.cancel();
    old.task.await.expect("the elector stops");
    assert!(!old.leadership.is_leader());
    // Not a speed figure: without the watch nothing would happen before the 40 s retry.
    until_within(
        "a follower takes the released Lease through its watch",
        Duration::from_secs(20),
        || leaders(&candidates) == 1,
    )
    .await;
    let new = candidates
        .iter()
        .position(|c| c.leadership.is_leader())
        .expect("a leader");
    let remaining: Vec<&str> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, id)| *id)
        .collect();
    let lease = leases.get("shop-leader").await.expect("the Lease");
    let spec = lease.spec.expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some(remaining[new]));
    assert_eq!(spec.lease_transitions, Some(1), "one handover");
    for candidate in candidates {
        candidate.stop.cancel();
        candidate.task.await.expect("stops");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_steps_down_before_the_others_may_take_over() {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("election").await.expect("namespace");
    let config = |identity: &str| {
        ElectionConfig::new(&ns, "cut-leader", identity).with_timings(LeaseTimings::new(
            Duration::from_secs(6),
            Duration::from_secs(4),
            Duration::from_secs(1),
        ))
    };
    // The first candidate's requests go through a switch the test can open.
    let (cuttable, cut, sent) = cuttable_client(env.client());
    let first = start(cuttable, config("first"));
    until("the first candidate leads", || first.leadership.is_leader()).await;
    let second = start(env.client(), config("second"));

    cut.store(true, Ordering::SeqCst);
    let cut_at = Instant::now();
    let deadline = Instant::now() + WAIT;
    let mut first_stepped_down = None;
    loop {
        let (a, b) = (first.leadership.is_leader(), second.leadership.is_leader());
        assert!(!(a && b), "two leaders at once");
        if !a && first_stepped_down.is_none() {
            first_stepped_down = Some(cut_at.elapsed());
        }
        if b {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second candidate never took over"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stepped_down = first_stepped_down.expect("the first stepped down before the second led");
    eprintln!("the cut leader stepped down {stepped_down:?} after the cut (renew deadline 4 s)");
    // Back on the network, the old leader reads the Lease again: while the second renews it,
    // the first never leads (sampled every 10 ms over at least ten of its requests, which
    // span several retry periods) and the Lease stays the second's.
    cut.store(false, Ordering::SeqCst);
    let healed_at = sent.load(Ordering::SeqCst);
    until_within(
        "the first candidate has been back for ten requests",
        WAIT,
        || {
            assert!(
                !first.leadership.is_leader(),
                "the old leader led again while the second held the Lease"
            );
            assert!(second.leadership.is_leader(), "the second kept leading");
            sent.load(Ordering::SeqCst) >= healed_at + 10
        },
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(env.client(), &ns);
    assert_eq!(
        holder(&leases, "cut-leader").await.as_deref(),
        Some("second")
    );
    for candidate in [first, second] {
        candidate.stop.cancel();
        candidate.task.await.expect("stops");
    }
}

/// One replica: an elector (its client may be cut) and a controller reconciling the labelled
/// ConfigMaps of `ns` while it leads, logging `"{replica} {name}"` per reconcile and
/// `"{replica} cancelled {name}"` when a `slow` object's call sees its context cancelled.
struct Replica {
    candidate: Candidate,
    controller_stop: CancellationToken,
    controller: tokio::task::JoinHandle<Result<(), kubeapp::operator::ControllerError>>,
}

fn replica(
    env: &TestEnv,
    ns: &str,
    id: &'static str,
    election_client: kube::Client,
    log: kubeapp_test_log::Log,
) -> Replica {
    use kube::ResourceExt;
    use kubeapp::operator::{
        Context, ControllerConfig, InformerController, InformerOptions, ReconcileRequest,
        ReconcileResult,
    };
    let config = ElectionConfig::new(ns, "replicas", id).with_timings(LeaseTimings::new(
        Duration::from_secs(6),
        Duration::from_secs(4),
        Duration::from_secs(1),
    ));
    let candidate = start(election_client, config);
    let controller = InformerController::new(ControllerConfig::default().name(id));
    let config_maps = controller.kind(
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client(), ns),
        kube::runtime::watcher::Config::default().labels("replicas=test"),
        InformerOptions::default(),
    );
    let handle = config_maps.reconcile_fn(
        move |request: ReconcileRequest<k8s_openapi::api::core::v1::ConfigMap>, ctx: Context| {
            let log = log.clone();
            async move {
                let name = request.object.name_any();
                log.push(format!("{id} {name}"));
                if name.starts_with("slow") {
                    ctx.cancelled().await;
                    log.push(format!("{id} cancelled {name}"));
                }
                Ok(ReconcileResult::done())
            }
        },
    );
    let controller_stop = CancellationToken::new();
    let leadership = candidate.leadership.clone();
    let task = tokio::spawn({
        let stop = controller_stop.clone();
        async move {
            let _handle = handle;
            controller.run_while_leading(stop, leadership).await
        }
    });
    Replica {
        candidate,
        controller_stop,
        controller: task,
    }
}

mod kubeapp_test_log {
    use std::sync::{Arc, Mutex};

    /// A shared log of lines.
    #[derive(Clone, Default)]
    pub struct Log(Arc<Mutex<Vec<String>>>);

    impl Log {
        pub fn push(&self, line: String) {
            self.0.lock().expect("log").push(line);
        }
        pub fn count(&self, pick: impl Fn(&str) -> bool) -> usize {
            self.0
                .lock()
                .expect("log")
                .iter()
                .filter(|l| pick(l))
                .count()
        }
    }
}

async fn create_labelled(client: &kube::Client, ns: &str, name: &str) {
    let map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"replicas": "test"}}
    }))
    .expect("a ConfigMap");
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &map)
        .await
        .expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_a_new_leader_gets_every_cached_object_and_a_lost_term_cancels_its_handlers()
 {
    let env = TestEnv::start().await.expect("control plane");
    let ns = env.create_namespace("replicas").await.expect("namespace");
    let log = kubeapp_test_log::Log::default();
    // The first replica's elector can be cut off from the apiserver.
    let (cuttable, cut, _) = cuttable_client(env.client());
    let first = replica(&env, &ns, "first", cuttable, log.clone());
    until("the first replica leads", || {
        first.candidate.leadership.is_leader()
    })
    .await;
    let second = replica(&env, &ns, "second", env.client(), log.clone());

    let client = env.client();
    for i in 0..20 {
        create_labelled(&client, &ns, &format!("cm-{i}")).await;
    }
    until("the leader reconciles all 20", || {
        log.count(|l| l.starts_with("first cm-")) >= 20
    })
    .await;
    // A reconcile that waits for its context: it is in flight when leadership ends.
    create_labelled(&client, &ns, "slow-1").await;
    until("the slow reconcile runs", || {
        log.count(|l| l == "first slow-1") == 1
    })
    .await;
    assert_eq!(
        log.count(|l| l.starts_with("second ")),
        0,
        "the follower reconciles nothing"
    );

    cut.store(true, Ordering::SeqCst);
    until(
        "the lost term cancels the in-flight handler's context",
        || log.count(|l| l == "first cancelled slow-1") == 1,
    )
    .await;
    until("the second replica takes over", || {
        second.candidate.leadership.is_leader()
    })
    .await;
    assert!(!first.candidate.leadership.is_leader());
    // The new leader gets every cached object (as Adds), with no new write by anyone.
    until("the new leader reconciles every cached object", || {
        log.count(|l| l.starts_with("second cm-")) >= 20
    })
    .await;
    let first_calls = log.count(|l| l.starts_with("first "));
    create_labelled(&client, &ns, "cm-after").await;
    until("the new leader reconciles a new object", || {
        log.count(|l| l == "second cm-after") == 1
    })
    .await;
    assert_eq!(
        log.count(|l| l.starts_with("first ")),
        first_calls,
        "the old leader started no handler call after losing the Lease"
    );
    for replica in [first, second] {
        replica.controller_stop.cancel();
        replica.candidate.stop.cancel();
        replica
            .controller
            .await
            .expect("the controller task")
            .expect("the controller stops cleanly");
        replica.candidate.task.await.expect("stops");
    }
}
