//! A replica's terms on the ring: from the membership it sees to the slots it may act on, and
//! when that must end. The controller (`controller/sharded.rs`) runs its handlers under these
//! decisions; the rules live here so they can be checked without a controller (see the tests).
//!
//! A term:
//!
//! 1. [`next_view`](Membership::next_view): wait until this replica's own Lease is valid and a
//!    read of the ring made while it was lists it; that membership is the term's view.
//! 2. [`begin_term`](Membership::begin_term): pin the term to the current period of validity
//!    (see [`Leadership::pinned`]), acknowledge the view on the own Lease, and take as active the
//!    slots no other live member holds under *its* acknowledgement, judged from the first read of
//!    the ring that started after this very acknowledgement was written.
//! 3. [`next_change`](Membership::next_change): more slots become active as previous owners
//!    acknowledge or expire; the term ends when the membership changes, and is lost when the
//!    own Lease lapses (the pinned period ends: a replica back from a partition or a pause
//!    never resumes an old term, whatever it still remembers of the ring).
//!
//! Why a lapse must end everything: while the own Lease was not renewed, the others may have
//! seen it expire, acknowledged a membership without this replica and taken its slots. Only a
//! read of the ring made after a fresh acknowledgement shows that; values remembered from
//! before the lapse (the others' acknowledgements, or an acknowledgement of our own that happens
//! to equal the one we are about to write) do not.

use crate::election::Leadership;

use super::Membership;
use super::assignment::SlotSet;
use super::handoff::active_slots;

/// One term: the membership it acts under, its period of validity and the slots it may act on
/// when it starts.
#[derive(Clone, Debug)]
pub(crate) struct Term {
    /// The membership acknowledged for the term.
    pub(crate) view: Vec<String>,
    /// The own Lease's validity, pinned to the period in which the term started.
    pub(crate) validity: Leadership,
    /// The slots active at once.
    pub(crate) active: SlotSet,
}

/// What changed in a running term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TermChange {
    /// These slots became active (previous owners acknowledged, or their Leases expired).
    Gained(SlotSet),
    /// The term is over: the membership changed (`lost: false`: drain, then start the next), or
    /// the own Lease lapsed (`lost: true`: stop at once, its slots may be someone else's).
    Ended {
        /// Whether the own Lease lapsed.
        lost: bool,
    },
}

impl Membership {
    /// Waits until this replica is a member listed in a read of the ring made while its own Lease
    /// was valid, and returns that membership.
    pub(crate) async fn next_view(&mut self) -> Vec<String> {
        loop {
            if self.is_member() {
                let state = self.state();
                if state.members.iter().any(|m| m == self.identity()) {
                    return state.members;
                }
            }
            self.changed().await;
        }
    }

    /// Starts a term under `view`; see the [module docs](self).
    pub(crate) async fn begin_term(&mut self, view: Vec<String>) -> Term {
        let validity = self.validity().pinned();
        let read = self.acknowledge(view.clone()).await;
        // A lapse since the pin makes `validity` false for ever: the term is then lost at its
        // first change, and no call passes its gate meanwhile.
        let active = active_slots(self.identity(), &view, &read.others);
        Term {
            view,
            validity,
            active,
        }
    }

    /// Waits for the next change of `term`, whose slots `active` are active now.
    pub(crate) async fn next_change(&mut self, term: &Term, active: &SlotSet) -> TermChange {
        let validity = &term.validity;
        loop {
            if !validity.is_leader() {
                return TermChange::Ended { lost: true };
            }
            let state = self.state();
            if state.members != term.view {
                return TermChange::Ended { lost: false };
            }
            let gained = active_slots(self.identity(), &term.view, &state.others).minus(active);
            if !gained.is_empty() {
                return TermChange::Gained(gained);
            }
            let until = validity.valid_until();
            tokio::select! {
                () = self.changed() => {}
                () = sleep_until(until) => {}
            }
        }
    }
}

/// Sleeps until `until`, or for ever when there is none.
async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
