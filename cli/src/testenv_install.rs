//! `kubeapp testenv install`: kube-apiserver and etcd for testenv, and the cluster mode's
//! kube-controller-manager, kube-scheduler and kwok, built from their Go modules into the cache
//! testenv searches, so generated projects' tests and `kubeapp run` work outside the kubeapp
//! repository.
//!
//! It is `testbin/build.sh` carried inside the binary: the same wrapper modules (their `go.mod`,
//! `go.sum` and `main.go`, embedded), the same versions, flags and cache directory, and the same
//! lock file, so the script and this command never build into the cache at the same time.
//!
//! The modules live in this crate (`cli/testbin/{apiserver,etcd,kwok}`), and the repository's
//! `testbin/build.sh` reads them from there: a published crate can only embed files of its own
//! package, and these belong to the command that builds them (the SDK's testenv only looks the
//! binaries up).
//!
//! - `$KUBEBUILDER_ASSETS` holding kube-apiserver and etcd: those are not built, that directory is
//!   printed; the cluster mode's binaries it lacks are built into the cache (testenv looks for
//!   each binary in both).
//! - Otherwise the cache (`${KUBEAPP_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/kubeapp}/k8s-<ver>-etcd-<ver>`):
//!   a binary already there is not built again; a missing one is built with `go build` from the
//!   module written into a temporary directory (minutes, once).
//!
//! Only the directory goes to stdout (`export KUBEBUILDER_ASSETS=$(kubeapp testenv install)`);
//! progress goes to stderr.

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kubeapp::sdk::testenv::binaries::{
    self, ASSETS_ENV, ETCD_VERSION, KUBE_APISERVER_VERSION, KWOK_VERSION,
};

/// `kubeapp testenv ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TestenvCommand {
    /// Build kube-apiserver, etcd and the cluster mode's kube-controller-manager, kube-scheduler
    /// and kwok (from their Go modules; Go >= 1.26 on PATH) into the cache testenv searches,
    /// unless they are there or in $KUBEBUILDER_ASSETS; print the directory.
    Install,
}

/// One binary's recipe: the Go wrapper module pinning it and what `go build` makes of it.
#[derive(Clone, Copy, Debug)]
pub struct Recipe {
    /// The binary's file name.
    pub binary: &'static str,
    /// The Go package built.
    pub package: &'static str,
    /// The wrapper module's files: name and text.
    pub files: [(&'static str, &'static str); 3],
    /// Whether the Kubernetes version is stamped in (`-X ...gitVersion=...`).
    pub stamp_kubernetes_version: bool,
}

/// How many of [`RECIPES`] make the plain control plane (the rest are the cluster mode's).
pub const CONTROL_PLANE_RECIPES: usize = 2;

/// The Kubernetes wrapper module's files (kube-apiserver, kube-controller-manager, kube-scheduler).
const KUBERNETES_MODULE: [(&str, &str); 3] = [
    ("go.mod", include_str!("../testbin/apiserver/go.mod")),
    ("go.sum", include_str!("../testbin/apiserver/go.sum")),
    ("main.go", include_str!("../testbin/apiserver/main.go")),
];

/// etcd, kube-apiserver, then the cluster mode's binaries (as `testbin/build.sh` builds them).
pub const RECIPES: [Recipe; 5] = [
    Recipe {
        binary: "etcd",
        package: "go.etcd.io/etcd/server/v3",
        files: [
            ("go.mod", include_str!("../testbin/etcd/go.mod")),
            ("go.sum", include_str!("../testbin/etcd/go.sum")),
            ("main.go", include_str!("../testbin/etcd/main.go")),
        ],
        stamp_kubernetes_version: false,
    },
    Recipe {
        binary: "kube-apiserver",
        package: "k8s.io/kubernetes/cmd/kube-apiserver",
        files: KUBERNETES_MODULE,
        stamp_kubernetes_version: true,
    },
    Recipe {
        binary: "kube-controller-manager",
        package: "k8s.io/kubernetes/cmd/kube-controller-manager",
        files: KUBERNETES_MODULE,
        stamp_kubernetes_version: true,
    },
    Recipe {
        binary: "kube-scheduler",
        package: "k8s.io/kubernetes/cmd/kube-scheduler",
        files: KUBERNETES_MODULE,
        stamp_kubernetes_version: true,
    },
    Recipe {
        binary: "kwok",
        package: "sigs.k8s.io/kwok/cmd/kwok",
        files: [
            ("go.mod", include_str!("../testbin/kwok/go.mod")),
            ("go.sum", include_str!("../testbin/kwok/go.sum")),
            ("main.go", include_str!("../testbin/kwok/main.go")),
        ],
        stamp_kubernetes_version: false,
    },
];

impl Recipe {
    /// The stamp of the module the binary is built from: the first 16 hex digits of the SHA-256
    /// of its `go.mod` followed by its `go.sum` (what `testbin/build.sh` writes, from
    /// `cat go.mod go.sum | sha256sum`). The cache directory is keyed by the Kubernetes and etcd
    /// versions only; the stamp tells a binary built from a changed module apart.
    pub fn module_stamp(&self) -> String {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        hash.update(self.files[0].1);
        hash.update(self.files[1].1);
        hash.finalize()
            .iter()
            .take(8)
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// The `go` arguments that build the binary into `out`.
    pub fn go_args(&self, out: &Path) -> Vec<String> {
        let mut ldflags = "-s -w".to_string();
        if self.stamp_kubernetes_version {
            let minor = KUBE_APISERVER_VERSION
                .trim_start_matches("v1.")
                .split('.')
                .next()
                .unwrap_or_default();
            for package in [
                "k8s.io/component-base/version",
                "k8s.io/client-go/pkg/version",
            ] {
                ldflags.push_str(&format!(
                    " -X {package}.gitVersion={KUBE_APISERVER_VERSION} -X {package}.gitMajor=1 \
                     -X {package}.gitMinor={minor}"
                ));
            }
        }
        vec![
            "build".into(),
            "-trimpath".into(),
            "-tags".into(),
            "selinux,notest,grpcnotrace".into(),
            "-ldflags".into(),
            ldflags,
            "-o".into(),
            out.display().to_string(),
            self.package.into(),
        ]
    }
}

/// Why the binaries are not there.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// No cache directory: neither KUBEAPP_CACHE_DIR, XDG_CACHE_HOME nor HOME is set.
    #[error("no cache directory: set KUBEAPP_CACHE_DIR (or XDG_CACHE_HOME or HOME)")]
    NoCacheDir,
    /// A file or directory could not be made.
    #[error("{path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// `go` is not on PATH.
    #[error(
        "go is not on PATH: install Go >= 1.26 (e.g. apt-get install golang-go, or from go.dev) \
         to build {binary}"
    )]
    NoGo {
        /// The binary that needed it.
        binary: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// `go build` failed.
    #[error("go build of {binary} ({package}) failed with {status}; its output is above")]
    Build {
        /// The binary.
        binary: &'static str,
        /// The package.
        package: &'static str,
        /// How it ended.
        status: std::process::ExitStatus,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `path` is an executable file.
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `$KUBEBUILDER_ASSETS` when it holds kube-apiserver and etcd.
pub fn assets_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os(ASSETS_ENV).filter(|d| !d.is_empty())?);
    RECIPES[..CONTROL_PLANE_RECIPES]
        .iter()
        .all(|recipe| executable(&dir.join(recipe.binary)))
        .then_some(dir)
}

/// Builds what is missing and returns the directory holding kube-apiserver and etcd (the cache,
/// or `$KUBEBUILDER_ASSETS`; the cluster mode's binaries are in one of the two).
///
/// # Errors
///
/// See [`InstallError`].
pub fn install() -> Result<PathBuf, InstallError> {
    let assets = assets_dir();
    let recipes = match &assets {
        Some(dir) => {
            eprintln!("testenv: using {ASSETS_ENV}={}", dir.display());
            let missing: Vec<&Recipe> = RECIPES[CONTROL_PLANE_RECIPES..]
                .iter()
                .filter(|recipe| !executable(&dir.join(recipe.binary)))
                .collect();
            if missing.is_empty() {
                return Ok(dir.clone());
            }
            missing
        }
        None => RECIPES.iter().collect(),
    };
    let dir = binaries::cache_dir().ok_or(InstallError::NoCacheDir)?;
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    // The lock file testbin/build.sh takes too (flock(1) on the same path).
    let lock_path = dir.join(".lock");
    let lock = File::options()
        .create(true)
        .append(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    flock(&lock).map_err(io(&lock_path))?;
    for recipe in recipes {
        build(recipe, &dir)?;
    }
    Ok(assets.unwrap_or(dir))
}

/// Holds an exclusive lock on `file` until it is closed.
#[allow(unsafe_code)]
fn flock(file: &File) -> std::io::Result<()> {
    // SAFETY: flock(2) on a file descriptor this function borrows; no memory is shared.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What the cache holds of one recipe's binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cached {
    /// The binary is there and was built from the recipe's module.
    Current,
    /// The binary is there but its stamp names another module (a changed `go.mod` or `go.sum`
    /// under the same version key, e.g. a kwok upgrade).
    Stale,
    /// No binary.
    Missing,
}

/// What `dir` holds of `recipe`'s binary. A binary cached before stamps existed (no
/// `.<binary>.stamp`) is taken as current and stamped, as `testbin/build.sh` does.
fn cached(recipe: &Recipe, dir: &Path) -> Result<Cached, InstallError> {
    if !executable(&dir.join(recipe.binary)) {
        return Ok(Cached::Missing);
    }
    let stamp_path = dir.join(format!(".{}.stamp", recipe.binary));
    match std::fs::read_to_string(&stamp_path) {
        Ok(stamp) if stamp.trim() == recipe.module_stamp() => Ok(Cached::Current),
        Ok(_) => Ok(Cached::Stale),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            write_stamp(recipe, dir)?;
            Ok(Cached::Current)
        }
        Err(error) => Err(io(&stamp_path)(error)),
    }
}

/// Records which module `recipe`'s cached binary was built from.
fn write_stamp(recipe: &Recipe, dir: &Path) -> Result<(), InstallError> {
    let path = dir.join(format!(".{}.stamp", recipe.binary));
    std::fs::write(&path, format!("{}\n", recipe.module_stamp())).map_err(io(&path))
}

/// Builds one binary into `dir` unless it is there, built from the recipe's module.
fn build(recipe: &Recipe, dir: &Path) -> Result<(), InstallError> {
    let target = dir.join(recipe.binary);
    match cached(recipe, dir)? {
        Cached::Current => {
            eprintln!("testenv: {} is cached in {}", recipe.binary, dir.display());
            return Ok(());
        }
        Cached::Stale => eprintln!(
            "testenv: {} in {} was built from another go.mod or go.sum: building it again",
            recipe.binary,
            dir.display()
        ),
        Cached::Missing => {}
    }
    let module = tempfile::Builder::new()
        .prefix("kubeapp-testbin-")
        .tempdir()
        .map_err(io(&std::env::temp_dir()))?;
    for (name, text) in recipe.files {
        let path = module.path().join(name);
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    eprintln!(
        "testenv: building {} {} (cold builds take minutes)",
        recipe.binary,
        match recipe.binary {
            "etcd" => ETCD_VERSION,
            "kwok" => KWOK_VERSION,
            _ => KUBE_APISERVER_VERSION,
        }
    );
    let start = Instant::now();
    let partial = dir.join(format!("{}.tmp", recipe.binary));
    let status = Command::new("go")
        .args(recipe.go_args(&partial))
        .current_dir(module.path())
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .stdout(std::process::Stdio::inherit())
        .status()
        .map_err(|source| InstallError::NoGo {
            binary: recipe.binary,
            source,
        })?;
    if !status.success() {
        return Err(InstallError::Build {
            binary: recipe.binary,
            package: recipe.package,
            status,
        });
    }
    std::fs::rename(&partial, &target).map_err(io(&target))?;
    write_stamp(recipe, dir)?;
    eprintln!(
        "testenv: built {} in {} s",
        recipe.binary,
        start.elapsed().as_secs()
    );
    Ok(())
}

/// `kubeapp testenv install`.
///
/// # Errors
///
/// See [`InstallError`].
pub fn run() -> Result<(), InstallError> {
    let dir = install()?;
    println!("{}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's `testbin/build.sh` (these tests run in the kubeapp checkout; the
    /// published crate does not carry the script).
    fn repository_build_script() -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbin/build.sh");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run in the kubeapp checkout)", path.display()))
    }

    #[test]
    fn the_recipes_are_the_scripts() {
        let script = repository_build_script();
        assert!(script.contains(&format!("K8S_VERSION={KUBE_APISERVER_VERSION}")));
        assert!(script.contains(&format!("ETCD_VERSION={ETCD_VERSION}")));
        for recipe in RECIPES {
            assert!(script.contains(recipe.package), "{}", recipe.package);
            let go_mod = recipe.files[0].1;
            assert!(go_mod.contains(recipe.package), "{} pins it", recipe.binary);
        }
        assert!(script.contains("-tags selinux,notest,grpcnotrace"));
        let args = RECIPES[1].go_args(Path::new("/c/kube-apiserver.tmp"));
        assert_eq!(
            args[..5],
            [
                "build",
                "-trimpath",
                "-tags",
                "selinux,notest,grpcnotrace",
                "-ldflags"
            ]
        );
        assert!(args[5].contains("k8s.io/component-base/version.gitVersion=v1.36.3"));
        assert!(args[5].contains("gitMinor=36"), "{}", args[5]);
        assert_eq!(
            args[6..],
            [
                "-o",
                "/c/kube-apiserver.tmp",
                "k8s.io/kubernetes/cmd/kube-apiserver"
            ]
        );
        assert_eq!(RECIPES[0].go_args(Path::new("/e"))[5], "-s -w");
        assert!(script.contains(&format!("KWOK_VERSION={KWOK_VERSION}")));
        assert!(
            RECIPES[4].files[0]
                .1
                .contains(&format!("sigs.k8s.io/kwok {KWOK_VERSION}")),
            "cli/testbin/kwok/go.mod pins kwok {KWOK_VERSION}"
        );
    }

    /// The stamp this command writes is the one `testbin/build.sh` writes for the same module
    /// (`cat go.mod go.sum | sha256sum`, 16 hex digits), so either may find the other's binary
    /// current.
    #[test]
    fn the_stamps_are_the_scripts() {
        let dirs = ["etcd", "apiserver", "apiserver", "apiserver", "kwok"];
        for (recipe, dir) in RECIPES.iter().zip(dirs) {
            let testbin = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testbin")
                .join(dir);
            let output = Command::new("sh")
                .arg("-c")
                .arg("cat go.mod go.sum | sha256sum | cut -c1-16")
                .current_dir(&testbin)
                .output()
                .expect("sh, cat, sha256sum and cut (coreutils)");
            let script = String::from_utf8_lossy(&output.stdout);
            assert_eq!(script.trim(), recipe.module_stamp(), "{}", recipe.binary);
        }
    }

    /// A binary whose stamp names another module is rebuilt; one cached before stamps existed
    /// is kept and stamped; a missing one is built.
    #[test]
    fn a_binary_built_from_another_module_is_stale() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let kwok = &RECIPES[4];
        assert_eq!(cached(kwok, dir.path()).expect("read"), Cached::Missing);
        let binary = dir.path().join("kwok");
        std::fs::write(&binary, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(cached(kwok, dir.path()).expect("read"), Cached::Current);
        let stamp = dir.path().join(".kwok.stamp");
        assert_eq!(
            std::fs::read_to_string(&stamp).expect("stamped").trim(),
            kwok.module_stamp()
        );
        std::fs::write(&stamp, "0123456789abcdef\n").expect("write");
        assert_eq!(cached(kwok, dir.path()).expect("read"), Cached::Stale);
    }
}
