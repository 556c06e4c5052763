//! Fault injectors that run next to the workload until it is done.
//!
//! - [`poke_objects`], the conflict writer: merge-patches the [`POKE_ANNOTATION`] of objects at a
//!   fixed rate. Each write bumps the object's `resourceVersion` without changing its generation,
//!   so a wrapper's finalizer patch (a JSON patch with a `resourceVersion` precondition) that read
//!   the object before the write meets 409 Conflict. Half of the writes go to the objects created
//!   last (the ones the operator is adding right now, where finalizer patches happen), half to any
//!   object created so far.
//! - [`restart_apiserver`]: kills kube-apiserver (SIGKILL) every interval and starts it again
//!   (etcd keeps the data); watches break, requests fail until it is back.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kubeapp::operator::CancellationToken;
use kubeapp::sdk::testenv::TestEnv;

use crate::kind::{Churn, POKE_ANNOTATION};
use crate::workload::WorkloadSettings;

/// The objects created last, among which half of the pokes fall.
const RECENT_WINDOW: usize = 50;

/// What the fault injectors did.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Annotation writes that succeeded.
    pub pokes: AtomicU64,
    /// Apiserver restarts completed.
    pub restarts: AtomicU64,
}

/// Pokes objects `writes_per_second` times a second until `stop`; `created` is how many objects
/// the workload has created so far (indices below it exist, unless deleted). Errors (deleted
/// objects, the apiserver restarting) are ignored: the pokes only exist to cause conflicts.
pub async fn poke_objects(
    api: Api<Churn>,
    workload: WorkloadSettings,
    created: &AtomicUsize,
    writes_per_second: u32,
    counts: &FaultCounts,
    stop: CancellationToken,
    seed: u64,
) {
    if writes_per_second == 0 {
        return;
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / writes_per_second);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut serial: u64 = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let upto = created.load(Ordering::Relaxed);
        if upto == 0 {
            continue;
        }
        let index = if rng.bool() {
            rng.usize(upto.saturating_sub(RECENT_WINDOW)..upto)
        } else {
            rng.usize(0..upto)
        };
        serial += 1;
        let patch = serde_json::json!({
            "metadata": { "annotations": { POKE_ANNOTATION: serial.to_string() } }
        });
        let name = workload.name(index);
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                counts.pokes.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => tracing::trace!(%name, %error, "poke failed"),
        }
    }
}

/// Restarts kube-apiserver every `every` until `stop` (a restart in progress is completed, so
/// the apiserver runs when this returns).
///
/// # Errors
///
/// The apiserver did not come back.
pub async fn restart_apiserver(
    env: &TestEnv,
    every: Duration,
    counts: &FaultCounts,
    stop: CancellationToken,
) -> Result<(), kubeapp::sdk::testenv::TestEnvError> {
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
        tracing::info!("soak: restarting kube-apiserver");
        env.stop_apiserver();
        env.start_apiserver().await?;
        counts.restarts.fetch_add(1, Ordering::Relaxed);
    }
}
