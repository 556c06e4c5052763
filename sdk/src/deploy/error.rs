//! [`DeployError`].

use crate::rbac::RbacError;

/// Why the deployment of an operator could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// A builder field has a value Kubernetes would reject or the operator cannot run with.
    #[error("invalid {field}: {reason}")]
    InvalidField {
        /// The field, as the builder method names it.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The RBAC could not be built from the manifest.
    #[error("building the operator's RBAC")]
    Rbac(#[from] RbacError),
    /// An object could not be serialized.
    #[error("writing the {object} as YAML: {message}")]
    Serialize {
        /// Which object.
        object: &'static str,
        /// The serializer's message.
        message: String,
    },
}
