//! [`Metric`]: every metric name a generated dashboard or alert reads, typed, with where it comes
//! from. The names are the ones the operator's collectors register (kubeapp-operator,
//! kubeapp-runner, kubeapp-ha) and the ones kube-apiserver exports about webhooks; the suite
//! checks each against a live scrape, so a renamed collector breaks a test instead of a query.

/// Who exports a metric, which decides whether the registry's prefix applies to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricSource {
    /// The operator's `/metrics`, under its `--metrics-prefix`.
    Operator,
    /// kube-apiserver's `/metrics` (webhook calls as the apiserver saw them), never prefixed.
    Apiserver,
}

/// A metric a dashboard panel or an alert reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Informer events by `event_type` and `kind`.
    InformerEvents,
    /// 1 once an informer delivered its first complete list, by `kind`.
    InformerSynced,
    /// Events waiting in object lanes, by `kind`.
    InformerQueueDepth,
    /// How long the oldest object ready for a handler call has waited for a worker, by `kind`.
    QueueOldestAge,
    /// Time of one reconciler call (histogram).
    ReconcilerDuration,
    /// Time from an informer event's receipt to the start of its first handler call
    /// (histogram).
    EventWait,
    /// Failed reconciler calls.
    ReconcilerErrors,
    /// Failed watcher calls.
    WatcherErrors,
    /// Reconciles that failed with a terminal error (never retried).
    TerminalErrors,
    /// Failed handler calls by `kind` and `cause`.
    HandlerFailures,
    /// Handler calls running.
    OngoingProcesses,
    /// Retries and requeues scheduled, by `kind`.
    RetriesPending,
    /// Retries and requeues run, by `kind` and `result`.
    Retries,
    /// Handler calls given up after the retry policy's last attempt.
    RetriesGivenUp,
    /// Objects waiting for a retry after a failed handler call.
    ObjectsFailing,
    /// How long the longest-failing object has been failing.
    OldestRetryAge,
    /// Raw watch events received, by `kind`.
    WatchEvents,
    /// Watch errors (each followed by a backoff and a reconnect), by `kind`.
    WatchErrors,
    /// Object states that did not deserialize into the kind's type.
    DecodeErrors,
    /// Checks of an informer's cache against a consistent list of the apiserver.
    CacheDriftChecks,
    /// Checks that found the cache drifted (the informer re-listed).
    CacheDrift,
    /// Requests to the Kubernetes API by `status_code`, `verb`, `kind` (resource) and
    /// `subresource`.
    ClientRequests,
    /// Time until the Kubernetes API answered a request (histogram).
    ClientRequestDuration,
    /// 1 while this replica holds the leader Lease `name`.
    LeaderStatus,
    /// Live members of the shard ring this replica sees.
    ShardMembers,
    /// Share of the hash space this replica owns (0 to 1).
    ShardOwnedWidth,
    /// Share of the hash space this replica acts on now (0 to 1).
    ShardActiveWidth,
    /// Membership changes this replica began to follow.
    ShardHandoffsStarted,
    /// Handoffs after which this replica acts on its whole owned share.
    ShardHandoffsFinished,
    /// Admission webhook call latency as kube-apiserver measured it (histogram, by `name`).
    AdmissionWebhookDuration,
    /// Admission requests kube-apiserver rejected because of a webhook, by `name` and
    /// `error_type` (`calling_webhook_error` when the call itself failed).
    AdmissionWebhookRejections,
    /// CRD conversion webhook calls as kube-apiserver measured them (histogram, by `crd_name`
    /// and `succeeded`).
    ConversionWebhookDuration,
}

impl Metric {
    /// The name as registered, without any prefix.
    pub fn name(self) -> &'static str {
        match self {
            Metric::InformerEvents => "informer_events_total",
            Metric::InformerSynced => "informer_synced",
            Metric::InformerQueueDepth => "informer_queue_depth",
            Metric::QueueOldestAge => "informer_queue_oldest_age_seconds",
            Metric::ReconcilerDuration => "reconciler_process_duration_seconds",
            Metric::EventWait => "informer_event_wait_seconds",
            Metric::ReconcilerErrors => "reconciler_errors_total",
            Metric::WatcherErrors => "watcher_errors_total",
            Metric::TerminalErrors => "reconciler_terminal_errors_total",
            Metric::HandlerFailures => "handler_failures_total",
            Metric::OngoingProcesses => "ongoing_reconcile_processes",
            Metric::RetriesPending => "controller_retries_pending",
            Metric::Retries => "controller_retries_total",
            Metric::RetriesGivenUp => "controller_retries_given_up_total",
            Metric::ObjectsFailing => "controller_objects_failing",
            Metric::OldestRetryAge => "controller_oldest_retry_age_seconds",
            Metric::WatchEvents => "kubernetes_watch_events_total",
            Metric::WatchErrors => "kubernetes_watch_errors_total",
            Metric::DecodeErrors => "informer_decode_errors_total",
            Metric::CacheDriftChecks => "informer_cache_drift_checks_total",
            Metric::CacheDrift => "informer_cache_drift_total",
            Metric::ClientRequests => "kubernetes_client_requests_total",
            Metric::ClientRequestDuration => "kubernetes_client_request_duration_seconds",
            Metric::LeaderStatus => "leader_election_master_status",
            Metric::ShardMembers => "shard_members",
            Metric::ShardOwnedWidth => "shard_owned_range_width",
            Metric::ShardActiveWidth => "shard_active_range_width",
            Metric::ShardHandoffsStarted => "shard_handoffs_started_total",
            Metric::ShardHandoffsFinished => "shard_handoffs_finished_total",
            Metric::AdmissionWebhookDuration => {
                "apiserver_admission_webhook_admission_duration_seconds"
            }
            Metric::AdmissionWebhookRejections => "apiserver_admission_webhook_rejection_count",
            Metric::ConversionWebhookDuration => {
                "apiserver_crd_conversion_webhook_duration_seconds"
            }
        }
    }

    /// Who exports it.
    pub fn source(self) -> MetricSource {
        match self {
            Metric::AdmissionWebhookDuration
            | Metric::AdmissionWebhookRejections
            | Metric::ConversionWebhookDuration => MetricSource::Apiserver,
            _ => MetricSource::Operator,
        }
    }

    /// The name in a query: `{prefix}_{name}` for the operator's metrics when a prefix is set.
    pub(crate) fn series(self, prefix: Option<&str>) -> String {
        match (self.source(), prefix) {
            (MetricSource::Operator, Some(prefix)) if !prefix.is_empty() => {
                format!("{prefix}_{}", self.name())
            }
            _ => self.name().to_string(),
        }
    }
}
