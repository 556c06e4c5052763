//! The project's operator binary: built with cargo, found through `cargo metadata`, and run for
//! its printing commands (`crd`, `manifests`), which are what `generate`, `deploy` and `run`
//! read the project's YAML from.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::project::Project;

/// Why the binary could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    /// cargo could not be started.
    #[error("running cargo in {dir}")]
    Cargo {
        /// The project.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// `cargo build` failed.
    #[error("cargo build of {package} in {dir} failed ({status}); its errors are above")]
    Build {
        /// The package.
        package: String,
        /// The project.
        dir: PathBuf,
        /// How it ended.
        status: std::process::ExitStatus,
    },
    /// `cargo metadata` gave something unexpected.
    #[error("{manifest}: cargo metadata: {problem}")]
    Metadata {
        /// The project's Cargo.toml.
        manifest: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A command of the binary failed.
    #[error("{binary} {args} failed ({status}): {stderr}")]
    Command {
        /// The binary.
        binary: PathBuf,
        /// Its arguments.
        args: String,
        /// How it ended.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
}

/// The project's operator binary, built.
#[derive(Debug, Clone)]
pub struct OperatorBinary {
    path: PathBuf,
}

/// Which cargo profile the binary is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `cargo build` (`target/debug`): what `run`, `generate` and `deploy` use.
    Debug,
    /// `cargo build --release` (`target/release`): what `bench` measures, as deployed.
    Release,
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

impl OperatorBinary {
    /// `cargo build`s the project's package and finds its binary (the one named like the
    /// package, else its only one).
    ///
    /// # Errors
    ///
    /// A failed build, or a package without a binary.
    pub fn build(project: &Project) -> Result<Self, BinaryError> {
        Self::build_profile(project, Profile::Debug)
    }

    /// [`build`](Self::build) with `profile`.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_profile(project: &Project, profile: Profile) -> Result<Self, BinaryError> {
        let manifest = project.dir.join("Cargo.toml");
        let cargo_error = |source| BinaryError::Cargo {
            dir: project.dir.clone(),
            source,
        };
        let metadata_error = |problem: String| BinaryError::Metadata {
            manifest: manifest.clone(),
            problem,
        };
        let metadata = cargo()
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--manifest-path",
            ])
            .arg(&manifest)
            .stderr(Stdio::inherit())
            .output()
            .map_err(cargo_error)?;
        if !metadata.status.success() {
            return Err(metadata_error(format!("failed ({})", metadata.status)));
        }
        let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout)
            .map_err(|e| metadata_error(format!("not JSON: {e}")))?;
        let target_dir = metadata["target_directory"]
            .as_str()
            .ok_or_else(|| metadata_error("no target_directory".into()))?;
        let canonical = manifest.canonicalize().unwrap_or_else(|_| manifest.clone());
        let package = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(canonical.as_path()))
            .ok_or_else(|| metadata_error(format!("no package {}", project.name)))?;
        let bins: Vec<&str> = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
            })
            .filter_map(|t| t["name"].as_str())
            .collect();
        let bin = match bins.as_slice() {
            [only] => *only,
            many => many
                .iter()
                .copied()
                .find(|name| *name == project.name)
                .ok_or_else(|| {
                    metadata_error(format!(
                        "package {} has binaries {many:?}, none named like it",
                        project.name
                    ))
                })?,
        };
        let (release, profile_dir) = match profile {
            Profile::Debug => (None, "debug"),
            Profile::Release => (Some("--release"), "release"),
        };
        eprintln!(
            "building: cargo build {}--bin {bin} (in {})",
            release.map_or(String::new(), |flag| format!("{flag} ")),
            project.dir.display()
        );
        let status = cargo()
            .args(["build", "--bin", bin])
            .args(release)
            .arg("--manifest-path")
            .arg(&manifest)
            .stdout(Stdio::null())
            .status()
            .map_err(cargo_error)?;
        if !status.success() {
            return Err(BinaryError::Build {
                package: project.name.clone(),
                dir: project.dir.clone(),
                status,
            });
        }
        Ok(Self {
            path: Path::new(target_dir).join(profile_dir).join(bin),
        })
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs a printing command and returns its stdout.
    ///
    /// # Errors
    ///
    /// When it cannot run or fails; the error carries its stderr.
    pub fn output<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String, BinaryError> {
        self.output_in(args, None)
    }

    /// [`output`](Self::output), with `KUBECONFIG` set to `kubeconfig` when given (the binary
    /// then talks to that cluster).
    ///
    /// # Errors
    ///
    /// As [`output`](Self::output).
    pub fn output_in<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        kubeconfig: Option<&Path>,
    ) -> Result<String, BinaryError> {
        let shown = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let failed = |status: String, stderr: String| BinaryError::Command {
            binary: self.path.clone(),
            args: shown.clone(),
            status,
            stderr,
        };
        let mut command = Command::new(&self.path);
        command.args(args).stdin(Stdio::null());
        if let Some(kubeconfig) = kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        let output = command
            .output()
            .map_err(|e| failed("not started".into(), e.to_string()))?;
        if !output.status.success() {
            return Err(failed(
                output.status.to_string(),
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ));
        }
        String::from_utf8(output.stdout)
            .map_err(|_| failed("success".into(), "printed something not UTF-8".into()))
    }
}
