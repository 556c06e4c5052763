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
use std::time::Instant;

use futures::StreamExt;
use serde_json::Value;
use tracing::Instrument;

pub use crate::component::BoxComponent;
use crate::component::{Component, ComponentError, Rendered, Session};
use crate::graph::ComponentGraph;
use crate::metrics::ComponentMetrics;
use crate::readiness::Readiness;
use crate::report::{ComponentObject, Outcome, RunReport, Verified};

impl<K: 'static> crate::graph::GraphBuilder<K, BoxComponent<K>> {
    /// Adds `component`, boxed; the `depends_on` calls that follow apply to it.
    #[must_use]
    pub fn add(self, name: impl Into<String>, component: impl Component<K>) -> Self {
        self.component(name, Box::new(component))
    }

    /// Adds a component that is always enabled and renders with `render` (see
    /// [`component_fn`](crate::component_fn)).
    #[must_use]
    pub fn render<F>(self, name: impl Into<String>, render: F) -> Self
    where
        F: Fn(&Session<K>) -> Result<Vec<Rendered>, ComponentError> + Send + Sync + 'static,
    {
        self.add(name, crate::component::component_fn(render))
    }

    /// Adds a component rendered with `render`, enabled only when `enabled(object)` (a spec
    /// toggle): when disabled, its objects are deleted.
    #[must_use]
    pub fn render_when<E, F>(self, name: impl Into<String>, enabled: E, render: F) -> Self
    where
        E: Fn(&K) -> bool + Send + Sync + 'static,
        F: Fn(&Session<K>) -> Result<Vec<Rendered>, ComponentError> + Send + Sync + 'static,
    {
        let component = crate::component::component_fn(render);
        self.add(name, crate::component::EnabledWhen::new(component, enabled))
    }
}

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

    /// After a delete: `None` when `object` is gone, else its finalizers (see
    /// [`teardown`](crate::teardown)). The default says gone, for clusters that delete at once.
    fn remaining(
        &self,
        component: &str,
        object: &Rendered,
    ) -> impl Future<Output = Result<Option<Vec<String>>, String>> + Send {
        let _ = (component, object);
        std::future::ready(Ok(None))
    }
}

/// How a run goes: concurrency, and what it reports to.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// At most this many components of a level are deployed at once (at least 1).
    pub concurrency: usize,
    /// The custom kind, for spans and metric labels.
    pub kind: String,
    /// Where outcomes and durations are counted, if anywhere.
    pub metrics: Option<ComponentMetrics>,
    /// Do not wait for a `depends_on_ready` dependency's objects to be ready (the dry run: its
    /// objects have no status, and every component is to be rendered).
    pub assume_ready: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            kind: String::new(),
            metrics: None,
            assume_ready: false,
        }
    }
}

/// Deploys then verifies `graph` for `session`'s object through `cluster`, at most
/// `concurrency` components of a level at once; see the [module docs](self).
pub async fn run<K, C>(
    graph: &ComponentGraph<K>,
    session: &Session<K>,
    cluster: &C,
    concurrency: usize,
) -> RunReport
where
    K: Send + Sync + 'static,
    C: Cluster,
{
    let options = RunOptions {
        concurrency,
        ..RunOptions::default()
    };
    run_with(graph, session, cluster, &options).await
}

/// [`run`] with `options`: a span per phase (`components.deploy`, `components.verify`) and per
/// component (`component`, with its name and outcome), and the [metrics](crate::metrics) when
/// given.
pub async fn run_with<K, C>(
    graph: &ComponentGraph<K>,
    session: &Session<K>,
    cluster: &C,
    options: &RunOptions,
) -> RunReport
where
    K: Send + Sync + 'static,
    C: Cluster,
{
    let nodes = graph.nodes();
    let kind = options.kind.as_str();
    let mut deployed: Vec<Option<(Outcome, Vec<ComponentObject>)>> = vec![None; nodes.len()];
    let started = Instant::now();
    let deploy_span = tracing::info_span!("components.deploy", kind);
    for level in graph.levels() {
        let results: HashMap<usize, (Outcome, Vec<ComponentObject>)> =
            futures::stream::iter(level.iter().copied())
                .map(|index| {
                    let deployed = &deployed;
                    let name = nodes[index].name.as_str();
                    let span = tracing::info_span!(
                        parent: &deploy_span,
                        "component",
                        component = name,
                        outcome = tracing::field::Empty
                    );
                    async move {
                        let began = Instant::now();
                        let result =
                            deploy_one(graph, index, deployed, session, cluster, options).await;
                        tracing::Span::current().record("outcome", outcome_name(&result.0));
                        if let Some(metrics) = &options.metrics {
                            metrics.deployed(kind, name, &result.0, began.elapsed());
                        }
                        (index, result)
                    }
                    .instrument(span)
                })
                .buffer_unordered(options.concurrency.max(1))
                .collect()
                .await;
        for (index, result) in results {
            deployed[index] = Some(result);
        }
    }
    if let Some(metrics) = &options.metrics {
        metrics.phase(kind, "deploy", started.elapsed());
    }
    let (deployed, objects): (Vec<Outcome>, Vec<Vec<ComponentObject>>) = deployed
        .into_iter()
        .map(|result| result.unwrap_or((Outcome::Failed("not run".into()), Vec::new())))
        .unzip();
    let started = Instant::now();
    let verified =
        tracing::info_span!("components.verify", kind).in_scope(|| verify(graph, &deployed));
    if let Some(metrics) = &options.metrics {
        metrics.phase(kind, "verify", started.elapsed());
        for (node, verified) in nodes.iter().zip(&verified) {
            metrics.verified(kind, &node.name, verified);
        }
    }
    RunReport {
        names: nodes.iter().map(|node| node.name.clone()).collect(),
        deployed,
        verified,
        objects,
    }
}

/// The `outcome` of a component's span.
fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Deployed(_) => "deployed",
        Outcome::Disabled => "disabled",
        Outcome::Waiting(_) => "waiting",
        Outcome::Failed(_) => "failed",
        Outcome::Halted { .. } => "halted",
    }
}

async fn deploy_one<K: 'static, C: Cluster>(
    graph: &ComponentGraph<K>,
    index: usize,
    done: &[Option<(Outcome, Vec<ComponentObject>)>],
    session: &Session<K>,
    cluster: &C,
    options: &RunOptions,
) -> (Outcome, Vec<ComponentObject>) {
    let mut objects = Vec::new();
    let outcome = deploy_checked(graph, index, done, session, cluster, options, &mut objects).await;
    if !matches!(outcome, Outcome::Deployed(_)) {
        objects.clear();
    }
    (outcome, objects)
}

/// Deploys one component, recording into `objects` what it applied.
async fn deploy_checked<K: 'static, C: Cluster>(
    graph: &ComponentGraph<K>,
    index: usize,
    done: &[Option<(Outcome, Vec<ComponentObject>)>],
    session: &Session<K>,
    cluster: &C,
    options: &RunOptions,
    objects: &mut Vec<ComponentObject>,
) -> Outcome {
    let node = &graph.nodes()[index];
    for dependency in &node.depends_on {
        let Some(dep) = graph.nodes().iter().position(|n| n.name == dependency.on) else {
            continue;
        };
        match done[dep].as_ref().map(|(outcome, _)| outcome) {
            Some(Outcome::Disabled) => {}
            Some(Outcome::Deployed(objects)) => {
                if dependency.ready && !options.assume_ready {
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
    for mut object in rendered {
        crate::unchanged::mark(&mut object.object);
        let what = object.describe();
        match cluster.apply(&node.name, &object).await {
            Ok(stored) => {
                objects.extend(ComponentObject::of(&node.name, &object, &stored));
                applied.push(stored);
            }
            Err(why) => return Outcome::Failed(format!("applying {what}: {why}")),
        }
    }
    Outcome::Deployed(applied)
}

fn verify<K: 'static>(graph: &ComponentGraph<K>, deployed: &[Outcome]) -> Vec<Verified> {
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
