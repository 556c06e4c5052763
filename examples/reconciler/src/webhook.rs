//! The operator's webhooks seen from outside: whether the manifest requires them, where the
//! apiserver reaches them, and the server's settings for the Runner.
//!
//! - **Required.** The manifest declares validation, mutation and conversion for `Template`
//!   ([`declared`]), so the operator must serve `/validate`, `/mutate` and `/convert` over HTTPS:
//!   `run` without `--webhook-cert-file` and `--webhook-key-file` is an error naming both flags
//!   ([`server_config`]). A process that starts without them would look healthy while the
//!   apiserver refuses every Template (the webhooks fail closed) and cannot read `v2`.
//! - **Where.** In a cluster, the apiserver calls the Service [`SERVICE_NAME`] (port
//!   [`SERVICE_PORT`]) in the operator's namespace, which the `manifests` command adds. For an
//!   operator outside the cluster (a local control plane), `--webhook-url` points the CRD and the
//!   webhook configurations at a URL instead, e.g. `https://127.0.0.1:8443`.
//! - **Trust.** The apiserver only trusts the CA given with `--webhook-ca-file`, written into
//!   every `caBundle`.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context as _, bail};
use kubeapp::operator::webhook::WebhookConfig;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::webhooks::WebhookEndpoint;

use crate::cli::WebhookTargetArgs;

/// The name of the Service in front of the webhook server.
pub const SERVICE_NAME: &str = "kubeapp-example-reconciler-webhook";

/// The port of that Service (the apiserver's default for webhooks).
pub const SERVICE_PORT: u16 = 443;

/// The webhook server's settings from `run`'s flags; `None` when the manifest needs no webhooks
/// and no certificate was given.
///
/// # Errors
///
/// When the manifest declares webhooks and the certificate or key flag is missing, or when only
/// one of the two is given; the message names the flags and their environment variables.
pub fn server_config(
    manifest: &ManifestData,
    cert: Option<&Path>,
    key: Option<&Path>,
    addr: SocketAddr,
) -> anyhow::Result<Option<WebhookConfig>> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(WebhookConfig::new(cert, key).addr(addr))),
        (Some(_), None) => bail!(
            "--webhook-cert-file is set but --webhook-key-file (WEBHOOK_KEY_FILE) is not: the \
             webhook server needs both"
        ),
        (None, Some(_)) => bail!(
            "--webhook-key-file is set but --webhook-cert-file (WEBHOOK_CERT_FILE) is not: the \
             webhook server needs both"
        ),
        (None, None) => {
            let declared = manifest.declared_webhooks();
            if declared.is_empty() {
                return Ok(None);
            }
            bail!(
                "the manifest declares webhooks ({}), so the operator must serve them over \
                 HTTPS: pass --webhook-cert-file and --webhook-key-file (or set WEBHOOK_CERT_FILE \
                 and WEBHOOK_KEY_FILE) with a serving certificate and its key, whose CA the \
                 apiserver trusts (see `crd --webhook-ca-file`)",
                declared.join("; ")
            )
        }
    }
}

/// Where the apiserver reaches the webhooks: `--webhook-url`, or else the in-cluster Service in
/// `namespace`; with the CA of `--webhook-ca-file`.
///
/// # Errors
///
/// When `--webhook-ca-file` is missing or unreadable, or `--webhook-url` is not an `https://`
/// URL.
pub fn endpoint(
    manifest: &ManifestData,
    target: &WebhookTargetArgs,
    namespace: &str,
) -> anyhow::Result<WebhookEndpoint> {
    let Some(ca_file) = &target.webhook_ca_file else {
        bail!(
            "the manifest declares webhooks ({}): pass --webhook-ca-file (or set \
             WEBHOOK_CA_FILE) with the CA certificate (PEM) that signed the webhook server's \
             certificate, so that the apiserver trusts it",
            manifest.declared_webhooks().join("; ")
        );
    };
    let ca = read_ca(ca_file)?;
    match &target.webhook_url {
        Some(url) => {
            if !url.starts_with("https://") || url.len() <= "https://".len() {
                bail!(
                    "--webhook-url {url:?} is not an https:// URL: the apiserver calls webhooks \
                     over TLS only (e.g. https://127.0.0.1:8443)"
                );
            }
            Ok(WebhookEndpoint::url(url.clone(), ca))
        }
        None => Ok(WebhookEndpoint::service(
            namespace,
            SERVICE_NAME,
            i32::from(SERVICE_PORT),
            ca,
        )),
    }
}

fn read_ca(path: &Path) -> anyhow::Result<String> {
    let pem = std::fs::read_to_string(path)
        .with_context(|| format!("reading --webhook-ca-file {}", path.display()))?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        bail!(
            "--webhook-ca-file {}: not a PEM certificate (no BEGIN CERTIFICATE line)",
            path.display()
        );
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn manifest() -> ManifestData {
        crate::kind::manifest().expect("manifest")
    }

    #[test]
    fn the_example_declares_all_three_capabilities() {
        assert_eq!(
            manifest().declared_webhooks(),
            ["Template: validation, mutation, conversion"]
        );
    }

    #[test]
    fn running_without_certificates_names_the_flags() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 8443));
        let err = server_config(&manifest(), None, None, addr).expect_err("required");
        let message = err.to_string();
        for needle in [
            "--webhook-cert-file",
            "--webhook-key-file",
            "WEBHOOK_CERT_FILE",
            "Template: validation, mutation, conversion",
        ] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        let err = server_config(&manifest(), Some(Path::new("c")), None, addr).expect_err("key");
        assert!(err.to_string().contains("--webhook-key-file"), "{err}");
        let config = server_config(
            &manifest(),
            Some(Path::new("c")),
            Some(Path::new("k")),
            addr,
        )
        .expect("both")
        .expect("a server");
        assert_eq!((config.addr, config.cert_path), (addr, PathBuf::from("c")));
    }

    #[test]
    fn the_endpoint_needs_a_ca_and_an_https_url() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = dir.path().join("ca.crt");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let target = |url: Option<&str>, ca: Option<&PathBuf>| WebhookTargetArgs {
            webhook_ca_file: ca.cloned(),
            webhook_url: url.map(str::to_string),
        };
        let err = endpoint(&manifest(), &target(None, None), "ops").expect_err("no CA");
        assert!(err.to_string().contains("--webhook-ca-file"), "{err}");
        let err = endpoint(&manifest(), &target(Some("http://x"), Some(&ca)), "ops")
            .expect_err("plain http");
        assert!(err.to_string().contains("https://"), "{err}");
        let url = endpoint(
            &manifest(),
            &target(Some("https://127.0.0.1:1"), Some(&ca)),
            "ops",
        )
        .expect("url");
        assert_eq!(
            url.conversion_client().url.as_deref(),
            Some("https://127.0.0.1:1/convert")
        );
        let service = endpoint(&manifest(), &target(None, Some(&ca)), "ops").expect("service");
        let reference = service.conversion_client().service.expect("service");
        assert_eq!(
            (
                reference.namespace.as_str(),
                reference.name.as_str(),
                reference.port
            ),
            ("ops", SERVICE_NAME, Some(443))
        );
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hello").expect("write");
        let err = endpoint(&manifest(), &target(None, Some(&not_pem)), "ops").expect_err("pem");
        assert!(err.to_string().contains("not a PEM certificate"), "{err}");
    }
}
