//! [`AnalysisStatus`]: one run of an analysis as `status.analysis` records it (counts of the
//! whole run, the last [`MAX_MEASUREMENTS`] measurements, the outcome), and the rules that add a
//! measurement to it and say when the next one is due.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Analysis;

/// How many measurements `status.analysis.measurements` keeps (the newest; the counts cover
/// the whole run).
pub const MAX_MEASUREMENTS: usize = 10;

/// How one measurement was judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MeasurementResult {
    /// It met the success condition (or, with only a failure condition, did not meet that).
    Successful,
    /// It met the failure condition (or, with only a success condition, did not meet that).
    Failed,
    /// It met neither of the two conditions.
    Inconclusive,
}

/// Where a run of an analysis stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Outcome {
    /// Measuring.
    Running,
    /// `count` measurements within the limits: the phase took its success transition.
    Successful,
    /// More failed measurements than the failure limit: the phase took its failure transition.
    Failed,
    /// More inconclusive measurements than the limit: the object is paused until a gate.
    Inconclusive,
    /// The `promote` gate ended it: the phase took its success transition.
    Promoted,
    /// The `abort` gate ended it: the phase took its failure transition.
    Aborted,
}

impl Outcome {
    /// Whether the run is over (a phase entered again starts a new run).
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Running | Self::Inconclusive)
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Measurement {
    /// The value the provider returned.
    pub value: f64,
    /// When it was taken (RFC 3339).
    pub time: String,
    /// How it was judged.
    pub result: MeasurementResult,
}

/// One run of an analysis, as `status.analysis` records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisStatus {
    /// The phase that waits on it.
    pub phase: String,
    /// The analysis's metric.
    pub metric: String,
    /// Where the run stands.
    pub outcome: Outcome,
    /// Why it ended or paused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Measurements taken in this run.
    #[serde(default)]
    pub measured: u32,
    /// Measurements judged successful.
    #[serde(default)]
    pub successful: u32,
    /// Measurements judged failed.
    #[serde(default)]
    pub failed: u32,
    /// Measurements judged inconclusive (since the last `resume`).
    #[serde(default)]
    pub inconclusive: u32,
    /// The newest measurements, oldest first (at most 10: `MAX_MEASUREMENTS`).
    #[serde(default)]
    pub measurements: Vec<Measurement>,
}

/// When the next measurement is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// Now.
    Now,
    /// After this long.
    In(Duration),
}

impl AnalysisStatus {
    /// A new run of `analysis` in `phase`: nothing measured.
    pub fn start(phase: &str, analysis: &Analysis) -> Self {
        Self {
            phase: phase.to_string(),
            metric: analysis.metric.clone(),
            outcome: Outcome::Running,
            message: String::new(),
            measured: 0,
            successful: 0,
            failed: 0,
            inconclusive: 0,
            measurements: Vec::new(),
        }
    }

    /// Whether this run is `phase`'s current one (not one that ended in an earlier visit).
    pub fn continues_in(&self, phase: &str) -> bool {
        self.phase == phase && !self.outcome.is_final()
    }

    /// When the next measurement is due at `now`: an interval after the last one.
    pub(crate) fn due(&self, analysis: &Analysis, now: Timestamp) -> Due {
        let last = self
            .measurements
            .last()
            .and_then(|m| m.time.parse::<Timestamp>().ok());
        let Some(last) = last else {
            return Due::Now;
        };
        // A clock that went back waits one interval, never longer.
        let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or_default();
        match analysis.interval.0.checked_sub(elapsed) {
            Some(left) if !left.is_zero() => Due::In(left),
            _ => Due::Now,
        }
    }

    /// Adds the measurement `value` taken at `now` and decides the outcome; see the
    /// [module docs](super).
    pub fn record(&mut self, analysis: &Analysis, value: f64, now: Timestamp) -> Outcome {
        let result = analysis.judge(value);
        self.measured = self.measured.saturating_add(1);
        match result {
            MeasurementResult::Successful => self.successful = self.successful.saturating_add(1),
            MeasurementResult::Failed => self.failed = self.failed.saturating_add(1),
            MeasurementResult::Inconclusive => {
                self.inconclusive = self.inconclusive.saturating_add(1);
            }
        }
        self.measurements.push(Measurement {
            value,
            time: now.to_string(),
            result,
        });
        let excess = self.measurements.len().saturating_sub(MAX_MEASUREMENTS);
        self.measurements.drain(..excess);
        let conditions = analysis.conditions();
        (self.outcome, self.message) = if self.failed > analysis.failure_limit {
            (
                Outcome::Failed,
                format!(
                    "{} of {} measurements failed ({conditions}), more than the failure limit {}",
                    self.failed, self.measured, analysis.failure_limit
                ),
            )
        } else if self.inconclusive > analysis.inconclusive_limit {
            (
                Outcome::Inconclusive,
                format!(
                    "{} = {value} is inconclusive ({conditions}): paused until a gate \
                     (promote, abort or resume)",
                    analysis.metric
                ),
            )
        } else if self.measured >= analysis.count {
            (
                Outcome::Successful,
                format!(
                    "{} of {} measurements taken, {} failed ({conditions})",
                    self.measured, analysis.count, self.failed
                ),
            )
        } else {
            (Outcome::Running, String::new())
        };
        self.outcome
    }

    /// The run after `resume`: measuring again, the inconclusive ones forgiven.
    pub fn resume(&mut self) {
        if self.outcome == Outcome::Inconclusive {
            self.outcome = Outcome::Running;
            self.inconclusive = 0;
            self.message = String::new();
        }
    }

    /// The run ended by a gate (`Promoted` or `Aborted`).
    pub fn end_by_gate(&mut self, outcome: Outcome, gate: &str) {
        self.outcome = outcome;
        self.message = format!("ended by the {gate} gate");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Comparison;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a time")
    }

    fn analysis() -> Analysis {
        Analysis::new("rate", "q")
            .success(Comparison::at_least(0.9))
            .failure(Comparison::below(0.5))
            .interval(Duration::from_secs(10))
            .count(3)
    }

    #[test]
    fn count_measurements_within_the_limits_succeed() {
        let analysis = analysis();
        let mut run = AnalysisStatus::start("Evaluating", &analysis);
        assert_eq!(run.record(&analysis, 0.95, at(0)), Outcome::Running);
        assert_eq!(run.record(&analysis, 0.99, at(10)), Outcome::Running);
        assert_eq!(run.record(&analysis, 0.91, at(20)), Outcome::Successful);
        assert_eq!((run.measured, run.successful, run.failed), (3, 3, 0));
        assert!(
            run.message.contains("3 of 3 measurements taken, 0 failed"),
            "{}",
            run.message
        );
        assert!(!run.continues_in("Evaluating"), "a successful run is over");
    }

    #[test]
    fn one_failure_more_than_the_limit_fails_at_once() {
        let analysis = analysis().count(10).failure_limit(1);
        let mut run = AnalysisStatus::start("Evaluating", &analysis);
        assert_eq!(
            run.record(&analysis, 0.1, at(0)),
            Outcome::Running,
            "within the limit"
        );
        assert_eq!(run.record(&analysis, 0.95, at(10)), Outcome::Running);
        assert_eq!(run.record(&analysis, 0.2, at(20)), Outcome::Failed);
        assert!(
            run.message.contains("2 of 3 measurements failed (success >= 0.9, failure < 0.5), more than the failure limit 1"),
            "{}",
            run.message
        );
    }

    #[test]
    fn an_inconclusive_measurement_pauses_and_resume_forgives_it() {
        let analysis = analysis();
        let mut run = AnalysisStatus::start("Evaluating", &analysis);
        assert_eq!(run.record(&analysis, 0.7, at(0)), Outcome::Inconclusive);
        assert!(
            run.message.contains("rate = 0.7 is inconclusive"),
            "{}",
            run.message
        );
        assert!(run.continues_in("Evaluating"), "paused, not over");
        run.resume();
        assert_eq!(
            (run.outcome, run.inconclusive, run.measured),
            (Outcome::Running, 0, 1)
        );
        assert_eq!(run.record(&analysis, 0.95, at(10)), Outcome::Running);
        assert_eq!(
            run.record(&analysis, 0.95, at(20)),
            Outcome::Successful,
            "the inconclusive one counted as taken"
        );
    }

    #[test]
    fn the_next_measurement_is_due_an_interval_after_the_last() {
        let analysis = analysis();
        let mut run = AnalysisStatus::start("Evaluating", &analysis);
        assert_eq!(run.due(&analysis, at(0)), Due::Now, "nothing measured yet");
        run.record(&analysis, 0.95, at(0));
        assert_eq!(run.due(&analysis, at(4)), Due::In(Duration::from_secs(6)));
        assert_eq!(run.due(&analysis, at(10)), Due::Now);
        assert_eq!(
            run.due(&analysis, at(-5)),
            Due::In(Duration::from_secs(10)),
            "a clock that went back waits no longer than an interval"
        );
    }

    #[test]
    fn the_status_keeps_the_last_measurements_and_the_counts_of_the_whole_run() {
        let analysis = analysis().count(100);
        let mut run = AnalysisStatus::start("Evaluating", &analysis);
        for i in 0..25 {
            run.record(
                &analysis,
                0.9 + f64::from(i) / 1000.0,
                at(i64::from(i) * 10),
            );
        }
        assert_eq!(run.measured, 25);
        assert_eq!(run.measurements.len(), MAX_MEASUREMENTS);
        assert_eq!(
            run.measurements[0].value, 0.915,
            "the oldest kept is the 16th"
        );
        assert_eq!(run.measurements[9].time, at(240).to_string());
        let json = serde_json::to_value(&run).expect("json");
        let back: AnalysisStatus = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, run);
    }
}
