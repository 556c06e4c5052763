//! The flags every operator takes, for a clap command line (feature `cli`).
//!
//! [`OperatorArgs`] is a `clap::Args` struct: flatten it into your own command and turn it into the
//! library's settings with [`OperatorArgs::telemetry_config`] and [`OperatorArgs::runner_config`].
//!
//! | Flag | Environment | Default | Goes to |
//! |------|-------------|---------|---------|
//! | `--metrics-addr <ADDR>` | `METRICS_ADDR` | `0.0.0.0:9090` | [`RunnerConfig::metrics_addr`] |
//! | `--metrics-prefix <PREFIX>` | `METRICS_PREFIX` | none | [`RunnerConfig::metrics_prefix`] |
//! | `--metrics-auth` | `METRICS_AUTH` | off | a bearer token reviewed by the apiserver on `/metrics` and `/debug/kubeapp` (`Runner::authenticate_metrics`) |
//! | `--namespace <NAMESPACE>` | `WATCH_NAMESPACE` | all namespaces | [`OperatorArgs::namespace`], for your informers |
//! | `--log-format <FORMAT>` | `LOG_FORMAT` | `text` | [`TelemetryConfig::log_format`] |
//! | `--otlp-endpoint <URL>` | `OTLP_ENDPOINT` | none | [`Otlp::Endpoint`] |
//! | `--otlp-protocol <PROTOCOL>` | `OTLP_PROTOCOL` | `grpc` | [`Otlp::Endpoint`] (needs an endpoint) |
//! | `--shutdown-timeout <DURATION>` | `SHUTDOWN_TIMEOUT` | `30s` | [`RunnerConfig::shutdown_timeout`] |
//! | `--shutdown-delay <DURATION>` | `SHUTDOWN_DELAY` | `0s` | [`RunnerConfig::shutdown_delay`] |
//! | `--webhook-cert-file <PATH>` | `WEBHOOK_CERT_FILE` | none | [`WebhookConfig`] (with the key) |
//! | `--webhook-key-file <PATH>` | `WEBHOOK_KEY_FILE` | none | [`WebhookConfig`] (with the certificate) |
//! | `--webhook-addr <ADDR>` | `WEBHOOK_ADDR` | `0.0.0.0:8443` | [`WebhookConfig::addr`] |
//! | `--instance <NAME>` | `POD_NAME` | none | [`OperatorArgs::instance`], the Events' `reportingInstance` and the leader-election and shard identity |
//! | `--leader-elect` | `LEADER_ELECT` | off | run the app's handlers only while this replica holds the Lease |
//! | `--leader-ready` | `LEADER_READY` | off | `/readyz` fails while not leading |
//! | `--leader-election-namespace <NAMESPACE>` | `POD_NAMESPACE` | `default` | the Lease's namespace |
//! | `--leader-election-id <NAME>` | `LEADER_ELECTION_ID` | `{app}-leader` | the Lease's name |
//! | `--ready-requires-writes [N]` | `READY_REQUIRES_WRITES` | off (`3` when given without a value) | `/readyz` fails after N handler calls of a kind in a row were forbidden (403): `AppConfig::ready_requires_writes` |
//! | `--shard` | `SHARD` | off | split the managed kinds' objects between the replicas of a shard ring (not with `--leader-elect`) |
//! | `--shard-ring <NAME>` | `SHARD_RING` | `{app}-shards` | the ring's name; its Leases live in `--leader-election-namespace` |
//! | `--lease-duration <DURATION>` | `LEASE_DURATION` | `15s` | [`LeaseTimings::lease_duration`] |
//! | `--renew-deadline <DURATION>` | `RENEW_DEADLINE` | `10s` | [`LeaseTimings::renew_deadline`] |
//! | `--retry-period <DURATION>` | `RETRY_PERIOD` | `2s` | [`LeaseTimings::retry_period`] |
//!
//! A flag beats its environment variable. The variable names are the ones the kubeapp examples
//! have used, so an operator switching to `OperatorArgs` keeps its deployments working.
//!
//! Without `--otlp-endpoint` (or `OTLP_ENDPOINT`), OTLP export is decided by the standard
//! `OTEL_EXPORTER_OTLP_*` variables ([`Otlp::FromEnv`]). They are deliberately not the fallbacks
//! of the flags: they carry more than one flag can (per-signal endpoints, the specification's
//! `http/protobuf` default protocol), and [`Otlp::FromEnv`] honours all of it.
//!
//! Durations are read by `parse_duration`: `humantime` syntax (`500ms`, `30s`, `2m`, `1h 30m`)
//! or a plain number of seconds.
//!
//! ```
//! use clap::Parser;
//! use kubeapp_simple::cli::OperatorArgs;
//!
//! /// my-operator: does one thing well.
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     operator: OperatorArgs,
//! }
//!
//! let cli = Cli::try_parse_from(["my-operator", "--metrics-addr", "127.0.0.1:9000"])?;
//! let telemetry = cli.operator.telemetry_config("my-operator");
//! let runner = cli.operator.runner_config()?;
//! assert_eq!(runner.metrics_addr, ([127, 0, 0, 1], 9000).into());
//! # let _ = telemetry;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use kubeapp_ha::election::{ElectionConfig, LeaseTimings};
use kubeapp_ha::sharding::ShardingConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kubeapp_runner::RunnerConfig;
use kubeapp_runner::webhook::WebhookConfig;

use crate::telemetry::{LogFormat, Otlp, OtlpProtocol, TelemetryConfig};

/// The flags every operator takes, each with an environment fallback (see the [module
/// docs](self) for the table). Flatten it into a clap command with `#[command(flatten)]`.
#[derive(Clone, Debug, clap::Args)]
#[non_exhaustive]
pub struct OperatorArgs {
    /// Where /metrics, /livez and /readyz are served.
    #[arg(
        long,
        env = "METRICS_ADDR",
        value_name = "ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_addr: SocketAddr,
    /// A prefix for the name of every kubeapp metric served on /metrics (`PREFIX_informer_events_total`,
    /// ...): letters, digits, `_` and `:`, not starting with a digit.
    #[arg(long, env = "METRICS_PREFIX", value_name = "PREFIX")]
    pub metrics_prefix: Option<String>,
    /// Require a bearer token on /metrics and /debug/kubeapp, reviewed by the apiserver
    /// (TokenReview, then SubjectAccessReview of `get` on the path); /livez and /readyz stay
    /// open. Without it /metrics is open and /debug/kubeapp answers only loopback clients.
    #[arg(long, env = "METRICS_AUTH")]
    pub metrics_auth: bool,
    /// Watch this namespace only (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The format of log lines on stderr (filter them with RUST_LOG).
    #[arg(long, env = "LOG_FORMAT", value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export traces over OTLP to this endpoint (without it, the OTEL_EXPORTER_OTLP_* variables
    /// decide); needs an operator built with kubeapp's `otlp` feature.
    #[arg(long, env = "OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The protocol for --otlp-endpoint.
    #[arg(
        long,
        env = "OTLP_PROTOCOL",
        value_name = "PROTOCOL",
        value_enum,
        default_value_t = OtlpProtocol::Grpc,
        requires = "otlp_endpoint"
    )]
    pub otlp_protocol: OtlpProtocol,
    /// How long in-flight work may take to finish after SIGTERM or SIGINT (e.g. 30s).
    #[arg(
        long,
        env = "SHUTDOWN_TIMEOUT",
        value_name = "DURATION",
        default_value = "30s",
        value_parser = parse_duration
    )]
    pub shutdown_timeout: Duration,
    /// How long to keep serving (with /readyz failing) after SIGTERM or SIGINT before stopping
    /// anything, so webhook calls still routed to this pod are answered (e.g. 5s).
    #[arg(
        long,
        env = "SHUTDOWN_DELAY",
        value_name = "DURATION",
        default_value = "0s",
        value_parser = parse_duration
    )]
    pub shutdown_delay: Duration,
    /// The webhook server's certificate (PEM, with its chain); serves the webhooks over HTTPS
    /// together with --webhook-key-file.
    #[arg(long, env = "WEBHOOK_CERT_FILE", value_name = "PATH")]
    pub webhook_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --webhook-cert-file.
    #[arg(long, env = "WEBHOOK_KEY_FILE", value_name = "PATH")]
    pub webhook_key_file: Option<PathBuf>,
    /// This replica's name (the pod name in a cluster): the `reportingInstance` of the Events
    /// the app writes.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub instance: Option<String>,
    /// Where the webhooks are served over HTTPS.
    #[arg(
        long,
        env = "WEBHOOK_ADDR",
        value_name = "ADDR",
        default_value = "0.0.0.0:8443"
    )]
    pub webhook_addr: SocketAddr,
    /// Run the app's handlers only while this replica holds the leader Lease (the others keep
    /// their caches warm and take over when it is released or expires); the identity is
    /// --instance, else the hostname.
    #[arg(long, env = "LEADER_ELECT")]
    pub leader_elect: bool,
    /// With --leader-elect: /readyz fails while this replica does not lead (by default a
    /// follower is ready: it serves webhooks and keeps its caches warm).
    #[arg(long, env = "LEADER_READY", requires = "leader_elect")]
    pub leader_ready: bool,
    /// The namespace of the leader Lease.
    #[arg(
        long,
        env = "POD_NAMESPACE",
        value_name = "NAMESPACE",
        default_value = "default"
    )]
    pub leader_election_namespace: String,
    /// The name of the leader Lease (default: `{app}-leader`).
    #[arg(long, env = "LEADER_ELECTION_ID", value_name = "NAME")]
    pub leader_election_id: Option<String>,
    /// Make /readyz fail (check `writes-permitted`) once the last N handler calls of a kind in a
    /// row were refused with 403 Forbidden: the operator's role lacks a permission its handlers
    /// need. Without a value, 3. Off by default (readiness is about serving; the refusals are
    /// counted in handler_failures_total{cause="forbidden"} and logged either way).
    #[arg(
        long,
        env = "READY_REQUIRES_WRITES",
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "3",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub ready_requires_writes: Option<u64>,
    /// Split the managed kinds' objects between the replicas of a shard ring (each replica
    /// holds its own Lease in --leader-election-namespace, with the same timings); the
    /// identity is --instance, else the hostname. Not with --leader-elect.
    #[arg(long, env = "SHARD", conflicts_with = "leader_elect")]
    pub shard: bool,
    /// The shard ring's name (default: `{app}-shards`): the Leases' label and name prefix.
    #[arg(long, env = "SHARD_RING", value_name = "NAME", requires = "shard")]
    pub shard_ring: Option<String>,
    /// How long a leader's claim counts for the others after its last renew.
    #[arg(long, env = "LEASE_DURATION", value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How long a leader may go without renewing before it stops acting (less than
    /// --lease-duration).
    #[arg(long, env = "RENEW_DEADLINE", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// How often the leader renews and a follower retries (less than --renew-deadline).
    #[arg(long, env = "RETRY_PERIOD", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
}

/// Why [`OperatorArgs`] cannot be turned into a configuration.
#[derive(Debug, thiserror::Error)]
pub enum OperatorArgsError {
    /// One of the webhook certificate and key was given without the other.
    #[error("{given} was given without {missing}: the webhook server needs both")]
    IncompleteWebhookTls {
        /// The flag that was given, e.g. `--webhook-cert-file`.
        given: &'static str,
        /// The flag that is missing, e.g. `--webhook-key-file`.
        missing: &'static str,
    },
    /// `--leader-elect` without `--instance` (`POD_NAME`) on a machine whose hostname cannot be
    /// read: candidates need distinct identities.
    #[error(
        "--leader-elect needs --instance (or POD_NAME): each replica's identity in the Lease (the \
         hostname could not be read)"
    )]
    LeaderWithoutInstance,
    /// `--shard` without `--instance` (`POD_NAME`) on a machine whose hostname cannot be read.
    #[error(
        "--shard needs --instance (or POD_NAME): each replica's identity in the ring (the \
         hostname could not be read)"
    )]
    ShardWithoutInstance,
    /// The sharding settings do not fit together.
    #[error("{0}")]
    Sharding(String),
    /// The leader-election timings do not fit together.
    #[error("{0}")]
    LeaderElection(String),
}

impl OperatorArgs {
    /// Telemetry settings for a service called `service_name`: the log format, and OTLP export
    /// to `--otlp-endpoint` when given, else as the `OTEL_EXPORTER_OTLP_*` variables say.
    pub fn telemetry_config(&self, service_name: impl Into<String>) -> TelemetryConfig {
        let otlp = match &self.otlp_endpoint {
            Some(url) => Otlp::Endpoint {
                url: url.clone(),
                protocol: self.otlp_protocol,
            },
            None => Otlp::FromEnv,
        };
        TelemetryConfig::new(service_name)
            .log_format(self.log_format)
            .otlp(otlp)
    }

    /// The webhook server's configuration: `Some` when both `--webhook-cert-file` and
    /// `--webhook-key-file` are given, `None` when neither is.
    ///
    /// # Errors
    ///
    /// [`OperatorArgsError::IncompleteWebhookTls`] naming the missing flag when only one is given.
    pub fn webhook_config(&self) -> Result<Option<WebhookConfig>, OperatorArgsError> {
        match (&self.webhook_cert_file, &self.webhook_key_file) {
            (Some(cert), Some(key)) => {
                Ok(Some(WebhookConfig::new(cert, key).addr(self.webhook_addr)))
            }
            (None, None) => Ok(None),
            (Some(_), None) => Err(OperatorArgsError::IncompleteWebhookTls {
                given: "--webhook-cert-file",
                missing: "--webhook-key-file",
            }),
            (None, Some(_)) => Err(OperatorArgsError::IncompleteWebhookTls {
                given: "--webhook-key-file",
                missing: "--webhook-cert-file",
            }),
        }
    }

    /// The Runner's configuration: metrics address and prefix, shutdown timeout and delay, and the
    /// webhook server when its certificate and key are given (see
    /// [`webhook_config`](Self::webhook_config)). An invalid prefix is refused by
    /// `Runner::new`.
    ///
    /// # Errors
    ///
    /// [`OperatorArgsError::IncompleteWebhookTls`] when only one of the certificate and key is given.
    pub fn runner_config(&self) -> Result<RunnerConfig, OperatorArgsError> {
        let mut config = RunnerConfig::default()
            .metrics_addr(self.metrics_addr)
            .shutdown_timeout(self.shutdown_timeout)
            .shutdown_delay(self.shutdown_delay);
        if let Some(prefix) = &self.metrics_prefix {
            config = config.metrics_prefix(prefix.clone());
        }
        Ok(match self.webhook_config()? {
            Some(webhook) => config.webhook(webhook),
            None => config,
        })
    }

    /// The leader election of app `app`, when `--leader-elect` is given.
    ///
    /// # Errors
    ///
    /// [`OperatorArgsError::LeaderWithoutInstance`], or timings that do not fit
    /// (`--retry-period` < `--renew-deadline` < `--lease-duration`).
    pub fn election_config(&self, app: &str) -> Result<Option<ElectionConfig>, OperatorArgsError> {
        if !self.leader_elect {
            return Ok(None);
        }
        let identity = self
            .identity()
            .ok_or(OperatorArgsError::LeaderWithoutInstance)?;
        let name = self
            .leader_election_id
            .clone()
            .unwrap_or_else(|| format!("{app}-leader"));
        let config = ElectionConfig::new(self.leader_election_namespace.clone(), name, identity)
            .with_timings(self.lease_timings());
        config.validate().map_err(|error| {
            OperatorArgsError::LeaderElection(format!(
                "--lease-duration, --renew-deadline, --retry-period: {error}"
            ))
        })?;
        Ok(Some(config))
    }
}

impl OperatorArgs {
    /// `--lease-duration`, `--renew-deadline` and `--retry-period`, which leader election and
    /// the shard ring share.
    fn lease_timings(&self) -> LeaseTimings {
        LeaseTimings::new(self.lease_duration, self.renew_deadline, self.retry_period)
    }

    /// This replica's identity: `--instance`, else the hostname.
    fn identity(&self) -> Option<String> {
        self.instance
            .clone()
            .or_else(|| {
                hostname::get()
                    .ok()
                    .and_then(|name| name.into_string().ok())
            })
            .filter(|name| !name.is_empty())
    }

    /// The shard ring membership of app `app`, when `--shard` is given.
    ///
    /// # Errors
    ///
    /// [`OperatorArgsError::ShardWithoutInstance`], or settings that do not fit (timings as
    /// for leader election, an identity with a comma).
    pub fn sharding_config(&self, app: &str) -> Result<Option<ShardingConfig>, OperatorArgsError> {
        if !self.shard {
            return Ok(None);
        }
        let identity = self
            .identity()
            .ok_or(OperatorArgsError::ShardWithoutInstance)?;
        let ring = self
            .shard_ring
            .clone()
            .unwrap_or_else(|| format!("{app}-shards"));
        let config = ShardingConfig::new(self.leader_election_namespace.clone(), ring, identity)
            .with_timings(self.lease_timings());
        config.validate().map_err(|error| {
            OperatorArgsError::Sharding(format!(
                "--shard (--lease-duration, --renew-deadline, --retry-period, --instance): {error}"
            ))
        })?;
        Ok(Some(config))
    }
}

/// Parses a duration flag: `humantime` syntax (`500ms`, `30s`, `2m`, `1h 30m`) or a plain number
/// of seconds (`30`), which the kubeapp examples accepted before.
///
/// # Errors
///
/// `humantime`'s one-line description of what is wrong (unknown unit, no number, overflow).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, humantime::DurationError> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        humantime::parse_duration(&format!("{text}s"))
    } else {
        humantime::parse_duration(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_or_as_seconds() {
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_duration("30s").ok(), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m").ok(), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("1h 30m").ok(),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(parse_duration(" 7 ").ok(), Some(Duration::from_secs(7)));
        assert_eq!(parse_duration("0").ok(), Some(Duration::ZERO));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999999").is_err());
    }
}
