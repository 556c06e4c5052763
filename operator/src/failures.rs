//! Handler failures by cause, and the missing permission behind a forbidden write.
//!
//! Readiness is about serving (webhooks, synced caches), so an operator whose every write is
//! refused can be ready and still do nothing. This module makes that visible where operators
//! look:
//!
//! - **A metric.** Every failed handler call (watcher or reconciler, retried or not) counts into
//!   `handler_failures_total{kind, cause}` (under the runner's prefix), `cause` being one of
//!   [`FailureCause`]: `forbidden` (HTTP 403), `conflict` (409), `not_found` (404),
//!   `server_error` (5xx, 429), `timeout` (the controller's `event_timeout`, a 504 or a request
//!   that timed out) and `handler_error` (anything else: the handler's own error, a panic, another
//!   4xx). The cause is read from the first Kubernetes API error found down the error's
//!   [`source()`](std::error::Error::source) chain (a `kube::Error::Api`, or its `Status`), so a
//!   handler that returns `kube::Error` with `?`, or wraps it in an error that returns it as
//!   its source, is classified.
//! - **A log line per missing permission.** A 403 names the verb, the resource and the group in
//!   its message (`User "u" cannot patch resource "widgets" in API group "example.com" ...`): the
//!   first one of each kind, verb and resource is logged as an error naming the missing permission
//!   and the RBAC rule that grants it, and then at most once every [`FORBIDDEN_LOG_INTERVAL`].
//! - **An opt-in readiness check.** [`ForbiddenWritesCheck`] (a `kubeapp_sdk` health check named
//!   `writes-permitted`) fails while some kind's last `threshold` or more handler calls in a row
//!   failed with 403; any successful call of the kind resets its count. A simple App adds it with
//!   `AppConfig::ready_requires_writes`, an operator binary with `--ready-requires-writes`.

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube::core::Status;
use kubeapp_sdk::app::HealthCheck;
use prometheus::{IntCounter, IntCounterVec};

use crate::InformerController;
use crate::handler::HandlerError;

/// How often the same missing permission (kind, verb, resource, group) is logged at most.
pub const FORBIDDEN_LOG_INTERVAL: Duration = Duration::from_secs(300);

/// Why a handler call failed, as the `cause` label of `handler_failures_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureCause {
    /// The apiserver refused a request with 403 Forbidden (RBAC).
    Forbidden,
    /// 409 Conflict (a stale `resourceVersion`, or an object that exists already).
    Conflict,
    /// 404 Not Found.
    NotFound,
    /// A 5xx answer, or 429 Too Many Requests.
    ServerError,
    /// The call ran past the controller's `event_timeout`, or a request timed out (504, an I/O
    /// timeout).
    Timeout,
    /// Anything else: the handler's own error, a panic, another 4xx answer.
    HandlerError,
}

impl FailureCause {
    /// Every cause, in label order.
    pub const ALL: [FailureCause; 6] = [
        FailureCause::Forbidden,
        FailureCause::Conflict,
        FailureCause::NotFound,
        FailureCause::ServerError,
        FailureCause::Timeout,
        FailureCause::HandlerError,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            FailureCause::Forbidden => "forbidden",
            FailureCause::Conflict => "conflict",
            FailureCause::NotFound => "not_found",
            FailureCause::ServerError => "server_error",
            FailureCause::Timeout => "timeout",
            FailureCause::HandlerError => "handler_error",
        }
    }

    /// The cause of a failed handler call.
    pub fn of(error: &HandlerError) -> Self {
        match error {
            HandlerError::TimedOut(_) => FailureCause::Timeout,
            HandlerError::Failed(error) => Self::of_error(error.as_ref()),
            HandlerError::Panicked(_) | HandlerError::Cancelled => FailureCause::HandlerError,
        }
    }

    /// The cause of an error: from the first API status or timeout down its chain.
    pub(crate) fn of_error(error: &(dyn Error + 'static)) -> Self {
        if let Some(status) = api_status(error) {
            return match status.code {
                403 => FailureCause::Forbidden,
                409 => FailureCause::Conflict,
                404 => FailureCause::NotFound,
                504 => FailureCause::Timeout,
                429 | 500..=599 => FailureCause::ServerError,
                _ => FailureCause::HandlerError,
            };
        }
        if chain(error).any(is_timeout) {
            FailureCause::Timeout
        } else {
            FailureCause::HandlerError
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// `error` and its sources.
fn chain<'a>(
    error: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> + 'a {
    std::iter::successors(Some(error), |&error| error.source())
}

/// The first Kubernetes API status down `error`'s chain.
pub(crate) fn api_status<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a Status> {
    chain(error).find_map(|error| {
        if let Some(kube::Error::Api(status)) = error.downcast_ref::<kube::Error>() {
            Some(status.as_ref())
        } else if let Some(status) = error.downcast_ref::<Status>() {
            Some(status)
        } else {
            error.downcast_ref::<Box<Status>>().map(AsRef::as_ref)
        }
    })
}

fn is_timeout(error: &(dyn Error + 'static)) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        || error.is::<tokio::time::error::Elapsed>()
}

/// What a 403's message says was refused: `User "u" cannot VERB resource "RESOURCE" in API group
/// "GROUP" in the namespace "NS"` (or `at the cluster scope`), as kube-apiserver words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ForbiddenRequest {
    /// Who asked (the `User "..."` of the message), if named.
    pub user: Option<String>,
    /// The verb: `get`, `list`, `patch`, ...
    pub verb: String,
    /// The resource, with its subresource when there is one (`widgets/status`).
    pub resource: String,
    /// The API group (`""` for the core group).
    pub group: String,
    /// The namespace, or `None` at the cluster scope.
    pub namespace: Option<String>,
}

impl ForbiddenRequest {
    /// Reads a 403 message; `None` when it is not in kube-apiserver's wording.
    pub fn parse(message: &str) -> Option<Self> {
        let quoted_after = |text: &str, marker: &str| -> Option<String> {
            let rest = &text[text.find(marker)? + marker.len()..];
            Some(rest[..rest.find('"')?].to_string())
        };
        let user = quoted_after(message, "User \"");
        let after_cannot = &message[message.find(" cannot ")? + " cannot ".len()..];
        let verb = after_cannot.split_whitespace().next()?.to_string();
        let resource = quoted_after(after_cannot, "resource \"")?;
        let group = quoted_after(after_cannot, "in API group \"")?;
        let namespace = quoted_after(after_cannot, "in the namespace \"");
        Some(Self {
            user,
            verb,
            resource,
            group,
            namespace,
        })
    }

    /// The RBAC rule that grants the request, in YAML flow style.
    pub fn rule(&self) -> String {
        format!(
            "{{apiGroups: [\"{}\"], resources: [\"{}\"], verbs: [\"{}\"]}}",
            self.group, self.resource, self.verb
        )
    }
}

impl fmt::Display for ForbiddenRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "the core API group".to_string()
        } else {
            format!("API group {:?}", self.group)
        };
        write!(f, "{} {} in {group}", self.verb, self.resource)?;
        match &self.namespace {
            Some(namespace) => write!(f, " (namespace {namespace:?})"),
            None => f.write_str(" (cluster-wide)"),
        }
    }
}

/// One kind's failure counters, its run of forbidden calls and its log limiter. Clones share
/// everything.
#[derive(Clone)]
pub(crate) struct KindFailures {
    kind: Arc<str>,
    counters: Arc<[IntCounter; 6]>,
    streak: Arc<AtomicU64>,
    last_forbidden: Arc<Mutex<Option<String>>>,
    logged: Arc<Mutex<HashMap<Permission, Instant>>>,
}

/// Verb, resource and group of a refused request: what the log limiter counts by.
type Permission = (String, String, String);

impl fmt::Debug for KindFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KindFailures")
            .field("kind", &self.kind)
            .field("forbidden_streak", &self.streak.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl KindFailures {
    /// The counters of `kind` in `handler_failures` (labels `kind`, `cause`).
    pub(crate) fn new(kind: &str, handler_failures: &IntCounterVec) -> Self {
        let counter =
            |cause: FailureCause| handler_failures.with_label_values(&[kind, cause.label()]);
        Self {
            kind: Arc::from(kind),
            counters: Arc::new(FailureCause::ALL.map(counter)),
            streak: Arc::default(),
            last_forbidden: Arc::default(),
            logged: Arc::default(),
        }
    }

    /// A handler call of the kind failed with `error`.
    pub(crate) fn failed(&self, error: &HandlerError) {
        let cause = FailureCause::of(error);
        let index = FailureCause::ALL
            .iter()
            .position(|c| *c == cause)
            .unwrap_or(FailureCause::ALL.len() - 1);
        self.counters[index].inc();
        if cause != FailureCause::Forbidden {
            return;
        }
        self.streak.fetch_add(1, Ordering::Relaxed);
        let refused = match error {
            HandlerError::Failed(error) => api_status(error.as_ref())
                .and_then(|status| ForbiddenRequest::parse(&status.message)),
            _ => None,
        };
        let summary = refused.as_ref().map_or_else(
            || "a request was forbidden (403)".to_string(),
            |refused| format!("cannot {refused}; grant the rule {}", refused.rule()),
        );
        *self
            .last_forbidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(summary);
        if let Some(refused) = refused {
            self.log_forbidden(&refused, error);
        }
    }

    /// A handler call of the kind succeeded: its run of forbidden calls ends. (One load on the
    /// hot path; the store only after a forbidden call.)
    pub(crate) fn succeeded(&self) {
        if self.streak.load(Ordering::Relaxed) != 0 {
            self.streak.store(0, Ordering::Relaxed);
        }
    }

    /// How many handler calls in a row failed with 403, and what the last one was refused.
    pub(crate) fn forbidden_streak(&self) -> (u64, Option<String>) {
        let last = self
            .last_forbidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (self.streak.load(Ordering::Relaxed), last)
    }

    /// The error line of a missing permission, once per [`FORBIDDEN_LOG_INTERVAL`] per kind,
    /// verb, resource and group.
    fn log_forbidden(&self, refused: &ForbiddenRequest, error: &HandlerError) {
        let key = (
            refused.verb.clone(),
            refused.resource.clone(),
            refused.group.clone(),
        );
        let now = Instant::now();
        {
            let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
            match logged.get(&key) {
                Some(at) if now.duration_since(*at) < FORBIDDEN_LOG_INTERVAL => return,
                _ => {
                    logged.insert(key, now);
                }
            }
        }
        tracing::error!(
            kind = %self.kind,
            verb = %refused.verb,
            resource = %refused.resource,
            group = %refused.group,
            namespace = refused.namespace.as_deref().unwrap_or(""),
            user = refused.user.as_deref().unwrap_or(""),
            rule = %refused.rule(),
            %error,
            "handler calls of {} are forbidden to {refused}: the operator's role lacks the \
             permission; grant it the RBAC rule {} (logged at most every {}s per permission; \
             handler_failures_total{{cause=\"forbidden\"}} counts every refusal)",
            self.kind,
            refused.rule(),
            FORBIDDEN_LOG_INTERVAL.as_secs(),
        );
    }
}

/// Where [`ForbiddenWritesCheck`] reads each kind's run of forbidden calls.
pub(crate) type ForbiddenStreaks =
    Arc<dyn Fn() -> Vec<(String, u64, Option<String>)> + Send + Sync>;

/// The opt-in readiness check `writes-permitted`; see the [module docs](self).
pub struct ForbiddenWritesCheck {
    pub(crate) threshold: u64,
    pub(crate) streaks: ForbiddenStreaks,
}

impl InformerController {
    /// The opt-in `writes-permitted` readiness check of this controller's kinds: it fails while
    /// the last `threshold` (at least 1) or more handler calls of some kind failed with 403
    /// Forbidden, naming the kind and the permission the last one lacked (see the
    /// [module docs](self)). Kinds added later are included.
    pub fn forbidden_writes_check(&self, threshold: u64) -> ForbiddenWritesCheck {
        let controller = self.clone();
        ForbiddenWritesCheck {
            threshold: threshold.max(1),
            streaks: Arc::new(move || {
                controller
                    .runtimes()
                    .iter()
                    .map(|runtime| {
                        let (streak, last) = runtime.metrics.failures.forbidden_streak();
                        (runtime.name.to_string(), streak, last)
                    })
                    .collect()
            }),
        }
    }
}

/// The name of [`ForbiddenWritesCheck`] in the `/readyz` body.
pub const WRITES_PERMITTED_CHECK: &str = "writes-permitted";

impl fmt::Debug for ForbiddenWritesCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForbiddenWritesCheck")
            .field("threshold", &self.threshold)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl HealthCheck for ForbiddenWritesCheck {
    fn name(&self) -> String {
        WRITES_PERMITTED_CHECK.to_string()
    }

    async fn check(&self) -> Result<(), String> {
        let failing: Vec<String> = (self.streaks)()
            .into_iter()
            .filter(|(_, streak, _)| *streak >= self.threshold)
            .map(|(kind, streak, last)| {
                format!(
                    "{kind}: the last {streak} handler calls failed with 403 Forbidden ({})",
                    last.unwrap_or_default()
                )
            })
            .collect();
        if failing.is_empty() {
            Ok(())
        } else {
            Err(failing.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> HandlerError {
        let status = Status::failure(message, "Reason").with_code(code);
        HandlerError::failed(Box::new(kube::Error::Api(status.boxed())))
    }

    /// An error of a kubeapp type that returns its kube error as its source.
    #[derive(Debug, thiserror::Error)]
    #[error("patching the finalizers")]
    struct Wrapped(#[source] kube::Error);

    const FORBIDDEN: &str = "widgets.example.com \"a\" is forbidden: User \"system:serviceaccount:ops:op\" cannot patch resource \"widgets\" in API group \"example.com\" in the namespace \"team\"";

    #[test]
    fn causes_are_read_from_the_api_status_down_the_chain() {
        for (code, cause) in [
            (403, FailureCause::Forbidden),
            (409, FailureCause::Conflict),
            (404, FailureCause::NotFound),
            (500, FailureCause::ServerError),
            (503, FailureCause::ServerError),
            (429, FailureCause::ServerError),
            (504, FailureCause::Timeout),
            (422, FailureCause::HandlerError),
        ] {
            assert_eq!(FailureCause::of(&api_error(code, "x")), cause, "{code}");
        }
        let status = Status::failure(FORBIDDEN, "Forbidden").with_code(403);
        let wrapped = Wrapped(kube::Error::Api(status.boxed()));
        assert_eq!(
            FailureCause::of(&HandlerError::failed(Box::new(wrapped))),
            FailureCause::Forbidden
        );
        let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        assert_eq!(
            FailureCause::of(&HandlerError::failed(Box::new(timed_out))),
            FailureCause::Timeout
        );
        assert_eq!(
            FailureCause::of(&HandlerError::TimedOut(Duration::from_secs(1))),
            FailureCause::Timeout
        );
        assert_eq!(
            FailureCause::of(&HandlerError::failed("not implemented yet".into())),
            FailureCause::HandlerError
        );
        assert_eq!(
            FailureCause::of(&HandlerError::Panicked("boom".into())),
            FailureCause::HandlerError
        );
    }

    #[test]
    fn a_forbidden_message_names_the_permission_and_the_rule() {
        let refused = ForbiddenRequest::parse(FORBIDDEN).expect("kube-apiserver's wording");
        assert_eq!(refused.verb, "patch");
        assert_eq!(refused.resource, "widgets");
        assert_eq!(refused.group, "example.com");
        assert_eq!(refused.namespace.as_deref(), Some("team"));
        assert_eq!(
            refused.user.as_deref(),
            Some("system:serviceaccount:ops:op")
        );
        assert_eq!(
            refused.to_string(),
            "patch widgets in API group \"example.com\" (namespace \"team\")"
        );
        assert_eq!(
            refused.rule(),
            r#"{apiGroups: ["example.com"], resources: ["widgets"], verbs: ["patch"]}"#
        );
        let cluster = ForbiddenRequest::parse(
            "nodes is forbidden: User \"u\" cannot list resource \"nodes\" in API group \"\" at the cluster scope",
        )
        .expect("cluster scope");
        assert_eq!(cluster.namespace, None);
        assert_eq!(
            cluster.to_string(),
            "list nodes in the core API group (cluster-wide)"
        );
        assert_eq!(ForbiddenRequest::parse("forbidden"), None);
    }

    #[tokio::test]
    async fn the_check_fails_after_the_threshold_and_a_success_resets_it() {
        let vec = IntCounterVec::new(
            prometheus::Opts::new("handler_failures_total", "x"),
            &["kind", "cause"],
        )
        .expect("counter");
        let failures = KindFailures::new("widgets", &vec);
        let read = failures.clone();
        let check = ForbiddenWritesCheck {
            threshold: 2,
            streaks: Arc::new(move || {
                let (streak, last) = read.forbidden_streak();
                vec![("widgets".to_string(), streak, last)]
            }),
        };
        let forbidden = api_error(403, FORBIDDEN);
        failures.failed(&forbidden);
        assert_eq!(check.check().await, Ok(()));
        failures.failed(&api_error(500, "x"));
        failures.failed(&forbidden);
        let err = check
            .check()
            .await
            .expect_err("two forbidden calls in a row");
        assert!(
            err.starts_with("widgets: the last 2 handler calls failed with 403 Forbidden (cannot patch widgets in API group \"example.com\""),
            "{err}"
        );
        assert!(err.contains(r#"verbs: ["patch"]"#), "{err}");
        failures.succeeded();
        assert_eq!(check.check().await, Ok(()));
        let forbidden_count = vec.with_label_values(&["widgets", "forbidden"]).get();
        let server_count = vec.with_label_values(&["widgets", "server_error"]).get();
        assert_eq!((forbidden_count, server_count), (2, 1));
    }
}
