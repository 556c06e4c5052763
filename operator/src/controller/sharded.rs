//! [`InformerController::run_sharded`]: the controller acts only on its replica's share of the
//! objects of a [shard ring](crate::sharding).
//!
//! A term is one run of the controller under one acknowledged membership:
//!
//! - **Starting** a term: the replica asks its kinds' informers to cache its owned slots (the
//!   server-side selector, where the apiserver honours it: they list again and forget what
//!   left the range), acknowledges the membership it sees (on its Lease), reads
//!   the ring again, and activates the slots no other live member still holds under its own
//!   acknowledgement. The kinds subscribe; their cached objects in active slots arrive as Adds.
//! - **During** the term, as previous owners acknowledge (or their Leases expire), more of the
//!   replica's slots become active; their cached objects are delivered as Adds at that moment.
//!   Events of objects outside the active slots are dropped (forgotten, never turned into
//!   deletes).
//! - **A membership change** ends the term like a stop: no new handler call, contexts cancelled,
//!   in-flight calls drained up to the grace period, queued events and retries dropped. Only then
//!   does the next term acknowledge the new membership, so a slot's next owner starts after the
//!   previous one stopped.
//! - **Losing the own Lease** (no renew within the renew deadline, by the monotonic clock) ends
//!   the term at once with no grace, as losing leadership does; every handler call checks it first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::subscription::kind_subscriber;
use super::{ControllerError, InformerController, TermGates};
use crate::sharding::Membership;
use crate::sharding::assignment::{SlotSet, owned_by, slot_of_uid};
use crate::sharding::gate::ShardGate;
use crate::sharding::term::{Term, TermChange};

impl InformerController {
    /// Runs the controller on this replica's share of a shard ring until `stop`; see the
    /// [module docs](self). Run the ring ([`ShardRing::run`](crate::sharding::ShardRing::run))
    /// alongside and stop it after this returns.
    ///
    /// # Errors
    ///
    /// [`ControllerError::NotRestartable`] when a kind was added with `add_informer`;
    /// [`ControllerError::AlreadyRan`] when the controller runs or ran.
    pub async fn run_sharded(
        &self,
        stop: CancellationToken,
        mut membership: Membership,
    ) -> Result<(), ControllerError> {
        self.check_restartable()?;
        let me = membership.identity().to_string();
        let changed_at = Arc::new(Mutex::new(Instant::now()));
        if let Some(metrics) = membership.metrics() {
            for runtime in self.runtimes() {
                let Some(fanout) = runtime.fanout.get() else {
                    continue;
                };
                metrics
                    .cached_objects
                    .track(&fanout.resource.kind, &fanout.cache);
                if let Some(scope) = &fanout.scope {
                    scope.report_to(metrics.server_side_selector.clone());
                }
            }
        }
        loop {
            // A member, and listed as one (read while valid), before acknowledging anything.
            let view = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                view = membership.next_view() => view,
            };
            if let Some(metrics) = membership.metrics() {
                metrics.handoffs_started.inc();
            }
            // Owned, not only active: objects of slots still held by a previous owner must be
            // cached when they are handed over. Asked for before acknowledging, so the re-list
            // overlaps the handoff.
            let owned = owned_by(&view, &me);
            self.cache_only(owned);
            let started = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                term = membership.begin_term(view) => term,
            };
            let since = *changed_at.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(metrics) = membership.metrics() {
                metrics
                    .acknowledge_seconds
                    .observe(since.elapsed().as_secs_f64());
                metrics.owned_width.set(owned.fraction());
            }
            let gate = Arc::new(ShardGate::default());
            gate.activate(&started.active);
            tracing::info!(members = ?started.view, active = started.active.len(), slots = ?started.active, "sharding: a term starts");
            let term = stop.child_token();
            let lost = Arc::new(AtomicBool::new(false));
            let gates = TermGates {
                leadership: Some(started.validity.clone()),
                shard: Some(Arc::clone(&gate)),
            };
            let follow = tokio::spawn(follow_ring(
                self.clone(),
                membership.clone(),
                started,
                gate,
                term.clone(),
                Arc::clone(&lost),
                Arc::clone(&changed_at),
            ));
            let configured = self.shared.config.shutdown_grace;
            let lost_now = Arc::clone(&lost);
            // Lost the own Lease: no grace (its slots may be someone else's by now); a
            // membership change or a stop: the configured one.
            let grace = Arc::new(move || {
                if lost_now.load(Ordering::Acquire) {
                    Duration::ZERO
                } else {
                    configured
                }
            });
            let result = self.run_term(term, gates, Some(grace), true).await;
            follow.abort();
            // Drained (or dropped, when lost): from here the next owners may take its slots.
            tracing::info!(
                lost = lost.load(Ordering::Acquire),
                stopped = stop.is_cancelled(),
                "sharding: the term is over"
            );
            result?;
            if stop.is_cancelled() {
                return Ok(());
            }
        }
    }

    /// Asks the informers of the term's kinds to cache only `owned` slots: where the apiserver
    /// honours the shard selector, each lists and watches again with it (see
    /// [`sharding`](crate::sharding#server-side-selection)).
    fn cache_only(&self, owned: SlotSet) {
        for runtime in self.runtimes() {
            if let Some(scope) = runtime
                .fanout
                .get()
                .and_then(|fanout| fanout.scope.as_ref())
            {
                scope.want(owned);
            }
        }
    }

    /// Delivers the cached objects of `gained` slots as Adds to every kind of the term.
    async fn deliver_gained(&self, gained: &SlotSet) {
        for runtime in self.runtimes() {
            let (Some(fanout), Some(run)) = (runtime.fanout.get(), runtime.current_run()) else {
                continue;
            };
            let subscriber = kind_subscriber(&runtime, &run);
            fanout
                .deliver_cached(&subscriber, |object| {
                    gained.contains(slot_of_uid(object.metadata().uid.as_deref().unwrap_or("")))
                })
                .await;
        }
    }

    /// Cached objects of the term's kinds in `active` slots.
    fn objects_in(&self, active: &SlotSet) -> usize {
        self.runtimes()
            .iter()
            .filter_map(|runtime| runtime.fanout.get())
            .map(|fanout| {
                fanout
                    .cache
                    .snapshot()
                    .iter()
                    .filter(|o| {
                        active.contains(slot_of_uid(o.metadata().uid.as_deref().unwrap_or("")))
                    })
                    .count()
            })
            .sum()
    }
}

/// Grows the term's active slots as previous owners hand over; ends the term on a membership
/// change (recording when it was seen) or, marking `lost`, when the own Lease lapses.
async fn follow_ring(
    controller: InformerController,
    mut membership: Membership,
    term_state: Term,
    gate: Arc<ShardGate>,
    term: CancellationToken,
    lost: Arc<AtomicBool>,
    changed_at: Arc<Mutex<Instant>>,
) {
    let owned = owned_by(&term_state.view, membership.identity());
    let mut finished = false;
    loop {
        let active = gate.active();
        if let Some(metrics) = membership.metrics() {
            metrics.active_width.set(active.fraction());
            let objects = controller.objects_in(&active);
            metrics
                .objects
                .set(i64::try_from(objects).unwrap_or(i64::MAX));
            if !finished && owned.is_subset(&active) {
                finished = true;
                metrics.handoffs_finished.inc();
            }
        }
        let change = tokio::select! {
            change = membership.next_change(&term_state, &active) => change,
            () = term.cancelled() => return,
        };
        match change {
            TermChange::Gained(gained) => {
                gate.activate(&gained);
                tracing::info!(
                    gained = gained.len(),
                    active = gate.active().len(),
                    slots = ?gained,
                    "sharding: slots handed over"
                );
                controller.deliver_gained(&gained).await;
            }
            TermChange::Ended { lost: lapsed } => {
                if lapsed {
                    lost.store(true, Ordering::Release);
                }
                *changed_at.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
                if lapsed {
                    tracing::warn!("sharding: own Lease lapsed; the term stops at once");
                } else {
                    tracing::info!("sharding: the membership changed; the term drains");
                }
                if let Some(metrics) = membership.metrics() {
                    metrics.active_width.set(0.0);
                }
                term.cancel();
                return;
            }
        }
    }
}
