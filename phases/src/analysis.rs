//! Declarative analysis: an [`Analysis`] is data (a metric, a query, success and failure
//! conditions, an interval, a count, limits) that a phase waits on; the scheduler measures it
//! through a [`MetricProvider`](crate::provider::MetricProvider) once per interval and records
//! each measurement in `status.analysis` ([`AnalysisStatus`]). Its outcome decides the phase's
//! transition (declared with [`PhaseMachine::analysis`](crate::PhaseMachine::analysis)).
//!
//! # The rules
//!
//! - One measurement judges as **Failed** when the `failure` condition holds, else
//!   **Successful** when the `success` condition holds. A value meeting neither is **Failed**
//!   when only `success` is given, **Successful** when only `failure` is given, and
//!   **Inconclusive** when both are given: the range between them is the inconclusive range.
//! - The analysis is **Failed** once more than `failureLimit` measurements failed, and
//!   **Inconclusive** once more than `inconclusiveLimit` were inconclusive (failure first);
//!   otherwise **Successful** once `count` measurements were taken.
//! - A query with no value (an empty result, or NaN: e.g. a rate of no requests) is no
//!   measurement: nothing is recorded and it is measured again after the interval. A provider
//!   error fails the reconcile (retried by the controller's policy), also recording nothing.
//! - The status keeps the counts of the whole run and the last [`MAX_MEASUREMENTS`]
//!   measurements (value, time, judgement): bounded whatever the count.
//!
//! ```
//! use std::time::Duration;
//! use kubeapp_phases::analysis::{Analysis, Comparison, MeasurementResult};
//!
//! let analysis = Analysis::new("successRate", "max(up{job=\"{{metadata.name}}\"})")
//!     .success(Comparison::at_least(0.95))
//!     .failure(Comparison::below(0.8))
//!     .interval(Duration::from_secs(30))
//!     .count(5);
//! assert_eq!(analysis.judge(0.99), MeasurementResult::Successful);
//! assert_eq!(analysis.judge(0.5), MeasurementResult::Failed);
//! assert_eq!(analysis.judge(0.9), MeasurementResult::Inconclusive);
//! // The same, as a spec would carry it:
//! let spec: Analysis = serde_json::from_value(serde_json::json!({
//!     "metric": "successRate", "query": "max(up{job=\"{{metadata.name}}\"})",
//!     "success": ">= 0.95", "failure": "< 0.8", "interval": "30s", "count": 5
//! }))?;
//! assert_eq!(spec, analysis);
//! # Ok::<(), serde_json::Error>(())
//! ```

mod comparison;
mod interval;
mod run;
mod template;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use comparison::{Comparison, ComparisonError, Operator};
pub use interval::{Interval, IntervalError};
pub use run::{AnalysisStatus, MAX_MEASUREMENTS, Measurement, MeasurementResult, Outcome};
pub use template::TemplateError;

pub(crate) use run::Due;

/// What a phase waits on; see the [module docs](self) for the rules.
///
/// Data, so it can be a field of a custom kind's spec:
///
/// ```
/// use kubeapp_phases::Analysis;
/// use kubeapp_phases::analysis::MeasurementResult;
/// use serde_json::json;
///
/// let analysis: Analysis = serde_json::from_value(json!({
///     "metric": "successRate",
///     "query": "sum(rate(ok{app=\"{{metadata.name}}\"}[1m])) / sum(rate(all{app=\"{{metadata.name}}\"}[1m]))",
///     "success": ">= 0.95",
///     "failure": "< 0.8",
///     "interval": "1m",
///     "count": 5,
///     "failureLimit": 1,
/// }))?;
/// analysis.check()?;
/// assert_eq!(
///     analysis.query_for(&json!({"metadata": {"name": "web"}}))?,
///     "sum(rate(ok{app=\"web\"}[1m])) / sum(rate(all{app=\"web\"}[1m]))"
/// );
/// assert_eq!(analysis.judge(0.99), MeasurementResult::Successful);
/// assert_eq!(analysis.judge(0.5), MeasurementResult::Failed);
/// assert_eq!(analysis.judge(0.9), MeasurementResult::Inconclusive, "pauses for a person");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Analysis {
    /// The metric's name, recorded in status (e.g. `successRate`).
    pub metric: String,
    /// The provider's query; `{{path}}` is replaced by the object's field at that dotted path
    /// (e.g. `{{metadata.name}}`).
    pub query: String,
    /// A measurement meeting this is successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<Comparison>,
    /// A measurement meeting this is failed (checked first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Comparison>,
    /// Time between two measurements (default 30s).
    #[serde(default = "default_interval")]
    pub interval: Interval,
    /// Measurements to take before the analysis is successful (default 1).
    #[serde(default = "default_count")]
    #[schemars(range(min = 1))]
    pub count: u32,
    /// Failed measurements tolerated (default 0: the first failure fails the analysis).
    #[serde(default)]
    pub failure_limit: u32,
    /// Inconclusive measurements tolerated (default 0: the first one pauses the object).
    #[serde(default)]
    pub inconclusive_limit: u32,
}

fn default_interval() -> Interval {
    Interval(Duration::from_secs(30))
}

fn default_count() -> u32 {
    1
}

/// An analysis that cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnalysisError {
    /// Neither a success nor a failure condition: no measurement could be judged.
    #[error("analysis {0}: neither a success nor a failure condition")]
    NoCondition(String),
    /// `count` is zero: the analysis would succeed without measuring.
    #[error("analysis {0}: count must be at least 1")]
    ZeroCount(String),
    /// The query's template names something the object does not have.
    #[error("analysis {metric}: the query template")]
    Query {
        /// The metric.
        metric: String,
        /// What is wrong with the template.
        #[source]
        source: TemplateError,
    },
}

impl Analysis {
    /// An analysis of `metric` by `query`, with no condition yet (add [`success`](Self::success)
    /// or [`failure`](Self::failure)), a 30 s interval, one measurement, no failure and no
    /// inconclusive measurement tolerated.
    pub fn new(metric: impl Into<String>, query: impl Into<String>) -> Self {
        Self {
            metric: metric.into(),
            query: query.into(),
            success: None,
            failure: None,
            interval: default_interval(),
            count: default_count(),
            failure_limit: 0,
            inconclusive_limit: 0,
        }
    }

    /// A measurement meeting `condition` is successful.
    #[must_use]
    pub fn success(mut self, condition: Comparison) -> Self {
        self.success = Some(condition);
        self
    }

    /// A measurement meeting `condition` is failed.
    #[must_use]
    pub fn failure(mut self, condition: Comparison) -> Self {
        self.failure = Some(condition);
        self
    }

    /// Time between two measurements.
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Interval(interval);
        self
    }

    /// Measurements to take before the analysis is successful.
    #[must_use]
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// Failed measurements tolerated.
    #[must_use]
    pub fn failure_limit(mut self, limit: u32) -> Self {
        self.failure_limit = limit;
        self
    }

    /// Inconclusive measurements tolerated.
    #[must_use]
    pub fn inconclusive_limit(mut self, limit: u32) -> Self {
        self.inconclusive_limit = limit;
        self
    }

    /// Whether the analysis can be evaluated.
    ///
    /// # Errors
    ///
    /// [`AnalysisError::NoCondition`], [`AnalysisError::ZeroCount`].
    pub fn check(&self) -> Result<(), AnalysisError> {
        if self.success.is_none() && self.failure.is_none() {
            return Err(AnalysisError::NoCondition(self.metric.clone()));
        }
        if self.count == 0 {
            return Err(AnalysisError::ZeroCount(self.metric.clone()));
        }
        Ok(())
    }

    /// The query for `object` (as JSON), its placeholders replaced.
    ///
    /// # Errors
    ///
    /// [`AnalysisError::Query`] naming the placeholder.
    pub fn query_for(&self, object: &Value) -> Result<String, AnalysisError> {
        template::render(&self.query, object).map_err(|source| AnalysisError::Query {
            metric: self.metric.clone(),
            source,
        })
    }

    /// How one measured `value` is judged; see the [module docs](self).
    pub fn judge(&self, value: f64) -> MeasurementResult {
        if self.failure.is_some_and(|c| c.holds(value)) {
            return MeasurementResult::Failed;
        }
        if self.success.is_some_and(|c| c.holds(value)) {
            return MeasurementResult::Successful;
        }
        match (self.success, self.failure) {
            (Some(_), Some(_)) => MeasurementResult::Inconclusive,
            (Some(_), None) => MeasurementResult::Failed,
            _ => MeasurementResult::Successful,
        }
    }

    /// The conditions, for messages: `success >= 0.9, failure < 0.5`.
    pub(crate) fn conditions(&self) -> String {
        let parts: Vec<String> = [("success", self.success), ("failure", self.failure)]
            .into_iter()
            .filter_map(|(name, c)| c.map(|c| format!("{name} {c}")))
            .collect();
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_condition_alone_judges_everything_and_two_leave_an_inconclusive_range() {
        let success_only = Analysis::new("m", "q").success(Comparison::at_least(0.9));
        assert_eq!(success_only.judge(0.95), MeasurementResult::Successful);
        assert_eq!(success_only.judge(0.5), MeasurementResult::Failed);
        let failure_only = Analysis::new("m", "q").failure(Comparison::below(0.5));
        assert_eq!(failure_only.judge(0.7), MeasurementResult::Successful);
        assert_eq!(failure_only.judge(0.4), MeasurementResult::Failed);
        let both = success_only.clone().failure(Comparison::below(0.5));
        assert_eq!(both.judge(0.7), MeasurementResult::Inconclusive);
        // Overlapping conditions: failure is checked first.
        let overlapping = Analysis::new("m", "q")
            .success(Comparison::at_least(0.5))
            .failure(Comparison::at_most(0.6));
        assert_eq!(overlapping.judge(0.55), MeasurementResult::Failed);
    }

    #[test]
    fn an_analysis_without_a_condition_or_count_is_refused_by_name() {
        let none = Analysis::new("latency", "q")
            .check()
            .expect_err("no condition");
        assert_eq!(
            none.to_string(),
            "analysis latency: neither a success nor a failure condition"
        );
        let zero = Analysis::new("latency", "q")
            .failure(Comparison::above(1.0))
            .count(0)
            .check()
            .expect_err("zero count");
        assert!(
            zero.to_string().contains("count must be at least 1"),
            "{zero}"
        );
    }

    #[test]
    fn the_spec_form_has_defaults_and_refuses_bad_fields_by_name() {
        let minimal: Analysis = serde_json::from_value(serde_json::json!({
            "metric": "m", "query": "q", "success": ">= 1"
        }))
        .expect("defaults");
        assert_eq!(
            minimal,
            Analysis::new("m", "q").success(Comparison::at_least(1.0))
        );
        let bad = serde_json::from_value::<Analysis>(serde_json::json!({
            "metric": "m", "query": "q", "success": "about 1"
        }))
        .expect_err("a bad comparison");
        assert!(bad.to_string().contains("comparison \"about 1\""), "{bad}");
        let schema = serde_json::to_value(schemars::schema_for!(Analysis)).expect("schema");
        assert!(
            schema["properties"]["success"]["pattern"].is_string(),
            "{schema}"
        );
        assert!(
            schema["properties"]["interval"]["pattern"].is_string(),
            "{schema}"
        );
    }
}
