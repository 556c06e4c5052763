//! When failed handler calls run again, and when a newer event makes a pending retry obsolete.
//!
//! - [`RetryPolicy`]: `(error, attempt) -> Option<delay>`. `attempt` is 0 after the first failure
//!   of an event, 1 after the first retry failed, and so on; `None` gives up. Reconcilers default
//!   to [`RetryPolicy::default`]: 5, 10, 20, 40, 80, 160 s, then every 5 minutes, never giving up
//!   (level-triggered: one pending request per object, with its newest state, so nothing queues
//!   behind it). Watchers default to [`RetryPolicy::go_sdk`]: 5, 10, 20, 40, 80, 160 s, then
//!   give up (their retries run in event order, so a retry that never ends would hold back the
//!   object's later retries for good). See [`ControllerConfig`](super::ControllerConfig).
//! - [`RetryDequeuePolicy`]: `(new_action, new_obj, retry_action, retry_obj, retry_err) -> bool`,
//!   asked when a new event reaches a handler that has a retry (or requeue) pending for the same
//!   object; `true` drops the pending one. The default is [`RetryDequeuePolicy::opinionated`].
//!   With no policy (`ControllerConfig::dequeue_policy(None)`), every new event drops it.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::action::ReconcileAction;
use crate::handler::HandlerError;
use crate::object::KubeObject;

type RetryFn = dyn Fn(&HandlerError, u32) -> Option<Duration> + Send + Sync;

/// The first retry delay of the default policies: 5 s.
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(5);

/// The longest delay of [`RetryPolicy::default`] (the reconcilers' default): 5 minutes.
pub const DEFAULT_RETRY_CAP: Duration = Duration::from_secs(300);

/// The last attempt [`RetryPolicy::go_sdk`] retries after (attempt 5: the retry after 160 s).
pub const GO_SDK_LAST_ATTEMPT: u32 = 5;

/// Decides whether and when a failed handler call runs again: `(error, attempt) -> Option<delay>`.
///
/// `attempt` is 0 after the first failure of an event, 1 after the first retry failed, and so on;
/// `None` gives up.
///
/// - [`RetryPolicy::default`], what reconcilers get unless configured otherwise:
///   [`capped_exponential`](Self::capped_exponential) from 5 s to 5 minutes: retries after 5, 10,
///   20, 40, 80, 160 s, then every 300 s, and never gives up (as kube-rs and controller-runtime
///   do): an object whose reconciler fails for a while (a dependency down, a quota) is retried
///   until it succeeds, not forgotten until its next edit.
/// - [`RetryPolicy::go_sdk`], what watchers get unless configured otherwise, and the Go SDK's
///   default for every handler: `5 s * 2^attempt` for attempts 0 to 5 (retries after 5, 10, 20,
///   40, 80 and 160 s), then gives up.
///
/// Failures are visible either way: see [`ControllerConfig`](super::ControllerConfig) for the
/// Warning Events and metrics.
///
/// ```
/// use std::time::Duration;
/// use kubeapp_operator::{ControllerConfig, RetryPolicy, handler::HandlerError};
///
/// let error = HandlerError::failed("the database is down".into());
/// let default = RetryPolicy::default();
/// assert_eq!(default.delay(&error, 0), Some(Duration::from_secs(5)));
/// assert_eq!(default.delay(&error, 20), Some(Duration::from_secs(300)), "never gives up");
/// assert_eq!(RetryPolicy::go_sdk().delay(&error, 6), None, "gives up after 160 s");
///
/// // Three quick retries, then give up; for the reconcilers of one controller.
/// let quick = RetryPolicy::exponential(Duration::from_millis(100), 2);
/// assert_eq!(quick.delay(&error, 2), Some(Duration::from_millis(400)));
/// assert_eq!(quick.delay(&error, 3), None);
/// let config = ControllerConfig::default().reconciler_retry_policy(quick);
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct RetryPolicy(Arc<RetryFn>);

impl RetryPolicy {
    /// A policy from a function `(error, attempt) -> Option<delay>`.
    pub fn new(f: impl Fn(&HandlerError, u32) -> Option<Duration> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// `base * 2^attempt` for attempts `0..=max_attempt`, then give up.
    pub fn exponential(base: Duration, max_attempt: u32) -> Self {
        Self::new(move |_, attempt| {
            (attempt <= max_attempt).then(|| base.saturating_mul(2u32.saturating_pow(attempt)))
        })
    }

    /// `base * 2^attempt`, at most `cap`, for every attempt: never gives up.
    pub fn capped_exponential(base: Duration, cap: Duration) -> Self {
        Self::new(move |_, attempt| {
            Some(base.saturating_mul(2u32.saturating_pow(attempt)).min(cap))
        })
    }

    /// The Go SDK's default policy, which gives up: `5 s * 2^attempt` for attempts 0 to 5
    /// (retries after 5, 10, 20, 40, 80 and 160 s), then `None`. The default of watchers.
    pub fn go_sdk() -> Self {
        Self::exponential(DEFAULT_RETRY_BASE, GO_SDK_LAST_ATTEMPT)
    }

    /// Never retry.
    pub fn never() -> Self {
        Self::new(|_, _| None)
    }

    /// The same policy with each delay stretched by a random factor in `[1, 1 + fraction]`, so a
    /// burst of failures does not retry in lockstep.
    #[must_use]
    pub fn with_jitter(self, fraction: f64) -> Self {
        let inner = self.0;
        Self::new(move |error, attempt| {
            inner(error, attempt)
                .map(|delay| delay.mul_f64(1.0 + fraction.max(0.0) * unit_random()))
        })
    }

    /// The delay before retry number `attempt + 1`, or `None` to give up.
    pub fn delay(&self, error: &HandlerError, attempt: u32) -> Option<Duration> {
        (self.0)(error, attempt)
    }
}

impl Default for RetryPolicy {
    /// The reconcilers' default: [`capped_exponential`](Self::capped_exponential) from
    /// [`DEFAULT_RETRY_BASE`] (5 s) to [`DEFAULT_RETRY_CAP`] (5 minutes), never giving up.
    fn default() -> Self {
        Self::capped_exponential(DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP)
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryPolicy(..)")
    }
}

/// A number in `[0, 1)`; std's randomly keyed hasher is random enough for jitter.
fn unit_random() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    // 53 bits fill an f64 mantissa exactly.
    #[allow(clippy::cast_precision_loss)]
    let value = (hasher.finish() >> 11) as f64;
    value / (1u64 << 53) as f64
}

type DequeueFn = dyn Fn(
        ReconcileAction,
        &dyn KubeObject,
        ReconcileAction,
        &dyn KubeObject,
        Option<&HandlerError>,
    ) -> bool
    + Send
    + Sync;

/// Decides whether a new event drops a pending retry of the same handler and object:
/// `(new_action, new_obj, retry_action, retry_obj, retry_err) -> bool`.
///
/// Asked when a new event reaches a handler that has a retry (or requeue) pending for the same
/// object; `true` drops the pending one. The default is [`RetryDequeuePolicy::opinionated`]. With
/// no policy (`ControllerConfig::dequeue_policy(None)`), every new event drops it.
#[derive(Clone)]
pub struct RetryDequeuePolicy(Arc<DequeueFn>);

impl RetryDequeuePolicy {
    /// A policy from `(new_action, new_obj, retry_action, retry_obj, retry_err) -> drop?`.
    /// `retry_err` is `None` for a pending requeue (`requeue_after` without an error).
    pub fn new(
        f: impl Fn(
            ReconcileAction,
            &dyn KubeObject,
            ReconcileAction,
            &dyn KubeObject,
            Option<&HandlerError>,
        ) -> bool
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }

    /// The Go SDK's opinionated rule: a new Delete drops the retry; a different action keeps it;
    /// the same generation keeps it; otherwise (a newer generation of the same action) it is
    /// dropped.
    pub fn opinionated() -> Self {
        Self::new(|new_action, new_obj, retry_action, retry_obj, _| {
            if new_action == ReconcileAction::Deleted {
                return true;
            }
            if new_action != retry_action {
                return false;
            }
            new_obj.metadata().generation != retry_obj.metadata().generation
        })
    }

    /// Every new event drops the pending retry (what having no policy means).
    pub fn always() -> Self {
        Self::new(|_, _, _, _, _| true)
    }

    /// Whether the pending retry is dropped.
    pub(crate) fn should_dequeue(
        &self,
        new_action: ReconcileAction,
        new_obj: &dyn KubeObject,
        retry_action: ReconcileAction,
        retry_obj: &dyn KubeObject,
        retry_err: Option<&HandlerError>,
    ) -> bool {
        (self.0)(new_action, new_obj, retry_action, retry_obj, retry_err)
    }
}

impl Default for RetryDequeuePolicy {
    fn default() -> Self {
        Self::opinionated()
    }
}

impl fmt::Debug for RetryDequeuePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryDequeuePolicy(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Arc;

    fn err() -> HandlerError {
        HandlerError::Panicked("x".into())
    }

    #[test]
    fn default_retry_policy_doubles_from_5s_to_5_minutes_and_never_gives_up() {
        let policy = RetryPolicy::default();
        let delays: Vec<_> = (0..9).map(|a| policy.delay(&err(), a)).collect();
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(
            delays,
            [
                secs(5),
                secs(10),
                secs(20),
                secs(40),
                secs(80),
                secs(160),
                secs(300),
                secs(300),
                secs(300)
            ]
        );
        for attempt in [100, 10_000, u32::MAX] {
            assert_eq!(
                policy.delay(&err(), attempt),
                secs(300),
                "attempt {attempt}"
            );
        }
    }

    #[test]
    fn the_go_sdk_policy_is_5s_doubling_and_gives_up_after_attempt_5() {
        let policy = RetryPolicy::go_sdk();
        let delays: Vec<_> = (0..8).map(|a| policy.delay(&err(), a)).collect();
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(
            delays,
            [
                secs(5),
                secs(10),
                secs(20),
                secs(40),
                secs(80),
                secs(160),
                None,
                None
            ]
        );
    }

    #[test]
    fn jitter_stretches_delays_within_the_fraction() {
        let policy = RetryPolicy::exponential(Duration::from_secs(10), 3).with_jitter(0.5);
        for _ in 0..100 {
            let delay = policy.delay(&err(), 0).expect("retries");
            assert!(delay >= Duration::from_secs(10) && delay <= Duration::from_secs(15));
        }
        assert_eq!(policy.delay(&err(), 4), None);
    }

    fn cm(generation: i64) -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.generation = Some(generation);
        Arc::new(cm)
    }

    use ReconcileAction::{Created, Deleted, Updated};

    #[test]
    fn dequeue_rule_new_delete_drops_the_retry() {
        let p = RetryDequeuePolicy::opinionated();
        assert!(p.should_dequeue(Deleted, &*cm(1), Updated, &*cm(1), Some(&err())));
    }

    #[test]
    fn dequeue_rule_a_different_action_keeps_the_retry() {
        let p = RetryDequeuePolicy::opinionated();
        assert!(!p.should_dequeue(Updated, &*cm(2), Created, &*cm(1), Some(&err())));
    }

    #[test]
    fn dequeue_rule_the_same_generation_keeps_the_retry() {
        let p = RetryDequeuePolicy::opinionated();
        assert!(!p.should_dequeue(Updated, &*cm(3), Updated, &*cm(3), Some(&err())));
    }

    #[test]
    fn dequeue_rule_a_newer_generation_of_the_same_action_drops_the_retry() {
        let p = RetryDequeuePolicy::opinionated();
        assert!(p.should_dequeue(Updated, &*cm(4), Updated, &*cm(3), None));
    }

    #[test]
    fn dequeue_rule_without_a_policy_every_new_event_drops_the_retry() {
        let p = RetryDequeuePolicy::always();
        assert!(p.should_dequeue(Updated, &*cm(3), Created, &*cm(3), None));
    }
}
