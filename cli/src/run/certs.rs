//! Development certificates for the operator's webhook server, from testenv's CA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use kubeapp::sdk::testenv::CertificateAuthority;

use super::RunError;

/// A CA and a serving certificate, as files.
#[derive(Clone, Debug)]
pub struct DevCerts {
    /// The CA certificate the apiserver is told to trust (`--webhook-ca-file`).
    pub ca_file: PathBuf,
    /// The serving certificate (`--webhook-cert-file`).
    pub cert_file: PathBuf,
    /// Its key (`--webhook-key-file`).
    pub key_file: PathBuf,
}

impl DevCerts {
    /// A new CA and a certificate for `ip`, 127.0.0.1 and localhost, written into `dir` as
    /// `ca.crt`, `tls.crt` and `tls.key`.
    ///
    /// # Errors
    ///
    /// When a certificate cannot be made or a file cannot be written.
    pub fn write(dir: &Path, ip: IpAddr) -> Result<Self, RunError> {
        let failed =
            |what: &str, e: &dyn std::fmt::Display| RunError::Certs(format!("{what}: {e}"));
        std::fs::create_dir_all(dir).map_err(|e| failed(&dir.display().to_string(), &e))?;
        let ca = CertificateAuthority::new("kubeapp-run-webhook-ca")
            .map_err(|e| failed("creating the development CA", &e))?;
        let ip = ip.to_string();
        let mut hosts = vec![ip.as_str()];
        for host in ["127.0.0.1", "localhost"] {
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        let serving = ca
            .issue_serving(&hosts)
            .map_err(|e| failed("issuing the webhook's serving certificate", &e))?;
        let certs = Self {
            ca_file: dir.join("ca.crt"),
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
        };
        for (path, pem) in [
            (&certs.ca_file, ca.cert_pem()),
            (&certs.cert_file, serving.cert_pem),
            (&certs.key_file, serving.key_pem),
        ] {
            std::fs::write(path, pem).map_err(|e| failed(&path.display().to_string(), &e))?;
        }
        Ok(certs)
    }
}
