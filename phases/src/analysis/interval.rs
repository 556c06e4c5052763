//! [`Interval`]: the time between two measurements, written in a spec as `500ms`, `30s`, `5m` or
//! `1h` (one number and one unit, what Kubernetes users write elsewhere).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as one number and a unit: `ms`, `s`, `m` or `h`.
///
/// ```
/// use std::time::Duration;
/// use kubeapp_phases::analysis::Interval;
///
/// assert_eq!("5m".parse::<Interval>()?.0, Duration::from_secs(300));
/// assert_eq!(Interval(Duration::from_millis(1500)).to_string(), "1500ms");
/// # Ok::<(), kubeapp_phases::analysis::IntervalError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval(pub Duration);

/// An interval's text that is not a number and a unit, or zero.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "interval {0:?}: expected a positive whole number and a unit (ms, s, m or h), e.g. \"30s\""
)]
pub struct IntervalError(pub String);

impl FromStr for Interval {
    type Err = IntervalError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || IntervalError(text.to_string());
        let digits = text
            .trim()
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(error)?;
        let (number, unit) = text.trim().split_at(digits);
        let number: u64 = number.parse().map_err(|_| error())?;
        let millis = match unit {
            "ms" => Some(number),
            "s" => number.checked_mul(1_000),
            "m" => number.checked_mul(60_000),
            "h" => number.checked_mul(3_600_000),
            _ => None,
        }
        .filter(|millis| *millis > 0)
        .ok_or_else(error)?;
        Ok(Self(Duration::from_millis(millis)))
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        match millis {
            m if m % 3_600_000 == 0 => write!(f, "{}h", m / 3_600_000),
            m if m % 60_000 == 0 => write!(f, "{}m", m / 60_000),
            m if m % 1_000 == 0 => write!(f, "{}s", m / 1_000),
            m => write!(f, "{m}ms"),
        }
    }
}

impl Serialize for Interval {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Interval {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Interval".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A duration: a whole number and a unit (ms, s, m, h), e.g. \"30s\".",
            "pattern": r"^[0-9]+(ms|s|m|h)$",
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
    fn intervals_read_and_print_one_number_and_a_unit() {
        for (text, millis) in [
            ("250ms", 250),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
        ] {
            let interval: Interval = text.parse().expect(text);
            assert_eq!(interval.0, Duration::from_millis(millis));
            assert_eq!(interval.to_string(), text);
        }
        for bad in [
            "",
            "30",
            "s",
            "0s",
            "1.5s",
            "-1s",
            "3d",
            "99999999999999999999h",
        ] {
            let error = bad.parse::<Interval>().expect_err(bad);
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }
}
