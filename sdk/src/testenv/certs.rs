//! Keys and certificates for the test control plane, generated in Rust (no `openssl` CLI).
//!
//! Keys are ECDSA P-256, which kube-apiserver, etcd's clients and rustls all accept.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use super::TestEnvError;

/// The X.509 attribute type of `O` (organization), which Kubernetes reads as a group.
const ORGANIZATION_OID: [u64; 4] = [2, 5, 4, 10];

/// A certificate and its private key, both PEM encoded.
#[derive(Clone, Debug)]
pub struct IssuedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
}

/// A self-signed certificate authority that issues serving and client certificates.
///
/// ```
/// use kubeapp_sdk::testenv::CertificateAuthority;
///
/// let ca = CertificateAuthority::new("example-ca")?;
/// let serving = ca.issue_serving(&["localhost", "127.0.0.1"])?;
/// assert!(serving.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
/// let client = ca.issue_client("alice", &["developers"])?;
/// assert!(client.key_pem.contains("PRIVATE KEY"));
/// # Ok::<(), kubeapp_sdk::testenv::TestEnvError>(())
/// ```
pub struct CertificateAuthority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

fn cert_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> TestEnvError {
    move |source| TestEnvError::Certificate { what, source }
}

impl CertificateAuthority {
    /// Creates a new CA whose certificate has common name `name`.
    pub fn new(name: &str) -> Result<Self, TestEnvError> {
        let key = KeyPair::generate().map_err(cert_err("CA key"))?;
        let mut params = CertificateParams::new(Vec::new()).map_err(cert_err("CA certificate"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer =
            CertifiedIssuer::self_signed(params, key).map_err(cert_err("CA certificate"))?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM: what clients trust.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `hosts` (DNS names or IP addresses).
    pub fn issue_serving(&self, hosts: &[&str]) -> Result<IssuedCert, TestEnvError> {
        let mut params = CertificateParams::new(Vec::new()).map_err(cert_err("serving cert"))?;
        params.distinguished_name.push(
            DnType::CommonName,
            hosts.first().copied().unwrap_or("localhost"),
        );
        for host in hosts {
            params.subject_alt_names.push(match host.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    (*host)
                        .to_string()
                        .try_into()
                        .map_err(cert_err("serving cert name"))?,
                ),
            });
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, "serving cert")
    }

    /// A client certificate that Kubernetes authenticates as user `user` in `groups`
    /// (common name and organizations).
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<IssuedCert, TestEnvError> {
        let mut params = CertificateParams::new(Vec::new()).map_err(cert_err("client cert"))?;
        params.distinguished_name.push(DnType::CommonName, user);
        for (i, group) in groups.iter().enumerate() {
            // rcgen keeps one value per attribute type; further groups go in as the same OID
            // spelled as a custom type, which encodes to an identical `O=` attribute.
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(ORGANIZATION_OID.to_vec())
            };
            params.distinguished_name.push(ty, *group);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, "client cert")
    }

    fn issue(
        &self,
        params: CertificateParams,
        what: &'static str,
    ) -> Result<IssuedCert, TestEnvError> {
        let key = KeyPair::generate().map_err(cert_err(what))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(cert_err(what))?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A key pair for signing service-account tokens: private key and public key, PEM.
pub(crate) fn service_account_key() -> Result<(String, String), TestEnvError> {
    let key = KeyPair::generate().map_err(cert_err("service-account key"))?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
