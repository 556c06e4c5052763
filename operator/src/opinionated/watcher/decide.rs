//! The opinionated watcher's decisions: what an `add` or an `update(old, new)` event leads to.
//! Pure functions of the event's objects, the finalizer names and what this process remembers;
//! the [module docs](super::super) state the rules in words.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::change::{changed, has_generation};
use super::super::finalizer::FinalizerNames;
use crate::object::KubeObject;

/// What the wrapper does with an `add`; see the [module docs](super::super).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddDecision {
    /// Being deleted and held by our finalizer (or the in-progress one): `delete`, then release.
    Delete,
    /// Being deleted without our finalizers: not ours to handle.
    IgnoreDeleting,
    /// Already handled (a restart or a re-list): `sync`, then drop a leftover in-progress
    /// finalizer.
    Sync {
        /// The in-progress finalizer is still there.
        drop_in_progress: bool,
    },
    /// New: in-progress finalizer, `add`, then swap it for ours.
    Add,
}

impl AddDecision {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::IgnoreDeleting => "ignore-deleting",
            Self::Sync { .. } => "sync",
            Self::Add => "add",
        }
    }
}

pub(crate) fn decide_add(meta: &ObjectMeta, names: &FinalizerNames) -> AddDecision {
    // Legacy default names count as ours (see the finalizer module's names section).
    let ours = names.is_handled(meta);
    let in_progress = names.is_in_progress(meta);
    if meta.deletion_timestamp.is_some() {
        if ours || in_progress {
            AddDecision::Delete
        } else {
            AddDecision::IgnoreDeleting
        }
    } else if ours {
        AddDecision::Sync {
            // A legacy name is tidied up by the same patch.
            drop_in_progress: in_progress || names.carries_legacy(meta),
        }
    } else {
        AddDecision::Add
    }
}

/// What the wrapper does with an `update(old, new)`; the checks run in the order of the variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateDecision {
    /// `new` is being deleted and held by our finalizer (or the in-progress one).
    Delete,
    /// `new` is being deleted without our finalizers.
    IgnoreDeleting,
    /// The add succeeded in this process with an older object than `new` (the spec changed
    /// while it ran): finish the finalizer swap if it is missing, then `update(object the add
    /// saw, new)`.
    ChangedSinceAdd,
    /// The add succeeded and `new` carries our finalizer with nothing changed since the add: its
    /// swap landed; forget the object the add saw, call nothing.
    AddConfirmed,
    /// Our own patch: `old` lacked our finalizer (or the in-progress one), `new` has it, and
    /// nothing else changed.
    IgnoreOwnPatch,
    /// Someone else removed our finalizer: put it back, call nothing.
    Restore,
    /// The add of this object has not completed: go the add path (never both add and update).
    CompleteAdd,
    /// Nothing a handler cares about changed: the same generation (a status, label, annotation
    /// or finalizer change), or, for kinds without a generation, a resync of the same version.
    IgnoreUnchanged,
    /// A spec change (any change, for kinds without a generation): `update(old, new)`.
    Update,
}

impl UpdateDecision {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::IgnoreDeleting => "ignore-deleting",
            Self::ChangedSinceAdd => "update-since-add",
            Self::AddConfirmed => "add-confirmed",
            Self::IgnoreOwnPatch => "ignore-own-patch",
            Self::Restore => "restore-finalizer",
            Self::CompleteAdd => "complete-add",
            Self::IgnoreUnchanged => "ignore-unchanged",
            Self::Update => "update",
        }
    }
}

/// Decides an `update(old, new)`. `add_saw` is the object a successful add of this incarnation
/// was given, while this process has not yet seen an event that shows whether the spec changed
/// after the add read it.
pub(crate) fn decide_update(
    old: &dyn KubeObject,
    new: &dyn KubeObject,
    names: &FinalizerNames,
    add_saw: Option<&dyn KubeObject>,
) -> UpdateDecision {
    // Legacy default names count as ours (see the finalizer module's names section).
    let has_finalizer = |meta: &ObjectMeta, name: &str| {
        if name == names.finalizer() {
            names.is_handled(meta)
        } else {
            names.is_in_progress(meta)
        }
    };
    let (ours, wip) = (names.finalizer(), names.in_progress());
    let (old_meta, new_meta) = (old.metadata(), new.metadata());
    if new_meta.deletion_timestamp.is_some() {
        return if has_finalizer(new_meta, ours) || has_finalizer(new_meta, wip) {
            UpdateDecision::Delete
        } else {
            UpdateDecision::IgnoreDeleting
        };
    }
    // Compared with what the add saw, not with `old`: the event that carries a spec change made
    // while the add ran can look like an add in progress (gen1+wip -> gen2+wip) or like our own
    // patch, and must not be folded into the add that read gen1.
    if let Some(saw) = add_saw {
        return if changed(saw, new) {
            UpdateDecision::ChangedSinceAdd
        } else if has_finalizer(new_meta, ours) {
            UpdateDecision::AddConfirmed
        } else {
            UpdateDecision::CompleteAdd
        };
    }
    // Our own swap. With a change as well (a re-list can fold several writes into one update),
    // the change still reaches `update` below. (Comparing content serializes objects of kinds
    // without a generation, so it is only asked once the finalizers point to our patch.)
    if !has_finalizer(old_meta, ours) && has_finalizer(new_meta, ours) && !changed(old, new) {
        return UpdateDecision::IgnoreOwnPatch;
    }
    if !has_finalizer(new_meta, ours) {
        if has_finalizer(old_meta, ours) {
            return UpdateDecision::Restore;
        }
        // The in-progress finalizer just appeared: the add that put it there is running or
        // waiting for its retry (which the dequeue policy keeps), so this event adds nothing.
        if !has_finalizer(old_meta, wip) && has_finalizer(new_meta, wip) && !changed(old, new) {
            return UpdateDecision::IgnoreOwnPatch;
        }
        return UpdateDecision::CompleteAdd;
    }
    let unchanged = if has_generation(new) {
        !changed(old, new)
    } else {
        // Without a generation every change counts; only a resync repeats the same version.
        old_meta.resource_version == new_meta.resource_version
    };
    if unchanged {
        UpdateDecision::IgnoreUnchanged
    } else {
        UpdateDecision::Update
    }
}
