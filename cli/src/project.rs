//! A kubeapp project on disk: its Cargo.toml (package name, `[package.metadata.kubeapp]`) and
//! its manifest, read by `kind add`, `generate`, `run` and `deploy`.

use std::path::{Path, PathBuf};

use kubeapp::sdk::manifest::{Format, ManifestData};

use crate::template::Flavor;

/// What is wrong with the project, naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// A file could not be read.
    #[error("{path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Cargo.toml is not TOML.
    #[error("{path}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message (with the line).
        source: toml::de::Error,
    },
    /// A field is missing or has the wrong type.
    #[error("{path}: {field}: {problem}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, dotted.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The manifest does not parse or validate.
    #[error("{path}: {message}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// The parser's or validator's message.
        message: String,
    },
}

/// A project: a directory with a Cargo.toml whose package uses kubeapp's `Operator`.
#[derive(Debug, Clone)]
pub struct Project {
    /// The project's root.
    pub dir: PathBuf,
    /// The package's (and its binary's) name.
    pub name: String,
    /// The template it was made from (`kind add` uses it for new kinds).
    pub flavor: Flavor,
    /// The manifest file, relative to `dir`.
    pub manifest_file: PathBuf,
}

impl Project {
    /// Reads the project in `dir`.
    ///
    /// # Errors
    ///
    /// A Cargo.toml that cannot be read, or lacks `package.name`; a
    /// `package.metadata.kubeapp.template` that is not one of the templates.
    pub fn load(dir: &Path) -> Result<Self, ProjectError> {
        let path = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| ProjectError::Read {
            path: path.clone(),
            source,
        })?;
        let table: toml::Table = text.parse().map_err(|source| ProjectError::Toml {
            path: path.clone(),
            source,
        })?;
        let field = |field: &'static str, problem: &str| ProjectError::Field {
            path: path.clone(),
            field,
            problem: problem.to_string(),
        };
        let package = table
            .get("package")
            .ok_or_else(|| field("package", "missing: is this a kubeapp project's root?"))?;
        let name = package
            .get("name")
            .and_then(toml::Value::as_str)
            .ok_or_else(|| field("package.name", "missing or not a string"))?
            .to_string();
        let metadata = package.get("metadata").and_then(|m| m.get("kubeapp"));
        let flavor = match metadata.and_then(|m| m.get("template")) {
            None => Flavor::Reconciler,
            Some(value) => value.as_str().and_then(Flavor::from_name).ok_or_else(|| {
                field(
                    "package.metadata.kubeapp.template",
                    "not one of reconciler, watcher, components, phases",
                )
            })?,
        };
        let manifest_file = match metadata.and_then(|m| m.get("manifest")) {
            None => PathBuf::from("manifest.yaml"),
            Some(value) => PathBuf::from(value.as_str().ok_or_else(|| {
                field("package.metadata.kubeapp.manifest", "not a string (a path)")
            })?),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            name,
            flavor,
            manifest_file,
        })
    }

    /// The manifest's path.
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join(&self.manifest_file)
    }

    /// The manifest's text.
    ///
    /// # Errors
    ///
    /// When it cannot be read.
    pub fn manifest_text(&self) -> Result<String, ProjectError> {
        let path = self.manifest_path();
        std::fs::read_to_string(&path).map_err(|source| ProjectError::Read { path, source })
    }

    /// The manifest, parsed and validated.
    ///
    /// # Errors
    ///
    /// When it cannot be read, parsed or validated (the message names the field).
    pub fn manifest(&self) -> Result<ManifestData, ProjectError> {
        parse_manifest(&self.manifest_path(), &self.manifest_text()?)
    }
}

/// `text` as the manifest at `path`.
///
/// # Errors
///
/// The parser's or validator's message, with the path.
pub fn parse_manifest(path: &Path, text: &str) -> Result<ManifestData, ProjectError> {
    ManifestData::parse(text, Format::Yaml, &path.display().to_string()).map_err(|error| {
        ProjectError::Manifest {
            path: path.to_path_buf(),
            message: kubeapp::sdk::error::error_chain(&error),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_the_field() {
        let dir = tempfile::tempdir().expect("temp dir");
        let write =
            |text: &str| std::fs::write(dir.path().join("Cargo.toml"), text).expect("write");
        write("[package]\nname = \"a\"\n[package.metadata.kubeapp]\ntemplate = \"operator\"\n");
        let err = Project::load(dir.path())
            .expect_err("bad template")
            .to_string();
        assert!(
            err.ends_with(
                "Cargo.toml: package.metadata.kubeapp.template: not one of reconciler, \
                           watcher, components, phases"
            ),
            "{err}"
        );
        write("[workspace]\n");
        let err = Project::load(dir.path())
            .expect_err("no package")
            .to_string();
        assert!(err.contains("Cargo.toml: package: missing"), "{err}");
        write("[package]\nname = \"a\"\n");
        let project = Project::load(dir.path()).expect("a project");
        assert_eq!(project.flavor, Flavor::Reconciler);
        std::fs::write(
            project.manifest_path(),
            "appName: a\ngroup: 1\nversions: nope\n",
        )
        .expect("write");
        let err = project.manifest().expect_err("bad manifest").to_string();
        assert!(
            err.starts_with(&project.manifest_path().display().to_string()),
            "{err}"
        );
    }
}
