//! Several sharded replicas on one timeline, read from their JSON logs (run with
//! `RUST_LOG=info,kubeapp::calls=debug,kubeapp_ha::sharding=debug`):
//!
//! - handler calls (target `kubeapp::calls`: a start and an end line per call, or an end line
//!   with `started=false` for a call refused because the replica stopped acting just before);
//! - the replica's terms and their active slots ("a term starts" and "slots handed over" with the
//!   count of active slots; a term ends at once when the own Lease lapses, else when it is over:
//!   drained, after which the next owners may take its slots);
//! - its own Lease's renewals ("own Lease renewed", with the wall-clock time the renew was sent),
//!   from which its periods of validity follow: a renew keeps the replica acting until it was
//!   sent plus the renew deadline; a renew that completes after that starts a new period, and a
//!   term never outlives the period it started in.
//!
//! Times are microseconds since the epoch (every replica runs on this machine's clock).

use std::collections::HashMap;

use k8s_openapi::jiff::Timestamp;

/// One handler call of one replica.
#[derive(Clone, Debug)]
pub struct Call {
    /// The replica.
    pub replica: String,
    /// The object (`namespace/name`).
    pub object: String,
    /// When its start line was written.
    pub start: i64,
    /// When its end line was written (or the replica was killed).
    pub end: i64,
}

/// One term of one replica: its active slot counts over time.
#[derive(Clone, Debug)]
pub struct TermSpan {
    /// When it started.
    pub start: i64,
    /// When it stopped acting (its end line), if it did before the log ends.
    pub end: Option<i64>,
    /// (time, active slots from then on), the first at `start`.
    pub steps: Vec<(i64, usize)>,
}

/// What one replica's log tells.
#[derive(Clone, Debug, Default)]
pub struct ReplicaLog {
    /// The replica's name.
    pub replica: String,
    /// Its handler calls.
    pub calls: Vec<Call>,
    /// Calls refused because it stopped acting just before (their start line was written).
    pub refused: usize,
    /// Its terms in order.
    pub terms: Vec<TermSpan>,
    /// Its renewals: (completed, sent), both wall clock.
    pub renewals: Vec<(i64, i64)>,
}

fn micros(line: &serde_json::Value) -> Option<i64> {
    let ts: Timestamp = line.get("timestamp")?.as_str()?.parse().ok()?;
    Some(ts.as_microsecond())
}

/// Reads `log` of `replica`; a call without an end line ends at `cut` (the replica was killed
/// during it) or fails the test.
pub fn read(replica: &str, log: &str, cut: Option<i64>) -> ReplicaLog {
    let mut open: HashMap<String, i64> = HashMap::new();
    let mut out = ReplicaLog {
        replica: replica.to_string(),
        ..ReplicaLog::default()
    };
    for line in log.lines() {
        let Ok(json) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(at) = micros(&json) else {
            continue;
        };
        let fields = &json["fields"];
        let message = fields["message"].as_str().unwrap_or_default();
        let active = fields["active"].as_u64().map(|a| a as usize);
        if json.get("target").and_then(|t| t.as_str()) == Some("kubeapp::calls") {
            let object = fields["object"].as_str().unwrap_or_default().to_string();
            match message {
                "handler call started" => {
                    assert!(
                        open.insert(object.clone(), at).is_none(),
                        "{replica}: two calls at once for {object}"
                    );
                }
                "handler call ended" => {
                    let start = open.remove(&object).expect("an end after a start");
                    if fields["started"].as_bool() == Some(false) {
                        out.refused += 1;
                    } else {
                        out.calls.push(Call {
                            replica: replica.to_string(),
                            object,
                            start,
                            end: at,
                        });
                    }
                }
                _ => {}
            }
            continue;
        }
        match message {
            "sharding: a term starts" => out.terms.push(TermSpan {
                start: at,
                end: None,
                steps: vec![(at, active.expect("active slots"))],
            }),
            "sharding: slots handed over" => {
                let term = out.terms.last_mut().expect("a term before a handover");
                term.steps.push((at, active.expect("active slots")));
            }
            // It stops at once on a lapse; otherwise (membership change, stop) calls of events
            // under way may still start until it is drained and over.
            "sharding: own Lease lapsed; the term stops at once" | "sharding: the term is over" => {
                if let Some(term) = out.terms.last_mut() {
                    term.end.get_or_insert(at);
                }
            }
            "sharding: own Lease renewed" => {
                let sent = fields["sent_at_us"].as_i64().expect("sent_at_us");
                out.renewals.push((at, sent));
            }
            _ => {}
        }
    }
    for (object, start) in open {
        let end = cut.unwrap_or_else(|| panic!("{replica}: the call for {object} never ended"));
        out.calls.push(Call {
            replica: replica.to_string(),
            object,
            start,
            end,
        });
    }
    out
}

impl ReplicaLog {
    /// The end of the period of validity that contains `at`, if `at` is in one, given the renew
    /// deadline.
    pub fn period_end(&self, at: i64, renew_deadline_us: i64) -> Option<i64> {
        let mut period: Option<(i64, i64)> = None;
        for &(completed, sent) in &self.renewals {
            let until = sent + renew_deadline_us;
            period = match period {
                // Renewed in time: the same period goes on.
                Some((start, end)) if completed < end => Some((start, until.max(end))),
                // Late or first: a new period. The previous one covered `at`?
                Some((start, end)) => {
                    if (start..end).contains(&at) {
                        return Some(end);
                    }
                    Some((completed, until))
                }
                None => Some((completed, until)),
            };
        }
        period.and_then(|(start, end)| (start..end).contains(&at).then_some(end))
    }

    /// The terms as they really acted: each from its start to its end line or the end of its
    /// period of validity, whichever comes first (a paused replica writes its end line late).
    pub fn effective_terms(&self, renew_deadline_us: i64) -> Vec<TermSpan> {
        self.terms
            .iter()
            .filter_map(|term| {
                let period_end = self.period_end(term.start, renew_deadline_us)?;
                let end = term.end.map_or(period_end, |end| end.min(period_end));
                Some(TermSpan {
                    start: term.start,
                    end: Some(end),
                    steps: term.steps.iter().copied().filter(|s| s.0 < end).collect(),
                })
            })
            .collect()
    }

    /// The slots active at `at` (0 outside every effective term).
    pub fn active_at(&self, at: i64, renew_deadline_us: i64) -> usize {
        self.effective_terms(renew_deadline_us)
            .iter()
            .find(|t| t.start <= at && at < t.end.unwrap_or(i64::MAX))
            .and_then(|t| t.steps.iter().rev().find(|s| s.0 <= at).map(|s| s.1))
            .unwrap_or(0)
    }
}

/// Calls that started inside a term and ended after it (in flight when it lapsed).
#[derive(Debug, Default)]
pub struct Late {
    /// How many.
    pub calls: usize,
    /// The longest time one of them ran past its term's end, in microseconds.
    pub longest_us: i64,
}

/// Checks the replicas' timelines: returns the problems found (calls started outside an
/// effective term, instants where the active slots of all replicas sum past 256) and the calls
/// in flight past their term's end.
pub fn check_terms(logs: &[ReplicaLog], renew_deadline_us: i64) -> (Vec<String>, Late) {
    let mut problems = Vec::new();
    let mut late = Late::default();
    for log in logs {
        let terms = log.effective_terms(renew_deadline_us);
        for call in &log.calls {
            match terms
                .iter()
                .find(|t| t.start <= call.start && call.start < t.end.unwrap_or(i64::MAX))
            {
                None => problems.push(format!(
                    "{}: a call for {} started at {} outside any valid term",
                    log.replica, call.object, call.start
                )),
                Some(term) if call.end > term.end.unwrap_or(i64::MAX) => {
                    late.calls += 1;
                    late.longest_us = late.longest_us.max(call.end - term.end.unwrap_or(i64::MAX));
                }
                Some(_) => {}
            }
        }
    }
    let instants: Vec<i64> = logs
        .iter()
        .flat_map(|log| log.terms.iter().flat_map(|t| t.steps.iter().map(|s| s.0)))
        .collect();
    for at in instants {
        let per_replica: Vec<usize> = logs
            .iter()
            .map(|log| log.active_at(at, renew_deadline_us))
            .collect();
        let sum: usize = per_replica.iter().sum();
        if sum > 256 {
            problems.push(format!(
                "at {at} the replicas' active slots sum to {sum} ({per_replica:?})"
            ));
        }
    }
    (problems, late)
}

/// Checks that no two replicas ran a call for the same object at overlapping times; returns
/// the overlaps found and how often an object moved between replicas.
pub fn check_overlaps(calls: &[Call]) -> (Vec<String>, usize) {
    let mut by_object: HashMap<&str, Vec<&Call>> = HashMap::new();
    for call in calls {
        by_object
            .entry(call.object.as_str())
            .or_default()
            .push(call);
    }
    let mut overlaps = Vec::new();
    let mut handed_over = 0;
    for (object, mut calls) in by_object {
        calls.sort_by_key(|c| c.start);
        for pair in calls.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.replica != b.replica {
                handed_over += 1;
                if a.end > b.start {
                    overlaps.push(format!(
                        "{object}: {} ran a handler until {} while {} started one at {}",
                        a.replica, a.end, b.replica, b.start
                    ));
                }
            }
        }
    }
    (overlaps, handed_over)
}
