//! The finalizer list arithmetic: what the new list is, computed from the current one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Whether `meta` lists `finalizer`.
pub(crate) fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_deref()
        .is_some_and(|list| list.iter().any(|f| f == finalizer))
}

/// A change of an object's finalizer list: remove some names, then make sure one is present.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FinalizerChange<'a> {
    /// Appended when missing.
    pub add: Option<&'a str>,
    /// Removed wherever they appear.
    pub remove: &'a [&'a str],
}

impl FinalizerChange<'_> {
    /// The metric label of the change.
    pub(crate) fn operation(&self) -> &'static str {
        match (self.add, self.remove.is_empty()) {
            (Some(_), true) => "add",
            (Some(_), false) => "replace",
            (None, _) => "remove",
        }
    }
}

/// What a [`FinalizerChange`] means for one finalizer list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListPlan {
    /// The list already is as wanted.
    Unchanged,
    /// Set the list to this.
    Set(Vec<String>),
    /// The change would add a finalizer to an object being deleted, which the apiserver forbids;
    /// nothing is changed (not even the removals, which may be what holds the deletion).
    BlockedByDeletion,
}

/// The new finalizer list: `current` without `change.remove`, with `change.add` appended when
/// missing. Other finalizers keep their order.
pub(crate) fn plan_finalizers(
    current: &[String],
    change: FinalizerChange<'_>,
    deleting: bool,
) -> ListPlan {
    let mut next: Vec<String> = current
        .iter()
        .filter(|f| !change.remove.contains(&f.as_str()))
        .cloned()
        .collect();
    if let Some(add) = change.add
        && !next.iter().any(|f| f == add)
    {
        if deleting {
            return ListPlan::BlockedByDeletion;
        }
        next.push(add.to_string());
    }
    if next == current {
        ListPlan::Unchanged
    } else {
        ListPlan::Set(next)
    }
}
