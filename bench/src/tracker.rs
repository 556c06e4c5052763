//! The tool's own view of the objects: one watch on the namespace, through the driver identity,
//! that counts watch events and knows which objects are done (status `observedGeneration` equal to
//! `metadata.generation`, and the finalizer present).

use std::collections::HashMap;

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::kind::BenchObject;

/// The name of the object that proves a contender is up before the clock starts.
pub const WARMUP: &str = "warmup";

/// What the tracker has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The warm-up object is done.
    pub warmup_done: bool,
    /// Measured objects (all but the warm-up) that are done.
    pub done: usize,
    /// Watch events about measured objects.
    pub events: u64,
    /// Watch errors (the watch resumes after each).
    pub watch_errors: u64,
}

/// A running tracker; stops when dropped.
#[derive(Debug)]
pub struct Tracker {
    progress: watch::Receiver<Progress>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    /// Starts watching `api`'s objects.
    pub fn start(api: Api<BenchObject>) -> Self {
        let (sender, progress) = watch::channel(Progress::default());
        let task = tokio::spawn(track(api, sender));
        Self { progress, task }
    }

    /// The latest progress.
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// A receiver of progress updates.
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn track(api: Api<BenchObject>, sender: watch::Sender<Progress>) {
    let mut done: HashMap<String, bool> = HashMap::new();
    let mut progress = Progress::default();
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                let name = object.name_any();
                let now_done = object.is_reconciled() && object.has_finalizer();
                if name == WARMUP {
                    progress.warmup_done = now_done;
                } else {
                    progress.events += 1;
                    let before = done.insert(name, now_done).unwrap_or(false);
                    match (before, now_done) {
                        (false, true) => progress.done += 1,
                        (true, false) => progress.done -= 1,
                        _ => {}
                    }
                }
            }
            Ok(Event::Delete(object)) => {
                if done.remove(&object.name_any()) == Some(true) {
                    progress.done -= 1;
                }
            }
            Ok(Event::Init | Event::InitDone) => {}
            Err(error) => {
                progress.watch_errors += 1;
                tracing::warn!(%error, "the tracker's watch failed; resuming");
            }
        }
        sender.send_replace(progress);
    }
}
