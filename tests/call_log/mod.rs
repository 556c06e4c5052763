//! What the end-to-end tests of the opinionated wrappers, finalizer names, undecodable objects
//! and kept retries share: a log of handler calls that a test awaits conditions on, the test's
//! `tracing` output, and a wait for an object's exact finalizer list.
//!
//! Each test file is its own crate and uses only part of this module.
#![allow(dead_code)]

use std::sync::{Arc, Once};
use std::time::Duration;

use kube::Resource;
use kube::api::Api;
use kube::runtime::wait::await_condition;
use tokio::sync::watch;

/// How long a test waits for a condition before it fails, saying what it waited for.
pub const WAIT: Duration = Duration::from_secs(60);

/// Sends `kubeapp_operator` logs (`info`, or `RUST_LOG`) to the test's captured output, once.
pub fn logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "kubeapp_operator=info".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

/// An append-only log of handler calls; cheap to clone into handlers.
#[derive(Clone)]
pub struct CallLog(Arc<watch::Sender<Vec<String>>>);

impl CallLog {
    /// An empty log.
    pub fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Vec::new())))
    }

    /// Appends one entry and wakes the waiters.
    pub fn push(&self, entry: String) {
        self.0.send_modify(|log| log.push(entry));
    }

    /// Every entry so far.
    pub fn entries(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    /// The entries about the object `name` (its name is each entry's second word).
    pub fn of(&self, name: &str) -> Vec<String> {
        self.entries()
            .into_iter()
            .filter(|e| e.split(' ').nth(1) == Some(name))
            .collect()
    }

    /// How often `entry` was logged.
    pub fn count(&self, entry: &str) -> usize {
        self.0.borrow().iter().filter(|e| *e == entry).count()
    }

    /// Waits until `done` holds for the log; fails naming `what` and showing the log.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        let mut rx = self.0.subscribe();
        if !matches!(
            tokio::time::timeout(WAIT, rx.wait_for(|log| done(log))).await,
            Ok(Ok(_))
        ) {
            panic!(
                "{what}: not reached within {WAIT:?}; log: {:#?}",
                self.entries()
            );
        }
    }

    /// Waits until `entry` was logged.
    pub async fn wait_contains(&self, entry: &str) {
        self.wait_for(entry, |log| log.iter().any(|e| e == entry))
            .await;
    }

    /// Waits until the log holds at least `len` entries and returns them.
    pub async fn wait_len(&self, len: usize) -> Vec<String> {
        self.wait_for(&format!("{len} entries"), |log| log.len() >= len)
            .await;
        self.entries()
    }
}

/// Waits until the object `name` carries exactly `expected` as its finalizers (in order).
pub async fn wait_finalizers<K>(api: &Api<K>, name: &str, expected: &[&str])
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let wanted: Vec<String> = expected.iter().map(|f| (*f).to_string()).collect();
    let condition = wanted.clone();
    let reached = tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, move |o: Option<&K>| {
            o.is_some_and(|o| o.meta().finalizers.clone().unwrap_or_default() == condition)
        }),
    )
    .await;
    if !matches!(reached, Ok(Ok(_))) {
        let now = api.get_opt(name).await.ok().flatten();
        panic!(
            "{name} has not exactly the finalizers {wanted:?} within {WAIT:?}; now: {:?}",
            now.map(|o| o.meta().finalizers.clone())
        );
    }
}

/// Waits until the object `name` exists and `done` holds for it (a watch, not polling); fails
/// naming `what`.
pub async fn wait_object<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    done: impl Fn(&K) -> bool + Send + 'static,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let reached = tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, move |o: Option<&K>| o.is_some_and(&done)),
    )
    .await;
    assert!(
        matches!(reached, Ok(Ok(_))),
        "{what}: not reached within {WAIT:?}"
    );
}

/// Checks `done` every 50 ms until it holds, for state that has no watch (metrics, counters);
/// fails naming `what`.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not reached within {WAIT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A client for `kubeconfig` whose requests are counted, under the metrics prefix `prefix`, in
/// collectors of its own.
pub async fn counted_client(
    kubeconfig: &kube::config::Kubeconfig,
    prefix: &str,
) -> (kube::Client, kubeapp::runner::client_metrics::ClientMetrics) {
    use kubeapp::runner::client_metrics::{ClientMetrics, instrumented_client};
    let metrics = ClientMetrics::unregistered(Some(prefix)).expect("client metrics");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig.clone(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("client config");
    let client = instrumented_client(config, metrics.clone()).expect("client");
    (client, metrics)
}
