//! The names a project is made of, checked before anything is written: the kind, its group and
//! version, the crate and app name; and the names derived from them (module, plural).

/// A name given on the command line that Kubernetes or Rust would refuse.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {value:?}: {rule}")]
pub struct NameError {
    /// The flag or argument that carried it.
    pub flag: &'static str,
    /// The value.
    pub value: String,
    /// What it must be.
    pub rule: &'static str,
}

fn check(flag: &'static str, value: &str, ok: bool, rule: &'static str) -> Result<(), NameError> {
    if ok {
        Ok(())
    } else {
        Err(NameError {
            flag,
            value: value.to_string(),
            rule,
        })
    }
}

/// A kind: `UpperCamelCase`, ASCII letters and digits, e.g. `Widget`.
///
/// # Errors
///
/// Names `--kind` and the rule.
pub fn kind(value: &str) -> Result<(), NameError> {
    let ok = value.len() <= 63
        && value.starts_with(|c: char| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_alphanumeric());
    check(
        "--kind",
        value,
        ok,
        "a kind is UpperCamelCase ASCII letters and digits, starting with a capital (e.g. Widget)",
    )
}

/// An API group: a DNS subdomain with at least one dot, e.g. `example.com`.
///
/// # Errors
///
/// Names `--group` and the rule.
pub fn group(value: &str) -> Result<(), NameError> {
    let ok = value.len() <= 253
        && value.contains('.')
        && value.split('.').all(|label| dns_label(label, 63));
    check(
        "--group",
        value,
        ok,
        "a group is a lowercase DNS name with a dot (e.g. example.com)",
    )
}

/// A version: `v1`, `v2beta1`, `v1alpha2`...
///
/// # Errors
///
/// Names `--version` and the rule.
pub fn version(value: &str) -> Result<(), NameError> {
    let ok = value
        .strip_prefix('v')
        .and_then(|rest| {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (major, tail) = rest.split_at(digits);
            (!major.is_empty() && !major.starts_with('0')).then_some(tail)
        })
        .is_some_and(|tail| {
            tail.is_empty()
                || ["alpha", "beta"].iter().any(|stage| {
                    tail.strip_prefix(stage).is_some_and(|n| {
                        !n.is_empty()
                            && !n.starts_with('0')
                            && n.chars().all(|c| c.is_ascii_digit())
                    })
                })
        });
    check(
        "--version",
        value,
        ok,
        "a version is v<N>, v<N>alpha<M> or v<N>beta<M> (e.g. v1, v2beta1)",
    )
}

/// The project's crate and app name (from its directory): a DNS label, e.g. `widget-operator`.
///
/// # Errors
///
/// Names the directory argument and the rule.
pub fn app(value: &str) -> Result<(), NameError> {
    check(
        "<dir>",
        value,
        dns_label(value, 40) && value.starts_with(|c: char| c.is_ascii_lowercase()),
        "the directory's name is the crate's and the app's name: lowercase letters, digits and \
         '-', starting with a letter, at most 40 characters (e.g. widget-operator)",
    )
}

fn dns_label(label: &str, max: usize) -> bool {
    !label.is_empty()
        && label.len() <= max
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// The kind's Rust module name: `WebApp` -> `web_app`.
pub fn snake(kind: &str) -> String {
    let mut out = String::with_capacity(kind.len() + 4);
    for (i, c) in kind.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The kind's plural resource name: `Widget` -> `widgets`, `Policy` -> `policies`,
/// `Class` -> `classes`.
pub fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| lower.ends_with(end))
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_groups_versions_and_apps_are_checked_naming_the_flag() {
        assert!(kind("Widget").is_ok() && kind("WebApp2").is_ok());
        let err = kind("widget").expect_err("lowercase");
        assert!(err.to_string().starts_with("--kind \"widget\": "), "{err}");
        assert!(kind("Web-App").is_err());
        assert!(group("example.com").is_ok());
        assert!(group("example").is_err() && group("Example.com").is_err());
        for ok in ["v1", "v2beta1", "v10alpha3"] {
            assert!(version(ok).is_ok(), "{ok}");
        }
        for bad in ["1", "v", "v0", "v1beta", "v1gamma1", "V1"] {
            assert!(version(bad).is_err(), "{bad}");
        }
        assert!(app("widget-operator").is_ok());
        assert!(app("Widget").is_err() && app("-w").is_err() && app("1w").is_err());
    }

    #[test]
    fn module_and_plural_names() {
        assert_eq!(snake("WebApp"), "web_app");
        assert_eq!(snake("Widget"), "widget");
        assert_eq!(plural("Widget"), "widgets");
        assert_eq!(plural("Policy"), "policies");
        assert_eq!(plural("Gateway"), "gateways");
        assert_eq!(plural("Class"), "classes");
        assert_eq!(plural("Box"), "boxes");
    }
}
