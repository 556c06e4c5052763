//! [`ComponentGraph<K>`]: the components of one kind and their dependencies, checked once when
//! the graph is built, and the order a reconcile walks them in.
//!
//! A graph is declared once per kind. [`GraphBuilder::build`] refuses a graph with a duplicate
//! name, a dependency on a component that does not exist, or a cycle (the error names the
//! components on it), so a wrong graph fails at start-up, never at the first reconcile.
//!
//! The order is by *levels*: level 0 holds the components without dependencies, level `n` those
//! whose dependencies are all on earlier levels. Components of one level do not depend on each
//! other, so a reconcile may run them concurrently; within a level they keep their declaration
//! order (so the order, and the dry run's output, is stable).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::component::BoxComponent;

/// A check on a dependency edge: it must pass (for the custom object being reconciled) before the
/// dependent component deploys, e.g. "the database's Secret has a password".
pub(crate) type EdgeCheck<K> = Arc<dyn Fn(&K) -> bool + Send + Sync>;

/// One dependency of a component.
pub struct Dependency<K> {
    /// The component depended on.
    pub on: String,
    /// Must also pass before the dependent deploys.
    pub check: Option<EdgeCheck<K>>,
    /// The dependent deploys only once the dependency's objects are ready (as the apply
    /// returned them), not merely applied.
    pub ready: bool,
}

impl<K> Clone for Dependency<K> {
    fn clone(&self) -> Self {
        Self {
            on: self.on.clone(),
            check: self.check.clone(),
            ready: self.ready,
        }
    }
}

impl<K> fmt::Debug for Dependency<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dependency")
            .field("on", &self.on)
            .field("check", &self.check.is_some())
            .field("ready", &self.ready)
            .finish()
    }
}

/// A node of the graph: a name, its dependencies, and what it is (`C`, e.g. a boxed component).
#[derive(Debug)]
pub struct Node<K, C> {
    /// Unique in the graph.
    pub name: String,
    /// In declaration order.
    pub depends_on: Vec<Dependency<K>>,
    /// The component.
    pub component: C,
}

/// Why a graph was refused; see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// Two components share a name.
    #[error("component {name:?} is declared twice")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A component depends on one that is not in the graph.
    #[error(
        "component {component:?} depends on {missing:?}, which is not a component of the graph"
    )]
    UnknownDependency {
        /// The dependent.
        component: String,
        /// The missing dependency.
        missing: String,
    },
    /// The dependencies form a cycle.
    #[error("the dependencies form a cycle: {}", cycle.join(" -> "))]
    Cycle {
        /// The components on the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
    /// `depends_on` was called before any component was added.
    #[error("depends_on({on:?}) was called before any component was added")]
    NoComponent {
        /// The dependency given.
        on: String,
    },
}

/// Declares a graph: components in order, each followed by its dependencies.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubeapp_components::{ComponentGraph, GraphError, Rendered, Session};
/// use serde_json::json;
///
/// let object = |kind: &str, name: &str| {
///     Rendered::value(json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}))
/// };
/// let graph = ComponentGraph::builder()
///     .render("secret", move |_: &Session<ConfigMap>| Ok(vec![object("Secret", "creds")]))
///     .render("config", move |_| Ok(vec![object("ConfigMap", "settings")]))
///     .depends_on("secret")
///     // Rendered only once every object of "config" is ready (the built-in readiness rules).
///     .render("service", move |_| Ok(vec![object("Service", "web")]))
///     .depends_on_ready("config")
///     .build()?;
/// // Deployed level by level, in dependency order; torn down in the reverse order.
/// let names = |level: &Vec<usize>| -> Vec<String> {
///     level.iter().map(|&i| graph.nodes()[i].name.clone()).collect()
/// };
/// let levels: Vec<Vec<String>> = graph.levels().iter().map(names).collect();
/// assert_eq!(levels, [["secret"], ["config"], ["service"]]);
///
/// let unknown = ComponentGraph::<ConfigMap>::builder()
///     .render("config", |_| Ok(vec![]))
///     .depends_on("secret")
///     .build();
/// assert!(matches!(unknown, Err(GraphError::UnknownDependency { missing, .. }) if missing == "secret"));
/// # Ok::<(), GraphError>(())
/// ```
pub struct GraphBuilder<K, C> {
    nodes: Vec<Node<K, C>>,
    misplaced: Option<String>,
}

impl<K, C> Default for GraphBuilder<K, C> {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            misplaced: None,
        }
    }
}

impl<K, C> GraphBuilder<K, C> {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a component; the `depends_on` calls that follow apply to it.
    #[must_use]
    pub fn component(mut self, name: impl Into<String>, component: C) -> Self {
        self.nodes.push(Node {
            name: name.into(),
            depends_on: Vec::new(),
            component,
        });
        self
    }

    /// The last added component deploys only after `on` deployed.
    #[must_use]
    pub fn depends_on(self, on: impl Into<String>) -> Self {
        self.depend(on.into(), None, false)
    }

    /// The last added component deploys only after `on` deployed **and is ready** (e.g. a
    /// Service that should appear only once its Deployment is available). Until then it waits
    /// (not an error) and the reconcile is retried; watching the dependency's kind with `owns`
    /// retries it as soon as the dependency's status changes.
    #[must_use]
    pub fn depends_on_ready(self, on: impl Into<String>) -> Self {
        self.depend(on.into(), None, true)
    }

    /// The last added component deploys only after `on` deployed and `check` passes for the
    /// custom object.
    #[must_use]
    pub fn depends_on_if(
        self,
        on: impl Into<String>,
        check: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.depend(on.into(), Some(Arc::new(check)), false)
    }

    fn depend(mut self, on: String, check: Option<EdgeCheck<K>>, ready: bool) -> Self {
        match self.nodes.last_mut() {
            Some(node) => node.depends_on.push(Dependency { on, check, ready }),
            None => {
                self.misplaced.get_or_insert(on);
            }
        }
        self
    }

    /// Checks the graph and orders it; see the [module docs](self).
    ///
    /// # Errors
    ///
    /// See [`GraphError`].
    pub fn build(self) -> Result<ComponentGraph<K, C>, GraphError> {
        if let Some(on) = self.misplaced {
            return Err(GraphError::NoComponent { on });
        }
        let mut index = HashMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if index.insert(node.name.clone(), i).is_some() {
                return Err(GraphError::Duplicate {
                    name: node.name.clone(),
                });
            }
        }
        let mut edges: Vec<Vec<usize>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let mut deps = Vec::new();
            for dependency in &node.depends_on {
                match index.get(&dependency.on) {
                    Some(&i) => deps.push(i),
                    None => {
                        return Err(GraphError::UnknownDependency {
                            component: node.name.clone(),
                            missing: dependency.on.clone(),
                        });
                    }
                }
            }
            edges.push(deps);
        }
        let levels = levels(&edges).map_err(|cycle| GraphError::Cycle {
            cycle: cycle
                .into_iter()
                .map(|i| self.nodes[i].name.clone())
                .collect(),
        })?;
        Ok(ComponentGraph {
            nodes: self.nodes,
            edges,
            levels,
        })
    }
}

/// A checked graph; see the [module docs](self). Its components are boxed [`Component`](crate::Component)s unless
/// `C` says otherwise (`ComponentGraph<K>` is what a reconciler, `run` and `dry_run` take).
pub struct ComponentGraph<K, C = BoxComponent<K>> {
    nodes: Vec<Node<K, C>>,
    /// For each node, the indexes of its dependencies.
    edges: Vec<Vec<usize>>,
    /// Node indexes by level, declaration order within a level.
    levels: Vec<Vec<usize>>,
}

impl<K, C> fmt::Debug for ComponentGraph<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentGraph")
            .field("levels", &self.level_names())
            .finish()
    }
}

impl<K, C> ComponentGraph<K, C> {
    /// A builder; see [`GraphBuilder`].
    pub fn builder() -> GraphBuilder<K, C> {
        GraphBuilder::new()
    }

    /// The components, in declaration order.
    pub fn nodes(&self) -> &[Node<K, C>] {
        &self.nodes
    }

    /// The node indexes of each level.
    pub fn levels(&self) -> &[Vec<usize>] {
        &self.levels
    }

    /// The dependencies of node `index` (node indexes).
    pub fn dependencies(&self, index: usize) -> &[usize] {
        self.edges.get(index).map_or(&[], Vec::as_slice)
    }

    /// The names of each level (for messages and tests).
    pub(crate) fn level_names(&self) -> Vec<Vec<&str>> {
        self.levels
            .iter()
            .map(|level| level.iter().map(|&i| self.nodes[i].name.as_str()).collect())
            .collect()
    }

    /// Every node that depends, directly or not, on node `index` (what a failure of `index`
    /// halts), in level order.
    pub fn downstream(&self, index: usize) -> Vec<usize> {
        let mut halted = vec![false; self.nodes.len()];
        halted[index] = true;
        let mut out = Vec::new();
        for &node in self.levels.iter().flatten() {
            if node != index && self.edges[node].iter().any(|&dep| halted[dep]) {
                halted[node] = true;
                out.push(node);
            }
        }
        out
    }
}

/// Kahn's algorithm by levels; on a cycle, the nodes of one cycle (first repeated at the end).
fn levels(edges: &[Vec<usize>]) -> Result<Vec<Vec<usize>>, Vec<usize>> {
    let count = edges.len();
    let mut level_of: Vec<Option<usize>> = vec![None; count];
    let mut levels: Vec<Vec<usize>> = Vec::new();
    let mut placed = 0;
    while placed < count {
        let level: Vec<usize> = (0..count)
            .filter(|&node| {
                level_of[node].is_none()
                    && edges[node]
                        .iter()
                        .all(|&dep| level_of[dep].is_some_and(|l| l < levels.len()))
            })
            .collect();
        if level.is_empty() {
            return Err(find_cycle(edges, &level_of));
        }
        for &node in &level {
            level_of[node] = Some(levels.len());
        }
        placed += level.len();
        levels.push(level);
    }
    Ok(levels)
}

/// A cycle among the unplaced nodes: follow unplaced dependencies until a node repeats.
fn find_cycle(edges: &[Vec<usize>], level_of: &[Option<usize>]) -> Vec<usize> {
    let Some(start) = (0..edges.len()).find(|&node| level_of[node].is_none()) else {
        return Vec::new();
    };
    let mut path = vec![start];
    let mut node = start;
    loop {
        // Every unplaced node has an unplaced dependency, or it would have been placed.
        let Some(&next) = edges[node].iter().find(|&&dep| level_of[dep].is_none()) else {
            return path;
        };
        if let Some(at) = path.iter().position(|&seen| seen == next) {
            let mut cycle = path.split_off(at);
            cycle.push(next);
            return cycle;
        }
        path.push(next);
        node = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Graph = ComponentGraph<(), ()>;

    fn builder() -> GraphBuilder<(), ()> {
        Graph::builder()
    }

    #[test]
    fn levels_follow_dependencies_and_keep_declaration_order() {
        let graph = builder()
            .component("service", ())
            .depends_on("deployment")
            .component("config", ())
            .component("secret", ())
            .component("deployment", ())
            .depends_on("config")
            .depends_on("secret")
            .component("ingress", ())
            .depends_on("service")
            .component("pdb", ())
            .depends_on("deployment")
            .build()
            .expect("a valid graph");
        assert_eq!(
            graph.level_names(),
            [
                vec!["config", "secret"],
                vec!["deployment"],
                vec!["service", "pdb"],
                vec!["ingress"]
            ]
        );
    }

    #[test]
    fn a_failure_halts_everything_downstream_and_nothing_else() {
        let graph = builder()
            .component("config", ())
            .component("db", ())
            .component("app", ())
            .depends_on("config")
            .component("service", ())
            .depends_on("app")
            .component("backup", ())
            .depends_on("db")
            .build()
            .expect("valid");
        let names = |indexes: Vec<usize>| -> Vec<&str> {
            indexes
                .into_iter()
                .map(|i| graph.nodes()[i].name.as_str())
                .collect()
        };
        assert_eq!(names(graph.downstream(0)), ["app", "service"]);
        assert_eq!(names(graph.downstream(1)), ["backup"]);
        assert!(graph.downstream(3).is_empty());
    }

    #[test]
    fn cycles_unknown_and_duplicate_names_are_refused_with_the_names() {
        let cycle = builder()
            .component("a", ())
            .depends_on("c")
            .component("b", ())
            .depends_on("a")
            .component("c", ())
            .depends_on("b")
            .component("d", ())
            .build()
            .expect_err("a cycle");
        assert_eq!(
            cycle,
            GraphError::Cycle {
                cycle: vec!["a".into(), "c".into(), "b".into(), "a".into()]
            }
        );
        assert_eq!(
            cycle.to_string(),
            "the dependencies form a cycle: a -> c -> b -> a"
        );
        let own = builder()
            .component("a", ())
            .depends_on("a")
            .build()
            .expect_err("self dependency");
        assert_eq!(own.to_string(), "the dependencies form a cycle: a -> a");
        let unknown = builder()
            .component("a", ())
            .depends_on("nope")
            .build()
            .expect_err("unknown");
        assert_eq!(
            unknown.to_string(),
            "component \"a\" depends on \"nope\", which is not a component of the graph"
        );
        let twice = builder()
            .component("a", ())
            .component("a", ())
            .build()
            .expect_err("duplicate");
        assert_eq!(twice.to_string(), "component \"a\" is declared twice");
        let early = builder()
            .depends_on("a")
            .component("a", ())
            .build()
            .expect_err("misplaced");
        assert!(matches!(early, GraphError::NoComponent { .. }));
    }

    #[test]
    fn edge_checks_are_kept_on_their_dependency() {
        let graph = ComponentGraph::<u32, ()>::builder()
            .component("db", ())
            .component("app", ())
            .depends_on_if("db", |replicas: &u32| *replicas > 0)
            .build()
            .expect("valid");
        let check = graph.nodes()[1].depends_on[0]
            .check
            .clone()
            .expect("a check");
        assert!(check(&1) && !check(&0));
    }
}
