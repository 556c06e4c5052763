//! Finalizer names: the default scheme, overrides, their validation, and the legacy names that
//! are recognised and replaced (see the [module docs](super#names)).

use std::hash::Hasher;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;

use super::has_finalizer;

/// The longest name part (after the slash) of a finalizer.
pub const MAX_FINALIZER_LENGTH: usize = 63;

/// The longest prefix (before the slash) of a finalizer: a DNS subdomain.
pub const MAX_FINALIZER_PREFIX_LENGTH: usize = 253;

/// The prefix of default finalizers for kinds of the core API group, which has no name.
pub const CORE_GROUP_FINALIZER_PREFIX: &str = "core.kubeapp.dev";

/// The app part of default finalizer names of wrappers built without an app name.
pub const DEFAULT_FINALIZER_APP: &str = "operator";

/// The suffix that tells the in-progress finalizer from the finalizer.
pub const IN_PROGRESS_SUFFIX: &str = "-wip";

/// A finalizer name that cannot be used. Every variant names the rejected finalizer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinalizerNameError {
    /// The name is empty.
    #[error("a finalizer name must not be empty")]
    Empty,
    /// The name has no `prefix/` part (kube-apiserver refuses such names on core kinds).
    #[error(
        "finalizer `{finalizer}` is not a qualified name: it needs a `prefix/` (a lowercase DNS subdomain such as `example.dev/`)"
    )]
    MissingPrefix {
        /// The rejected name.
        finalizer: String,
    },
    /// The part before the slash is not a lowercase DNS subdomain.
    #[error("finalizer `{finalizer}` has an invalid prefix `{prefix}`: {rule}")]
    InvalidPrefix {
        /// The rejected name.
        finalizer: String,
        /// Its prefix.
        prefix: String,
        /// The rule the prefix breaks.
        rule: &'static str,
    },
    /// The name part (after the slash) is longer than [`MAX_FINALIZER_LENGTH`].
    #[error(
        "finalizer `{finalizer}`: the name after the slash is {length} characters long; at most {MAX_FINALIZER_LENGTH} are allowed"
    )]
    TooLong {
        /// The rejected name.
        finalizer: String,
        /// The length of its name part in characters.
        length: usize,
    },
    /// The name part (after the slash) is not a valid qualified-name part.
    #[error("finalizer `{finalizer}` has an invalid name part `{name}`: {rule}")]
    InvalidName {
        /// The rejected name.
        finalizer: String,
        /// Its name part.
        name: String,
        /// The rule the name part breaks.
        rule: &'static str,
    },
    /// The finalizer and the in-progress finalizer are the same name.
    #[error("the finalizer and the in-progress finalizer are both `{0}`; they must differ")]
    Same(String),
}

fn is_alphanumeric_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// The rule a DNS-subdomain prefix breaks, if any.
fn prefix_rule(prefix: &str) -> Option<&'static str> {
    if prefix.is_empty() {
        return Some("it is empty");
    }
    if prefix.len() > MAX_FINALIZER_PREFIX_LENGTH {
        return Some("it is longer than 253 characters");
    }
    for label in prefix.split('.') {
        if label.is_empty() {
            return Some("it has an empty label (two dots, or a leading or trailing dot)");
        }
        if label.len() > 63 {
            return Some("a label between dots is longer than 63 characters");
        }
        if !label.chars().all(|c| is_alphanumeric_lower(c) || c == '-') {
            return Some("only lowercase letters, digits, '-' and '.' are allowed");
        }
        let edges = [label.chars().next(), label.chars().last()];
        if !edges.into_iter().flatten().all(is_alphanumeric_lower) {
            return Some("each label must start and end with a lowercase letter or digit");
        }
    }
    None
}

/// The rule a name part breaks, if any (length is checked separately).
fn name_rule(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.contains('/') {
        return Some("a finalizer has exactly one '/'");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some("only letters, digits, '-', '_' and '.' are allowed");
    }
    let edges = [name.chars().next(), name.chars().last()];
    if !edges
        .into_iter()
        .flatten()
        .all(|c| c.is_ascii_alphanumeric())
    {
        return Some("it must start and end with a letter or digit");
    }
    None
}

/// Checks that `finalizer` is a qualified name `prefix/name`: the prefix a lowercase DNS
/// subdomain (at most 253 characters), the name 1 to 63 letters, digits, `-`, `_` or `.`,
/// starting and ending with a letter or digit.
pub fn validate_finalizer(finalizer: &str) -> Result<(), FinalizerNameError> {
    if finalizer.is_empty() {
        return Err(FinalizerNameError::Empty);
    }
    let Some((prefix, name)) = finalizer.split_once('/') else {
        return Err(FinalizerNameError::MissingPrefix {
            finalizer: finalizer.to_string(),
        });
    };
    if let Some(rule) = prefix_rule(prefix) {
        return Err(FinalizerNameError::InvalidPrefix {
            finalizer: finalizer.to_string(),
            prefix: prefix.to_string(),
            rule,
        });
    }
    let length = name.chars().count();
    if length > MAX_FINALIZER_LENGTH {
        return Err(FinalizerNameError::TooLong {
            finalizer: finalizer.to_string(),
            length,
        });
    }
    if let Some(rule) = name_rule(name) {
        return Err(FinalizerNameError::InvalidName {
            finalizer: finalizer.to_string(),
            name: name.to_string(),
            rule,
        });
    }
    Ok(())
}

/// The prefix of a kind's default finalizers: its API group, or
/// [`CORE_GROUP_FINALIZER_PREFIX`] for the core group.
pub fn finalizer_prefix(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        CORE_GROUP_FINALIZER_PREFIX.to_string()
    } else {
        resource.group.to_ascii_lowercase()
    }
}

/// `{app}-{plural}-{version}{suffix}`, shortened deterministically when longer than 63
/// characters: the head is cut and a hash of the whole unshortened name part is appended
/// (`{head}-{hash}{suffix}`), so two long names stay apart and the suffix stays visible.
fn name_part(app: &str, resource: &ApiResource, suffix: &str) -> String {
    let base = format!("{app}-{}-{}", resource.plural, resource.version);
    if base.chars().count() + suffix.len() <= MAX_FINALIZER_LENGTH {
        return format!("{base}{suffix}");
    }
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(base.as_bytes());
    let hash = format!("{:016x}", hasher.finish());
    let hash = &hash[..10];
    let keep = MAX_FINALIZER_LENGTH - suffix.len() - hash.len() - 1;
    let head: String = base.chars().take(keep).collect();
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{head}-{hash}{suffix}")
}

/// The default finalizer of `app` for a kind: `{group}/{app}-{plural}-{version}` (see the
/// [module docs](super#names)).
pub fn app_finalizer(app: &str, resource: &ApiResource) -> String {
    format!(
        "{}/{}",
        finalizer_prefix(resource),
        name_part(app, resource, "")
    )
}

/// The default in-progress finalizer of `app` for a kind:
/// `{group}/{app}-{plural}-{version}-wip`.
pub fn app_in_progress_finalizer(app: &str, resource: &ApiResource) -> String {
    format!(
        "{}/{}",
        finalizer_prefix(resource),
        name_part(app, resource, IN_PROGRESS_SUFFIX)
    )
}

/// The default finalizer of a wrapper without an app name: `{group}/operator-{plural}-{version}`.
pub fn default_finalizer(resource: &ApiResource) -> String {
    app_finalizer(DEFAULT_FINALIZER_APP, resource)
}

/// The default in-progress finalizer of a wrapper without an app name:
/// `{group}/operator-{plural}-{version}-wip`.
pub fn default_in_progress_finalizer(resource: &ApiResource) -> String {
    app_in_progress_finalizer(DEFAULT_FINALIZER_APP, resource)
}

fn legacy_with_kind(prefix: &str, resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        format!("{prefix}.{}.{}", resource.version, resource.kind)
    } else {
        format!(
            "{prefix}.{}.{}.{}",
            resource.version, resource.kind, resource.group
        )
    }
}

/// The legacy names of earlier releases that a wrapper recognises as its own and replaces:
/// `(finalizers, in-progress finalizers)`. Without an app: `operator.{version}.{kind}.{group}` and
/// `wip.{version}.{kind}.{group}`; with one: `{app}-{plural}-finalizer` and `{app}-wip`.
pub fn legacy_finalizers(app: Option<&str>, resource: &ApiResource) -> (String, String) {
    match app {
        None => (
            legacy_with_kind("operator", resource),
            legacy_with_kind("wip", resource),
        ),
        Some(app) => (
            format!("{app}-{}-finalizer", resource.plural),
            format!("{app}-wip"),
        ),
    }
}

/// The wrapper's finalizer and its in-progress finalizer, both validated, plus legacy names that
/// count as them and are replaced by them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizerNames {
    finalizer: String,
    in_progress: String,
    legacy_finalizers: Vec<String>,
    legacy_in_progress: Vec<String>,
}

impl FinalizerNames {
    /// Validated names; see [`validate_finalizer`].
    pub fn new(
        finalizer: impl Into<String>,
        in_progress: impl Into<String>,
    ) -> Result<Self, FinalizerNameError> {
        let (finalizer, in_progress) = (finalizer.into(), in_progress.into());
        validate_finalizer(&finalizer)?;
        validate_finalizer(&in_progress)?;
        if finalizer == in_progress {
            return Err(FinalizerNameError::Same(finalizer));
        }
        Ok(Self {
            finalizer,
            in_progress,
            legacy_finalizers: Vec::new(),
            legacy_in_progress: Vec::new(),
        })
    }

    /// Names without validation, for unit tests of the decision logic.
    #[cfg(test)]
    pub(crate) fn unchecked(finalizer: &str, in_progress: &str) -> Self {
        Self {
            finalizer: finalizer.to_string(),
            in_progress: in_progress.to_string(),
            legacy_finalizers: Vec::new(),
            legacy_in_progress: Vec::new(),
        }
    }

    /// The defaults of a kind ([`default_finalizer`], [`default_in_progress_finalizer`]), with
    /// the legacy defaults of earlier releases recognised ([`legacy_finalizers`]).
    pub fn defaults(resource: &ApiResource) -> Result<Self, FinalizerNameError> {
        let (legacy, legacy_wip) = legacy_finalizers(None, resource);
        Ok(Self::new(
            default_finalizer(resource),
            default_in_progress_finalizer(resource),
        )?
        .with_legacy([legacy], [legacy_wip]))
    }

    /// Also treats `finalizers` as this finalizer and `in_progress` as the in-progress one: an
    /// object carrying them counts as carrying ours, and the next finalizer patch replaces them.
    /// They are not validated (they are old names, possibly unqualified); empty names and the
    /// current names are ignored.
    #[must_use]
    pub(crate) fn with_legacy(
        mut self,
        finalizers: impl IntoIterator<Item = String>,
        in_progress: impl IntoIterator<Item = String>,
    ) -> Self {
        let current = [self.finalizer.clone(), self.in_progress.clone()];
        let keep = |name: &String| !name.is_empty() && !current.contains(name);
        self.legacy_finalizers
            .extend(finalizers.into_iter().filter(keep));
        self.legacy_in_progress
            .extend(in_progress.into_iter().filter(keep));
        self
    }

    /// The finalizer that marks an object as handled.
    pub fn finalizer(&self) -> &str {
        &self.finalizer
    }

    /// The finalizer that holds an object whose add has not completed yet.
    pub fn in_progress(&self) -> &str {
        &self.in_progress
    }

    /// Legacy names recognised as [`finalizer`](Self::finalizer).
    pub fn legacy_finalizers(&self) -> &[String] {
        &self.legacy_finalizers
    }

    /// Legacy names recognised as [`in_progress`](Self::in_progress).
    pub fn legacy_in_progress(&self) -> &[String] {
        &self.legacy_in_progress
    }

    /// Whether `meta` carries the finalizer or one of its legacy names.
    pub(crate) fn is_handled(&self, meta: &ObjectMeta) -> bool {
        has_finalizer(meta, &self.finalizer)
            || self
                .legacy_finalizers
                .iter()
                .any(|f| has_finalizer(meta, f))
    }

    /// Whether `meta` carries the in-progress finalizer or one of its legacy names.
    pub(crate) fn is_in_progress(&self, meta: &ObjectMeta) -> bool {
        has_finalizer(meta, &self.in_progress)
            || self
                .legacy_in_progress
                .iter()
                .any(|f| has_finalizer(meta, f))
    }

    /// Whether `meta` carries any legacy name (an upgrade patch replaces it).
    pub(crate) fn carries_legacy(&self, meta: &ObjectMeta) -> bool {
        self.legacy_finalizers
            .iter()
            .chain(&self.legacy_in_progress)
            .any(|f| has_finalizer(meta, f))
    }

    /// Every legacy name.
    pub(crate) fn legacy(&self) -> impl Iterator<Item = &str> {
        self.legacy_finalizers
            .iter()
            .chain(&self.legacy_in_progress)
            .map(String::as_str)
    }

    /// What goes when the finalizer is set: the in-progress finalizer and every legacy name.
    pub(crate) fn superseded_by_finalizer(&self) -> Vec<&str> {
        std::iter::once(self.in_progress.as_str())
            .chain(self.legacy())
            .collect()
    }

    /// The finalizer and its legacy names (the reconciler's whole set).
    pub(crate) fn finalizer_and_legacy(&self) -> Vec<&str> {
        std::iter::once(self.finalizer.as_str())
            .chain(self.legacy_finalizers.iter().map(String::as_str))
            .collect()
    }

    /// Every name of the wrapper, for the release of an object.
    pub(crate) fn all(&self) -> Vec<&str> {
        std::iter::once(self.finalizer.as_str())
            .chain(self.superseded_by_finalizer())
            .collect()
    }
}
