//! Three members of a ring over a fake Lease API (a tower service keeping the ring's Leases,
//! honouring the `resourceVersion` precondition; each member's connection can be cut), on
//! tokio's paused clock. Each member runs the term rules as its controller does; every slot a
//! member activates is checked against what the others hold at that moment: no slot may be
//! active on two members whose terms are both still valid.
//!
//! The partition cases: one member cut for longer than the lease (the others take its share)
//! and then healed, by failing requests and by stalled ones that complete after the heal; and
//! one cut longer than the renew deadline but shorter than the lease (nobody takes over).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::election::{Leadership, LeaseTimings};
use crate::sharding::assignment::{SLOTS, SlotSet, owned_by};
use crate::sharding::term::TermChange;
use crate::sharding::{Membership, ShardRing, ShardingConfig};

/// The fake apiserver: the ring's Leases by name.
#[derive(Default)]
struct FakeApi {
    leases: Mutex<BTreeMap<String, Value>>,
    version: AtomicU64,
}

/// How a member's connection is cut.
#[derive(Default)]
struct Cut {
    /// Requests fail at once.
    failing: AtomicBool,
    /// Requests hang until the heal, then reach the server (a stalled TCP connection).
    stalled: AtomicBool,
    healed: Notify,
}

impl Cut {
    fn heal(&self) {
        self.failing.store(false, Ordering::SeqCst);
        self.stalled.store(false, Ordering::SeqCst);
        self.healed.notify_waiters();
    }
}

fn respond(status: u16, body: &Value) -> http::Response<kube::client::Body> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("a response")
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code})
}

impl FakeApi {
    fn next_version(&self) -> String {
        (self.version.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }

    fn serve(
        &self,
        method: &str,
        name: Option<&str>,
        watch: bool,
        body: &[u8],
    ) -> http::Response<kube::client::Body> {
        let mut leases = self.leases.lock().expect("leases");
        match (method, name) {
            ("GET", None) => {
                let items: Vec<Value> = leases.values().cloned().collect();
                respond(
                    200,
                    &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                        "metadata": {"resourceVersion": self.version.load(Ordering::SeqCst).to_string()},
                        "items": items}),
                )
            }
            ("GET", Some(name)) if !watch => match leases.get(name) {
                Some(lease) => respond(200, lease),
                None => respond(404, &status(404, "NotFound")),
            },
            ("POST", None) => {
                let Ok(mut lease) = serde_json::from_slice::<Value>(body) else {
                    return respond(400, &status(400, "BadRequest"));
                };
                let name = lease["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if leases.contains_key(&name) {
                    return respond(409, &status(409, "AlreadyExists"));
                }
                lease["metadata"]["resourceVersion"] = self.next_version().into();
                lease["metadata"]["uid"] = format!("uid-{name}").into();
                leases.insert(name, lease.clone());
                respond(201, &lease)
            }
            ("PUT", Some(name)) => {
                let Ok(mut lease) = serde_json::from_slice::<Value>(body) else {
                    return respond(400, &status(400, "BadRequest"));
                };
                let current = leases
                    .get(name)
                    .map(|l| l["metadata"]["resourceVersion"].clone());
                if current.is_none() {
                    return respond(404, &status(404, "NotFound"));
                }
                if current != Some(lease["metadata"]["resourceVersion"].clone()) {
                    return respond(409, &status(409, "Conflict"));
                }
                lease["metadata"]["resourceVersion"] = self.next_version().into();
                leases.insert(name.to_string(), lease.clone());
                respond(200, &lease)
            }
            ("DELETE", Some(name)) => match leases.remove(name) {
                Some(lease) => respond(200, &lease),
                None => respond(404, &status(404, "NotFound")),
            },
            _ => respond(404, &status(404, "NotFound")),
        }
    }
}

impl Cut {
    /// Waits while the connection is stalled.
    async fn until_flowing(&self) {
        loop {
            let healed = self.healed.notified();
            tokio::pin!(healed);
            healed.as_mut().enable();
            if !self.stalled.load(Ordering::SeqCst) {
                return;
            }
            healed.await;
        }
    }
}

/// A client of `api` whose connection `cut` can fail or stall.
fn client(api: Arc<FakeApi>, cut: Arc<Cut>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (api, cut) = (Arc::clone(&api), Arc::clone(&cut));
        async move {
            if cut.failing.load(Ordering::SeqCst) {
                return Err::<_, Box<dyn std::error::Error + Send + Sync>>("connection cut".into());
            }
            let watch = request
                .uri()
                .query()
                .is_some_and(|q| q.contains("watch=true"));
            if watch {
                // The ring's watch only speeds things up; the members also read the ring on
                // every retry period, which is what this test relies on.
                std::future::pending::<()>().await;
            }
            let method = request.method().as_str().to_string();
            let path = request.uri().path().to_string();
            let name = path
                .split_once("/leases/")
                .map(|(_, name)| name.to_string());
            let body = request.into_body().collect().await?.to_bytes();
            // A request sent into a stalled connection reaches the server when it flows again,
            // even if the client gave up on it meanwhile.
            let served = tokio::spawn(async move {
                cut.until_flowing().await;
                api.serve(&method, name.as_deref(), watch, &body)
            });
            Ok(served.await?)
        }
    });
    kube::Client::new(service, "default")
}

/// The slots each member holds, with the validity of the term holding them; every activation
/// is checked against the others' valid holdings.
#[derive(Default)]
struct Claims {
    held: Mutex<BTreeMap<String, (SlotSet, Option<Leadership>)>>,
    overlaps: Mutex<Vec<String>>,
}

impl Claims {
    fn activate(&self, me: &str, slots: &SlotSet, validity: &Leadership) {
        let mut held = self.held.lock().expect("claims");
        if validity.is_leader() {
            for (other, (theirs, their_validity)) in held.iter() {
                let shared = theirs.minus(&theirs.minus(slots));
                if other != me
                    && !shared.is_empty()
                    && their_validity.as_ref().is_some_and(Leadership::is_leader)
                {
                    self.overlaps.lock().expect("overlaps").push(format!(
                        "{me} activated {} slots that {other} holds",
                        shared.len()
                    ));
                }
            }
        }
        let entry = held.entry(me.to_string()).or_insert((SlotSet::EMPTY, None));
        entry.0 = entry.0.union(slots);
        entry.1 = Some(validity.clone());
    }

    fn release(&self, me: &str) {
        self.held.lock().expect("claims").remove(me);
    }

    /// Slots held under a valid term, per member.
    fn valid(&self) -> BTreeMap<String, usize> {
        self.held
            .lock()
            .expect("claims")
            .iter()
            .filter(|(_, (_, validity))| validity.as_ref().is_some_and(Leadership::is_leader))
            .map(|(member, (slots, _))| (member.clone(), slots.len()))
            .collect()
    }
}

/// One member's controller, reduced to the term rules: hold what a term activates, release it
/// when the term ends (the drain is instant here).
async fn controller(mut membership: Membership, claims: Arc<Claims>, stop: CancellationToken) {
    let me = membership.identity().to_string();
    loop {
        let view = tokio::select! {
            () = stop.cancelled() => return,
            view = membership.next_view() => view,
        };
        let term = tokio::select! {
            () = stop.cancelled() => return,
            term = membership.begin_term(view) => term,
        };
        claims.activate(&me, &term.active, &term.validity);
        let mut active = term.active;
        loop {
            let change = tokio::select! {
                () = stop.cancelled() => return,
                change = membership.next_change(&term, &active) => change,
            };
            match change {
                TermChange::Gained(gained) => {
                    claims.activate(&me, &gained, &term.validity);
                    active = active.union(&gained);
                }
                TermChange::Ended { .. } => {
                    claims.release(&me);
                    break;
                }
            }
        }
    }
}

struct Ring {
    api: Arc<FakeApi>,
    claims: Arc<Claims>,
    cuts: BTreeMap<&'static str, Arc<Cut>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

const MEMBERS: [&str; 3] = ["a", "b", "c"];

fn timings() -> LeaseTimings {
    LeaseTimings::new(
        Duration::from_secs(6),
        Duration::from_secs(4),
        Duration::from_secs(1),
    )
}

impl Ring {
    fn start() -> Self {
        let api = Arc::new(FakeApi::default());
        let claims = Arc::new(Claims::default());
        let stop = CancellationToken::new();
        let mut cuts = BTreeMap::new();
        let mut tasks = Vec::new();
        for member in MEMBERS {
            let cut = Arc::new(Cut::default());
            let config = ShardingConfig::new("ns", "ring", member).with_timings(timings());
            let ring =
                ShardRing::new(client(Arc::clone(&api), Arc::clone(&cut)), config).expect("valid");
            tasks.push(tokio::spawn(controller(
                ring.membership(),
                Arc::clone(&claims),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(ring.run(stop.clone())));
            cuts.insert(member, cut);
        }
        Self {
            api,
            claims,
            cuts,
            stop,
            tasks,
        }
    }

    /// Waits (virtual time) until the members holding valid slots are exactly `members`, each
    /// with its whole share under that membership.
    async fn until_settled(&self, members: &[&str], within: Duration) {
        let names: Vec<String> = members.iter().map(ToString::to_string).collect();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let valid = self.claims.valid();
            let settled = valid.len() == members.len()
                && names
                    .iter()
                    .all(|m| valid.get(m) == Some(&owned_by(&names, m).len()));
            if settled {
                assert_eq!(valid.values().sum::<usize>(), SLOTS);
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not settled on {members:?} within {within:?}: {valid:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn overlaps(&self) -> Vec<String> {
        self.claims.overlaps.lock().expect("overlaps").clone()
    }

    async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            task.await.expect("stops");
        }
        drop(self.api);
    }
}

/// Cuts `c` for `cut_for` (failing or stalling its requests), heals it, and checks that no slot
/// was ever active on two valid terms, that the others took c's share only when the cut
/// outlasted the lease, and that all three settle again.
async fn partition(stall: bool, cut_for: Duration, others_take_over: bool) {
    let ring = Ring::start();
    ring.until_settled(&MEMBERS, Duration::from_secs(30)).await;
    let cut = Arc::clone(&ring.cuts["c"]);
    if stall {
        cut.stalled.store(true, Ordering::SeqCst);
    } else {
        cut.failing.store(true, Ordering::SeqCst);
    }
    if others_take_over {
        ring.until_settled(&["a", "b"], cut_for).await;
    }
    tokio::time::sleep_until(tokio::time::Instant::now() + cut_for).await;
    if !others_take_over {
        let valid = ring.claims.valid();
        assert!(
            !valid.contains_key("c"),
            "c stopped acting at its renew deadline: {valid:?}"
        );
        assert_eq!(
            valid.values().sum::<usize>(),
            SLOTS - owned_by(&["a".into(), "b".into(), "c".into()], "c").len(),
            "nobody took c's share while its Lease had not expired"
        );
    }
    cut.heal();
    ring.until_settled(&MEMBERS, Duration::from_secs(60)).await;
    // Let the ring run on for a while: an overlap may start late.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let overlaps = ring.overlaps();
    ring.stop().await;
    assert!(overlaps.is_empty(), "{overlaps:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_member_back_from_a_partition_longer_than_the_lease_waits_for_the_others_to_let_go() {
    partition(false, Duration::from_secs(15), true).await;
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_stalled_requests_land_after_the_heal_waits_for_the_others_to_let_go() {
    partition(true, Duration::from_secs(15), true).await;
}

#[tokio::test(start_paused = true)]
async fn a_partition_past_the_renew_deadline_but_shorter_than_the_lease_moves_nothing() {
    partition(false, Duration::from_secs(5), false).await;
}

#[tokio::test(start_paused = true)]
async fn a_pinned_validity_never_returns_after_a_lapse() {
    let api = Arc::new(FakeApi::default());
    let cut = Arc::new(Cut::default());
    let ring = ShardRing::new(
        client(api, Arc::clone(&cut)),
        ShardingConfig::new("ns", "ring", "a").with_timings(timings()),
    )
    .expect("valid");
    let mut membership = ring.membership();
    let stop = CancellationToken::new();
    let task = tokio::spawn(ring.run(stop.clone()));
    let view = membership.next_view().await;
    let term = membership.begin_term(view).await;
    assert!(term.validity.is_leader());
    assert_eq!(term.active.len(), SLOTS, "alone in the ring");
    cut.failing.store(true, Ordering::SeqCst);
    while membership.is_member() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cut.heal();
    while !membership.is_member() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !term.validity.is_leader(),
        "the term's pinned validity ended with the lapse"
    );
    assert_eq!(
        membership.next_change(&term, &term.active).await,
        TermChange::Ended { lost: true }
    );
    stop.cancel();
    task.await.expect("stops");
}
