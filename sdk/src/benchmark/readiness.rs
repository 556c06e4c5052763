//! When the operator has handled a write, seen from a measuring tool's own watch.
//!
//! The tool announces every write it is about to send ([`ReadinessTracker::expect`]: the
//! object's name and the generation the write will give it) and then sends it; its watch of the
//! kind sees each object change, and the first copy that shows the operator handled that
//! generation ([`Readiness`]) ends the object's wait: its latency runs from the announcement to
//! that watch event. A newer write announced before the older one was handled supersedes it (the
//! operator may rightly handle only the newest generation): the older one is counted as
//! superseded, not as a latency. A copy of a later generation that is handled also counts (a
//! mutating webhook may bump the generation again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;

/// What shows that the operator handled an object's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Readiness {
    /// `status.observedGeneration` equals `metadata.generation`.
    ObservedGeneration,
    /// A `status.conditions` entry of type `Ready` is `True`, and its own `observedGeneration`
    /// (or, when it has none, `status.observedGeneration`) equals `metadata.generation`.
    Condition,
}

impl Readiness {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Readiness::ObservedGeneration => "observed-generation",
            Readiness::Condition => "condition",
        }
    }

    /// What the rule asks, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Readiness::ObservedGeneration => {
                "status.observedGeneration equal to metadata.generation"
            }
            Readiness::Condition => {
                "a Ready condition True for metadata.generation (its observedGeneration, or \
                 status.observedGeneration)"
            }
        }
    }

    /// The generation `object` is handled at under this rule, if any.
    pub fn handled_generation(self, object: &DynamicObject) -> Option<i64> {
        let generation = object.metadata.generation?;
        let status = &object.data["status"];
        let observed = status["observedGeneration"].as_i64();
        let handled = match self {
            Readiness::ObservedGeneration => observed == Some(generation),
            Readiness::Condition => ready_condition(status).is_some_and(|ready| {
                ready["status"] == "True"
                    && ready["observedGeneration"].as_i64().or(observed) == Some(generation)
            }),
        };
        handled.then_some(generation)
    }
}

/// The `Ready` entry of `status.conditions`.
fn ready_condition(status: &Value) -> Option<&Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == "Ready")
}

/// One line on what an object's copy shows: its generation, observed generation and `Ready`
/// condition (for errors about objects never handled).
pub fn status_line(object: &DynamicObject) -> String {
    let show = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
    let status = &object.data["status"];
    let ready = ready_condition(status).map(|c| {
        format!(
            "{} ({}: {})",
            c["status"].as_str().unwrap_or("?"),
            c["reason"].as_str().unwrap_or(""),
            c["message"].as_str().unwrap_or("")
        )
    });
    format!(
        "generation={} status.observedGeneration={} Ready={}",
        show(object.metadata.generation.map(|g| g.to_string())),
        show(status["observedGeneration"].as_i64().map(|g| g.to_string())),
        show(ready)
    )
}

/// Which kind of write a latency belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A create before the measurement starts (the warm-up): awaited, not reported.
    Warmup,
    /// The object's create (generation 1).
    Create,
    /// A spec update.
    Update,
}

/// A write announced and not handled yet.
#[derive(Debug)]
struct Pending {
    generation: i64,
    kind: WriteKind,
    sent: Instant,
}

#[derive(Debug, Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// The last copy seen of each object with a pending write, as a [`status_line`].
    last_seen: HashMap<String, String>,
    latencies: HashMap<WriteKind, Vec<Duration>>,
    superseded: HashMap<WriteKind, usize>,
    watch_errors: u64,
}

/// What the tracker has counted so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Writes announced and not handled yet.
    pub outstanding: usize,
    /// Handled writes (latency samples) by kind.
    pub handled: HashMap<WriteKind, usize>,
    /// Writes superseded by a newer one before they were handled, by kind.
    pub superseded: HashMap<WriteKind, usize>,
    /// Watch errors (the watch resumes after each).
    pub watch_errors: u64,
}

/// A measuring tool's watch of one kind; stops when dropped.
#[derive(Debug)]
pub struct ReadinessTracker {
    state: Arc<Mutex<State>>,
    changes: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReadinessTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ReadinessTracker {
    /// Starts watching `api`'s objects (through the tool's own client) under `readiness`.
    pub fn start(api: Api<DynamicObject>, readiness: Readiness) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let (sender, changes) = watch::channel(0);
        let task = tokio::spawn(track(api, readiness, Arc::clone(&state), sender));
        Self {
            state,
            changes,
            task,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Announces a write about to be sent: `name` will be at `generation` (1 for a create). The
    /// clock of its latency starts now.
    pub fn expect(&self, name: &str, generation: i64, kind: WriteKind) {
        let mut state = self.state();
        let new = Pending {
            generation,
            kind,
            sent: Instant::now(),
        };
        if let Some(older) = state.pending.insert(name.to_string(), new) {
            *state.superseded.entry(older.kind).or_default() += 1;
        }
    }

    /// Withdraws the announcement of a write that failed to be sent.
    pub fn withdraw(&self, name: &str) {
        self.state().pending.remove(name);
    }

    /// The counts so far.
    pub fn tally(&self) -> Tally {
        let state = self.state();
        Tally {
            outstanding: state.pending.len(),
            handled: state
                .latencies
                .iter()
                .map(|(kind, samples)| (*kind, samples.len()))
                .collect(),
            superseded: state.superseded.clone(),
            watch_errors: state.watch_errors,
        }
    }

    /// The latencies of the handled writes of `kind`, in the order they were handled.
    pub fn latencies(&self, kind: WriteKind) -> Vec<Duration> {
        self.state()
            .latencies
            .get(&kind)
            .cloned()
            .unwrap_or_default()
    }

    /// Up to `limit` writes still outstanding, each as `name: wanted generation G, last seen:
    /// <status line>` (sorted by name), for errors.
    pub fn outstanding(&self, limit: usize) -> Vec<String> {
        let state = self.state();
        let mut names: Vec<&String> = state.pending.keys().collect();
        names.sort();
        names
            .into_iter()
            .take(limit)
            .map(|name| {
                let seen = state
                    .last_seen
                    .get(name)
                    .map_or("not seen by the watch", String::as_str);
                format!(
                    "{name}: wanted generation {}, last seen: {seen}",
                    state.pending[name].generation
                )
            })
            .collect()
    }

    /// Waits until no announced write is outstanding, or `timeout` passes (`false`).
    pub async fn wait_all_handled(&self, timeout: Duration) -> bool {
        let mut changes = self.changes.clone();
        let done = async {
            loop {
                if self.state().pending.is_empty() {
                    return;
                }
                if changes.changed().await.is_err() {
                    // The watch task ended (it never does while the tracker lives): poll.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        tokio::time::timeout(timeout, done).await.is_ok()
    }
}

async fn track(
    api: Api<DynamicObject>,
    readiness: Readiness,
    state: Arc<Mutex<State>>,
    changes: watch::Sender<u64>,
) {
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                let name = object.name_any();
                let Some(wanted) = state.pending.get(&name).map(|p| p.generation) else {
                    continue;
                };
                if readiness
                    .handled_generation(&object)
                    .is_some_and(|generation| generation >= wanted)
                {
                    if let Some(done) = state.pending.remove(&name) {
                        let latency = now.saturating_duration_since(done.sent);
                        state.latencies.entry(done.kind).or_default().push(latency);
                    }
                    state.last_seen.remove(&name);
                } else {
                    state.last_seen.insert(name, status_line(&object));
                }
            }
            Ok(Event::Delete(_) | Event::Init | Event::InitDone) => continue,
            Err(error) => {
                state.watch_errors += 1;
                tracing::warn!(%error, "the benchmark's watch failed; resuming");
            }
        }
        drop(state);
        changes.send_modify(|count| *count += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(generation: i64, status: Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": generation}, "status": status
        }))
        .expect("an object")
    }

    #[test]
    fn observed_generation_must_be_the_current_generation() {
        let rule = Readiness::ObservedGeneration;
        let current = object(2, serde_json::json!({"observedGeneration": 2}));
        assert_eq!(rule.handled_generation(&current), Some(2));
        let behind = object(3, serde_json::json!({"observedGeneration": 2}));
        assert_eq!(rule.handled_generation(&behind), None);
        assert_eq!(rule.handled_generation(&object(1, Value::Null)), None);
        assert_eq!(
            status_line(&behind),
            "generation=3 status.observedGeneration=2 Ready=-"
        );
    }

    #[test]
    fn the_ready_condition_must_be_true_for_the_current_generation() {
        let rule = Readiness::Condition;
        let ready = |status: &str, generation: Option<i64>| {
            let mut condition = serde_json::json!({"type": "Ready", "status": status, "reason": "R", "message": "m"});
            if let Some(g) = generation {
                condition["observedGeneration"] = g.into();
            }
            condition
        };
        let with = |generation, status| object(generation, status);
        assert_eq!(
            rule.handled_generation(&with(
                2,
                serde_json::json!({"conditions": [ready("True", Some(2))]})
            )),
            Some(2)
        );
        // The condition's generation is old, though the status's is current.
        assert_eq!(
            rule.handled_generation(&with(
                2,
                serde_json::json!({"observedGeneration": 2, "conditions": [ready("True", Some(1))]})
            )),
            None
        );
        // No generation on the condition: the status's counts.
        assert_eq!(
            rule.handled_generation(&with(
                2,
                serde_json::json!({"observedGeneration": 2, "conditions": [ready("True", None)]})
            )),
            Some(2)
        );
        assert_eq!(
            rule.handled_generation(&with(
                2,
                serde_json::json!({"observedGeneration": 2, "conditions": [ready("False", None)]})
            )),
            None
        );
        // Ready with no generation anywhere cannot say which generation it is about.
        assert_eq!(
            rule.handled_generation(&with(
                2,
                serde_json::json!({"conditions": [ready("True", None)]})
            )),
            None
        );
    }
}
