//! The checker: compares what the apiserver holds, what the workload did ([`Ledger`]) and what
//! the handlers saw ([`Recorder`]), and lists every loss.
//!
//! The promises checked (runtime contract, sections 5 and 6):
//!
//! - **stale spec**: every live object's newest spec (`spec.revision` as the apiserver holds it)
//!   reached a spec-carrying handler call of its incarnation: `add`, `update` or `sync` for the
//!   watcher; `Created`, `Updated` or `Resynced` for the reconciler;
//! - **missing delete**: every deleted incarnation that a handler saw gets at least one `delete`
//!   (watcher) / `Deleted` (reconciler);
//! - **duplicate Deleted**: the reconciler's downstream sees at most one `Deleted` per UID (the
//!   soak's reconciler never fails and the operator does not restart, so none of the contract's
//!   exceptions apply);
//! - **unseen delete**: a deleted incarnation no handler saw at all. Without apiserver restarts
//!   the informer's watch sees every object, and the wrappers must then call `delete`/`Deleted`
//!   for it, so this is a loss; with restarts, an object created and deleted while the watch was
//!   down can be missed legitimately, so it is only counted;
//! - **stuck**: a deleted object still in the apiserver (a finalizer was never removed);
//! - **harness**: a live object missing or not as the workload left it (a fault of the tool, not
//!   the product; listed so that it cannot pass unnoticed).
//!
//! [`wait_for_convergence`] repeats the check until it is clean or a deadline passes: handlers
//! run asynchronously, so a check right after the workload sees work still in progress.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use kube::ResourceExt as _;
use kube::api::{Api, ListParams};

use crate::error::SoakError;
use crate::kind::Churn;
use crate::operator::Wrapper;
use crate::recorder::{Recorder, Sighting};
use crate::retry::retrying;
use crate::workload::Ledger;

/// One lost or wrong object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The object's name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// What is wrong, e.g. `newest spec revision 2 never reached a handler (last seen: 0)`.
    pub problem: String,
}

/// The categories of [`Loss`], in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LossKind {
    /// A live object whose newest spec no handler saw.
    StaleSpec,
    /// A deleted incarnation a handler saw, without `delete` / `Deleted`.
    MissingDelete,
    /// More than one `Deleted` for one UID (reconciler).
    DuplicateDeleted,
    /// A deleted incarnation no handler saw (a loss only without apiserver restarts).
    UnseenDelete,
    /// A deleted object still in the apiserver.
    Stuck,
    /// The apiserver does not hold what the workload left (a harness fault).
    Harness,
}

impl LossKind {
    fn title(self) -> &'static str {
        match self {
            Self::StaleSpec => "live objects whose newest spec never reached a handler",
            Self::MissingDelete => "deleted objects whose delete never reached a handler",
            Self::DuplicateDeleted => "deleted objects with more than one Deleted",
            Self::UnseenDelete => "deleted objects no handler ever saw",
            Self::Stuck => "deleted objects still in the apiserver",
            Self::Harness => "objects not as the workload left them (harness fault)",
        }
    }
}

/// The result of one check.
#[derive(Clone, Debug)]
pub struct LossReport {
    /// The wrapper checked.
    pub wrapper: Wrapper,
    /// Objects the workload left alive.
    pub live: usize,
    /// Objects the workload deleted.
    pub deleted: usize,
    /// Whether unseen deletes count as losses (no apiserver restarts happened).
    pub unseen_is_loss: bool,
    /// The problems found, by kind.
    pub losses: HashMap<LossKind, Vec<Loss>>,
}

impl LossReport {
    /// The problems of `kind` (sorted by name).
    pub fn of(&self, kind: LossKind) -> &[Loss] {
        self.losses.get(&kind).map_or(&[], Vec::as_slice)
    }

    /// How many objects were lost: every problem except unseen deletes after a restart.
    pub fn loss_count(&self) -> usize {
        self.losses
            .iter()
            .filter(|(kind, _)| self.counts_as_loss(**kind))
            .map(|(_, losses)| losses.len())
            .sum()
    }

    /// True when nothing was lost.
    pub fn is_clean(&self) -> bool {
        self.loss_count() == 0
    }

    fn counts_as_loss(&self, kind: LossKind) -> bool {
        kind != LossKind::UnseenDelete || self.unseen_is_loss
    }

    /// The report with at most `limit` objects listed per kind.
    pub fn display(&self, limit: usize) -> impl fmt::Display + '_ {
        ReportDisplay {
            report: self,
            limit,
        }
    }
}

struct ReportDisplay<'a> {
    report: &'a LossReport,
    limit: usize,
}

impl fmt::Display for ReportDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.report;
        writeln!(
            f,
            "{}: {} lost of {} objects ({} live, {} deleted)",
            r.wrapper,
            r.loss_count(),
            r.live + r.deleted,
            r.live,
            r.deleted
        )?;
        let mut kinds: Vec<_> = r.losses.keys().copied().collect();
        kinds.sort();
        for kind in kinds {
            let losses = r.of(kind);
            let note = if r.counts_as_loss(kind) {
                ""
            } else {
                " (not a loss: the apiserver restarted, the watch may have missed them)"
            };
            writeln!(f, "  {}: {}{note}", kind.title(), losses.len())?;
            for loss in losses.iter().take(self.limit) {
                writeln!(f, "    {} (uid {}): {}", loss.name, loss.uid, loss.problem)?;
            }
            if losses.len() > self.limit {
                writeln!(f, "    ... and {} more", losses.len() - self.limit)?;
            }
        }
        Ok(())
    }
}

/// Checks once: a fresh list of `api`'s namespace against `ledger` and `recorder`.
///
/// # Errors
///
/// The list failed for good.
pub async fn check(
    api: &Api<Churn>,
    ledger: &Ledger,
    recorder: &Recorder,
    wrapper: Wrapper,
    unseen_is_loss: bool,
    patience: Duration,
) -> Result<LossReport, SoakError> {
    let params = ListParams::default();
    let list = retrying(
        || "listing the objects".to_string(),
        patience,
        || api.list(&params),
    )
    .await?;
    Ok(compare(
        list.items,
        ledger,
        &recorder.sightings(),
        wrapper,
        unseen_is_loss,
    ))
}

/// The check proper: `objects` (what the apiserver holds) against `ledger` and `sightings`.
pub fn compare(
    objects: Vec<Churn>,
    ledger: &Ledger,
    sightings: &HashMap<String, Sighting>,
    wrapper: Wrapper,
    unseen_is_loss: bool,
) -> LossReport {
    let in_apiserver: HashMap<String, Churn> = objects
        .into_iter()
        .map(|object| (object.name_any(), object))
        .collect();
    let mut losses: HashMap<LossKind, Vec<Loss>> = HashMap::new();
    let mut lose = |kind: LossKind, name: &str, uid: &str, problem: String| {
        losses.entry(kind).or_default().push(Loss {
            name: name.to_string(),
            uid: uid.to_string(),
            problem,
        });
    };
    for (name, written) in &ledger.live {
        let uid = ledger.uids.get(name).map_or("", String::as_str);
        let Some(object) = in_apiserver.get(name) else {
            lose(
                LossKind::Harness,
                name,
                uid,
                "live object not in the apiserver".into(),
            );
            continue;
        };
        if object.uid().as_deref() != Some(uid) || object.spec.revision != *written {
            lose(
                LossKind::Harness,
                name,
                uid,
                format!(
                    "apiserver holds uid {:?} revision {}, the workload wrote revision {written}",
                    object.uid(),
                    object.spec.revision
                ),
            );
            continue;
        }
        let seen = sightings.get(uid).and_then(|s| s.newest_revision);
        if seen.is_none_or(|seen| seen < object.spec.revision) {
            let seen = seen.map_or_else(|| "nothing".to_string(), |r| format!("revision {r}"));
            lose(
                LossKind::StaleSpec,
                name,
                uid,
                format!(
                    "newest spec revision {} never reached a handler (last seen: {seen})",
                    object.spec.revision
                ),
            );
        }
    }
    for name in &ledger.deleted {
        let uid = ledger.uids.get(name).map_or("", String::as_str);
        if let Some(object) = in_apiserver.get(name) {
            lose(
                LossKind::Stuck,
                name,
                uid,
                format!("still there, finalizers {:?}", object.finalizers()),
            );
        }
        match sightings.get(uid) {
            None => lose(
                LossKind::UnseenDelete,
                name,
                uid,
                "deleted; no handler call about it at all".into(),
            ),
            Some(s) if s.deletes == 0 => lose(
                LossKind::MissingDelete,
                name,
                uid,
                format!(
                    "deleted; handlers saw it (newest revision {:?}) but no delete",
                    s.newest_revision
                ),
            ),
            Some(s) if s.deletes > 1 && wrapper == Wrapper::Reconciler => lose(
                LossKind::DuplicateDeleted,
                name,
                uid,
                format!("Deleted delivered {} times", s.deletes),
            ),
            Some(_) => {}
        }
    }
    for list in losses.values_mut() {
        list.sort_by(|a, b| a.name.cmp(&b.name));
    }
    LossReport {
        wrapper,
        live: ledger.live.len(),
        deleted: ledger.deleted.len(),
        unseen_is_loss,
        losses,
    }
}

/// Checks every `poll` until the check is clean or `deadline` has passed; returns the last
/// report and how long it took.
///
/// # Errors
///
/// A list failed for good.
pub async fn wait_for_convergence(
    api: &Api<Churn>,
    ledger: &Ledger,
    recorder: &Recorder,
    wrapper: Wrapper,
    unseen_is_loss: bool,
    deadline: Duration,
) -> Result<(LossReport, Duration), SoakError> {
    const POLL: Duration = Duration::from_millis(500);
    let started = Instant::now();
    loop {
        let report = check(api, ledger, recorder, wrapper, unseen_is_loss, deadline).await?;
        if report.is_clean() || started.elapsed() >= deadline {
            return Ok((report, started.elapsed()));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::ChurnSpec;

    fn object(name: &str, uid: &str, revision: u32, finalizers: &[&str]) -> Churn {
        let mut object = Churn::new(name, ChurnSpec { revision });
        object.metadata.uid = Some(uid.into());
        object.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_string()).collect());
        object
    }

    fn seen(name: &str, newest_revision: Option<u32>, deletes: u32) -> Sighting {
        Sighting {
            name: name.into(),
            newest_revision,
            deletes,
        }
    }

    /// live: a (revision 2, seen 2), b (revision 2, seen 1), c (revision 0, never seen);
    /// deleted: d (seen, deleted once), e (seen, never deleted), f (Deleted twice), g (unseen),
    /// h (still in the apiserver).
    fn scenario() -> (Vec<Churn>, Ledger, HashMap<String, Sighting>) {
        let mut ledger = Ledger::default();
        for name in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            ledger.uids.insert(name.into(), format!("u-{name}"));
        }
        ledger.live = [("a", 2), ("b", 2), ("c", 0)]
            .into_iter()
            .map(|(n, r)| (n.to_string(), r))
            .collect();
        ledger.deleted = ["d", "e", "f", "g", "h"]
            .into_iter()
            .map(String::from)
            .collect();
        let objects = vec![
            object("a", "u-a", 2, &[]),
            object("b", "u-b", 2, &[]),
            object("c", "u-c", 0, &[]),
            object("h", "u-h", 0, &["ours"]),
        ];
        let sightings = [
            ("u-a", seen("a", Some(2), 0)),
            ("u-b", seen("b", Some(1), 0)),
            ("u-d", seen("d", Some(0), 1)),
            ("u-e", seen("e", Some(0), 0)),
            ("u-f", seen("f", None, 2)),
            ("u-h", seen("h", Some(0), 1)),
        ]
        .into_iter()
        .map(|(uid, s)| (uid.to_string(), s))
        .collect();
        (objects, ledger, sightings)
    }

    fn names(report: &LossReport, kind: LossKind) -> Vec<&str> {
        report.of(kind).iter().map(|l| l.name.as_str()).collect()
    }

    #[test]
    fn every_kind_of_loss_is_found_and_named() {
        let (objects, ledger, sightings) = scenario();
        let report = compare(objects, &ledger, &sightings, Wrapper::Reconciler, true);
        assert_eq!(names(&report, LossKind::StaleSpec), ["b", "c"]);
        assert_eq!(names(&report, LossKind::MissingDelete), ["e"]);
        assert_eq!(names(&report, LossKind::DuplicateDeleted), ["f"]);
        assert_eq!(names(&report, LossKind::UnseenDelete), ["g"]);
        assert_eq!(names(&report, LossKind::Stuck), ["h"]);
        assert!(report.of(LossKind::Harness).is_empty());
        assert_eq!(report.loss_count(), 6);
        let text = report.display(1).to_string();
        assert!(
            text.contains("reconciler: 6 lost of 8 objects (3 live, 5 deleted)"),
            "{text}"
        );
        assert!(text.contains("b (uid u-b): newest spec revision 2 never reached a handler (last seen: revision 1)"), "{text}");
        assert!(text.contains("... and 1 more"), "{text}");
    }

    #[test]
    fn the_watcher_may_see_delete_twice_and_unseen_deletes_after_restarts_are_no_loss() {
        let (objects, ledger, sightings) = scenario();
        let report = compare(objects, &ledger, &sightings, Wrapper::Watcher, false);
        assert!(report.of(LossKind::DuplicateDeleted).is_empty());
        assert_eq!(names(&report, LossKind::UnseenDelete), ["g"]);
        // b, c stale; e missing; h stuck.
        assert_eq!(report.loss_count(), 4);
        assert!(!report.is_clean());
    }

    #[test]
    fn an_object_not_as_the_workload_left_it_is_a_harness_fault() {
        let (mut objects, ledger, sightings) = scenario();
        objects.retain(|o| o.name_any() != "a");
        objects[0].spec.revision = 5;
        let report = compare(objects, &ledger, &sightings, Wrapper::Watcher, true);
        assert_eq!(names(&report, LossKind::Harness), ["a", "b"]);
    }
}
