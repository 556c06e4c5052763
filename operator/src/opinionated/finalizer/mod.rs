//! Finalizer names, the finalizer list arithmetic, and the patch that changes the list.
//!
//! # Names
//!
//! [`FinalizerNames`] holds the wrapper's finalizer and its in-progress finalizer. The defaults
//! are `operator.{version}.{kind}.{group}` and `wip.{version}.{kind}.{group}` (for the core group,
//! whose name is empty, the trailing `.{group}` is left out, because a finalizer must not end in a
//! dot). Both can be overridden; each must be 1 to 63 characters long, and the two must differ.
//!
//! # Patches
//!
//! A change of the list is an RFC 6902 JSON patch of two operations: `replace
//! /metadata/resourceVersion` with the resourceVersion the list was computed from, and `add
//! /metadata/finalizers` with the whole new list. The apiserver applies the patch to the current
//! object and then checks the resulting resourceVersion like an update does: when the object
//! changed in between, the versions differ and the answer is HTTP 409 Conflict, so a list computed
//! from an old copy can never overwrite a newer one. (A `test` op on the resourceVersion would
//! express the same precondition, but kube-apiserver 1.36 answers a failed `test` with HTTP 422
//! and a generic message that cannot be told apart from a truly invalid patch, such as adding a
//! finalizer to an object being deleted; the `replace` form gives a clean 409.)
//!
//! The first attempt computes the new list from the event's copy of the object, which saves a
//! read when nothing else wrote meanwhile; a retry of a handler call (whose copy is known to be
//! old), and the opinionated reconciler's patch after a successful downstream call (which has most
//! likely written the object), start from a fresh read. On a conflict the object is read again,
//! the list is computed again from the fresh copy, and the patch is retried: at once when the
//! conflict was on the caller's copy (it was merely old), after a short backoff
//! ([`ConflictRetry`]) when it was on a fresh read (a race with another writer); the wait ends
//! early when the handler context is cancelled. Other
//! controllers' finalizers are never removed or reordered: the new list is the current list
//! minus ours, plus ours at the end.
//!
//! A patch never touches another incarnation of the object: when the fresh read finds a
//! different UID under the name (or nothing), the patch reports the object gone and changes
//! nothing. A finalizer is never added to an object that is being deleted (the apiserver forbids
//! it); a change that would add one changes nothing at all, so an in-progress finalizer is never
//! swapped away from an object whose deletion it holds.

mod list;
mod metrics;
mod names;
mod patch;
#[cfg(test)]
mod tests;

pub(crate) use list::*;
pub use metrics::*;
pub use names::*;
pub(crate) use patch::*;
pub use patch::{ConflictRetry, FinalizerPatchError};
