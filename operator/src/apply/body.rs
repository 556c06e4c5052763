//! Turning a serialized object or status into an apply configuration.

use serde_json::Value;

/// Removes every `null` field of every JSON object in `value` (array items are kept as they are).
///
/// Rust types commonly serialize `None` as `null`. In an apply configuration a `null` field is a
/// declared field set to nothing: it clears the value even when another field manager owns it,
/// and makes this manager an owner of the field. A `None` means "this manager has no opinion",
/// which in server-side apply is a field left out.
pub(crate) fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, child| !child.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::drop_nulls;

    #[test]
    fn null_fields_are_dropped_at_every_depth_and_array_items_kept() {
        let mut value =
            json!({"a": null, "b": {"c": null, "d": 1}, "e": [null, {"f": null, "g": 2}]});
        drop_nulls(&mut value);
        assert_eq!(value, json!({"b": {"d": 1}, "e": [null, {"g": 2}]}));
    }
}
