//! The values of `kubeapp bench`'s flags: durations (`90s`, `2m`, `500ms`), rates (`20/s`) and
//! spec variations (`spec.size=1,2,3`). Each parser's error names what it expected, and clap
//! prefixes it with the flag.

use std::time::Duration;

use serde_json::Value;

/// A duration: a number with `ms`, `s`, `m` or `h` (`s` when there is no unit).
///
/// # Errors
///
/// Anything else, or zero.
pub fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 2m or 500ms"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (ms, s, m or h)"
            ));
        }
    };
    if !(seconds > 0.0 && seconds.is_finite()) || seconds > 7.0 * 86_400.0 {
        return Err(format!(
            "{text:?} is not a duration above 0 and up to a week"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Updates per second: `20/s`, `20` (per second) or `600/m`.
///
/// # Errors
///
/// Anything else, zero, or more than 10,000 per second.
pub fn rate(text: &str) -> Result<f64, String> {
    let (number, per) = text.trim().split_once('/').unwrap_or((text.trim(), "s"));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a rate such as 20/s"))?;
    let per_second = match per {
        "s" => value,
        "m" => value / 60.0,
        other => return Err(format!("unknown period {other:?} in {text:?} (/s or /m)")),
    };
    if !(per_second > 0.0 && per_second <= 10_000.0) {
        return Err(format!(
            "{text:?} is not a rate above 0 and at most 10000/s"
        ));
    }
    Ok(per_second)
}

/// A spec variation: the field at `path` takes `values[i % len]` in object `i`.
#[derive(Clone, Debug, PartialEq)]
pub struct Variation {
    /// The dotted path as given (`spec.size`).
    pub path: String,
    /// Its segments (`["spec", "size"]`).
    pub segments: Vec<String>,
    /// The values, each a JSON number, boolean or null when it parses as one, else a string.
    pub values: Vec<Value>,
}

/// `PATH=V1,V2,...` (`spec.replicas=1,2,3`); the path starts with `spec.`.
///
/// # Errors
///
/// No `=`, a path outside `spec` or with an empty segment, no value, or a value given twice
/// (a churn update must change the spec).
pub fn variation(text: &str) -> Result<Variation, String> {
    let (path, values) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not PATH=V1,V2,... (e.g. spec.message=a,b)"))?;
    let segments: Vec<String> = path.split('.').map(str::to_string).collect();
    if segments.first().map(String::as_str) != Some("spec")
        || segments.len() < 2
        || segments.iter().any(String::is_empty)
    {
        return Err(format!(
            "{path:?} is not a dotted path into the spec (e.g. spec.message)"
        ));
    }
    let values: Vec<Value> = values
        .split(',')
        .map(|v| {
            serde_json::from_str::<Value>(v)
                .ok()
                .filter(|j| !j.is_object() && !j.is_array() && !j.is_string())
                .unwrap_or_else(|| Value::String(v.to_string()))
        })
        .collect();
    for (index, value) in values.iter().enumerate() {
        if values[..index].contains(value) {
            return Err(format!("{path}: the value {value} is given twice"));
        }
    }
    Ok(Variation {
        path: path.to_string(),
        segments,
        values,
    })
}

impl Variation {
    /// Sets the field in `object` to value `index` (modulo the number of values), creating the
    /// objects on the way.
    ///
    /// # Errors
    ///
    /// When a segment on the way is not an object (names the path).
    pub fn apply(&self, object: &mut Value, index: usize) -> Result<(), String> {
        let value = self.values[index % self.values.len()].clone();
        let mut at = object;
        let (last, parents) = self
            .segments
            .split_last()
            .ok_or_else(|| format!("{}: an empty path", self.path))?;
        for segment in parents {
            if at.get(segment).is_none() {
                at[segment.as_str()] = Value::Object(serde_json::Map::new());
            }
            at = &mut at[segment.as_str()];
            if !at.is_object() {
                return Err(format!(
                    "{}: {segment} is not an object in the sample",
                    self.path
                ));
            }
        }
        at[last.as_str()] = value;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_rates_parse_and_bad_ones_say_what_was_expected() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert!(duration("soon").unwrap_err().contains("not a duration"));
        assert!(duration("3d").unwrap_err().contains("unknown unit"));
        assert!(duration("0s").unwrap_err().contains("above 0"));
        assert_eq!(rate("20/s"), Ok(20.0));
        assert_eq!(rate("120/m"), Ok(2.0));
        assert_eq!(rate("5"), Ok(5.0));
        assert!(rate("fast").unwrap_err().contains("not a rate"));
        assert!(rate("0/s").unwrap_err().contains("above 0"));
        assert!(rate("5/h").unwrap_err().contains("unknown period"));
    }

    #[test]
    fn variations_parse_typed_values_and_set_nested_fields() {
        let v = variation("spec.size=1,2,big").expect("parses");
        assert_eq!(v.segments, ["spec", "size"]);
        assert_eq!(
            v.values,
            [Value::from(1), Value::from(2), Value::from("big")]
        );
        let mut object = serde_json::json!({"spec": {"message": "hi"}});
        v.apply(&mut object, 4).expect("sets");
        assert_eq!(object["spec"]["size"], 2);
        variation("spec.a.b=true")
            .expect("parses")
            .apply(&mut object, 0)
            .expect("creates spec.a");
        assert_eq!(object["spec"]["a"]["b"], true);
        let err = variation("spec.message.x=1")
            .expect("parses")
            .apply(&mut object, 0)
            .expect_err("message is a string");
        assert!(
            err.contains("spec.message.x: message is not an object"),
            "{err}"
        );
        assert!(variation("spec.size").unwrap_err().contains("PATH=V1,V2"));
        assert!(
            variation("metadata.name=a")
                .unwrap_err()
                .contains("into the spec")
        );
        assert!(
            variation("spec..x=a")
                .unwrap_err()
                .contains("into the spec")
        );
        assert!(variation("spec.x=a,a").unwrap_err().contains("given twice"));
    }
}
