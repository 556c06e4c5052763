//! What `kubeapp bench` writes: N objects copied from the project's samples (templated names,
//! `--set` variations cycled over them), then churn updates of their spec at a rate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kubeapp::sdk::benchmark::readiness::{ReadinessTracker, WriteKind};
use serde_json::Value;

use super::flags::Variation;

/// A sample object of one of the project's kinds, and where objects of its kind go.
pub struct Target {
    /// `Kind.group`, for the report.
    pub kind: String,
    /// The sample document.
    pub sample: Value,
    /// Where its copies are created (the bench namespace, or cluster-wide).
    pub api: Api<DynamicObject>,
    /// The tool's watch of its kind.
    pub tracker: Arc<ReadinessTracker>,
}

/// One created object.
pub struct Copy {
    /// Index into the targets.
    pub target: usize,
    /// Its name.
    pub name: String,
    /// Its index among all objects (picks the variation values).
    pub index: usize,
    /// The generation the tool's last write gave it.
    pub generation: i64,
}

impl Copy {
    /// Copy `index` of target `target`, named `<sample name>-<suffix>`.
    pub fn new(targets: &[Target], target: usize, index: usize, suffix: &str) -> Self {
        let base = targets[target].sample["metadata"]["name"]
            .as_str()
            .unwrap_or("bench");
        Self {
            target,
            name: copy_name(base, suffix),
            index,
            generation: 1,
        }
    }
}

/// The name of object `index` copied from a sample named `base`: `base-00042` (the base cut so
/// that the name stays a valid DNS label of at most 63 characters).
pub fn copy_name(base: &str, suffix: &str) -> String {
    let room = 63 - suffix.len() - 1;
    let base: String = base.chars().take(room).collect();
    format!("{}-{suffix}", base.trim_end_matches('-'))
}

/// The object to create: the sample with `name`, `namespace` (when the kind is namespaced) and
/// the variations at `index`; server-set fields and the status left out.
///
/// # Errors
///
/// A variation whose path crosses a field of the sample that is not an object.
pub fn copy_of(
    sample: &Value,
    name: &str,
    namespace: Option<&str>,
    variations: &[Variation],
    index: usize,
) -> Result<DynamicObject, String> {
    let mut object = sample.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    let metadata = &sample["metadata"];
    let mut fresh = serde_json::json!({ "name": name });
    for field in ["labels", "annotations"] {
        if metadata[field].is_object() {
            fresh[field] = metadata[field].clone();
        }
    }
    if let Some(namespace) = namespace {
        fresh["namespace"] = namespace.into();
    }
    object["metadata"] = fresh;
    for variation in variations {
        variation.apply(&mut object, index)?;
    }
    serde_json::from_value(object).map_err(|e| format!("not a Kubernetes object: {e}"))
}

/// The JSON merge patch of a churn update: every variation at `index`.
///
/// # Errors
///
/// As [`Variation::apply`].
pub fn update_patch(variations: &[Variation], index: usize) -> Result<Value, String> {
    let mut patch = serde_json::json!({});
    for variation in variations {
        variation.apply(&mut patch, index)?;
    }
    Ok(patch)
}

/// Creates every copy, `concurrency` at a time, each announced to its kind's tracker first;
/// returns how long the creates took.
///
/// # Errors
///
/// The first create that failed: the object's name and the apiserver's message.
pub async fn create_all(
    targets: &[Target],
    copies: &[Copy],
    variations: &[Variation],
    namespace: &str,
    concurrency: usize,
    kind: WriteKind,
) -> Result<Duration, String> {
    let started = Instant::now();
    let mut creates = futures::stream::iter(copies)
        .map(|copy| create(targets, copy, variations, namespace, kind))
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = creates.next().await {
        result?;
    }
    Ok(started.elapsed())
}

/// Creates one copy (announced to its tracker first as a write of `kind`).
///
/// # Errors
///
/// As [`create_all`].
pub async fn create(
    targets: &[Target],
    copy: &Copy,
    variations: &[Variation],
    namespace: &str,
    kind: WriteKind,
) -> Result<(), String> {
    let target = &targets[copy.target];
    let namespaced = target.api.resource_url().contains("/namespaces/");
    let object = copy_of(
        &target.sample,
        &copy.name,
        namespaced.then_some(namespace),
        variations,
        copy.index,
    )
    .map_err(|e| format!("{} {}: {e}", target.kind, copy.name))?;
    target.tracker.expect(&copy.name, 1, kind);
    if let Err(error) = target.api.create(&PostParams::default(), &object).await {
        target.tracker.withdraw(&copy.name);
        return Err(format!("creating {} {}: {error}", target.kind, copy.name));
    }
    Ok(())
}

/// What the churn phase did.
pub struct ChurnOutcome {
    /// Updates sent.
    pub updates: usize,
    /// From the first update until the last was answered.
    pub elapsed: Duration,
    /// How long updates were being started (the `--duration`, or longer when behind).
    pub sending: Duration,
}

/// Sends spec updates round-robin over the copies at `rate` per second for `duration`
/// (`concurrency` in flight at most; a tick that finds them all busy waits, so the achieved rate
/// may be lower); each update is announced to its kind's tracker, with the generation it will
/// give the object, when it is sent.
///
/// # Errors
///
/// The first update that failed: the object's name and the apiserver's message.
pub async fn churn(
    targets: &[Target],
    copies: &mut [Copy],
    variations: &[Variation],
    rate: f64,
    duration: Duration,
    concurrency: usize,
) -> Result<ChurnOutcome, String> {
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut updates = 0usize;
    while !copies.is_empty() {
        // The updates in flight progress while the next tick is awaited.
        tokio::select! {
            Some(result) = in_flight.next(), if !in_flight.is_empty() => {
                result?;
                continue;
            }
            _ = ticks.tick() => {}
        }
        if started.elapsed() >= duration {
            break;
        }
        while in_flight.len() >= concurrency.max(1) {
            if let Some(result) = in_flight.next().await {
                result?;
            }
        }
        let copy = &mut copies[updates % copies.len()];
        updates += 1;
        copy.generation += 1;
        let target = &targets[copy.target];
        let update = usize::try_from(copy.generation - 1).unwrap_or(0);
        let patch = update_patch(variations, copy.index + update)
            .map_err(|e| format!("{} {}: {e}", target.kind, copy.name))?;
        let (name, generation) = (copy.name.clone(), copy.generation);
        in_flight.push(async move {
            // Announced when sent: the latency runs from here.
            target.tracker.expect(&name, generation, WriteKind::Update);
            target
                .api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
                .map_err(|error| {
                    target.tracker.withdraw(&name);
                    format!("updating {} {name}: {error}", target.kind)
                })
        });
    }
    let sending = started.elapsed();
    while let Some(result) = in_flight.next().await {
        result?;
    }
    Ok(ChurnOutcome {
        updates,
        elapsed: started.elapsed(),
        sending,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::flags::variation;

    #[test]
    fn copies_take_the_samples_spec_a_new_name_and_the_variation() {
        let sample = serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "example-web-app", "namespace": "default",
                         "labels": {"a": "b"}, "resourceVersion": "7", "uid": "u"},
            "spec": {"message": "hello", "size": 1},
            "status": {"observedGeneration": 3}
        });
        let variations = [variation("spec.size=1,2,3").expect("parses")];
        let name = copy_name("example-web-app", "00004");
        assert_eq!(name, "example-web-app-00004");
        let copy = copy_of(&sample, &name, Some("bench-x"), &variations, 4).expect("a copy");
        let json = serde_json::to_value(&copy).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "WebApp",
                "metadata": {"name": "example-web-app-00004", "namespace": "bench-x",
                             "labels": {"a": "b"}},
                "spec": {"message": "hello", "size": 2}
            })
        );
        assert_eq!(
            update_patch(&variations, 5).expect("a patch"),
            serde_json::json!({"spec": {"size": 3}})
        );
        let long = copy_name(&"x".repeat(80), "warmup");
        assert_eq!(long.len(), 63);
        assert!(long.ends_with("x-warmup"), "{long}");
    }
}
