//! The elector over a fake Lease API (a tower service storing one Lease, honouring the
//! `resourceVersion` precondition, able to fail every request), on tokio's paused clock: the
//! step-down happens at the renew deadline to the millisecond, before the Lease could expire for
//! another candidate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;

/// The fake apiserver's state.
#[derive(Default)]
struct FakeLeases {
    lease: Mutex<Option<Value>>,
    /// When the Lease was last written (virtual time).
    written: Mutex<Option<Instant>>,
    cut: AtomicBool,
}

fn respond(status: u16, body: &Value) -> http::Response<kube::client::Body> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("a response")
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
}

fn client(fake: Arc<FakeLeases>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let fake = Arc::clone(&fake);
        async move {
            if fake.cut.load(Ordering::SeqCst) {
                return Err::<_, Box<dyn std::error::Error + Send + Sync>>("cut".into());
            }
            let method = request.method().clone();
            let single = request.uri().path().ends_with("/leases/lease");
            let query = request.uri().query().unwrap_or("").to_string();
            let body = request.into_body().collect().await?.to_bytes();
            let mut lease = fake.lease.lock().expect("lease");
            let answer = match (method.as_str(), single) {
                // The followers' watch of the Lease: not served here.
                ("GET", false) if query.contains("watch") => respond(404, &not_found()),
                ("GET", false) => respond(
                    200,
                    &json!({"apiVersion": "coordination.k8s.io/v1",
                    "kind": "LeaseList", "metadata": {"resourceVersion": "1"}, "items": []}),
                ),
                ("GET", true) => match &*lease {
                    Some(stored) => respond(200, stored),
                    None => respond(404, &not_found()),
                },
                ("POST", _) => {
                    let mut created: Value = serde_json::from_slice(&body)?;
                    created["metadata"]["resourceVersion"] = "1".into();
                    *lease = Some(created.clone());
                    *fake.written.lock().expect("written") = Some(Instant::now());
                    respond(201, &created)
                }
                ("PUT", true) => {
                    let mut replaced: Value = serde_json::from_slice(&body)?;
                    let current = lease
                        .as_ref()
                        .map(|l| l["metadata"]["resourceVersion"].clone());
                    if current != Some(replaced["metadata"]["resourceVersion"].clone()) {
                        respond(
                            409,
                            &json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "reason": "Conflict", "code": 409}),
                        )
                    } else {
                        let version: u64 = current
                            .and_then(|v| v.as_str().and_then(|v| v.parse().ok()))
                            .unwrap_or(0);
                        replaced["metadata"]["resourceVersion"] = (version + 1).to_string().into();
                        *lease = Some(replaced.clone());
                        *fake.written.lock().expect("written") = Some(Instant::now());
                        respond(200, &replaced)
                    }
                }
                _ => respond(404, &not_found()),
            };
            Ok(answer)
        }
    });
    kube::Client::new(service, "default")
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_stops_leading_at_its_renew_deadline_before_the_lease_expires() {
    let fake = Arc::new(FakeLeases::default());
    let config = ElectionConfig::new("ns", "lease", "me");
    let elector = LeaderElector::new(client(Arc::clone(&fake)), config).expect("valid");
    let mut leadership = elector.leadership();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    leadership.until_leading().await;
    // Renewals keep it leading well past one renew deadline.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(leadership.is_leader(), "renewed every 2 s");

    fake.cut.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    let last_write = fake.written.lock().expect("written").expect("renewed");
    let until = leadership.valid_until().expect("leading");
    while leadership.is_leader() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let stepped_down = Instant::now();
    // It leads until exactly its deadline: the last renew it sent plus the 10 s renew deadline.
    assert!(stepped_down >= until && stepped_down - until <= Duration::from_millis(1));
    assert!(
        stepped_down - cut <= Duration::from_secs(10),
        "within the renew deadline of the cut"
    );
    assert!(
        until <= last_write + Duration::from_secs(10),
        "the deadline counts from when the renew was sent, not later"
    );
    // Another candidate may take over only 15 s after it saw the last write: 5 s of margin.
    assert!(last_write + Duration::from_secs(15) - stepped_down >= Duration::from_secs(5));
    // The elector's own task notices too (the change notification), by the next retry at most.
    tokio::time::timeout(Duration::from_secs(2), leadership.changed())
        .await
        .ok();
    stop.cancel();
    task.await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_given_back_with_no_holder() {
    let fake = Arc::new(FakeLeases::default());
    let elector = LeaderElector::new(
        client(Arc::clone(&fake)),
        ElectionConfig::new("ns", "lease", "me"),
    )
    .expect("valid");
    let mut leadership = elector.leadership();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    leadership.until_leading().await;
    stop.cancel();
    task.await.expect("stops");
    assert!(!leadership.is_leader());
    let lease = fake.lease.lock().expect("lease").clone().expect("a Lease");
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
}

/// Writes the fake's Lease as `holder` would (a new `resourceVersion`), as another candidate
/// renewing it.
fn write_as(fake: &FakeLeases, holder: &str) {
    let mut lease = fake.lease.lock().expect("lease");
    let stored = lease.as_mut().expect("a Lease");
    let version: u64 = stored["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    stored["metadata"]["resourceVersion"] = (version + 1).to_string().into();
    stored["spec"]["holderIdentity"] = holder.into();
    *fake.written.lock().expect("written") = Some(Instant::now());
}

#[tokio::test(start_paused = true)]
async fn a_leader_back_from_a_partition_reads_the_lease_again_and_does_not_lead_while_another_holds_it()
 {
    let fake = Arc::new(FakeLeases::default());
    let elector = LeaderElector::new(
        client(Arc::clone(&fake)),
        ElectionConfig::new("ns", "lease", "me"),
    )
    .expect("valid");
    let mut leadership = elector.leadership();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    leadership.until_leading().await;
    let term = leadership.pinned();

    // Cut for longer than the lease; meanwhile another candidate takes the Lease (after it
    // expired for it) and keeps renewing it every 2 s.
    fake.cut.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(!leadership.is_leader(), "stepped down during the cut");
    write_as(&fake, "other");
    let renewing = CancellationToken::new();
    let other = tokio::spawn({
        let (fake, renewing) = (Arc::clone(&fake), renewing.clone());
        async move {
            while !renewing.is_cancelled() {
                tokio::time::sleep(Duration::from_secs(2)).await;
                write_as(&fake, "other");
            }
        }
    });
    fake.cut.store(false, Ordering::SeqCst);
    // Back on the network: for a minute of retries it sees the other holder's renewals and
    // never leads, and never takes the Lease from it.
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !leadership.is_leader(),
            "led while another candidate held the Lease"
        );
        let holder =
            fake.lease.lock().expect("lease").as_ref().expect("a Lease")["spec"]["holderIdentity"]
                .clone();
        assert_eq!(holder, "other", "overwrote the other holder's Lease");
    }
    // The other candidate stops renewing: the Lease is taken once it expired by our clock (15 s
    // after the last renew we saw), not before.
    renewing.cancel();
    other.await.expect("stops");
    let last = fake.written.lock().expect("written").expect("written");
    leadership.until_leading().await;
    assert!(Instant::now() >= last + Duration::from_secs(15));
    // A handle pinned to the earlier period stays false: a term of that period never resumes.
    assert!(!term.is_leader());
    assert!(leadership.pinned().is_leader());
    stop.cancel();
    task.await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn a_handle_pinned_to_a_period_of_leadership_stays_false_after_the_lease_is_regained() {
    let fake = Arc::new(FakeLeases::default());
    let elector = LeaderElector::new(
        client(Arc::clone(&fake)),
        ElectionConfig::new("ns", "lease", "me"),
    )
    .expect("valid");
    let mut leadership = elector.leadership();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    leadership.until_leading().await;
    let first = leadership.pinned();
    assert!(first.is_leader());
    // Renewals keep the same period.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        first.is_leader(),
        "renewed without a lapse: the same period"
    );
    // A cut past the renew deadline (but not the lease: nobody else is there anyway).
    fake.cut.store(true, Ordering::SeqCst);
    while leadership.is_leader() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fake.cut.store(false, Ordering::SeqCst);
    leadership.until_leading().await;
    assert!(!first.is_leader(), "the first period ended with the lapse");
    assert_eq!(first.valid_until(), None);
    assert!(leadership.pinned().is_leader(), "a new period");
    stop.cancel();
    task.await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn a_renew_that_starts_a_new_period_wakes_a_waiting_handle_though_validity_never_reported_false()
 {
    // A process paused past its renew deadline: when it runs again, its renew may succeed before
    // anything noticed the lapse, so "valid" is published twice in a row. The second is a new
    // period (the first ended unseen): a handle waiting to lead again must be woken by it, or a
    // replica whose term was lost waits until something else changes.
    let validity = Arc::new(Mutex::new(Validity::default()));
    let (changes, receiver) = tokio::sync::watch::channel(false);
    let deadline = Duration::from_secs(4);
    publish_validity(&validity, &changes, Some(Instant::now() + deadline));
    let mut handle = Leadership::from_parts(Arc::clone(&validity), receiver);
    let period = handle.pinned();
    assert!(handle.is_leader());
    tokio::time::timeout(Duration::from_millis(1), handle.changed())
        .await
        .expect("the first period was reported");

    // Paused for 5 s: the period ended by the clock, nobody published it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!handle.is_leader() && !period.is_leader());
    let waiting = tokio::spawn(async move {
        handle.changed().await;
        handle
    });
    tokio::task::yield_now().await;
    publish_validity(&validity, &changes, Some(Instant::now() + deadline));
    let handle = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the new period wakes the waiting handle")
        .expect("task");
    assert!(handle.is_leader());
    assert!(!period.is_leader(), "the old period stays over");

    // A renew within the period is not a change (renewals would otherwise wake every waiter).
    let mut handle = handle;
    publish_validity(&validity, &changes, Some(Instant::now() + deadline));
    assert!(
        tokio::time::timeout(Duration::from_secs(1), handle.changed())
            .await
            .is_err(),
        "a renew in the same period wakes nobody"
    );
}
