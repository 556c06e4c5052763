//! The checks [`OperatorDeployment::build`](super::OperatorDeployment::build) makes before it
//! builds anything, so a mistake is an error naming the builder field rather than a rejection by
//! the apiserver at apply time.

use super::{DeployError, OperatorDeployment};

impl OperatorDeployment<'_> {
    pub(super) fn validate(&self, name: &str) -> Result<(), DeployError> {
        let invalid =
            |field: &'static str, reason: String| DeployError::InvalidField { field, reason };
        if self.image.trim().is_empty() {
            return Err(invalid("image", "must not be empty".into()));
        }
        // The metrics Service is named like the Deployment: a Service name is a DNS-1035 label.
        check_dns_label("name", name)?;
        check_dns_label("namespace", &self.namespace)?;
        if self.replicas < 0 {
            return Err(invalid(
                "replicas",
                format!("{} is negative", self.replicas),
            ));
        }
        if self.metrics_port == 0 {
            return Err(invalid("metrics_port", "must not be 0".into()));
        }
        if self.termination_grace_seconds < 0 {
            return Err(invalid(
                "termination_grace_seconds",
                format!("{} is negative", self.termination_grace_seconds),
            ));
        }
        if let Some(webhooks) = &self.webhooks {
            if webhooks.tls_secret.trim().is_empty() {
                return Err(invalid("webhooks.tls_secret", "must not be empty".into()));
            }
            if !webhooks.tls_dir.starts_with('/') {
                return Err(invalid(
                    "webhooks.tls_dir",
                    format!("{:?} is not an absolute path", webhooks.tls_dir),
                ));
            }
            if webhooks.port == 0 || webhooks.port == self.metrics_port {
                return Err(invalid(
                    "webhooks.port",
                    format!(
                        "{} must be neither 0 nor the metrics port ({})",
                        webhooks.port, self.metrics_port
                    ),
                ));
            }
            if webhooks.service_port == 0 {
                return Err(invalid("webhooks.service_port", "must not be 0".into()));
            }
            if let Some(service) = &webhooks.service_name {
                check_dns_label("webhooks.service_name", service)?;
            }
        }
        Ok(())
    }
}

/// Whether `value` is a DNS-1035 label (what Service and namespace names must be).
fn check_dns_label(field: &'static str, value: &str) -> Result<(), DeployError> {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && !value.ends_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(DeployError::InvalidField {
            field,
            reason: format!(
                "{value:?} is not a DNS label (at most 63 lowercase letters, digits and '-', \
                 starting with a letter, not ending with '-')"
            ),
        })
    }
}
