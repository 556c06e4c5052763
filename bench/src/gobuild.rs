//! Building the grafana-app-sdk contender (`bench/go-operator`) with `go build`, into a cache
//! outside the checkout so that a second run starts at once.
//!
//! The binary lands in `${KUBEAPP_CACHE_DIR:-~/.cache/kubeapp}/bench/go-operator-<key>/`, where
//! `<key>` is a hash of the module's `go.mod`, `go.sum` and `main.go`: a changed dependency or a
//! changed operator builds anew, anything else reuses the binary. The build uses the local Go
//! toolchain (`GOTOOLCHAIN=local`) and the committed `go.sum` (`-mod=readonly`).

use std::hash::Hasher as _;
use std::path::{Path, PathBuf};

/// The files whose contents key the cache.
const KEY_FILES: [&str; 3] = ["go.mod", "go.sum", "main.go"];

/// The name of the built binary.
pub const BINARY: &str = "kubeapp-bench-go-operator";

/// The Go contender could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GoBuildError {
    /// `go` is not on PATH.
    #[error(
        "Go is needed to build the grafana-app-sdk contender and `go` was not found on PATH: \
         install Go >= 1.26 (a prerequisite of kubeapp, see README), pass a built operator with \
         --go-operator PATH, or leave the contender out with --contenders kubeapp,kube-runtime,floor"
    )]
    GoMissing,
    /// A module file could not be read.
    #[error("reading {path} (is --go-module-dir the bench/go-operator directory?)")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No cache directory could be found.
    #[error("no cache directory: set KUBEAPP_CACHE_DIR or HOME")]
    NoCacheDir,
    /// The cache directory could not be created or written.
    #[error("writing the cache directory {path}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `go build` failed.
    #[error(
        "`go build` of the grafana-app-sdk contender in {dir} failed ({status}):\n{output}\n\
         fix the module, or run `cd {dir} && GOTOOLCHAIN=local go build -trimpath .` to see the error"
    )]
    Build {
        /// The module directory.
        dir: PathBuf,
        /// The exit status.
        status: String,
        /// What `go build` printed.
        output: String,
    },
}

/// The cache root: `$KUBEAPP_CACHE_DIR`, else `~/.cache/kubeapp`.
pub fn cache_root() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KUBEAPP_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("kubeapp"))
}

/// The cache key of the module in `dir`.
///
/// # Errors
///
/// When one of the key files cannot be read.
pub fn cache_key(dir: &Path) -> Result<String, GoBuildError> {
    // FNV-1a (`fnv`), fed bytes alone: stable across Rust versions, which `DefaultHasher` is not
    // promised to be.
    let mut hasher = fnv::FnvHasher::default();
    for name in KEY_FILES {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|source| GoBuildError::Read { path, source })?;
        hasher.write(name.as_bytes());
        hasher.write(&(bytes.len() as u64).to_le_bytes());
        hasher.write(&bytes);
    }
    Ok(format!("{:016x}", hasher.finish()))
}

/// The built operator for the module in `module_dir`: from the cache, or built now.
///
/// # Errors
///
/// See [`GoBuildError`]; a missing Go says how to get around it.
pub async fn operator_binary(module_dir: &Path) -> Result<PathBuf, GoBuildError> {
    let key = cache_key(module_dir)?;
    let dir = cache_root()
        .ok_or(GoBuildError::NoCacheDir)?
        .join("bench")
        .join(format!("go-operator-{key}"));
    let binary = dir.join(BINARY);
    if binary.is_file() {
        tracing::info!(binary = %binary.display(), "grafana-app-sdk contender cached");
        return Ok(binary);
    }
    let cache = |source| GoBuildError::Cache {
        path: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(cache)?;
    let partial = dir.join(format!("{BINARY}.partial"));
    eprintln!(
        "building the grafana-app-sdk contender into {} (minutes the first time)",
        dir.display()
    );
    let output = tokio::process::Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&partial)
        .arg(".")
        .current_dir(module_dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .await
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => GoBuildError::GoMissing,
            _ => GoBuildError::Build {
                dir: module_dir.to_path_buf(),
                status: "not started".to_string(),
                output: source.to_string(),
            },
        })?;
    if !output.status.success() {
        return Err(GoBuildError::Build {
            dir: module_dir.to_path_buf(),
            status: output.status.to_string(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    std::fs::rename(&partial, &binary).map_err(cache)?;
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_any_key_file_and_only_then() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in KEY_FILES {
            std::fs::write(dir.path().join(name), name).expect("write");
        }
        let first = cache_key(dir.path()).expect("key");
        std::fs::write(dir.path().join("README"), "other").expect("write");
        assert_eq!(cache_key(dir.path()).expect("key"), first);
        std::fs::write(dir.path().join("go.sum"), "changed").expect("write");
        assert_ne!(cache_key(dir.path()).expect("key"), first);
    }

    #[test]
    fn a_missing_module_file_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = cache_key(dir.path()).expect_err("no files");
        assert!(err.to_string().contains("go.mod"), "{err}");
    }
}
