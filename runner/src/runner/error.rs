//! The errors a [`Runner`](crate::Runner) returns.

use std::net::SocketAddr;
use std::time::Duration;

use kubeapp_sdk::app::AppError;

/// Why a [`Runner`](crate::Runner) stopped with an error (or could not start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The metrics prefix ([`RunnerConfig::metrics_prefix`](crate::RunnerConfig::metrics_prefix))
    /// is not the start of a valid Prometheus name.
    #[error(
        "invalid metrics prefix {prefix:?}: use letters, digits, `_` and `:`, not starting with a digit"
    )]
    InvalidMetricsPrefix {
        /// The rejected prefix.
        prefix: String,
    },
    /// The HTTP server could not listen on its address.
    #[error("listening on {addr}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A collector of an app was refused by the registry for another reason than "already
    /// registered" (for example: a metric of the same name with other labels).
    #[error("registering a metric collector of app {app}")]
    Metrics {
        /// The app whose collector was refused.
        app: String,
        /// The prometheus error.
        #[source]
        source: prometheus::Error,
    },
    /// An app declares webhooks but no webhook server is configured.
    #[error(
        "app {app} declares webhooks ({declared}) but the runner has no webhook server: configure \
         RunnerConfig::webhook with a TLS certificate and key"
    )]
    WebhooksRequired {
        /// The app.
        app: String,
        /// What it declares, e.g. `Widget: validation, conversion`.
        declared: String,
    },
    /// The runner's kubeapp collectors (controller, finalizer) could not be created.
    #[error("registering the runner's metrics")]
    RunnerMetrics(#[source] kubeapp_operator::metrics::MetricsError),
    /// The webhook server could not start (certificate files, address).
    #[error(transparent)]
    Webhook(#[from] crate::webhook::WebhookError),
    /// The SIGTERM/SIGINT handlers could not be installed.
    #[error("installing the SIGTERM/SIGINT handlers")]
    Signal(#[source] std::io::Error),
    /// An app's `run` returned an error; the other apps were stopped. (The app's name is also
    /// in the source, an [`AppError`] that names it.)
    #[error("an app failed; the runner stopped the others")]
    App {
        /// The failing app's name.
        app: String,
        /// What the app returned.
        #[source]
        source: AppError,
    },
    /// An app's `run` panicked; the other apps were stopped.
    #[error("app {app} panicked: {message}")]
    AppPanicked {
        /// The app's name.
        app: String,
        /// The panic message.
        message: String,
    },
    /// An app's `run` returned `Ok` before the runner asked it to stop; the other apps were
    /// stopped (an operator whose app quietly stopped would look alive while doing nothing).
    #[error("app {app} stopped before the runner asked it to")]
    AppExited {
        /// The app's name.
        app: String,
    },
    /// One of the runner's servers stopped or failed while the apps were running.
    #[error("the {server} server failed")]
    Server {
        /// Which server (`metrics`).
        server: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The apps did not finish within the shutdown timeout; they were dropped.
    #[error("shutdown timed out after {timeout:?}; still running: {}", apps.join(", "))]
    ShutdownTimeout {
        /// The configured shutdown timeout.
        timeout: Duration,
        /// The apps that had not returned, in the order they were added.
        apps: Vec<String>,
    },
    /// An app stopped when asked to, but abandoned handler calls that were still running when
    /// its shutdown grace ran out ([`AppError::Abandoned`]): work was left undone.
    #[error(
        "{calls} handler call(s) of app {app} were abandoned: still running when the shutdown \
         grace ran out (give handlers more time with a longer shutdown timeout, or let them return \
         when their context is cancelled)"
    )]
    Abandoned {
        /// The app.
        app: String,
        /// How many calls it dropped.
        calls: u64,
    },
    /// A second SIGTERM/SIGINT arrived during the graceful shutdown: the runner returned at once,
    /// without waiting for the apps.
    #[error("second signal ({signal}) during graceful shutdown: stopped without waiting")]
    SecondSignal {
        /// `SIGTERM` or `SIGINT`.
        signal: &'static str,
    },
}

pub(super) use kubeapp_sdk::error::error_chain;

/// The exit status of a process whose runner stopped but left work undone: handler calls
/// abandoned at the shutdown grace ([`RunnerError::Abandoned`]), apps dropped at the shutdown
/// timeout ([`RunnerError::ShutdownTimeout`]) or a second signal that cut the shutdown short
/// ([`RunnerError::SecondSignal`]). Distinct from 1 (any other failure) so that Kubernetes and CI
/// tell "stopped, but abandoned work" from "failed".
pub const EXIT_WORK_ABANDONED: u8 = 3;

impl RunnerError {
    /// The process exit status for this error: [`EXIT_WORK_ABANDONED`] when work was left undone
    /// at shutdown, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Abandoned { .. } | Self::ShutdownTimeout { .. } | Self::SecondSignal { .. } => {
                EXIT_WORK_ABANDONED
            }
            _ => 1,
        }
    }

    /// The error of an app whose `run` returned `source`: [`RunnerError::Abandoned`] for
    /// abandoned calls, else [`RunnerError::App`].
    pub(super) fn of_app(app: String, source: AppError) -> Self {
        match source {
            AppError::Abandoned { calls, .. } => Self::Abandoned { app, calls },
            source => Self::App { app, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_chain_joins_the_causes() {
        let error = RunnerError::App {
            app: "a".into(),
            source: AppError::Build {
                app: "a".into(),
                message: "bad".into(),
            },
        };
        assert_eq!(
            error_chain(&error),
            "an app failed; the runner stopped the others: building app a: bad"
        );
    }

    /// Issue #33: this chain printed `app failing failed: app failing failed: run error: run
    /// error` (every level printed its source and returned it).
    #[test]
    fn a_run_error_is_reported_once() {
        let error = RunnerError::App {
            app: "failing".into(),
            source: AppError::Run {
                app: "failing".into(),
                source: "run error".into(),
            },
        };
        assert!(
            kubeapp_sdk::error::restated_causes(&error).is_empty(),
            "{:?}",
            kubeapp_sdk::error::restated_causes(&error)
        );
        assert_eq!(
            error_chain(&error),
            "an app failed; the runner stopped the others: app failing failed: run error"
        );
    }

    #[test]
    fn a_source_already_in_the_message_is_not_repeated() {
        let inner = std::io::Error::other("connection refused");
        let error = RunnerError::Server {
            server: "metrics",
            source: std::io::Error::other(inner),
        };
        assert_eq!(
            error_chain(&error),
            "the metrics server failed: connection refused"
        );
    }
}
