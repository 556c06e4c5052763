//! `kubeapp init`: a new operator project from a template.
//!
//! Every file is rendered in memory first ([`plan`]), so a template or name problem writes
//! nothing; then the files are written ([`write`]). A directory that exists and is not empty is
//! refused unless `--force` (then files of the same name are overwritten, others are kept).
//!
//! # Where the project gets kubeapp from
//!
//! - `--kubeapp-path PATH`: that kubeapp checkout, by path.
//! - Otherwise, a `kubeapp` built from a checkout ([`BUILT_FROM`], recorded at compile time by
//!   `build.rs`) depends on that checkout by path. It is used only when that directory still
//!   exists and is kubeapp's root (its Cargo.toml's `package.name` is `kubeapp` and it has a
//!   `[workspace]`); otherwise `init` fails before writing anything, with one line naming
//!   `--kubeapp-path`.
//! - A `kubeapp` built from its published package (`cargo install kubeapp-cli`: no checkout)
//!   depends on the published `kubeapp` of its own version (`kubeapp = "<version>"`), the crates
//!   published with it.
//!
//! (A git URL is never written: kubeapp has no public repository yet.)

use std::path::{Path, PathBuf};

use crate::names::{self, NameError};
use crate::template::{self, COMMON, Flavor, SAMPLE, TemplateError, Values};

/// The kubeapp checkout this binary was built from (the parent of the `cli/` package), the
/// default of `--kubeapp-path`; `None` when it was built from its published package (see
/// `build.rs`).
pub const BUILT_FROM: Option<&str> = option_env!("KUBEAPP_CLI_CHECKOUT");

/// The version of kubeapp a project depends on when this binary is not built from a checkout:
/// its own (every kubeapp crate is published with one version).
pub const KUBEAPP_VERSION: &str = env!("CARGO_PKG_VERSION");

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
    /// The kubeapp checkout the project depends on (by path); default: the checkout this
    /// `kubeapp` binary was built from, if it is still there (see docs/cli.md).
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
    /// No `--kubeapp-path`, and the checkout this binary was built from is gone (or is not
    /// kubeapp's root any more).
    #[error(
        "no kubeapp checkout to depend on: pass --kubeapp-path PATH (a kubeapp checkout's root); \
         the one this kubeapp binary was built from, {built_from}, {problem}"
    )]
    NoCheckout {
        /// The checkout the binary was built from.
        built_from: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A file could not be read or written.
    #[error("{path}")]
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

/// Where a generated project gets kubeapp from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeappSource {
    /// A kubeapp checkout, by path (resolved).
    Checkout {
        /// The checkout's root.
        root: PathBuf,
        /// Whether `--kubeapp-path` named it (rather than the checkout this binary was built
        /// from).
        chosen: bool,
    },
    /// The published `kubeapp` of this version.
    Published(&'static str),
}

impl KubeappSource {
    /// The dependency's source in the generated Cargo.toml (`path = "..."` or
    /// `version = "..."`).
    pub fn dependency(&self) -> String {
        match self {
            KubeappSource::Checkout { root, .. } => format!(
                "path = {}",
                toml::Value::String(root.to_string_lossy().into_owned())
            ),
            KubeappSource::Published(version) => {
                format!("version = {}", toml::Value::String((*version).to_string()))
            }
        }
    }

    /// The comment above the dependency.
    pub fn note(&self) -> &'static str {
        match self {
            KubeappSource::Checkout { chosen: true, .. } => {
                "kubeapp from a local checkout (kubeapp init --kubeapp-path)"
            }
            KubeappSource::Checkout { chosen: false, .. } => {
                "kubeapp from the checkout the kubeapp command was built from (kubeapp init \
                 --kubeapp-path picks another)"
            }
            KubeappSource::Published(_) => {
                "kubeapp from crates.io, the version of the kubeapp command that wrote this \
                 (kubeapp init --kubeapp-path depends on a checkout instead)"
            }
        }
    }

    /// Where the generated AGENTS.md sends readers for kubeapp's API documentation.
    fn api_docs(&self) -> String {
        match self {
            KubeappSource::Checkout { .. } => {
                "`cargo doc --open -p kubeapp` (the checkout this project depends on)".to_string()
            }
            KubeappSource::Published(version) => {
                format!("https://docs.rs/kubeapp/{version} (or `cargo doc --open -p kubeapp`)")
            }
        }
    }

    /// Where the generated AGENTS.md sends readers for kubeapp's guide and references.
    fn guide(&self) -> String {
        match self {
            KubeappSource::Checkout { root, .. } => format!("`{}/docs/`", root.display()),
            KubeappSource::Published(_) => "the `docs/` directory of the kubeapp repository \
                 (`docs/guide/` is the guide)"
                .to_string(),
        }
    }
}

/// Where the project gets kubeapp from: `--kubeapp-path` if given, else the checkout this
/// binary was built from (`built_from`, [`BUILT_FROM`] outside tests) if it was, else the
/// published version [`KUBEAPP_VERSION`].
///
/// # Errors
///
/// A `--kubeapp-path`, or a checkout this binary was built from, that is not kubeapp's root.
pub fn kubeapp_source(
    path: Option<&Path>,
    built_from: Option<&Path>,
) -> Result<KubeappSource, InitError> {
    match (path, built_from) {
        (Some(path), _) => Ok(KubeappSource::Checkout {
            root: kubeapp_root(path).map_err(|problem| InitError::KubeappPath {
                path: path.to_path_buf(),
                problem,
            })?,
            chosen: true,
        }),
        (None, Some(checkout)) => Ok(KubeappSource::Checkout {
            root: kubeapp_root(checkout).map_err(|problem| InitError::NoCheckout {
                built_from: normalized(checkout),
                problem,
            })?,
            chosen: false,
        }),
        (None, None) => Ok(KubeappSource::Published(KUBEAPP_VERSION)),
    }
}

/// `path` without a trailing `/..` written out, for messages about a directory that is gone.
fn normalized(path: &Path) -> PathBuf {
    match (path.file_name(), path.parent()) {
        (None, Some(parent)) if path.ends_with("..") => {
            parent.parent().unwrap_or(parent).to_path_buf()
        }
        _ => path.to_path_buf(),
    }
}

/// `path` resolved, when it is kubeapp's root: a Cargo.toml whose package is `kubeapp` and
/// which has a `[workspace]`. Otherwise, what is wrong with it.
fn kubeapp_root(path: &Path) -> Result<PathBuf, String> {
    let absolute = path
        .canonicalize()
        .map_err(|e| format!("cannot be resolved: {e}"))?;
    let manifest = std::fs::read_to_string(absolute.join("Cargo.toml"))
        .map_err(|e| format!("Cargo.toml cannot be read: {e}"))?;
    let table = manifest
        .parse::<toml::Table>()
        .map_err(|e| format!("Cargo.toml is not TOML: {}", e.message()))?;
    let name = table
        .get("package")
        .and_then(|package| package.get("name"))
        .and_then(toml::Value::as_str);
    if name != Some("kubeapp") || !table.contains_key("workspace") {
        return Err(format!(
            "is not kubeapp's root: its Cargo.toml's package.name is {name:?} (want \"kubeapp\", \
             with a [workspace])"
        ));
    }
    Ok(absolute)
}

/// Every file of the new project, rendered; nothing is written.
///
/// # Errors
///
/// A name that is not valid, a `--kubeapp-path` that is not a kubeapp checkout, or a template
/// that does not render.
pub fn plan(args: &InitArgs) -> Result<Vec<PlannedFile>, InitError> {
    plan_from(args, BUILT_FROM.map(Path::new))
}

/// [`plan`] for a binary built from the checkout `built_from` (`None`: from its package).
fn plan_from(args: &InitArgs, built_from: Option<&Path>) -> Result<Vec<PlannedFile>, InitError> {
    let crate_name = args
        .dir
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    names::app(&crate_name)?;
    names::kind(&args.kind)?;
    names::group(&args.group)?;
    names::version(&args.version)?;
    let source = kubeapp_source(args.kubeapp_path.as_deref(), built_from)?;
    let (module, crd, managed) = registration(&args.kind);

    let mut values = Values::new();
    kind_values(&mut values, &args.kind, &args.group, &args.version);
    values.insert("crate_name", crate_name.clone());
    values.insert("app_name", crate_name);
    values.insert("template", args.template.name().to_string());
    let run_note = template::render("run note", args.template.run_note(), &values)?;
    values.insert("run_note", run_note);
    values.insert("kubeapp_dependency", source.dependency());
    values.insert(
        "kubeapp_features",
        args.template.kubeapp_features().to_string(),
    );
    values.insert("fault_testenv", args.template.fault_testenv().to_string());
    values.insert("fault_workload", args.template.fault_workload().to_string());
    values.insert(
        "fault_change_step",
        args.template.fault_change_step().to_string(),
    );
    values.insert("kubeapp_source_note", source.note().to_string());
    values.insert("kubeapp_docs", source.api_docs());
    values.insert("kubeapp_guide", source.guide());
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
    match (&args.kubeapp_path, BUILT_FROM) {
        (Some(_), _) => {}
        (None, Some(checkout)) => println!(
            "note: kubeapp comes from {} (the checkout this kubeapp command was built from; \
             --kubeapp-path picks another)",
            normalized(Path::new(checkout)).display()
        ),
        (None, None) => println!(
            "note: the project depends on kubeapp {KUBEAPP_VERSION} from crates.io (the version \
             of this kubeapp command; --kubeapp-path PATH depends on a checkout instead)"
        ),
    }
    println!(
        "next: cd {} && cargo test (the first run builds kubeapp; the control plane comes from \
         `kubeapp testenv install`): it fails, pointing at the handler stub, until you write \
         src/{}.rs; then `kubeapp run`",
        args.dir.display(),
        names::snake(&args.kind)
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
            let checkout = Path::new(BUILT_FROM.expect("built from this checkout"))
                .canonicalize()
                .expect("the checkout");
            assert!(
                cargo.contains(&format!("path = \"{}\"", checkout.display())),
                "{cargo}"
            );
            assert!(!cargo.contains("git = "), "{cargo}");
            assert!(cargo.contains("\n[workspace]\n"), "{cargo}");
            let readme = files
                .iter()
                .find(|(path, _)| path == "README.md")
                .map(|(_, text)| text)
                .expect("a README");
            assert_eq!(
                readme.contains("The `WebApp` has two components (`src/web_app.rs`)"),
                flavor == Flavor::Components,
                "{flavor:?}: the components template's README says it ships a Deployment\n{readme}"
            );
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
        // A checkout of something else (a kubeapp sub-crate is not the root).
        bad.kubeapp_path = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        let err = plan(&bad).expect_err("not the root").to_string();
        assert!(err.contains("is not kubeapp's root"), "{err}");
    }

    #[test]
    fn a_missing_default_checkout_is_one_line_naming_the_flag() {
        let err = kubeapp_source(None, BUILT_FROM.map(Path::new))
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            err.is_ok(),
            "the checkout this test runs from is kubeapp's root: {err:?}"
        );
        let gone = InitError::NoCheckout {
            built_from: PathBuf::from("/gone/kubeapp"),
            problem: kubeapp_root(Path::new("/gone/kubeapp")).expect_err("gone"),
        }
        .to_string();
        assert!(!gone.contains('\n'), "{gone}");
        assert!(
            gone.starts_with("no kubeapp checkout to depend on: pass --kubeapp-path PATH")
                && gone.contains("/gone/kubeapp, cannot be resolved"),
            "{gone}"
        );
    }

    /// build.rs tells a checkout build from a packaged one: this test binary is built in the
    /// checkout, so `BUILT_FROM` is its root.
    #[test]
    fn a_checkout_build_records_the_checkout() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("cli/ has a parent");
        assert_eq!(BUILT_FROM.map(Path::new), Some(root));
    }

    /// A binary built from its package (no checkout) makes the project depend on the published
    /// kubeapp of its own version; `--kubeapp-path` still picks a checkout; a checkout build
    /// depends on the checkout by path.
    #[test]
    fn without_a_checkout_the_project_depends_on_the_published_version() {
        let flavor = Flavor::Reconciler;
        let files = plan_from(&args(Path::new("/tmp/web-operator"), flavor), None).expect("plan");
        let cargo = &files[0].1;
        let manifest: toml::Table = cargo.parse().expect("the Cargo.toml is TOML");
        for table in ["dependencies", "dev-dependencies"] {
            let kubeapp = &manifest[table]["kubeapp"];
            assert_eq!(
                kubeapp.get("version").and_then(toml::Value::as_str),
                Some(env!("CARGO_PKG_VERSION")),
                "{table}: {cargo}"
            );
            assert!(kubeapp.get("path").is_none(), "{table}: {cargo}");
        }
        assert!(cargo.contains("# kubeapp from crates.io"), "{cargo}");
        let agents = files
            .iter()
            .find(|(path, _)| path == "AGENTS.md")
            .map(|(_, text)| text)
            .expect("an AGENTS.md");
        assert!(
            agents.contains(&format!(
                "https://docs.rs/kubeapp/{}",
                env!("CARGO_PKG_VERSION")
            )),
            "{agents}"
        );

        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let root = checkout.canonicalize().expect("the checkout");
        let mut chosen = args(Path::new("/tmp/web-operator"), flavor);
        chosen.kubeapp_path = Some(checkout.clone());
        let files = plan_from(&chosen, None).expect("plan");
        assert!(
            files[0]
                .1
                .contains(&format!("kubeapp = {{ path = \"{}\"", root.display())),
            "{}",
            files[0].1
        );
        assert_eq!(
            kubeapp_source(None, Some(&checkout)).expect("the checkout"),
            KubeappSource::Checkout {
                root,
                chosen: false
            }
        );
    }
}
