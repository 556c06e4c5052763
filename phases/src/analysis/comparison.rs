//! [`Comparison`]: a typed condition on one measured value (`>= 0.95`), written in a spec as that
//! string and checked by the CRD's schema pattern before any operator reads it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How a value is compared with a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `>=`
    AtLeast,
    /// `>`
    Above,
    /// `<=`
    AtMost,
    /// `<`
    Below,
}

impl Operator {
    /// Its symbol, as written in a spec.
    pub fn symbol(self) -> &'static str {
        match self {
            Self::AtLeast => ">=",
            Self::Above => ">",
            Self::AtMost => "<=",
            Self::Below => "<",
        }
    }
}

/// A condition on a measured value: `value <operator> threshold`. Its text form (in a spec, in
/// status messages) is `">= 0.95"`.
///
/// ```
/// use kubeapp_phases::analysis::Comparison;
///
/// let at_least: Comparison = ">= 0.95".parse()?;
/// assert_eq!(at_least, Comparison::at_least(0.95));
/// assert!(at_least.holds(0.95) && !at_least.holds(0.9));
/// assert_eq!(Comparison::below(0.5).to_string(), "< 0.5");
/// # Ok::<(), kubeapp_phases::analysis::ComparisonError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// How the value is compared.
    pub operator: Operator,
    /// With what.
    pub threshold: f64,
}

/// A comparison's text that is not `<operator> <number>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "comparison {text:?}: {reason} (expected e.g. \">= 0.95\": one of >=, >, <=, < and a number)"
)]
pub struct ComparisonError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Comparison {
    /// `value >= threshold`.
    pub fn at_least(threshold: f64) -> Self {
        Self {
            operator: Operator::AtLeast,
            threshold,
        }
    }

    /// `value > threshold`.
    pub fn above(threshold: f64) -> Self {
        Self {
            operator: Operator::Above,
            threshold,
        }
    }

    /// `value <= threshold`.
    pub fn at_most(threshold: f64) -> Self {
        Self {
            operator: Operator::AtMost,
            threshold,
        }
    }

    /// `value < threshold`.
    pub fn below(threshold: f64) -> Self {
        Self {
            operator: Operator::Below,
            threshold,
        }
    }

    /// Whether `value` meets the condition (never for NaN).
    pub fn holds(&self, value: f64) -> bool {
        match self.operator {
            Operator::AtLeast => value >= self.threshold,
            Operator::Above => value > self.threshold,
            Operator::AtMost => value <= self.threshold,
            Operator::Below => value < self.threshold,
        }
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.operator.symbol(), self.threshold)
    }
}

impl FromStr for Comparison {
    type Err = ComparisonError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason| ComparisonError {
            text: text.to_string(),
            reason,
        };
        let trimmed = text.trim();
        // Two-character operators first: ">=" must not read as ">" and "=0.5".
        let (operator, rest) = [
            (">=", Operator::AtLeast),
            ("<=", Operator::AtMost),
            (">", Operator::Above),
            ("<", Operator::Below),
        ]
        .into_iter()
        .find_map(|(symbol, operator)| trimmed.strip_prefix(symbol).map(|rest| (operator, rest)))
        .ok_or_else(|| error("no operator"))?;
        let threshold: f64 = rest
            .trim()
            .parse()
            .map_err(|_| error("the threshold is not a number"))?;
        if !threshold.is_finite() {
            return Err(error("the threshold is not finite"));
        }
        Ok(Self {
            operator,
            threshold,
        })
    }
}

impl Serialize for Comparison {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Comparison {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The pattern the CRD checks a comparison against (the apiserver refuses others on write).
pub(crate) const PATTERN: &str = r"^\s*(>=|<=|>|<)\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\s*$";

impl schemars::JsonSchema for Comparison {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Comparison".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A condition on a measured value: one of >=, >, <=, < and a number, e.g. \">= 0.95\".",
            "pattern": PATTERN,
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_parse_print_and_hold_as_written() {
        for (text, comparison) in [
            (">= 0.95", Comparison::at_least(0.95)),
            (">0.5", Comparison::above(0.5)),
            (" <= 1e-3 ", Comparison::at_most(0.001)),
            ("< -2", Comparison::below(-2.0)),
        ] {
            assert_eq!(text.parse::<Comparison>(), Ok(comparison), "{text}");
            assert_eq!(comparison.to_string().parse::<Comparison>(), Ok(comparison));
        }
        assert!(Comparison::at_least(0.9).holds(0.9));
        assert!(!Comparison::above(0.9).holds(0.9));
        assert!(Comparison::at_most(0.9).holds(0.9));
        assert!(!Comparison::below(0.9).holds(0.9));
        assert!(!Comparison::at_least(0.0).holds(f64::NAN));
    }

    #[test]
    fn a_bad_comparison_names_the_text_and_what_is_wrong() {
        let error = "== 1".parse::<Comparison>().expect_err("no such operator");
        assert!(
            error
                .to_string()
                .contains("comparison \"== 1\": no operator"),
            "{error}"
        );
        let error = ">= high".parse::<Comparison>().expect_err("not a number");
        assert!(error.to_string().contains("not a number"), "{error}");
        let error = serde_json::from_str::<Comparison>("\"> inf\"").expect_err("not finite");
        assert!(error.to_string().contains("not finite"), "{error}");
    }
}
