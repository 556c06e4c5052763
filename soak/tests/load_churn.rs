//! The load-and-churn end-to-end test (kubeapp issues #12 and #13), sized for CI: 2,000 `Churn` objects
//! created 10 at a time against a real kube-apiserver + etcd; while the creates still run, every
//! third object gets two spec updates and every fifth is deleted. The operator's handlers take
//! 30 ms per add (10 workers), so updates and deletes arrive while adds are queued or running.
//! Each test then waits (up to two minutes) until the newest spec of every live object reached a
//! handler and every delete was handled, and fails with the list of what was lost. The operator
//! registers the kind through a typed `KindHandle`; a second controller shares its informer (one
//! watch) with a plain reconciler, which must see the same.
//!
//! `scripts/soak` runs the same scenario at any size, with apiserver restarts and forced 409s.

use std::sync::Once;

use kubeapp_soak::{LossKind, ScenarioSettings, Wrapper, run_once};
use tokio::sync::Semaphore;

/// One 2,000-object run at a time: two at once on a 2-core machine only slow each other down.
static ONE_AT_A_TIME: Semaphore = Semaphore::const_new(1);

fn logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

async fn load_and_churn(wrapper: Wrapper) {
    logs();
    let _slot = ONE_AT_A_TIME.acquire().await.expect("never closed");
    let mut settings = ScenarioSettings::default();
    settings.operator.wrapper = wrapper;
    let outcome = run_once(&settings)
        .await
        .unwrap_or_else(|e| panic!("{wrapper}: the soak could not run: {e}"));
    let report = &outcome.report;
    eprintln!(
        "{wrapper}: {} created, {} updates, {} deleted in {:.1?}; checked in {:.1?}\n{}",
        outcome.ledger.uids.len(),
        outcome.ledger.updates,
        outcome.ledger.deleted.len(),
        outcome.ledger.total_time,
        outcome.converge_time,
        report.display(50)
    );
    // The harness did what the scenario says (2,000 objects, 667 x 2 updates, 400 deletes).
    assert!(
        report.of(LossKind::Harness).is_empty(),
        "{}",
        report.display(50)
    );
    assert_eq!(outcome.ledger.uids.len(), 2000);
    assert_eq!(outcome.ledger.updates, 667 * 2);
    assert_eq!(outcome.ledger.deleted.len(), 400);
    assert!(
        report.is_clean(),
        "{wrapper}: events lost under load and churn:\n{}",
        report.display(50)
    );
    // A second controller shares the informer (one watch) with a plain reconciler: every
    // event reaches it too.
    let shadow = &outcome.shadow_report;
    eprintln!("shared informer, plain reconciler: {}", shadow.display(50));
    assert!(
        shadow.is_clean(),
        "{wrapper}: the second controller on the shared informer lost events:\n{}",
        shadow.display(50)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opinionated_watcher_sees_the_newest_spec_and_every_delete_under_load_and_churn() {
    load_and_churn(Wrapper::Watcher).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opinionated_reconciler_sees_the_newest_spec_and_one_deleted_per_uid_under_load_and_churn()
{
    load_and_churn(Wrapper::Reconciler).await;
}
