//! [`Thresholds`]: when each generated alert fires, with documented defaults, overridable in
//! code or from a YAML/JSON file (`manifests --monitoring --alert-thresholds FILE`).

use serde::{Deserialize, Serialize};

use super::MonitoringError;

/// When each alert fires. Every field has a default (the [`Default`] impl, listed per field);
/// a file sets only the fields it names, and an unknown field is an error naming it.
///
/// Durations are Prometheus durations (`30s`, `15m`, `1h`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Thresholds {
    /// How long a condition must hold before most alerts fire (default `15m`).
    pub pending: String,
    /// Failed handler calls per second of one kind (default `0.1`): `KubeappHandlerErrors`.
    pub handler_errors_per_second: f64,
    /// Handler calls given up in `pending` before `KubeappRetriesGivenUp` fires (default `0`:
    /// any).
    pub retries_given_up: u64,
    /// Terminal reconcile errors in `pending` before `KubeappTerminalErrors` fires (default `0`:
    /// any).
    pub terminal_errors: u64,
    /// Events waiting in one kind's lanes (default `1000`): `KubeappQueueBacklog`.
    pub queue_depth: u64,
    /// Objects of one kind waiting for a retry (default `10`): `KubeappObjectsFailing`.
    pub objects_failing: u64,
    /// Seconds the longest-failing object has been failing (default `3600`):
    /// `KubeappObjectFailingLong`.
    pub oldest_retry_age_seconds: f64,
    /// How long an informer may stay unsynced (default `10m`): `KubeappInformerNotSynced`.
    pub informer_not_synced_for: String,
    /// Watch errors per second of one kind (default `0.05`): `KubeappWatchErrors`.
    pub watch_errors_per_second: f64,
    /// Cache drifts of one kind within `cacheDriftWindow` before `KubeappCacheDrift` fires
    /// (default `0`: any; each drift already re-listed, the alert says the watches are cut).
    pub cache_drift: u64,
    /// The window `cacheDrift` counts in (default `1h`, longer than the default 10-minute check
    /// period).
    pub cache_drift_window: String,
    /// Leader changes per hour (default `4`): `KubeappLeaderChanges`.
    pub leader_changes_per_hour: u64,
    /// How long no replica may hold the leader Lease (default `5m`): `KubeappNoLeader`.
    pub no_leader_for: String,
    /// How long a replica may act on less than it owns (default `10m`): `KubeappShardHandoffStuck`.
    pub shard_handoff_for: String,
    /// Shard membership changes per hour (default `10`): `KubeappShardHandoffsFrequent`.
    pub shard_handoffs_per_hour: u64,
    /// The 99th percentile of webhook call latency, seconds (default `0.5`; the apiserver's
    /// timeout is 10 s): `KubeappWebhookLatency`.
    pub webhook_latency_p99_seconds: f64,
    /// Webhook calls per second that failed (the call, not a denial) (default `0`: any):
    /// `KubeappWebhookFailures` and `KubeappConversionWebhookFailures`.
    pub webhook_failures_per_second: f64,
    /// The share of Kubernetes API requests that failed (5xx, 429, no answer) (default `0.05`):
    /// `KubeappClientErrors`.
    pub client_error_ratio: f64,
    /// The 99th percentile of Kubernetes API request latency by verb, seconds (default `1`):
    /// `KubeappClientLatency`.
    pub client_latency_p99_seconds: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            pending: "15m".into(),
            handler_errors_per_second: 0.1,
            retries_given_up: 0,
            terminal_errors: 0,
            queue_depth: 1000,
            objects_failing: 10,
            oldest_retry_age_seconds: 3600.0,
            informer_not_synced_for: "10m".into(),
            watch_errors_per_second: 0.05,
            cache_drift: 0,
            cache_drift_window: "1h".into(),
            leader_changes_per_hour: 4,
            no_leader_for: "5m".into(),
            shard_handoff_for: "10m".into(),
            shard_handoffs_per_hour: 10,
            webhook_latency_p99_seconds: 0.5,
            webhook_failures_per_second: 0.0,
            client_error_ratio: 0.05,
            client_latency_p99_seconds: 1.0,
        }
    }
}

impl Thresholds {
    /// Thresholds from YAML or JSON text (only the fields to change), checked.
    ///
    /// # Errors
    ///
    /// [`MonitoringError::Thresholds`] naming `origin`, the field and the problem.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, MonitoringError> {
        let thresholds: Self =
            serde_saphyr::from_str(text).map_err(|e| MonitoringError::Thresholds {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
        thresholds
            .validate()
            .map_err(|message| MonitoringError::Thresholds {
                origin: origin.to_string(),
                message,
            })?;
        Ok(thresholds)
    }

    /// Every duration a Prometheus duration, every number finite and not negative.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let durations = [
            ("pending", &self.pending),
            ("informerNotSyncedFor", &self.informer_not_synced_for),
            ("noLeaderFor", &self.no_leader_for),
            ("shardHandoffFor", &self.shard_handoff_for),
            ("cacheDriftWindow", &self.cache_drift_window),
        ];
        for (field, value) in durations {
            if !is_duration(value) {
                return Err(format!(
                    "{field}: {value:?} is not a Prometheus duration (e.g. 30s, 15m, 1h)"
                ));
            }
        }
        let numbers = [
            ("handlerErrorsPerSecond", self.handler_errors_per_second),
            ("oldestRetryAgeSeconds", self.oldest_retry_age_seconds),
            ("watchErrorsPerSecond", self.watch_errors_per_second),
            ("webhookLatencyP99Seconds", self.webhook_latency_p99_seconds),
            ("webhookFailuresPerSecond", self.webhook_failures_per_second),
            ("clientErrorRatio", self.client_error_ratio),
            ("clientLatencyP99Seconds", self.client_latency_p99_seconds),
        ];
        for (field, value) in numbers {
            if !value.is_finite() || value < 0.0 {
                return Err(format!("{field}: {value} is not a finite number >= 0"));
            }
        }
        Ok(())
    }
}

/// `30s`, `15m`, `1h30m`: one or more number-unit pairs, units `ms s m h d w y`.
fn is_duration(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|unit| rest.starts_with(unit));
        match unit {
            Some(unit) => rest = &rest[unit.len()..],
            None => return false,
        }
    }
    true
}
