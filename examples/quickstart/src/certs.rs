//! Development certificates for the operator's webhook server, from kubeapp's testenv CA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kubeapp::sdk::testenv::CertificateAuthority;

/// A CA and a serving certificate, as files.
#[derive(Clone, Debug)]
pub struct DevCerts {
    /// The directory holding the files.
    pub dir: PathBuf,
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
    pub fn write(dir: &Path, ip: IpAddr) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca = CertificateAuthority::new("kubeapp-quickstart-webhook-ca")
            .context("creating the development CA")?;
        let ip = ip.to_string();
        let mut hosts = vec![ip.as_str()];
        for host in ["127.0.0.1", "localhost"] {
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        let serving = ca
            .issue_serving(&hosts)
            .context("issuing the webhook's serving certificate")?;
        let certs = Self {
            dir: dir.to_path_buf(),
            ca_file: dir.join("ca.crt"),
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
        };
        for (path, pem) in [
            (&certs.ca_file, ca.cert_pem()),
            (&certs.cert_file, serving.cert_pem),
            (&certs.key_file, serving.key_pem),
        ] {
            std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(certs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_files_are_pem() {
        let dir = tempfile::tempdir().expect("temp dir");
        let certs = DevCerts::write(dir.path(), IpAddr::from([127, 0, 0, 1])).expect("written");
        let read = |p: &Path| std::fs::read_to_string(p).expect("read");
        assert!(read(&certs.ca_file).starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(read(&certs.cert_file).starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(read(&certs.key_file).contains("PRIVATE KEY"));
    }
}
