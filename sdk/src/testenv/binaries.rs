//! Finding the control-plane binaries: kube-apiserver and etcd, and in cluster mode
//! kube-controller-manager, kube-scheduler and kwok. Each is looked up on its own, so a
//! `$KUBEBUILDER_ASSETS` holding envtest's two binaries works beside a cache holding the others.
//!
//! Search order, first hit wins, each directory must hold the binary as an executable file:
//!
//! 1. the directory set with [`TestEnvBuilder::binary_dir`](super::TestEnvBuilder::binary_dir);
//! 2. `$KUBEBUILDER_ASSETS` (the directory controller-runtime's envtest uses), when set;
//! 3. the cache that kubeapp's `testbin/build.sh` fills:
//!    `${KUBEAPP_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/kubeapp}/k8s-<version>-etcd-<version>`.
//!
//! `PATH` is deliberately not searched: a stray system etcd 3.4 from a distribution package would be
//! picked up silently and change how the apiserver behaves.

use std::path::{Path, PathBuf};

use super::TestEnvError;

/// The kube-apiserver version kubeapp tests against, as built by `testbin/build.sh`.
pub const KUBE_APISERVER_VERSION: &str = "v1.36.3";
/// The etcd version kubeapp tests against, as built by `testbin/build.sh`.
pub const ETCD_VERSION: &str = "v3.6.16";
/// The kwok version the cluster mode runs, as built by `testbin/build.sh`.
pub const KWOK_VERSION: &str = "v0.8.0";
/// The environment variable naming a directory that holds `kube-apiserver` and `etcd`.
pub const ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";
/// The script in the kubeapp repository that builds both binaries into the cache.
pub(crate) const BUILD_SCRIPT: &str = "testbin/build.sh";

/// The directory `testbin/build.sh` builds into, from the same environment variables it reads.
pub fn cache_dir() -> Option<PathBuf> {
    let root = match std::env::var_os("KUBEAPP_CACHE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => match std::env::var_os("XDG_CACHE_HOME") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("kubeapp"),
            _ => PathBuf::from(std::env::var_os("HOME")?)
                .join(".cache")
                .join("kubeapp"),
        },
    };
    Some(root.join(format!("k8s-{KUBE_APISERVER_VERSION}-etcd-{ETCD_VERSION}")))
}

/// The directories searched for binaries, in order.
pub(crate) fn search_dirs(explicit: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = explicit {
        dirs.push(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(ASSETS_ENV).filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(dir));
    }
    if let Some(dir) = cache_dir() {
        dirs.push(dir);
    }
    dirs
}

/// `Ok` when every binary in `names` is in the default places (no
/// [`binary_dir`](super::TestEnvBuilder::binary_dir)); otherwise the error naming the first
/// missing one. `kubeapp run` asks this before choosing the cluster mode.
pub fn check_available(names: &[&'static str]) -> Result<(), TestEnvError> {
    let dirs = search_dirs(None);
    names
        .iter()
        .try_for_each(|name| find(name, &dirs).map(drop))
}

/// Finds `name` in the first of `dirs` that holds it as an executable file.
pub(crate) fn find(name: &'static str, dirs: &[PathBuf]) -> Result<PathBuf, TestEnvError> {
    dirs.iter()
        .map(|dir| dir.join(name))
        .find(|path| is_executable(path))
        .ok_or_else(|| TestEnvError::BinaryNotFound {
            binary: name,
            searched: dirs.to_vec(),
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_error_names_binary_dirs_variable_and_script() {
        let dirs = vec![
            PathBuf::from("/nonexistent/a"),
            PathBuf::from("/nonexistent/b"),
        ];
        let err = find("kube-apiserver", &dirs).expect_err("no binary there");
        let text = err.to_string();
        assert!(text.contains("kube-apiserver"), "{text}");
        assert!(
            text.contains("/nonexistent/a") && text.contains("/nonexistent/b"),
            "{text}"
        );
        assert!(text.contains(ASSETS_ENV), "{text}");
        assert!(text.contains(BUILD_SCRIPT), "{text}");
    }

    #[test]
    fn explicit_dir_is_searched_first() {
        let dirs = search_dirs(Some(Path::new("/explicit")));
        assert_eq!(
            dirs.first().map(PathBuf::as_path),
            Some(Path::new("/explicit"))
        );
    }
}
