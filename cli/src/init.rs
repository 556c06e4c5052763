//! `kubeapp init`: a new operator project from a template.
//!
//! Every file is rendered in memory first ([`plan`]), so a template or name problem writes
//! nothing; then the files are written ([`write`]). A directory that exists and is not empty is
//! refused unless `--force` (then files of the same name are overwritten, others are kept).

use std::path::{Path, PathBuf};

use crate::names::{self, NameError};
use crate::template::{self, COMMON, Flavor, SAMPLE, TemplateError, Values};

/// The git URL of kubeapp that generated projects depend on without `--kubeapp-path`: the
/// `repository` of this workspace's Cargo.toml.
pub const KUBEAPP_GIT_URL: &str = env!("CARGO_PKG_REPOSITORY");

/// The settings of `kubeapp init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The project's directory, created if missing; its name is the crate's, the binary's and
    /// the app's name (lowercase letters, digits and '-').
    pub dir: PathBuf,
    /// The first kind, UpperCamelCase (e.g. Widget).
    #[arg(long)]
    pub kind: String,
    /// The kinds' API group, a DNS name (e.g. example.com).
    #[arg(long)]
    pub group: String,
    /// The kind's version.
    #[arg(long, default_value = "v1")]
    pub version: String,
    /// What the handler is.
    #[arg(long, value_enum, default_value = "reconciler")]
    pub template: Flavor,
    /// A kubeapp checkout to depend on (a path dependency); default: kubeapp's git repository
    /// (see docs/cli.md).
    #[arg(long, value_name = "PATH")]
    pub kubeapp_path: Option<PathBuf>,
    /// Write into a directory that is not empty (files of the same name are overwritten).
    #[arg(long)]
    pub force: bool,
}

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A name is not valid.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A template did not render (a bug of this program).
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The directory holds files already.
    #[error("{0}: the directory is not empty (pass --force to write into it anyway)")]
    NotEmpty(PathBuf),
    /// `--kubeapp-path` is not a kubeapp checkout.
    #[error("--kubeapp-path {path}: {problem}")]
    KubeappPath {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InitError + '_ {
    move |source| InitError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One file to write: its path relative to the project and its text.
pub type PlannedFile = (String, String);

/// The placeholders of one kind (for `init` and `kind add`).
pub fn kind_values(values: &mut Values, kind: &str, group: &str, version: &str) {
    let snake = names::snake(kind);
    values.insert("kind", kind.to_string());
    values.insert("group", group.to_string());
    values.insert("version", version.to_string());
    values.insert("kind_snake_dashed", snake.replace('_', "-"));
    values.insert("kind_snake", snake);
    values.insert("plural", names::plural(kind));
}

/// The module declaration, the CRD line and the managed-kind line that register a kind.
pub fn registration(kind: &str) -> (String, String, String) {
    let module = names::snake(kind);
    (
        format!("mod {module};\n"),
        format!("    operator = operator.crd::<crate::{module}::{kind}>();\n"),
        format!("    config = config.managed_kind(crate::{module}::managed_kind());\n"),
    )
}

/// The kind's module and sample.
///
/// # Errors
///
/// A template that does not render.
pub fn kind_files(flavor: Flavor, values: &Values) -> Result<Vec<PlannedFile>, TemplateError> {
    [flavor.kind_module(), SAMPLE]
        .iter()
        .map(|file| {
            Ok((
                template::render(file.source, file.path, values)?,
                template::render(file.source, file.text, values)?,
            ))
        })
        .collect()
}

/// The `kubeapp` dependency's source in the generated Cargo.toml, and its comment.
fn kubeapp_source(path: Option<&Path>) -> Result<(String, String), InitError> {
    let Some(path) = path else {
        return Ok((
            format!("git = {}", toml::Value::String(KUBEAPP_GIT_URL.into())),
            "kubeapp from its git repository (kubeapp init --kubeapp-path uses a checkout)".into(),
        ));
    };
    let problem = |problem: String| InitError::KubeappPath {
        path: path.to_path_buf(),
        problem,
    };
    let absolute = path
        .canonicalize()
        .map_err(|e| problem(format!("cannot be resolved: {e}")))?;
    let manifest = std::fs::read_to_string(absolute.join("Cargo.toml"))
        .map_err(|e| problem(format!("Cargo.toml cannot be read: {e}")))?;
    let name = manifest.parse::<toml::Table>().ok().and_then(|table| {
        table
            .get("package")?
            .get("name")?
            .as_str()
            .map(String::from)
    });
    if name.as_deref() != Some("kubeapp") {
        return Err(problem(format!(
            "Cargo.toml's package.name is {name:?}, not \"kubeapp\": give the checkout's root"
        )));
    }
    let shown = absolute.to_string_lossy().into_owned();
    Ok((
        format!("path = {}", toml::Value::String(shown)),
        "kubeapp from a local checkout (kubeapp init --kubeapp-path)".into(),
    ))
}

/// Every file of the new project, rendered; nothing is written.
///
/// # Errors
///
/// A name that is not valid, a `--kubeapp-path` that is not a kubeapp checkout, or a template
/// that does not render.
pub fn plan(args: &InitArgs) -> Result<Vec<PlannedFile>, InitError> {
    let crate_name = args
        .dir
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    names::app(&crate_name)?;
    names::kind(&args.kind)?;
    names::group(&args.group)?;
    names::version(&args.version)?;
    let (dependency, note) = kubeapp_source(args.kubeapp_path.as_deref())?;
    let (module, crd, managed) = registration(&args.kind);

    let mut values = Values::new();
    kind_values(&mut values, &args.kind, &args.group, &args.version);
    values.insert("crate_name", crate_name.clone());
    values.insert("app_name", crate_name);
    values.insert("template", args.template.name().to_string());
    values.insert("kubeapp_dependency", dependency);
    values.insert("kubeapp_source_note", note);
    values.insert("kubeapp_repository", KUBEAPP_GIT_URL.to_string());
    values.insert(
        "kind_modules",
        format!("{module}// kubeapp kind add: kind modules above this line.\n"),
    );
    values.insert("crd_lines", crd);
    values.insert("kind_lines", managed);

    let mut files = COMMON
        .iter()
        .map(|file| {
            Ok((
                template::render(file.source, file.path, &values)?,
                template::render(file.source, file.text, &values)?,
            ))
        })
        .collect::<Result<Vec<_>, TemplateError>>()?;
    files.extend(kind_files(args.template, &values)?);
    Ok(files)
}

/// Writes `files` under `dir`, creating it; refuses a non-empty `dir` unless `force`.
///
/// # Errors
///
/// A non-empty directory without `force`, or a file that cannot be written.
pub fn write(dir: &Path, files: &[PlannedFile], force: bool) -> Result<(), InitError> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(io(dir))?;
        if entries.next().is_some() && !force {
            return Err(InitError::NotEmpty(dir.to_path_buf()));
        }
    }
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    Ok(())
}

/// `kubeapp init`.
///
/// # Errors
///
/// See [`InitError`].
pub fn run(args: &InitArgs) -> Result<(), InitError> {
    let files = plan(args)?;
    write(&args.dir, &files, args.force)?;
    println!(
        "created {} ({} template, kind {}.{}/{}):",
        args.dir.display(),
        args.template.name(),
        args.kind,
        args.group,
        args.version
    );
    for (path, _) in &files {
        println!("  {path}");
    }
    if args.kubeapp_path.is_none() {
        println!(
            "note: kubeapp comes from {KUBEAPP_GIT_URL} (Cargo.toml); pass --kubeapp-path to use \
             a local checkout"
        );
    }
    println!(
        "next: cd {} && cargo test (the first run builds kubeapp; the control plane comes from \
         `kubeapp testenv install`), then `kubeapp run`",
        args.dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: &Path, flavor: Flavor) -> InitArgs {
        InitArgs {
            dir: dir.to_path_buf(),
            kind: "WebApp".into(),
            group: "example.com".into(),
            version: "v1beta1".into(),
            template: flavor,
            kubeapp_path: None,
            force: false,
        }
    }

    #[test]
    fn every_template_renders_with_every_placeholder_filled() {
        for flavor in Flavor::ALL {
            let files = plan(&args(Path::new("/tmp/web-operator"), flavor)).expect("renders");
            let paths: Vec<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
            for expected in [
                "Cargo.toml",
                "src/main.rs",
                "src/web_app.rs",
                "samples/web_app.yaml",
            ] {
                assert!(paths.contains(&expected), "{flavor:?}: {paths:?}");
            }
            for (path, text) in &files {
                assert!(
                    !text.contains("{{"),
                    "{flavor:?} {path} keeps a placeholder"
                );
            }
            let cargo = &files[0].1;
            assert!(cargo.contains("name = \"web-operator\""), "{cargo}");
            assert!(
                cargo.contains(&format!("git = \"{KUBEAPP_GIT_URL}\"")),
                "{cargo}"
            );
            assert!(cargo.contains("\n[workspace]\n"), "{cargo}");
        }
    }

    #[test]
    fn a_non_empty_directory_is_refused_unless_forced() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("notes.txt"), "mine").expect("write");
        let project = dir.path().to_path_buf();
        let files = vec![("a.txt".to_string(), "a".to_string())];
        let err = write(&project, &files, false).expect_err("refused");
        assert!(err.to_string().contains("not empty"), "{err}");
        assert!(!project.join("a.txt").exists());
        write(&project, &files, true).expect("forced");
        assert!(project.join("a.txt").exists() && project.join("notes.txt").exists());
    }

    #[test]
    fn a_bad_name_or_kubeapp_path_is_named() {
        let mut bad = args(Path::new("/tmp/web-operator"), Flavor::Reconciler);
        bad.kind = "webapp".into();
        assert!(
            plan(&bad)
                .expect_err("bad kind")
                .to_string()
                .contains("--kind")
        );
        let mut bad = args(Path::new("/tmp/Web"), Flavor::Reconciler);
        bad.kind = "WebApp".into();
        assert!(
            plan(&bad)
                .expect_err("bad dir")
                .to_string()
                .contains("<dir>")
        );
        let mut bad = args(Path::new("/tmp/web-operator"), Flavor::Reconciler);
        bad.kubeapp_path = Some(PathBuf::from("/nonexistent/kubeapp"));
        let err = plan(&bad).expect_err("bad path").to_string();
        assert!(
            err.starts_with("--kubeapp-path /nonexistent/kubeapp"),
            "{err}"
        );
    }
}
