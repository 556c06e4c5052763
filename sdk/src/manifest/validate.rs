//! The manifest's own consistency rules (see [`ManifestData::validate`]).

use std::collections::{BTreeMap, BTreeSet};

use super::{ManifestData, ManifestProblem, ManifestVersionKind};

/// Every problem of `manifest`, in document order.
pub(super) fn problems(manifest: &ManifestData) -> Vec<ManifestProblem> {
    let mut found = Problems::default();
    if manifest.app_name.trim().is_empty() {
        found.add("appName", "must not be empty");
    }
    if manifest.group.is_empty() {
        found.add("group", "must not be empty");
    } else if !is_dns_subdomain(&manifest.group) {
        found.add(
            "group",
            format!(
                "`{}` is not a lowercase DNS name (letters, digits, `-` and `.`)",
                manifest.group
            ),
        );
    } else if !manifest.group.contains('.') {
        // The apiserver refuses CRDs whose group is not a domain with a dot.
        found.add(
            "group",
            format!(
                "`{}` must be a domain with at least one dot, e.g. `{}.example.com`",
                manifest.group, manifest.group
            ),
        );
    }
    if manifest.versions.is_empty() {
        found.add("versions", "must list at least one version");
    }
    check_versions(manifest, &mut found);
    if !manifest.preferred_version.is_empty()
        && !manifest
            .versions
            .iter()
            .any(|v| v.name == manifest.preferred_version)
    {
        let names: Vec<&str> = manifest.versions.iter().map(|v| v.name.as_str()).collect();
        found.add(
            "preferredVersion",
            format!(
                "`{}` is not among the versions [{}]",
                manifest.preferred_version,
                names.join(", ")
            ),
        );
    }
    if let Some(extra) = &manifest.extra_permissions {
        for (i, access) in extra.access_kinds.iter().enumerate() {
            let at = format!("extraPermissions.accessKinds[{i}]");
            if access.resource.is_empty() {
                found.add(format!("{at}.resource"), "must not be empty");
            }
            if access.actions.is_empty() {
                found.add(format!("{at}.actions"), "must list at least one verb");
            }
        }
    }
    found.0
}

/// The first occurrence of a kind: where it was and what it said.
struct FirstSeen<'a> {
    version: &'a str,
    kind: &'a ManifestVersionKind,
}

fn check_versions(manifest: &ManifestData, found: &mut Problems) {
    let mut version_names = BTreeSet::new();
    let mut first_seen: BTreeMap<&str, FirstSeen<'_>> = BTreeMap::new();
    for (vi, version) in manifest.versions.iter().enumerate() {
        let at = format!("versions[{vi}]");
        if version.name.is_empty() {
            found.add(format!("{at}.name"), "must not be empty");
        } else if !version_names.insert(version.name.as_str()) {
            found.add(
                format!("{at}.name"),
                format!("version `{}` is listed twice", version.name),
            );
        }
        let mut kinds_here = BTreeSet::new();
        for (ki, kind) in version.kinds.iter().enumerate() {
            let at = format!("{at}.kinds[{ki}]");
            if kind.kind.is_empty() {
                found.add(format!("{at}.kind"), "must not be empty");
                continue;
            }
            if !kind.kind.starts_with(|c: char| c.is_ascii_uppercase()) {
                found.add(
                    format!("{at}.kind"),
                    format!("`{}` must start with an uppercase letter", kind.kind),
                );
            }
            if !kinds_here.insert(kind.kind.as_str()) {
                found.add(
                    format!("{at}.kind"),
                    format!(
                        "kind `{}` is listed twice in version `{}`",
                        kind.kind, version.name
                    ),
                );
                continue;
            }
            if !kind.plural.is_empty() && !is_dns_label(&kind.plural) {
                found.add(
                    format!("{at}.plural"),
                    format!(
                        "`{}` is not a lowercase DNS label (letters, digits and `-`)",
                        kind.plural
                    ),
                );
            }
            match first_seen.get(kind.kind.as_str()) {
                None => {
                    first_seen.insert(
                        kind.kind.as_str(),
                        FirstSeen {
                            version: version.name.as_str(),
                            kind,
                        },
                    );
                }
                Some(first) => compare_with_first(first, kind, &version.name, &at, found),
            }
        }
    }
}

/// A kind must have the same plural, scope and conversion in every version: they belong to the
/// one CRD that serves all its versions.
fn compare_with_first(
    first: &FirstSeen<'_>,
    kind: &ManifestVersionKind,
    version: &str,
    at: &str,
    found: &mut Problems,
) {
    let differs = |what: &str, a: String, b: String| {
        format!(
            "kind `{}` has {what} `{b}` in version `{version}` but `{a}` in version `{}`",
            kind.kind, first.version
        )
    };
    if first.kind.effective_plural() != kind.effective_plural() {
        found.add(
            format!("{at}.plural"),
            differs(
                "plural",
                first.kind.effective_plural(),
                kind.effective_plural(),
            ),
        );
    }
    if first.kind.scope != kind.scope {
        found.add(
            format!("{at}.scope"),
            differs(
                "scope",
                first.kind.scope.as_str().into(),
                kind.scope.as_str().into(),
            ),
        );
    }
    if first.kind.conversion != kind.conversion {
        found.add(
            format!("{at}.conversion"),
            differs(
                "conversion",
                first.kind.conversion.to_string(),
                kind.conversion.to_string(),
            ),
        );
    }
}

#[derive(Default)]
struct Problems(Vec<ManifestProblem>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(ManifestProblem {
            field: field.into(),
            message: message.into(),
        });
    }
}

/// RFC 1123 label: lowercase alphanumerics and `-`, alphanumeric at both ends, at most 63.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}
