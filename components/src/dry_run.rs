//! The dry run: every component of a graph rendered for one custom object, with no cluster.
//!
//! [`dry_run`] runs the deploy and verify phases over a [`MemoryCluster`] and returns what would
//! be applied, per component; [`DryRun::write_to`] writes it as a directory tree;
//! [`from_files`] does both from a custom-object file (and optionally a directory of existing
//! objects) for an operator binary's `dry-run` command. The same in-memory mode serves unit tests
//! of components: no apiserver is needed.
//!
//! What differs from a reconcile:
//!
//! - **Owner references** name the custom object (apiVersion, kind, name, `controller` and
//!   `blockOwnerDeletion` true) with the uid from the file; a custom object that was never stored
//!   has none, and then the reference's `uid` is empty: such an object cannot be applied as it
//!   is, it shows what a reconcile would send.
//! - **Readiness does not gate**: a dependency declared with `depends_on_ready` does not make its
//!   dependent wait (the objects have no status), so every enabled component is rendered. The
//!   verify phase still runs, over the existing objects' status when a directory of them is given.
//! - **Existing objects** (`--existing`) are what the "cluster" returns for an apply of the same
//!   object (apiVersion, kind, namespace, name): their status is kept, the rendered fields win.
//! - No pruning, no status write, no hooks, no cache reads ([`Session::store`] is an error).
//!
//! The tree: `<out>/<apiVersion>.<Kind>/<name>/<component>/<Kind>.<object name>.yaml`, where the
//! first two parts name the custom object and the slash of an apiVersion becomes `_`
//! (`apps/v1` -> `apps_v1`). A disabled component's directory holds a `DISABLED` file listing
//! the objects a reconcile would delete; a component that did not render (failed, waiting,
//! halted) holds a `NOT_RENDERED` file saying why, and [`DryRun::check`] fails naming it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::component::{Rendered, Session};
use crate::graph::ComponentGraph;
use crate::report::{Outcome, RunReport};
use crate::run::{Cluster, RunOptions, run_with};

/// Why a dry run failed, naming the file or the components at fault.
#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    /// A file could not be read or written.
    #[error("{path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid YAML or JSON of the expected object.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Components did not render (each `name: why`).
    #[error("components not rendered: {0}")]
    NotRendered(String),
}

/// A cluster in memory: records applies and deletes, returns existing objects' status.
#[derive(Debug, Default)]
pub struct MemoryCluster {
    owner: Option<Value>,
    existing: HashMap<String, Value>,
    applied: Mutex<Vec<(String, Value)>>,
    deleted: Mutex<Vec<(String, Value)>>,
}

/// `apiVersion/kind/namespace/name` of an object.
fn identity(object: &Value) -> String {
    format!(
        "{}/{}/{}/{}",
        object["apiVersion"].as_str().unwrap_or(""),
        object["kind"].as_str().unwrap_or(""),
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("")
    )
}

impl MemoryCluster {
    /// A cluster where every applied object gets a controller owner reference to `owner`, and
    /// `existing` objects answer applies of themselves.
    pub fn new<K: Resource<DynamicType = ()>>(owner: &K, existing: Vec<Value>) -> Self {
        let meta = owner.meta();
        let reference = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "name": meta.name.clone().unwrap_or_default(),
            "uid": meta.uid.clone().unwrap_or_default(),
            "controller": true,
            "blockOwnerDeletion": true,
        });
        Self {
            owner: Some(reference),
            existing: existing.into_iter().map(|o| (identity(&o), o)).collect(),
            applied: Mutex::default(),
            deleted: Mutex::default(),
        }
    }

    /// What was applied, in order: (component, object as sent).
    pub fn applied(&self) -> Vec<(String, Value)> {
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What was deleted, in order: (component, object identity as rendered).
    pub fn deleted(&self) -> Vec<(String, Value)> {
        self.deleted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Cluster for MemoryCluster {
    async fn apply(&self, component: &str, object: &Rendered) -> Result<Value, String> {
        let mut sent = object.object.clone();
        if let Some(reference) = &self.owner {
            sent["metadata"]["ownerReferences"] = json!([reference]);
        }
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((component.to_string(), sent.clone()));
        let mut stored = sent;
        if let Some(status) = self.existing.get(&identity(&stored)).map(|e| &e["status"])
            && !status.is_null()
        {
            stored["status"] = status.clone();
        }
        Ok(stored)
    }

    async fn delete(&self, component: &str, object: &Rendered) -> Result<(), String> {
        self.deleted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((component.to_string(), object.object.clone()));
        Ok(())
    }
}

/// What a dry run rendered; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct DryRun {
    /// `<apiVersion>.<Kind>/<name>` of the custom object (apiVersion's `/` as `_`).
    pub root: PathBuf,
    /// The phases' outcomes.
    pub report: RunReport,
    /// Objects to apply: (component, object as a reconcile would send it), in apply order.
    pub applied: Vec<(String, Value)>,
    /// Objects of disabled components, which a reconcile would delete.
    pub deleted: Vec<(String, Value)>,
}

/// Renders `graph` for `object` over a [`MemoryCluster`] holding `existing`.
pub async fn dry_run<K>(graph: &ComponentGraph<K>, object: K, existing: Vec<Value>) -> DryRun
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let root = PathBuf::from(format!(
        "{}.{}",
        K::api_version(&()).replace('/', "_"),
        K::kind(&())
    ))
    .join(object.meta().name.clone().unwrap_or_default());
    let cluster = MemoryCluster::new(&object, existing);
    let session = Session::new(Arc::new(object));
    let options = RunOptions {
        concurrency: 1,
        kind: K::kind(&()).into_owned(),
        metrics: None,
        assume_ready: true,
    };
    let report = run_with(graph, &session, &cluster, &options).await;
    DryRun {
        root,
        report,
        applied: cluster.applied(),
        deleted: cluster.deleted(),
    }
}

/// The file name of an object in the tree: `<Kind>.<name>.yaml`.
pub fn file_name(object: &Value) -> String {
    format!(
        "{}.{}.yaml",
        object["kind"].as_str().unwrap_or("Object"),
        object["metadata"]["name"].as_str().unwrap_or("unnamed")
    )
}

impl DryRun {
    /// Fails naming every component that did not render (failed, waiting, halted).
    ///
    /// # Errors
    ///
    /// [`DryRunError::NotRendered`].
    pub fn check(&self) -> Result<(), DryRunError> {
        let missing: Vec<String> = self
            .report
            .names
            .iter()
            .zip(&self.report.deployed)
            .filter_map(|(name, outcome)| not_rendered(outcome).map(|why| format!("{name}: {why}")))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(DryRunError::NotRendered(missing.join("; ")))
        }
    }

    /// Writes the tree under `out` (see the [module docs](self)); returns the files written.
    ///
    /// # Errors
    ///
    /// A directory or file that cannot be written, or an object that does not serialize.
    pub fn write_to(&self, out: &Path) -> Result<Vec<PathBuf>, DryRunError> {
        let base = out.join(&self.root);
        let mut written = Vec::new();
        for (name, outcome) in self.report.names.iter().zip(&self.report.deployed) {
            let dir = base.join(name);
            create_dir(&dir)?;
            match outcome {
                Outcome::Deployed(_) => {
                    for (_, object) in self.applied.iter().filter(|(c, _)| c == name) {
                        let path = dir.join(file_name(object));
                        write(&path, &to_yaml(&path, object)?)?;
                        written.push(path);
                    }
                }
                Outcome::Disabled => {
                    let mut text = String::from("disabled by the spec; a reconcile deletes:\n");
                    for (_, object) in self.deleted.iter().filter(|(c, _)| c == name) {
                        let _ = writeln!(text, "- {}", Rendered::value(object.clone()).describe());
                    }
                    let path = dir.join("DISABLED");
                    write(&path, &text)?;
                    written.push(path);
                }
                other => {
                    let why = not_rendered(other).unwrap_or_default();
                    let path = dir.join("NOT_RENDERED");
                    write(&path, &format!("{why}\n"))?;
                    written.push(path);
                }
            }
        }
        Ok(written)
    }
}

fn not_rendered(outcome: &Outcome) -> Option<String> {
    match outcome {
        Outcome::Deployed(_) | Outcome::Disabled => None,
        Outcome::Waiting(why) => Some(format!("waiting: {why}")),
        Outcome::Failed(why) => Some(format!("failed: {why}")),
        Outcome::Halted { by } => Some(format!("halted: {by} did not render")),
    }
}

fn create_dir(dir: &Path) -> Result<(), DryRunError> {
    std::fs::create_dir_all(dir).map_err(|source| DryRunError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

fn write(path: &Path, text: &str) -> Result<(), DryRunError> {
    std::fs::write(path, text).map_err(|source| DryRunError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn to_yaml(path: &Path, object: &impl Serialize) -> Result<String, DryRunError> {
    serde_saphyr::to_string(object).map_err(|e| DryRunError::Parse {
        path: path.to_path_buf(),
        message: format!("serializing: {e}"),
    })
}

/// Reads one object (YAML or JSON) from `path`.
///
/// # Errors
///
/// [`DryRunError::Io`] or [`DryRunError::Parse`] naming the file.
pub(crate) fn read_object<T: DeserializeOwned>(path: &Path) -> Result<T, DryRunError> {
    let text = std::fs::read_to_string(path).map_err(|source| DryRunError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_saphyr::from_str(&text).map_err(|e| DryRunError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Every object in the `.yaml`, `.yml` and `.json` files of `dir` (and its subdirectories),
/// several per file when separated by `---`.
///
/// # Errors
///
/// A directory or file that cannot be read or parsed, named.
pub(crate) fn read_objects(dir: &Path) -> Result<Vec<Value>, DryRunError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DryRunError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut objects = Vec::new();
    for path in paths {
        if path.is_dir() {
            objects.extend(read_objects(&path)?);
            continue;
        }
        let known = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if !known {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| DryRunError::Io {
            path: path.clone(),
            source,
        })?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| DryRunError::Parse {
                path: path.clone(),
                message: e.to_string(),
            })?;
        objects.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    Ok(objects)
}

/// The dry run of an operator binary: renders `graph` for the custom object in `object_file`,
/// with the objects under `existing` (if given), and writes the tree under `out`. Returns the
/// run and the files written.
///
/// # Errors
///
/// A file that cannot be read or parsed, a tree that cannot be written (each naming the path),
/// or components that did not render ([`DryRunError::NotRendered`], after the tree is written).
pub async fn from_files<K>(
    graph: &ComponentGraph<K>,
    object_file: &Path,
    existing: Option<&Path>,
    out: &Path,
) -> Result<(DryRun, Vec<PathBuf>), DryRunError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
{
    let object: K = read_object(object_file)?;
    let existing = existing.map(read_objects).transpose()?.unwrap_or_default();
    let run = dry_run(graph, object, existing).await;
    let written = run.write_to(out)?;
    run.check()?;
    Ok((run, written))
}

#[cfg(test)]
mod tests;
