//! Finalizer names, the finalizer list arithmetic, and the patch that changes the list.
//!
//! # Names
//!
//! [`FinalizerNames`] holds the wrapper's finalizer and its in-progress finalizer. Every name is
//! a qualified name `prefix/name` ([`validate_finalizer`]): kube-apiserver refuses anything else on
//! core kinds with HTTP 422 and warns about it on custom kinds. The defaults, the one scheme used
//! everywhere:
//!
//! | | name |
//! |---|---|
//! | finalizer | `{prefix}/{app}-{plural}-{version}` |
//! | in-progress finalizer | `{prefix}/{app}-{plural}-{version}-wip` |
//!
//! - `{prefix}` is the kind's API group (`example.dev`, `apps`); the core group, which has no name,
//!   stands as [`CORE_GROUP_FINALIZER_PREFIX`] (`core.kubeapp.dev`).
//! - `{app}` is the app's name ([`OpinionatedOptions::app_name`](super::OpinionatedOptions::app_name),
//!   set by the simple App) or [`DEFAULT_FINALIZER_APP`] (`operator`) for plain wrappers. So a
//!   ConfigMap wrapper's defaults are `core.kubeapp.dev/operator-configmaps-v1` and
//!   `core.kubeapp.dev/operator-configmaps-v1-wip`; the simple App `shop` on
//!   `widgets.example.dev/v1` uses `example.dev/shop-widgets-v1` and `…-wip`.
//! - The part after the slash may be at most 63 characters. When app, plural and version make it
//!   longer, it is shortened deterministically: cut to fit, followed by `-` and 10 hex digits of
//!   an FNV-1a hash of the whole unshortened part (then `-wip` for the in-progress one), so every
//!   replica computes the same name and two long kinds stay apart.
//!
//! Names set by hand are validated the same way when the wrapper is built: a
//! [`FinalizerNameError`] names the finalizer and the rule it breaks; the two must differ.
//!
//! **Upgrades.** Earlier releases used unqualified defaults: `operator.{version}.{kind}.{group}` /
//! `wip.{version}.{kind}.{group}` (plain wrappers) and `{app}-{plural}-finalizer` / `{app}-wip`
//! (the simple App). A default name brings its old form along as a *legacy* name
//! ([`FinalizerNames::legacy_finalizers`], [`legacy_finalizers`]): an object carrying it counts
//! as carrying ours (or the in-progress one), so it is neither added again nor left stuck, and the
//! wrapper replaces it: the watcher's `sync` at start-up and the reconciler's `Resynced` send an
//! upgrade patch (old name out, new name in), every swap or restore removes it, and the release at
//! deletion removes it with ours. Names set by hand bring no legacy name.
//!
//! # Patches
//!
//! A change of the list is an RFC 6902 JSON patch of three operations: `test /metadata/uid` (the
//! incarnation the list was computed for), `test /metadata/finalizers` (the list it was computed
//! from; `null` when there was none, which kube-apiserver's JSON patch takes as "absent"), and
//! `add /metadata/finalizers` with the whole new list. The apiserver applies the patch to the
//! current object: when the list (or the UID) changed in between, the `test` fails and the answer
//! is HTTP 422 ("testing value ... failed"), so a list computed from an old copy can never
//! overwrite a newer one. The precondition is the list, not the `resourceVersion` (issue #18):
//! a write that leaves the finalizers alone, the status the reconciler wrote a moment ago above
//! all, does not invalidate the patch, so the event's copy of a new object stays good after the
//! reconciler's own write and the finalizer costs one request, no read and no 409. (An earlier
//! version used a `resourceVersion` precondition; after a status write its first attempt always
//! met a 409 or had to read first: three requests per new object instead of two.)
//!
//! kube-apiserver answers a failed `test` with a bare HTTP 422 ("the server rejected our request
//! due to an error in our request"), the same status as a truly invalid patch, and it refuses a
//! finalizer added to an object whose deletion began after the copy was read with a 422 too. So
//! after a 409 or 422 the object is read again: when its list, UID and deletion state are what
//! the refused patch was computed from, the refusal was about something else and is returned as
//! an error; otherwise the copy was stale, the list is computed again from the fresh copy, and
//! the patch is retried: at once when the refusal was of the caller's copy (it was merely old),
//! after a short backoff ([`ConflictRetry`]) when it was of a fresh read (a race with another
//! writer of the list);
//! the wait ends early when the handler context is cancelled. Each refusal counts as a conflict
//! in [`FinalizerMetrics`]. Other controllers' finalizers are never removed or reordered: the
//! new list is the current list minus ours, plus ours at the end.
//!
//! The first attempt computes the new list from the event's copy of the object; a retry of a
//! handler call (whose copy is known to be old) and the reconciler's repair of a finalizer found
//! missing after `Created` (usually an older event than our patch) start from a fresh read. Every successful patch
//! records its resourceVersion as the controller's own write
//! ([`own_writes`](crate::own_writes)), so its watch event starts no reconcile.
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
