//! The webhook server's certificate, reloaded when its files change.
//!
//! Every TLS handshake asks [`ReloadingCert`] for the certificate. It compares the files' identity
//! (modification time, size and inode) with what it loaded last; when either file changed it
//! loads the pair again, so the handshake after a rotation (cert-manager renewing a Secret, an
//! operator replacing the files) already uses the new certificate. A `stat` per handshake costs
//! microseconds, and no watcher thread is needed. When the new files do not load (a rotation half
//! written, a key that does not match), the previous certificate stays in use and a warning is
//! logged; the next handshake tries again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::WebhookError;

/// What identifies one version of a file on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

struct Loaded {
    key: Arc<CertifiedKey>,
    stamps: (FileStamp, FileStamp),
}

/// A certificate resolver that reloads the certificate and key files when they change.
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Loads the PEM certificate chain and private key; an error names the file and the problem.
    pub fn load(
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, WebhookError> {
        let (cert_path, key_path) = (cert_path.into(), key_path.into());
        let loaded = load_pair(&cert_path, &key_path, &provider)?;
        Ok(Self {
            cert_path,
            key_path,
            provider,
            loaded: RwLock::new(loaded),
        })
    }

    /// The certificate to use now, reloading it first when the files changed.
    fn current(&self) -> Arc<CertifiedKey> {
        let on_disk = (stamp(&self.cert_path), stamp(&self.key_path));
        let read = self
            .loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let unchanged = matches!(&on_disk, (Ok(c), Ok(k)) if (*c, *k) == read.stamps);
        if unchanged || on_disk.0.is_err() || on_disk.1.is_err() {
            // Missing files mid-rotation: keep serving what we have.
            return read.key.clone();
        }
        drop(read);
        match load_pair(&self.cert_path, &self.key_path, &self.provider) {
            Ok(fresh) => {
                tracing::info!(cert = %self.cert_path.display(), "webhook certificate reloaded");
                let key = fresh.key.clone();
                *self
                    .loaded
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
                key
            }
            Err(err) => {
                tracing::warn!(%err, "webhook certificate files changed but do not load; keeping the previous certificate");
                self.loaded
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .key
                    .clone()
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn load_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Loaded, WebhookError> {
    let invalid = |path: &Path, message: String| WebhookError::Certificate {
        path: path.to_path_buf(),
        message,
    };
    // Stamps first: if a file changes while we read it, the next handshake sees a new stamp and
    // reads it again.
    let stamps = (
        stamp(cert_path).map_err(|e| invalid(cert_path, e.to_string()))?,
        stamp(key_path).map_err(|e| invalid(key_path, e.to_string()))?,
    );
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_path)
        .map_err(|e| invalid(cert_path, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert_path, e.to_string()))?;
    if chain.is_empty() {
        return Err(invalid(cert_path, "no PEM certificate in the file".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key_path).map_err(|e| invalid(key_path, e.to_string()))?;
    let certified = CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| invalid(cert_path, format!("certificate and key do not fit: {e}")))?;
    Ok(Loaded {
        key: Arc::new(certified),
        stamps,
    })
}
