//! [`RunInTerms::run_sharded`](crate::RunInTerms::run_sharded): the controller
//! acts only on its replica's share of the objects of a [shard ring](crate::sharding).
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
//!
//! Each term is one [`InformerController::run_term`] of the core: the own Lease's validity is
//! its [`CallGate`](kubeapp_operator::gate::CallGate), the active slots (`ShardGate`) its
//! [`EventFilter`](kubeapp_operator::gate::EventFilter). The owned slots reach the informers
//! through their `ShardScope` (when they were made with
//! [`shard_scopes`](crate::sharding::shard_scopes)).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kubeapp_operator::controller::{SharedKind, Term};
use kubeapp_operator::object::SharedObject;
use kubeapp_operator::{CancellationToken, ControllerError, InformerController};
use tokio::time::Instant;

use crate::leading::no_grace_once;
use crate::sharding::Membership;
use crate::sharding::assignment::{SlotSet, owned_by, slot_of_uid};
use crate::sharding::gate::ShardGate;
use crate::sharding::server_side::ShardScope;
use crate::sharding::term::{Term as ShardTerm, TermChange};

/// Runs `controller` on this replica's share of a shard ring until `stop`; see the
/// [module docs](self). Run the ring ([`ShardRing::run`](crate::sharding::ShardRing::run))
/// alongside and stop it after this returns.
///
/// # Errors
///
/// [`ControllerError::NotRestartable`] when a kind was added with `add_informer`;
/// [`ControllerError::AlreadyRan`] when the controller runs or ran.
pub(crate) async fn run_sharded(
    controller: &InformerController,
    stop: CancellationToken,
    mut membership: Membership,
) -> Result<(), ControllerError> {
    controller.check_restartable()?;
    let me = membership.identity().to_string();
    let changed_at = Arc::new(Mutex::new(Instant::now()));
    let kinds = controller.shared_kinds();
    let scopes = shard_scopes_of(&kinds);
    if scopes.len() < kinds.len() {
        tracing::info!(
            kinds = kinds.len(),
            shard_scoped = scopes.len(),
            "sharding: some informers were made without shard scopes (Informers::list_in(shard_scopes())); they cache every object and this replica filters them"
        );
    }
    if let Some(metrics) = membership.metrics() {
        for kind in &kinds {
            metrics.cached_objects.track(&kind.cache);
        }
        for scope in &scopes {
            scope.report_to(metrics.server_side_selector.clone());
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
        for scope in shard_scopes_of(&controller.shared_kinds()) {
            scope.want(owned);
        }
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
        // Lost the own Lease: no grace (its slots may be someone else's by now); a
        // membership change or a stop: the configured one.
        let grace = no_grace_once(Arc::clone(&lost));
        let gates = Term::new()
            .call_gate(Arc::new(started.validity.clone()))
            .event_filter(Arc::clone(&gate) as _)
            .grace(grace);
        let follow = tokio::spawn(follow_ring(
            controller.clone(),
            membership.clone(),
            started,
            gate,
            term.clone(),
            Arc::clone(&lost),
            Arc::clone(&changed_at),
        ));
        let result = controller.run_term(term, gates).await;
        follow.abort();
        membership.set_active_slots(SlotSet::EMPTY);
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

/// The shard scopes of the controller's kinds: the informers the term asks to cache only its
/// owned slots (see [`sharding`](crate::sharding#server-side-selection)). An informer made
/// without [`shard_scopes`](crate::sharding::shard_scopes) has another scope: it caches every
/// object, and the term's filter alone shards it.
fn shard_scopes_of(kinds: &[SharedKind]) -> Vec<Arc<ShardScope>> {
    kinds
        .iter()
        .filter_map(|kind| {
            let scope: Arc<dyn std::any::Any + Send + Sync> = kind.scope.clone()?;
            scope.downcast::<ShardScope>().ok()
        })
        .collect()
}

/// Whether `object` is in `slots`.
fn in_slots(slots: &SlotSet, object: &SharedObject) -> bool {
    slots.contains(slot_of_uid(object.metadata().uid.as_deref().unwrap_or("")))
}

/// Grows the term's active slots as previous owners hand over; ends the term on a membership
/// change (recording when it was seen) or, marking `lost`, when the own Lease lapses.
async fn follow_ring(
    controller: InformerController,
    mut membership: Membership,
    term_state: ShardTerm,
    gate: Arc<ShardGate>,
    term: CancellationToken,
    lost: Arc<AtomicBool>,
    changed_at: Arc<Mutex<Instant>>,
) {
    let owned = owned_by(&term_state.view, membership.identity());
    let mut finished = false;
    loop {
        let active = gate.active();
        membership.set_active_slots(active);
        if let Some(metrics) = membership.metrics() {
            metrics.active_width.set(active.fraction());
            let objects: usize = controller
                .shared_kinds()
                .iter()
                .map(|kind| kind.cache.count(|object| in_slots(&active, object)))
                .sum();
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
                controller
                    .deliver_cached(&|object| in_slots(&gained, object))
                    .await;
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
                membership.set_active_slots(SlotSet::EMPTY);
                if let Some(metrics) = membership.metrics() {
                    metrics.active_width.set(0.0);
                }
                term.cancel();
                return;
            }
        }
    }
}
