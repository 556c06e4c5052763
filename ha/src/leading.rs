//! [`RunInTerms::run_while_leading`](crate::RunInTerms::run_while_leading):
//! the controller acts only while this process holds the Lease of a
//! [`LeaderElector`](crate::election::LeaderElector).
//!
//! A term is one run of the controller while leading:
//!
//! - **Warm standby.** The shared informers keep listing and watching (and their caches stay
//!   current) while the process follows; only the controller's subscriptions come and go.
//! - **Gaining** starts a term: the kinds subscribe again, and a subscription first delivers every
//!   cached object as an Add, so the opinionated wrappers run `sync` (or `add`) for objects that
//!   changed while another replica led or none did.
//! - **Losing** (the renew deadline passed, by the monotonic clock) ends the term at once: no new
//!   handler call starts (every call checks [`Leadership::is_leader`] first, the term's
//!   [`CallGate`], so a process resumed
//!   from SIGSTOP starts nothing even before its tasks notice; the term's handle is
//!   [pinned](Leadership::pinned) to its period of leadership, so a leader that regains the Lease
//!   before its tasks noticed the loss still starts a new term), the handlers' contexts are
//!   cancelled, and calls still running are dropped without a grace period (the lease may be
//!   someone else's by now). Queued events and pending retries of the term are dropped; the next
//!   term lists everything again.
//! - **Stopping** (the `stop` token) ends the term with the configured grace period, as
//!   [`run`](InformerController::run) does.
//!
//! Each term is one [`InformerController::run_term`] of the core, with the period's
//! [`Leadership`] as its [`CallGate`] and a grace rule of zero after a loss.
//!
//! Leases give no fencing: a call that was already writing when leadership ended may still land.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kubeapp_operator::controller::Term;
use kubeapp_operator::gate::CallGate;
use kubeapp_operator::{CancellationToken, ControllerError, InformerController};

use crate::election::Leadership;

/// Runs `controller` in terms, one per period of leadership, until `stop`; see the
/// [module docs](self).
///
/// # Errors
///
/// [`ControllerError::NotRestartable`] when a kind was added with `add_informer`;
/// [`ControllerError::AlreadyRan`] when the controller runs or ran.
pub(crate) async fn run_while_leading(
    controller: &InformerController,
    stop: CancellationToken,
    mut leadership: Leadership,
) -> Result<(), ControllerError> {
    controller.check_restartable()?;
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = leadership.until_leading() => {}
        }
        tracing::info!("leading: the controller starts a term");
        // The term lives only as long as this period of leadership: a leader that lapsed
        // (e.g. paused past its deadline) and re-acquired before this task noticed starts a
        // new term, never continues the old one.
        let period = leadership.pinned();
        let term = stop.child_token();
        let lost = Arc::new(AtomicBool::new(false));
        let watch = tokio::spawn(end_on_loss(period.clone(), term.clone(), Arc::clone(&lost)));
        // Lost: no grace (another replica may lead already); stopped: the configured one.
        let grace = no_grace_once(Arc::clone(&lost));
        let gate: Arc<dyn CallGate> = Arc::new(period);
        let result = controller
            .run_term(term, Term::new().call_gate(gate).grace(grace))
            .await;
        watch.abort();
        result?;
        if stop.is_cancelled() {
            return Ok(());
        }
        tracing::warn!("lost the leadership: the controller's term ended");
    }
}

/// A term's grace rule: none once `lost` is set (the objects may be another replica's by now),
/// else the configured one.
pub(crate) fn no_grace_once(lost: Arc<AtomicBool>) -> impl Fn(Duration) -> Duration + Send + Sync {
    move |configured| {
        if lost.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            configured
        }
    }
}

/// Cancels `term` (marking `lost`) as soon as `leadership` ends.
async fn end_on_loss(mut leadership: Leadership, term: CancellationToken, lost: Arc<AtomicBool>) {
    loop {
        if !leadership.is_leader() {
            lost.store(true, Ordering::Release);
            term.cancel();
            return;
        }
        let until = leadership.valid_until();
        tokio::select! {
            () = leadership.changed() => {}
            () = sleep_until(until) => {}
            () = term.cancelled() => return,
        }
    }
}

async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}
