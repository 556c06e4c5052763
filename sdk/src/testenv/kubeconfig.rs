//! Kubeconfigs for identities of the test control plane.
//!
//! Each kubeconfig is self-contained (certificates inline as `*-data`), so it can be handed to a
//! child process, such as an operator binary under test, as a single file.

use std::path::Path;

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::TestEnvError;
use super::certs::IssuedCert;

/// Builds a kubeconfig whose single context talks to `server` as the holder of `client`.
pub(crate) fn for_client_cert(
    server: &str,
    ca_pem: &str,
    context: &str,
    client: &IssuedCert,
) -> Result<Kubeconfig, TestEnvError> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // Built through JSON so the key field (a secrecy::SecretString) needs no extra dependency.
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "kubeapp-testenv",
            "cluster": { "server": server, "certificate-authority-data": b64(ca_pem) }
        }],
        "users": [{
            "name": context,
            "user": {
                "client-certificate-data": b64(&client.cert_pem),
                "client-key-data": b64(&client.key_pem)
            }
        }],
        "contexts": [{
            "name": context,
            "context": { "cluster": "kubeapp-testenv", "user": context }
        }],
        "current-context": context,
    });
    serde_json::from_value(value).map_err(|e| TestEnvError::InvalidYaml {
        what: format!("generated kubeconfig for {context}"),
        message: e.to_string(),
    })
}

/// A `kube::Client` for `kubeconfig`'s current context.
pub(crate) async fn client(
    kubeconfig: &Kubeconfig,
    context: &str,
) -> Result<kube::Client, TestEnvError> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .map_err(|source| TestEnvError::Kubeconfig {
                context: context.to_string(),
                source,
            })?;
    kube::Client::try_from(config).map_err(|source| TestEnvError::Kube {
        action: format!("building a client for {context}"),
        source,
    })
}

/// Writes `kubeconfig` as YAML to `path`, readable only by the owner (it holds a private key).
pub(crate) fn write(kubeconfig: &Kubeconfig, path: &Path) -> Result<(), TestEnvError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let yaml = serde_saphyr::to_string(kubeconfig).map_err(|e| TestEnvError::InvalidYaml {
        what: format!("kubeconfig for {}", path.display()),
        message: e.to_string(),
    })?;
    let io = |source| TestEnvError::Io {
        action: "writing kubeconfig",
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    file.write_all(yaml.as_bytes()).map_err(io)
}
