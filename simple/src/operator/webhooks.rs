//! The webhooks of an [`Operator`](super::Operator): a manifest that declares any needs the
//! server's certificate to run, and the CA (and, outside the cluster, a URL) to be reached.

use std::path::{Path, PathBuf};

use kubeapp_sdk::manifest::ManifestData;
use kubeapp_sdk::webhooks::WebhookEndpoint;

use super::commands::WebhookTargetArgs;
use crate::cli::OperatorArgs;

/// The port of the webhook Service (the apiserver's default for webhooks).
const SERVICE_PORT: i32 = 443;

/// Why the webhooks cannot be served or reached as configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The manifest declares webhooks, but `run` has no certificate to serve them with.
    #[error(
        "the manifest declares webhooks ({declared}), so the operator must serve them over HTTPS: \
         pass --webhook-cert-file and --webhook-key-file (or set WEBHOOK_CERT_FILE and \
         WEBHOOK_KEY_FILE)"
    )]
    NoServerCertificate {
        /// What the manifest declares, e.g. `Widget: validation`.
        declared: String,
    },
    /// The manifest declares webhooks, but no CA was given for their `caBundle`.
    #[error(
        "the manifest declares webhooks ({declared}): pass --webhook-ca-file (or set \
         WEBHOOK_CA_FILE) with the CA certificate (PEM) that signed the webhook server's \
         certificate, so that the apiserver trusts it"
    )]
    NoCa {
        /// What the manifest declares.
        declared: String,
    },
    /// The CA file cannot be read.
    #[error("reading --webhook-ca-file {}", path.display())]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CA file is not a PEM certificate.
    #[error("--webhook-ca-file {}: not a PEM certificate (no BEGIN CERTIFICATE line)", path.display())]
    NotPem {
        /// The file.
        path: PathBuf,
    },
    /// `--webhook-url` is not an `https://` URL.
    #[error(
        "--webhook-url {url:?} is not an https:// URL: the apiserver calls webhooks over TLS only \
         (e.g. https://127.0.0.1:8443)"
    )]
    NotHttps {
        /// The URL given.
        url: String,
    },
}

/// `run` must serve the webhooks the manifest declares.
pub(super) fn require_server(
    manifest: &ManifestData,
    args: &OperatorArgs,
) -> Result<(), WebhookError> {
    let declared = manifest.declared_webhooks();
    if declared.is_empty() || args.webhook_cert_file.is_some() || args.webhook_key_file.is_some() {
        // A lone certificate or key is reported by `OperatorArgs::runner_config`.
        return Ok(());
    }
    Err(WebhookError::NoServerCertificate {
        declared: declared.join("; "),
    })
}

/// Where the apiserver reaches the webhooks: `--webhook-url`, else the Service `service` in
/// `namespace`; with the CA of `--webhook-ca-file`.
pub(super) fn endpoint(
    manifest: &ManifestData,
    target: &WebhookTargetArgs,
    namespace: &str,
    service: &str,
) -> Result<WebhookEndpoint, WebhookError> {
    let Some(ca_file) = &target.webhook_ca_file else {
        return Err(WebhookError::NoCa {
            declared: manifest.declared_webhooks().join("; "),
        });
    };
    let ca = read_ca(ca_file)?;
    match &target.webhook_url {
        Some(url) if !url.starts_with("https://") || url.len() <= "https://".len() => {
            Err(WebhookError::NotHttps { url: url.clone() })
        }
        Some(url) => Ok(WebhookEndpoint::url(url.clone(), ca)),
        None => Ok(WebhookEndpoint::service(
            namespace,
            service,
            SERVICE_PORT,
            ca,
        )),
    }
}

fn read_ca(path: &Path) -> Result<String, WebhookError> {
    let pem = std::fs::read_to_string(path).map_err(|source| WebhookError::ReadCa {
        path: path.to_path_buf(),
        source,
    })?;
    if pem.contains("-----BEGIN CERTIFICATE-----") {
        Ok(pem)
    } else {
        Err(WebhookError::NotPem {
            path: path.to_path_buf(),
        })
    }
}
