//! `kubeapp kind add`: another kind in an existing project, with the project's template: its
//! module (type and handler stub), its sample, its manifest entry and its registration (a
//! module line in `src/main.rs`, a CRD line and a managed-kind line in `src/kinds.rs`, each
//! inserted above the `kubeapp kind add` comment that `init` wrote).
//!
//! Every change is computed before anything is written: a problem (a kind that exists, a
//! missing marker comment, a manifest that would not validate) leaves the project as it was.

use std::path::{Path, PathBuf};

use crate::init::{self, InitError};
use crate::names::{self, NameError};
use crate::project::{self, Project, ProjectError};
use crate::template::{TemplateError, Values};

/// `kubeapp kind ...`.
#[derive(Debug, clap::Subcommand)]
pub enum KindCommand {
    /// Add a kind to the project: its type and handler stub (src/<kind>.rs), its manifest
    /// entry, its registration (src/main.rs, src/kinds.rs) and a sample.
    Add(KindAddArgs),
}

/// The settings of `kubeapp kind add`.
#[derive(Debug, clap::Args)]
pub struct KindAddArgs {
    /// The new kind, UpperCamelCase (e.g. Gadget).
    #[arg(long)]
    pub kind: String,
    /// Its version (added to the manifest when it has no such version yet).
    #[arg(long, default_value = "v1")]
    pub version: String,
    /// The project's directory.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

/// Why `kind add` changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum KindAddError {
    /// The project cannot be read.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// The kind's name is not valid.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A template did not render.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The kind is in the manifest already, or its module exists.
    #[error("{path}: the kind {kind} is there already")]
    Exists {
        /// The file that has it.
        path: PathBuf,
        /// The kind.
        kind: String,
    },
    /// A file lacks the comment new lines go above.
    #[error("{path}: no line with {marker:?} to insert the kind above (was it removed?)")]
    NoMarker {
        /// The file.
        path: PathBuf,
        /// The comment looked for.
        marker: &'static str,
    },
    /// The manifest has no `versions:` line to add the kind under.
    #[error("{path}: versions: no `versions:` line at the start of a line to add {kind} under")]
    NoVersions {
        /// The manifest.
        path: PathBuf,
        /// The kind.
        kind: String,
    },
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] InitError),
}

/// The comment in `src/main.rs` that module lines go above.
pub const MODULE_MARKER: &str = "// kubeapp kind add: kind modules above this line.";
/// The comment in `src/kinds.rs` that CRD lines go above.
pub const CRD_MARKER: &str = "// kubeapp kind add: CRD types above this line.";
/// The comment in `src/kinds.rs` that managed-kind lines go above.
pub const KIND_MARKER: &str = "// kubeapp kind add: managed kinds above this line.";

/// `text` with `line` inserted above the line holding `marker`.
fn insert_above(
    path: &Path,
    text: &str,
    marker: &'static str,
    line: &str,
) -> Result<String, KindAddError> {
    let at = text.find(marker).ok_or_else(|| KindAddError::NoMarker {
        path: path.to_path_buf(),
        marker,
    })?;
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    Ok(format!(
        "{}{line}{}",
        &text[..line_start],
        &text[line_start..]
    ))
}

/// The manifest's text with `kind` added to `version` (a new version entry when there is none).
pub fn add_to_manifest(
    path: &Path,
    text: &str,
    kind: &str,
    version: &str,
) -> Result<String, KindAddError> {
    let entry = format!(
        "      - kind: {kind}\n        plural: {}\n",
        names::plural(kind)
    );
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let version_line = lines.iter().position(|line| {
        let line = line.trim();
        line == format!("- name: {version}") || line == format!("- name: \"{version}\"")
    });
    let kinds_line = version_line.and_then(|start| {
        lines[start + 1..]
            .iter()
            .take_while(|line| !line.trim_start().starts_with("- name:"))
            .position(|line| line.trim() == "kinds:")
            .map(|offset| start + 1 + offset)
    });
    let (at, insert) = match kinds_line {
        Some(at) => (at + 1, entry),
        None => {
            let at = lines
                .iter()
                .position(|line| line.trim_end() == "versions:")
                .ok_or_else(|| KindAddError::NoVersions {
                    path: path.to_path_buf(),
                    kind: kind.to_string(),
                })?;
            (at + 1, format!("  - name: {version}\n    kinds:\n{entry}"))
        }
    };
    let mut out: String = lines[..at].concat();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&insert);
    out.push_str(&lines[at..].concat());
    Ok(out)
}

/// `text` with the module line `line` among the `mod` lines above `marker`, kept sorted as
/// rustfmt sorts them.
fn insert_module(
    path: &Path,
    text: &str,
    marker: &'static str,
    line: &str,
) -> Result<String, KindAddError> {
    let with_line = insert_above(path, text, marker, line)?;
    let mut lines: Vec<&str> = with_line.split_inclusive('\n').collect();
    let Some(marker_at) = lines.iter().position(|l| l.contains(marker)) else {
        return Ok(with_line);
    };
    let block_start = lines[..marker_at]
        .iter()
        .rposition(|l| !l.starts_with("mod "))
        .map_or(0, |i| i + 1);
    lines[block_start..marker_at].sort_unstable();
    Ok(lines.concat())
}

fn read(path: &Path) -> Result<String, KindAddError> {
    std::fs::read_to_string(path).map_err(|source| {
        KindAddError::Project(ProjectError::Read {
            path: path.to_path_buf(),
            source,
        })
    })
}

/// `kubeapp kind add`.
///
/// # Errors
///
/// See [`KindAddError`].
pub fn run(args: &KindAddArgs) -> Result<(), KindAddError> {
    names::kind(&args.kind)?;
    names::version(&args.version)?;
    let project = Project::load(&args.dir)?;
    let manifest_path = project.manifest_path();
    let manifest = project.manifest()?;
    if manifest.kinds().iter().any(|k| k.kind == args.kind) {
        return Err(KindAddError::Exists {
            path: manifest_path,
            kind: args.kind.clone(),
        });
    }
    let mut values = Values::new();
    init::kind_values(&mut values, &args.kind, &manifest.group, &args.version);
    let files = init::kind_files(project.flavor, &values)?;
    for (path, _) in &files {
        if project.dir.join(path).exists() {
            return Err(KindAddError::Exists {
                path: project.dir.join(path),
                kind: args.kind.clone(),
            });
        }
    }

    let (module, crd, managed) = init::registration(&args.kind);
    let main_path = project.dir.join("src/main.rs");
    let main = insert_module(&main_path, &read(&main_path)?, MODULE_MARKER, &module)?;
    let kinds_path = project.dir.join("src/kinds.rs");
    let kinds = read(&kinds_path)?;
    let kinds = insert_above(&kinds_path, &kinds, CRD_MARKER, &crd)?;
    let kinds = insert_above(&kinds_path, &kinds, KIND_MARKER, &managed)?;
    let new_manifest = add_to_manifest(
        &manifest_path,
        &project.manifest_text()?,
        &args.kind,
        &args.version,
    )?;
    project::parse_manifest(&manifest_path, &new_manifest)?;

    let mut changed = files;
    changed.push(("src/main.rs".into(), main));
    changed.push(("src/kinds.rs".into(), kinds));
    changed.push((project.manifest_file.display().to_string(), new_manifest));
    init::write(&project.dir, &changed, true)?;
    println!(
        "added kind {}.{}/{} ({} template):",
        args.kind,
        manifest.group,
        args.version,
        project.flavor.name()
    );
    for (path, _) in &changed {
        println!("  {path}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "# mine\nappName: a\ngroup: example.com\nversions:\n  - name: v1\n    \
                            kinds:\n      - kind: Widget\n        plural: widgets\n";

    #[test]
    fn a_kind_joins_its_version_or_a_new_one() {
        let path = Path::new("manifest.yaml");
        let same = add_to_manifest(path, MANIFEST, "Gadget", "v1").expect("added");
        let parsed = project::parse_manifest(path, &same).expect("valid");
        let kinds: Vec<&str> = parsed.kinds().iter().map(|k| k.kind).collect();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert!(same.starts_with("# mine\n"), "comments are kept");
        let other = add_to_manifest(path, MANIFEST, "Gadget", "v2").expect("added");
        let parsed = project::parse_manifest(path, &other).expect("valid");
        assert_eq!(parsed.versions.len(), 2, "{other}");
    }

    #[test]
    fn lines_go_above_the_marker_and_a_missing_marker_is_named() {
        let text = format!("fn x() {{\n    {CRD_MARKER}\n}}\n");
        let path = Path::new("src/kinds.rs");
        let out = insert_above(path, &text, CRD_MARKER, "    a();\n").expect("inserted");
        assert_eq!(out, format!("fn x() {{\n    a();\n    {CRD_MARKER}\n}}\n"));
        let err = insert_above(path, "fn x() {}", CRD_MARKER, "a();\n").expect_err("no marker");
        assert!(
            err.to_string().starts_with("src/kinds.rs: no line"),
            "{err}"
        );
    }
}
