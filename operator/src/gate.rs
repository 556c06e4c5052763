//! The gates a controller term asks: whether a handler call may start ([`CallGate`]) and which
//! events the term handles at all ([`EventFilter`]).
//!
//! The controller owns these traits and never knows what is behind them: the `kubeapp-ha`
//! crate implements them with leader election (a call starts only while this process holds the
//! Lease, by the monotonic clock) and sharding (an event reaches the lanes only when its object
//! is in the replica's active share). A term is run with them through
//! [`InformerController::run_term`](crate::InformerController::run_term).
//!
//! Both are on the hot path: [`CallGate::may_call`] is asked before every handler call and
//! [`EventFilter::admits`] for every event, so an implementation reads atomics (or a lock-free
//! snapshot) and never allocates or waits.

use crate::object::SharedObject;

/// Asked before every handler call of a term: whether it may start (e.g. this process still
/// leads). A `false` starts no call; the term's owner ends the term soon after.
pub trait CallGate: Send + Sync + 'static {
    /// Whether the next handler call may start now. Must not block or allocate.
    fn may_call(&self) -> bool;
}

/// Which events a term admits, asked for every event (and every cached object delivered at a
/// subscription) before it reaches the kind's lanes. An object not admitted is dropped for this
/// term: not handled, never turned into a delete.
pub trait EventFilter: Send + Sync + 'static {
    /// Whether the term handles events of `object`. Must not block or allocate.
    fn admits(&self, object: &SharedObject) -> bool;
}
