//! Finalizer names: the defaults, overrides and their validation.

use kube::api::ApiResource;

/// The longest finalizer name accepted.
pub const MAX_FINALIZER_LENGTH: usize = 63;

/// A finalizer name that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinalizerNameError {
    /// The name is longer than [`MAX_FINALIZER_LENGTH`].
    #[error(
        "finalizer `{finalizer}` is {length} characters long; at most {MAX_FINALIZER_LENGTH} are allowed"
    )]
    TooLong {
        /// The rejected name.
        finalizer: String,
        /// Its length in characters.
        length: usize,
    },
    /// The name is empty.
    #[error("a finalizer name must not be empty")]
    Empty,
    /// The finalizer and the in-progress finalizer are the same name.
    #[error("the finalizer and the in-progress finalizer are both `{0}`; they must differ")]
    Same(String),
}

/// Checks that `finalizer` is a usable finalizer name (1 to 63 characters).
pub fn validate_finalizer(finalizer: &str) -> Result<(), FinalizerNameError> {
    let length = finalizer.chars().count();
    if length == 0 {
        return Err(FinalizerNameError::Empty);
    }
    if length > MAX_FINALIZER_LENGTH {
        return Err(FinalizerNameError::TooLong {
            finalizer: finalizer.to_string(),
            length,
        });
    }
    Ok(())
}

fn with_kind(prefix: &str, resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        format!("{prefix}.{}.{}", resource.version, resource.kind)
    } else {
        format!(
            "{prefix}.{}.{}.{}",
            resource.version, resource.kind, resource.group
        )
    }
}

/// The default finalizer of a kind: `operator.{version}.{kind}.{group}`.
pub fn default_finalizer(resource: &ApiResource) -> String {
    with_kind("operator", resource)
}

/// The default in-progress finalizer of a kind: `wip.{version}.{kind}.{group}`.
pub fn default_in_progress_finalizer(resource: &ApiResource) -> String {
    with_kind("wip", resource)
}

/// The wrapper's finalizer and its in-progress finalizer, both validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizerNames {
    finalizer: String,
    in_progress: String,
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
        })
    }

    /// The defaults of a kind ([`default_finalizer`], [`default_in_progress_finalizer`]); an
    /// error when a long kind or group makes them longer than 63 characters.
    pub fn defaults(resource: &ApiResource) -> Result<Self, FinalizerNameError> {
        Self::new(
            default_finalizer(resource),
            default_in_progress_finalizer(resource),
        )
    }

    /// The finalizer that marks an object as handled.
    pub fn finalizer(&self) -> &str {
        &self.finalizer
    }

    /// The finalizer that holds an object whose add has not completed yet.
    pub fn in_progress(&self) -> &str {
        &self.in_progress
    }
}
