//! The query template: `{{metadata.name}}`, `{{spec.app}}`, … are replaced by the object's fields
//! (a dotted path into the object as JSON). PromQL's own braces are single (`up{job="x"}`), so
//! they need no escaping.

use serde_json::Value;

/// A placeholder that names no field of the object, or a field that is not a string, number or
/// boolean.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("query placeholder {{{{{placeholder}}}}}: {reason}")]
pub struct TemplateError {
    /// The path inside the braces.
    pub placeholder: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// `template` with every `{{path}}` replaced by the field of `object` at `path`.
pub(crate) fn render(template: &str, object: &Value) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| TemplateError {
            placeholder: after.chars().take(40).collect(),
            reason: "not closed with }}",
        })?;
        let placeholder = after[..end].trim();
        let error = |reason| TemplateError {
            placeholder: placeholder.to_string(),
            reason,
        };
        let field = placeholder
            .split('.')
            .try_fold(object, |value, key| value.get(key))
            .ok_or_else(|| error("no such field in the object"))?;
        match field {
            Value::String(text) => out.push_str(text),
            Value::Number(number) => out.push_str(&number.to_string()),
            Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
            _ => return Err(error("not a string, number or boolean")),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn placeholders_take_the_objects_fields_and_a_bad_one_is_named() {
        let object = json!({"metadata": {"name": "web", "namespace": "shop"},
                            "spec": {"replicas": 3, "track": {"a": 1}}});
        assert_eq!(
            render(
                "rate(x{app=\"{{ metadata.name }}\",ns=\"{{metadata.namespace}}\"}[1m]) * {{spec.replicas}}",
                &object
            ),
            Ok("rate(x{app=\"web\",ns=\"shop\"}[1m]) * 3".to_string())
        );
        assert_eq!(render("vector(1)", &object), Ok("vector(1)".into()));
        let missing = render("{{spec.nope}}", &object).expect_err("no field");
        assert_eq!(
            missing.to_string(),
            "query placeholder {{spec.nope}}: no such field in the object"
        );
        let object_field = render("{{spec.track}}", &object).expect_err("an object");
        assert!(
            object_field.to_string().contains("not a string"),
            "{object_field}"
        );
        let open = render("up{{metadata.name", &object).expect_err("open");
        assert!(open.to_string().contains("not closed"), "{open}");
    }
}
