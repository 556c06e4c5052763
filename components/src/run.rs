//! The two phases of a reconcile over a [`ComponentGraph`]: **deploy** (render and apply each
//! component in dependency order, independent ones concurrently up to a bound) and **verify** (the
//! components that deployed, in the same order, by their readiness).
//!
//! Deploy, per component, in level order:
//!
//! - a dependency that did not deploy (failed, waiting, or itself halted) halts it:
//!   [`Outcome::Halted`] naming that dependency; a disabled dependency does not halt it; a
//!   dependency declared with `depends_on_ready` whose objects are not ready yet makes it wait;
//! - an edge check that does not pass makes it wait ([`Outcome::Waiting`]);
//! - a disabled component's rendered objects are deleted (not found counts as deleted):
//!   [`Outcome::Disabled`];
//! - otherwise its objects are rendered and applied one by one; the first error stops it
//!   ([`Outcome::Failed`], or [`Outcome::Waiting`] for an expected wait from `render`); else
//!   [`Outcome::Deployed`] with the objects as the cluster returned them.
//!
//! Verify reads readiness from those returned objects (never an older copy): a component is
//! verified when every object is ready; one not ready (or failed) leaves everything downstream
//! unverified.
//!
//! The [`Cluster`] is where objects go: the operator's server-side apply in a reconcile, a map in
//! a dry run or a unit test.

use std::collections::HashMap;
use std::future::Future;

use futures::StreamExt;
use serde_json::Value;

use crate::component::{Component, ComponentError, Rendered, Session};
use crate::graph::ComponentGraph;
use crate::readiness::Readiness;

/// A component of `K`'s graph, boxed.
pub type BoxComponent<K> = Box<dyn Component<K>>;

/// Where a run applies and deletes objects.
pub trait Cluster: Send + Sync {
    /// Creates or updates `object` for `component`; returns it as stored.
    fn apply(
        &self,
        component: &str,
        object: &Rendered,
    ) -> impl Future<Output = Result<Value, String>> + Send;

    /// Deletes `object` (rendered by a disabled `component`); not found is success.
    fn delete(
        &self,
        component: &str,
        object: &Rendered,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// What the deploy phase did with one component.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Applied; the objects as the cluster returned them.
    Deployed(Vec<Value>),
    /// Disabled by the spec; its objects were deleted.
    Disabled,
    /// An expected wait (a prerequisite or an edge check); not an error.
    Waiting(String),
    /// Failed (rendering or applying).
    Failed(String),
    /// Not attempted: the named dependency did not deploy.
    Halted {
        /// The dependency that stopped it.
        by: String,
    },
}

/// What the verify phase found for one component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verified {
    /// Every object is ready.
    Ready,
    /// An object is not ready yet (`Kind/name: reason`).
    NotReady(String),
    /// An object will not become ready without a change.
    Failed(String),
    /// Not checked: a dependency is not verified, or the component did not deploy.
    Skipped,
}

/// The outcome of a reconcile's two phases, per component, in declaration order.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// Component names, declaration order.
    pub names: Vec<String>,
    /// Deploy outcomes, same order.
    pub deployed: Vec<Outcome>,
    /// Verify outcomes, same order.
    pub verified: Vec<Verified>,
}

impl RunReport {
    /// Whether every enabled component deployed and verified.
    pub fn all_ready(&self) -> bool {
        self.deployed
            .iter()
            .zip(&self.verified)
            .all(|(d, v)| matches!(d, Outcome::Disabled) || matches!(v, Verified::Ready))
    }

    /// Names of the components whose outcome matches `pick`.
    pub fn names_where(&self, pick: impl Fn(&Outcome, &Verified) -> bool) -> Vec<&str> {
        self.names
            .iter()
            .zip(self.deployed.iter().zip(&self.verified))
            .filter(|(_, (d, v))| pick(d, v))
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

/// Deploys then verifies `graph` for `session`'s object through `cluster`, at most
/// `concurrency` components of a level at once; see the [module docs](self).
pub async fn run<K, C>(
    graph: &ComponentGraph<K, BoxComponent<K>>,
    session: &Session<K>,
    cluster: &C,
    concurrency: usize,
) -> RunReport
where
    K: Send + Sync + 'static,
    C: Cluster,
{
    let nodes = graph.nodes();
    let mut deployed: Vec<Option<Outcome>> = vec![None; nodes.len()];
    for level in graph.levels() {
        let results: HashMap<usize, Outcome> = futures::stream::iter(level.iter().copied())
            .map(|index| {
                let deployed = &deployed;
                async move {
                    (
                        index,
                        deploy_one(graph, index, deployed, session, cluster).await,
                    )
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        for (index, outcome) in results {
            deployed[index] = Some(outcome);
        }
    }
    let deployed: Vec<Outcome> = deployed
        .into_iter()
        .map(|outcome| outcome.unwrap_or(Outcome::Failed("not run".into())))
        .collect();
    let verified = verify(graph, &deployed);
    RunReport {
        names: nodes.iter().map(|node| node.name.clone()).collect(),
        deployed,
        verified,
    }
}

async fn deploy_one<K: 'static, C: Cluster>(
    graph: &ComponentGraph<K, BoxComponent<K>>,
    index: usize,
    done: &[Option<Outcome>],
    session: &Session<K>,
    cluster: &C,
) -> Outcome {
    let node = &graph.nodes()[index];
    for dependency in &node.depends_on {
        let Some(dep) = graph.nodes().iter().position(|n| n.name == dependency.on) else {
            continue;
        };
        match &done[dep] {
            Some(Outcome::Disabled) => {}
            Some(Outcome::Deployed(objects)) => {
                if dependency.ready {
                    let component = &graph.nodes()[dep].component;
                    for object in objects {
                        if let Readiness::NotReady(why) | Readiness::Failed(why) =
                            component.ready(object)
                        {
                            return Outcome::Waiting(format!(
                                "{} is not ready: {}: {why}",
                                dependency.on,
                                Rendered::value(object.clone()).describe()
                            ));
                        }
                    }
                }
            }
            _ => {
                return Outcome::Halted {
                    by: dependency.on.clone(),
                };
            }
        }
        if let Some(check) = &dependency.check
            && !check(session.object())
        {
            return Outcome::Waiting(format!(
                "the check on its dependency {} fails",
                dependency.on
            ));
        }
    }
    let component = &node.component;
    let rendered = match component.render(session) {
        Ok(rendered) => rendered,
        Err(ComponentError::Waiting(why)) => return Outcome::Waiting(why),
        Err(ComponentError::Failed(why)) => return Outcome::Failed(format!("render: {why}")),
    };
    if !component.enabled(session) {
        for object in &rendered {
            if let Err(why) = cluster.delete(&node.name, object).await {
                return Outcome::Failed(format!("deleting {}: {why}", object.describe()));
            }
        }
        return Outcome::Disabled;
    }
    let mut applied = Vec::with_capacity(rendered.len());
    for object in rendered {
        let what = object.describe();
        match cluster.apply(&node.name, &object).await {
            Ok(stored) => applied.push(stored),
            Err(why) => return Outcome::Failed(format!("applying {what}: {why}")),
        }
    }
    Outcome::Deployed(applied)
}

fn verify<K: 'static>(
    graph: &ComponentGraph<K, BoxComponent<K>>,
    deployed: &[Outcome],
) -> Vec<Verified> {
    let nodes = graph.nodes();
    let mut verified = vec![Verified::Skipped; nodes.len()];
    for &index in graph.levels().iter().flatten() {
        let Outcome::Deployed(objects) = &deployed[index] else {
            continue;
        };
        let blocked = graph.dependencies(index).iter().any(|&dep| {
            !matches!(deployed[dep], Outcome::Disabled) && verified[dep] != Verified::Ready
        });
        if blocked {
            continue;
        }
        let component = &nodes[index].component;
        verified[index] = Verified::Ready;
        for object in objects {
            let what = Rendered::value(object.clone()).describe();
            match component.ready(object) {
                Readiness::Ready => {}
                Readiness::NotReady(why) => {
                    verified[index] = Verified::NotReady(format!("{what}: {why}"));
                    break;
                }
                Readiness::Failed(why) => {
                    verified[index] = Verified::Failed(format!("{what}: {why}"));
                    break;
                }
            }
        }
    }
    verified
}

#[cfg(test)]
mod tests;
