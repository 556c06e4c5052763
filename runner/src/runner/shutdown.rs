//! What stops a runner (signals or a caller's future) and the set of running apps.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use kubeapp_sdk::app::{App, AppError};
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// Where the stop request comes from.
pub(super) enum StopSource<'a> {
    /// SIGTERM or SIGINT; a second one during the graceful shutdown is reported too.
    Signals(Signals),
    /// The caller's future; `None` once it completed (it is not polled again).
    Until(Option<Pin<&'a mut (dyn Future<Output = ()> + Send)>>),
}

impl StopSource<'_> {
    /// Completes when the runner is asked to stop; says why.
    pub(super) async fn first(&mut self) -> &'static str {
        match self {
            Self::Signals(signals) => signals.next().await,
            Self::Until(stop) => {
                if let Some(future) = stop.as_mut() {
                    future.as_mut().await;
                }
                *stop = None;
                "the stop future completed"
            }
        }
    }

    /// Completes on a second stop request: a second signal. Never completes for a future.
    pub(super) async fn second(&mut self) -> &'static str {
        match self {
            Self::Signals(signals) => signals.next().await,
            Self::Until(_) => std::future::pending().await,
        }
    }
}

/// Waits `delay` after a requested stop; a second signal during it ends the wait with its name
/// (the runner then returns at once). A stop future has no second request.
pub(super) async fn delay(
    stop: &mut StopSource<'_>,
    delay: std::time::Duration,
) -> Result<(), &'static str> {
    tokio::select! {
        () = tokio::time::sleep(delay) => Ok(()),
        signal = stop.second() => Err(signal),
    }
}

/// The process's SIGTERM and SIGINT, installed once and kept for the runner's lifetime, so that a
/// signal never falls back to the default action (kill) while the runner runs.
pub(super) struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers.
    pub(super) fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            // `recv` yields `None` only when the runtime shuts down: then no signal comes.
            tokio::select! {
                Some(()) = self.terminate.recv() => "SIGTERM",
                Some(()) = self.interrupt.recv() => "SIGINT",
                else => std::future::pending().await,
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => "SIGINT",
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// How an app's `run` ended.
pub(super) enum AppOutcome {
    /// It returned `Ok`.
    Stopped,
    /// It returned an error.
    Failed(AppError),
    /// It panicked (or was cancelled, which the runner only does after it gave up on it).
    Panicked(String),
}

impl From<Result<Result<(), AppError>, JoinError>> for AppOutcome {
    fn from(joined: Result<Result<(), AppError>, JoinError>) -> Self {
        match joined {
            Ok(Ok(())) => Self::Stopped,
            Ok(Err(error)) => Self::Failed(error),
            Err(error) => Self::Panicked(panic_message(error)),
        }
    }
}

fn panic_message(error: JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    let payload = error.into_panic();
    if let Some(message) = payload.downcast_ref::<&'static str>() {
        (*message).to_string()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// The apps' `run` tasks, each with its name. Dropping the set aborts what still runs.
pub(super) struct AppTasks {
    tasks: JoinSet<Result<(), AppError>>,
    /// Task id -> (position the app was added at, name).
    names: HashMap<Id, (usize, String)>,
}

impl AppTasks {
    /// Starts every app's `run` with `stop` (all apps share it).
    pub(super) fn spawn(apps: &[Arc<dyn App>], stop: &CancellationToken) -> Self {
        let mut tasks = JoinSet::new();
        let mut names = HashMap::new();
        for (position, app) in apps.iter().enumerate() {
            let (app, stop) = (Arc::clone(app), stop.clone());
            let name = app.name().to_string();
            let handle = tasks.spawn(async move { app.run(stop).await });
            names.insert(handle.id(), (position, name));
        }
        Self { tasks, names }
    }

    /// Whether every app has returned.
    pub(super) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The next app to return, with its outcome; `None` when none is left.
    pub(super) async fn next(&mut self) -> Option<(String, AppOutcome)> {
        let (id, joined) = match self.tasks.join_next_with_id().await? {
            Ok((id, result)) => (id, Ok(result)),
            Err(error) => (error.id(), Err(error)),
        };
        let name = self
            .names
            .remove(&id)
            .map_or_else(|| format!("<task {id}>"), |(_, name)| name);
        Some((name, joined.into()))
    }

    /// The apps that have not returned, in the order they were added.
    pub(super) fn still_running(&self) -> Vec<String> {
        let mut running: Vec<_> = self.names.values().cloned().collect();
        running.sort_unstable_by_key(|(position, _)| *position);
        running.into_iter().map(|(_, name)| name).collect()
    }

    /// Aborts what still runs (their futures are dropped at their next await).
    pub(super) fn abort_all(&mut self) {
        self.tasks.abort_all();
    }
}
