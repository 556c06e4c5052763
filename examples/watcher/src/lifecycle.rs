//! The lifecycle steps of a `Probe` the watcher records, and what each step's Event says.
//!
//! One step per watcher call: `add` (a Probe appeared), `update` (its spec changed), `delete` (it
//! is being deleted, or is gone) and `sync` (at start-up, a Probe the operator had already
//! handled: it may have changed while the operator was down).

use std::fmt;

use kube::ResourceExt;

use crate::kind::Probe;

/// The longest target quoted in an Event note: notes are limited to 1 kB, targets are not.
const MAX_TARGET_CHARS: usize = 200;

/// A lifecycle step of a `Probe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The Probe appeared.
    Add,
    /// Its spec changed (a new generation).
    Update,
    /// It is being deleted, or is gone.
    Delete,
    /// The operator started and found it already handled.
    Sync,
}

impl Step {
    /// Every step, in lifecycle order.
    pub const ALL: [Step; 4] = [Step::Add, Step::Update, Step::Delete, Step::Sync];

    /// The metric label: `add`, `update`, `delete`, `sync`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Sync => "sync",
        }
    }

    /// The Event's `reason`: `Added`, `Updated`, `Deleted`, `Synced`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Add => "Added",
            Self::Update => "Updated",
            Self::Delete => "Deleted",
            Self::Sync => "Synced",
        }
    }

    /// The Event's `action`, what the watcher did: `Add`, `Update`, `Delete`, `Sync`.
    pub fn action(self) -> &'static str {
        match self {
            Self::Add => "Add",
            Self::Update => "Update",
            Self::Delete => "Delete",
            Self::Sync => "Sync",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// `namespace/name` of a Probe.
pub fn key(probe: &Probe) -> String {
    format!(
        "{}/{}",
        probe.namespace().unwrap_or_default(),
        probe.name_any()
    )
}

/// The target, shortened to [`MAX_TARGET_CHARS`] characters and quoted.
fn target(probe: &Probe) -> String {
    let target = &probe.spec.target;
    match target.char_indices().nth(MAX_TARGET_CHARS) {
        Some((end, _)) => format!("{:?}...", &target[..end]),
        None => format!("{target:?}"),
    }
}

fn generation(probe: &Probe) -> String {
    probe
        .metadata
        .generation
        .map_or_else(|| "?".to_string(), |g| g.to_string())
}

/// The Event note of `step` for `probe`; for [`Step::Update`], `old` is the state before.
pub fn note(step: Step, probe: &Probe, old: Option<&Probe>) -> String {
    let key = key(probe);
    let millis = probe.spec.processing_millis;
    match (step, old) {
        (Step::Update, Some(old)) => {
            let target_change = if old.spec.target == probe.spec.target {
                format!("target {} unchanged", target(probe))
            } else {
                format!("target {} -> {}", target(old), target(probe))
            };
            format!(
                "Probe {key} updated: generation {} -> {}, {target_change}; processed in {millis} ms",
                generation(old),
                generation(probe),
            )
        }
        (Step::Add | Step::Update, _) => format!(
            "Probe {key} {}: target {}, generation {}; processed in {millis} ms",
            step.reason().to_lowercase(),
            target(probe),
            generation(probe),
        ),
        (Step::Delete, _) => format!(
            "Probe {key} deleted: last target {}; processed in {millis} ms",
            target(probe),
        ),
        (Step::Sync, _) => format!(
            "Probe {key} synced after an operator start: target {}, generation {}; processed in \
             {millis} ms",
            target(probe),
            generation(probe),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::ProbeSpec;

    fn probe(target: &str, generation: i64) -> Probe {
        let mut p = Probe::new(
            "web",
            ProbeSpec {
                target: target.into(),
                processing_millis: 5,
            },
        );
        p.metadata.namespace = Some("demo".into());
        p.metadata.generation = Some(generation);
        p
    }

    #[test]
    fn labels_and_reasons_are_distinct() {
        let labels: std::collections::BTreeSet<_> = Step::ALL.iter().map(|s| s.label()).collect();
        let reasons: std::collections::BTreeSet<_> = Step::ALL.iter().map(|s| s.reason()).collect();
        assert_eq!(labels.len(), 4);
        assert_eq!(reasons.len(), 4);
        assert_eq!(Step::Sync.to_string(), "sync");
        assert_eq!(Step::Delete.reason(), "Deleted");
    }

    #[test]
    fn notes_name_the_object_and_what_changed() {
        let new = probe("b", 2);
        assert_eq!(
            note(Step::Add, &new, None),
            "Probe demo/web added: target \"b\", generation 2; processed in 5 ms"
        );
        assert_eq!(
            note(Step::Update, &new, Some(&probe("a", 1))),
            "Probe demo/web updated: generation 1 -> 2, target \"a\" -> \"b\"; processed in 5 ms"
        );
        assert!(note(Step::Update, &new, Some(&probe("b", 1))).contains("target \"b\" unchanged"));
        assert!(note(Step::Delete, &new, None).starts_with("Probe demo/web deleted"));
        assert!(note(Step::Sync, &new, None).starts_with("Probe demo/web synced"));
    }

    #[test]
    fn long_targets_are_shortened_to_keep_notes_small() {
        let long = "é".repeat(5000);
        let note = note(Step::Add, &probe(&long, 1), None);
        assert!(note.len() < 1024, "{}", note.len());
        assert!(note.contains("\"..."), "{note}");
    }
}
