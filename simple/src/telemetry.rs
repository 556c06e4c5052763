//! Logs and traces for an operator in one call.
//!
//! [`init`] installs a global `tracing` subscriber with:
//!
//! - an `EnvFilter` (the configured directives, else `RUST_LOG`, else `info`);
//! - logs to stderr as text or JSON ([`LogFormat`]);
//! - when OTLP export is configured, a `tracing-opentelemetry` layer that exports every span over
//!   OTLP, by gRPC or HTTP/protobuf, through a batch processor on the Tokio runtime.
//!
//! The exporters (OpenTelemetry's SDK and OTLP crates, tonic for gRPC, reqwest for HTTP) are
//! compiled only with the `otlp` feature (`kubeapp/otlp`), so an operator that does not export
//! does not build them (see `docs/performance/README.md`, "Compile time"). Without it, logs
//! work as above and a configured export (explicit or through the `OTEL_EXPORTER_OTLP_*`
//! variables) fails [`init`] with
//! [`TelemetryError::OtlpNotBuilt`], so spans are never dropped unnoticed.
//!
//! OTLP is configured explicitly ([`Otlp::Endpoint`]) or, with the default [`Otlp::FromEnv`],
//! through the standard variables: export is on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`); the protocol comes
//! from `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc` or
//! `http/protobuf`, default `http/protobuf` as the OpenTelemetry specification says); headers,
//! timeout and `OTEL_SERVICE_NAME`/`OTEL_RESOURCE_ATTRIBUTES` are read by the exporter and SDK as
//! usual. An explicit HTTP endpoint is a base URL: `/v1/traces` is appended when it has no path,
//! the same rule the `OTEL_EXPORTER_OTLP_ENDPOINT` variable follows.
//!
//! Spans are batched; the last batch is sent by [`TelemetryGuard::shutdown`] before the process
//! exits. Either call it yourself after the Runner returned, or hand the guard to the Runner with
//! [`TelemetryGuard::flush_on_shutdown`]: it then flushes once the apps and servers stopped, on
//! every return (errors included) except a second signal, which exits at once. Dropping the
//! guard without a flush only warns: a flush from `Drop` could block the very runtime thread the
//! exporter needs.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), kubeapp_simple::telemetry::TelemetryError> {
//! use kubeapp_simple::telemetry::{self, LogFormat, Otlp, TelemetryConfig};
//!
//! let guard = telemetry::init(
//!     TelemetryConfig::new("my-operator").log_format(LogFormat::Json).otlp(Otlp::Disabled),
//! )?;
//! tracing::info!("operator starting");
//! guard.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "otlp")]
use std::time::Duration;

use kubeapp_sdk::error::ErrorChain;
#[cfg(feature = "otlp")]
use opentelemetry::trace::TracerProvider as _;
#[cfg(feature = "otlp")]
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
#[cfg(feature = "otlp")]
use opentelemetry_sdk::Resource;
#[cfg(feature = "otlp")]
use opentelemetry_sdk::trace::SdkTracerProvider;
#[cfg(feature = "otlp")]
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// How long [`TelemetryGuard::shutdown`] waits for the last spans to be exported.
#[cfg(feature = "otlp")]
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The format of log lines on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LogFormat {
    /// Human-readable text (the default).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = TelemetryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(TelemetryError::InvalidSetting {
                setting: "log format".into(),
                value: s.into(),
                expected: "text or json",
            }),
        }
    }
}

/// The OTLP transport.
///
/// With the `cli` feature it is a `clap::ValueEnum` whose values are the ones the
/// `OTEL_EXPORTER_OTLP_PROTOCOL` variable takes (`grpc`, `http/protobuf`), with `http` accepted
/// for `http/protobuf` (the examples' older spelling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum OtlpProtocol {
    /// OTLP over gRPC (usually port 4317).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (usually port 4318).
    #[cfg_attr(feature = "cli", value(name = "http/protobuf", alias = "http"))]
    HttpProtobuf,
}

impl std::str::FromStr for OtlpProtocol {
    type Err = TelemetryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" => Ok(Self::HttpProtobuf),
            _ => Err(TelemetryError::InvalidSetting {
                setting: "OTLP protocol".into(),
                value: s.into(),
                expected: "grpc or http/protobuf",
            }),
        }
    }
}

/// Whether and where spans are exported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Otlp {
    /// Decide from the `OTEL_EXPORTER_OTLP_*` variables (the default); see the module docs.
    #[default]
    FromEnv,
    /// Never export, whatever the environment says.
    Disabled,
    /// Export to this endpoint with this protocol.
    Endpoint {
        /// Where: `http://host:4317` for gRPC, a base URL such as `http://host:4318` for HTTP.
        url: String,
        /// How.
        protocol: OtlpProtocol,
    },
}

/// Settings for [`init`]: a plain struct with chained setters.
#[derive(Clone, Debug)]
pub struct TelemetryConfig {
    // The exported spans' service name: unread without the exporters.
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    service_name: String,
    log_format: LogFormat,
    filter: Option<String>,
    otlp: Otlp,
}

impl TelemetryConfig {
    /// Defaults for a service called `service_name` (text logs, `RUST_LOG` or `info`, OTLP from
    /// the environment).
    pub fn new(service_name: impl Into<String>) -> Self {
        Self {
            service_name: service_name.into(),
            log_format: LogFormat::default(),
            filter: None,
            otlp: Otlp::default(),
        }
    }

    /// Log lines as text or JSON.
    #[must_use]
    pub fn log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// Filter directives as `RUST_LOG` takes them (`info,kubeapp_operator=debug`); overrides
    /// `RUST_LOG`.
    #[must_use]
    pub fn filter(mut self, directives: impl Into<String>) -> Self {
        self.filter = Some(directives.into());
        self
    }

    /// Where spans go.
    #[must_use]
    pub fn otlp(mut self, otlp: Otlp) -> Self {
        self.otlp = otlp;
        self
    }
}

/// What can go wrong while setting telemetry up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting (from code or the environment) has a value that is not understood.
    #[error("invalid {setting} {value:?}: expected {expected}")]
    InvalidSetting {
        /// Which setting, e.g. `OTEL_EXPORTER_OTLP_PROTOCOL`.
        setting: String,
        /// The value given.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// The log filter directives do not parse.
    #[error("invalid log filter {directives:?}")]
    InvalidFilter {
        /// The directives given.
        directives: String,
        /// The parser's error.
        source: tracing_subscriber::filter::ParseError,
    },
    /// The OTLP exporter could not be built (bad endpoint, no Tokio runtime, ...).
    #[cfg(feature = "otlp")]
    #[error("building the OTLP {protocol:?} exporter")]
    Exporter {
        /// The protocol chosen.
        protocol: OtlpProtocol,
        /// The exporter's error.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// OTLP export is configured but the exporters were not compiled in.
    #[error(
        "OTLP export is configured ({configured}) but this operator was built without the exporters: enable kubeapp's `otlp` feature, or unset the OTEL_EXPORTER_OTLP_* variables"
    )]
    OtlpNotBuilt {
        /// Where the configuration came from (`Otlp::Endpoint` or the variable set).
        configured: String,
    },
    /// OTLP export needs a Tokio runtime to run its batch processor on.
    #[error("OTLP export needs a Tokio runtime: call telemetry::init from within one")]
    NoRuntime,
    /// A global subscriber was installed already (by an earlier `init` or another library).
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInitialized(String),
    /// Flushing the last spans on shutdown failed or timed out.
    #[error("flushing spans on shutdown: {0}")]
    Shutdown(String),
}

/// Keeps the span exporter alive; [`shutdown`](Self::shutdown) flushes it.
#[derive(Debug)]
#[must_use = "dropping the guard without calling shutdown() loses the last batch of spans"]
pub struct TelemetryGuard {
    provider: Option<SpanExport>,
}

/// What exports spans: OpenTelemetry's tracer provider with the `otlp` feature, nothing (a type
/// with no value) without it.
#[cfg(feature = "otlp")]
type SpanExport = SdkTracerProvider;
#[cfg(not(feature = "otlp"))]
#[derive(Debug)]
enum SpanExport {}

impl TelemetryGuard {
    /// True when spans are exported over OTLP.
    pub fn exports_spans(&self) -> bool {
        self.provider.is_some()
    }

    /// Hands the guard to `runner`, which calls [`shutdown`](Self::shutdown) after its apps and
    /// servers stopped (a failed flush is logged as a warning).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use kubeapp_runner::{Runner, RunnerConfig};
    /// use kubeapp_simple::telemetry::{self, Otlp, TelemetryConfig};
    ///
    /// let guard = telemetry::init(TelemetryConfig::new("my-operator").otlp(Otlp::Disabled))?;
    /// let mut runner = Runner::new(RunnerConfig::default().metrics_addr(([127, 0, 0, 1], 0).into()))?;
    /// guard.flush_on_shutdown(&mut runner);
    /// runner.run_until(async {}).await?; // in a binary: runner.run().await?
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush_on_shutdown(self, runner: &mut kubeapp_runner::Runner) {
        runner.on_shutdown(move || async move {
            if let Err(err) = self.shutdown().await {
                tracing::warn!(error = %ErrorChain(&err), "telemetry not flushed");
            }
        });
    }

    /// Sends the spans still batched and stops the exporter (waits at most 10 s).
    pub async fn shutdown(mut self) -> Result<(), TelemetryError> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        #[cfg(not(feature = "otlp"))]
        match provider {}
        #[cfg(feature = "otlp")]
        Self::flush(provider).await
    }

    #[cfg(feature = "otlp")]
    async fn flush(provider: SdkTracerProvider) -> Result<(), TelemetryError> {
        // The SDK's shutdown blocks its thread until the batch task, which runs on this runtime,
        // has exported: so block a blocking-pool thread, not a runtime worker.
        let flush = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, flush).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(err))) => Err(TelemetryError::Shutdown(err.to_string())),
            Ok(Err(join)) => Err(TelemetryError::Shutdown(join.to_string())),
            Err(_) => Err(TelemetryError::Shutdown(format!(
                "not done after {SHUTDOWN_TIMEOUT:?}"
            ))),
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if self.provider.is_some() {
            tracing::warn!("TelemetryGuard dropped without shutdown(): unsent spans are lost");
        }
    }
}

/// A subscriber configured as [`init`] would install it, and its guard, without installing it:
/// for `tracing::subscriber::set_default` in tests, or to add layers of your own.
pub fn subscriber(
    config: &TelemetryConfig,
) -> Result<
    (
        Box<dyn tracing::Subscriber + Send + Sync + 'static>,
        TelemetryGuard,
    ),
    TelemetryError,
> {
    let filter = match &config.filter {
        Some(directives) => {
            EnvFilter::try_new(directives).map_err(|source| TelemetryError::InvalidFilter {
                directives: directives.clone(),
                source,
            })?
        }
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let logs = match config.log_format {
        // Colours only on a terminal: escape codes in a log file or collector are noise.
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let provider = tracer_provider(config)?;
    #[cfg(feature = "otlp")]
    let spans = provider
        .as_ref()
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("kubeapp")));
    #[cfg(not(feature = "otlp"))]
    let spans: Option<tracing_subscriber::layer::Identity> = None;
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(spans);
    Ok((Box::new(subscriber), TelemetryGuard { provider }))
}

/// Installs the global subscriber described by `config`. Call once, early in `main`, inside the
/// Tokio runtime; keep the guard and call [`TelemetryGuard::shutdown`] on the way out.
pub fn init(config: TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let (subscriber, guard) = subscriber(&config)?;
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| TelemetryError::AlreadyInitialized(e.to_string()))?;
    Ok(guard)
}

/// The endpoint and protocol to export to, or `None` when export is off.
fn resolve_otlp(
    otlp: &Otlp,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<(Option<String>, OtlpProtocol)>, TelemetryError> {
    match otlp {
        Otlp::Disabled => Ok(None),
        Otlp::Endpoint { url, protocol } => Ok(Some((Some(url.clone()), *protocol))),
        Otlp::FromEnv => {
            let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
            if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
                return Ok(None);
            }
            if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
                && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            {
                return Ok(None);
            }
            let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .map(|v| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v))
                .or_else(|| {
                    set("OTEL_EXPORTER_OTLP_PROTOCOL").map(|v| ("OTEL_EXPORTER_OTLP_PROTOCOL", v))
                }) {
                None => OtlpProtocol::HttpProtobuf,
                Some((name, value)) => {
                    value.parse().map_err(|_| TelemetryError::InvalidSetting {
                        setting: name.into(),
                        value,
                        expected: "grpc or http/protobuf",
                    })?
                }
            };
            // The exporter reads the endpoint variables itself (with the per-signal path rules).
            Ok(Some((None, protocol)))
        }
    }
}

/// An explicit HTTP endpoint is a base URL: add the traces path when none is given.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))] // Tested either way.
fn http_traces_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .map_or(trimmed, |(_, rest)| rest)
        .contains('/');
    if has_path {
        url.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Without the exporters: `None` when export is off, else an error saying how to get them.
#[cfg(not(feature = "otlp"))]
fn tracer_provider(config: &TelemetryConfig) -> Result<Option<SpanExport>, TelemetryError> {
    match resolve_otlp(&config.otlp, |name| std::env::var(name).ok())? {
        None => Ok(None),
        Some((Some(url), protocol)) => Err(TelemetryError::OtlpNotBuilt {
            configured: format!("{protocol:?} to {url}"),
        }),
        Some((None, protocol)) => Err(TelemetryError::OtlpNotBuilt {
            configured: format!("{protocol:?} from OTEL_EXPORTER_OTLP_*"),
        }),
    }
}

#[cfg(feature = "otlp")]
fn tracer_provider(config: &TelemetryConfig) -> Result<Option<SpanExport>, TelemetryError> {
    let Some((endpoint, protocol)) = resolve_otlp(&config.otlp, |name| std::env::var(name).ok())?
    else {
        return Ok(None);
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(TelemetryError::NoRuntime);
    }
    let exporter = match protocol {
        OtlpProtocol::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(url) = endpoint {
                builder = builder.with_endpoint(url);
            }
            builder.build()
        }
        OtlpProtocol::HttpProtobuf => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(reqwest::Client::new());
            if let Some(url) = endpoint {
                builder = builder.with_endpoint(http_traces_url(&url));
            }
            builder.build()
        }
    }
    .map_err(|source| TelemetryError::Exporter { protocol, source })?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(config.service_name.clone());
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .build(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// Runs without the `otlp` feature (`scripts/test` runs this module's tests so too).
    #[cfg(not(feature = "otlp"))]
    #[test]
    fn without_the_exporters_a_configured_export_fails_saying_which_feature() {
        let explicit = TelemetryConfig::new("t").otlp(Otlp::Endpoint {
            url: "http://collector:4318".into(),
            protocol: OtlpProtocol::HttpProtobuf,
        });
        let error = subscriber(&explicit)
            .err()
            .expect("an export cannot be set up");
        assert!(
            matches!(&error, TelemetryError::OtlpNotBuilt { configured } if configured.contains("http://collector:4318")),
            "{error:?}"
        );
        assert!(error.to_string().contains("`otlp` feature"), "{error}");
        let off = TelemetryConfig::new("t").otlp(Otlp::Disabled);
        let (_, guard) = subscriber(&off).expect("logs alone need no exporter");
        assert!(!guard.exports_spans());
    }

    #[test]
    fn no_endpoint_variable_means_no_export() {
        assert_eq!(
            resolve_otlp(&Otlp::FromEnv, env_of(&[])).ok().flatten(),
            None
        );
    }

    #[test]
    fn endpoint_variable_turns_export_on_with_http_protobuf_by_default() {
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        let resolved = resolve_otlp(&Otlp::FromEnv, env).expect("valid");
        assert_eq!(resolved, Some((None, OtlpProtocol::HttpProtobuf)));
    }

    #[test]
    fn traces_protocol_variable_wins_over_the_general_one() {
        let env = env_of(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://collector:4317",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]);
        let resolved = resolve_otlp(&Otlp::FromEnv, env).expect("valid");
        assert_eq!(resolved, Some((None, OtlpProtocol::Grpc)));
    }

    #[test]
    fn sdk_disabled_variable_turns_export_off() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(resolve_otlp(&Otlp::FromEnv, env).expect("valid"), None);
    }

    #[test]
    fn unknown_protocol_is_an_error_naming_the_variable() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
        ]);
        let err = resolve_otlp(&Otlp::FromEnv, env).expect_err("invalid protocol");
        let text = err.to_string();
        assert!(
            text.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && text.contains("carrier-pigeon"),
            "{text}"
        );
    }

    #[test]
    fn explicit_config_ignores_the_environment() {
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        assert_eq!(resolve_otlp(&Otlp::Disabled, &env).expect("valid"), None);
        let explicit = Otlp::Endpoint {
            url: "http://x:4317".into(),
            protocol: OtlpProtocol::Grpc,
        };
        assert_eq!(
            resolve_otlp(&explicit, &env).expect("valid"),
            Some((Some("http://x:4317".into()), OtlpProtocol::Grpc))
        );
    }

    #[test]
    fn http_base_url_gets_the_traces_path() {
        assert_eq!(http_traces_url("http://h:4318"), "http://h:4318/v1/traces");
        assert_eq!(http_traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(
            http_traces_url("http://h:4318/custom/traces"),
            "http://h:4318/custom/traces"
        );
    }

    #[test]
    fn log_format_and_protocol_parse_with_clear_errors() {
        assert_eq!("JSON".parse::<LogFormat>().ok(), Some(LogFormat::Json));
        let err = "yaml".parse::<LogFormat>().expect_err("not a format");
        assert!(err.to_string().contains("text or json"), "{err}");
        assert_eq!(
            "grpc".parse::<OtlpProtocol>().ok(),
            Some(OtlpProtocol::Grpc)
        );
    }

    #[test]
    fn bad_filter_is_an_error_naming_the_directives() {
        let config = TelemetryConfig::new("t")
            .filter("info,[[[")
            .otlp(Otlp::Disabled);
        let err = subscriber(&config).err().expect("invalid filter");
        assert!(err.to_string().contains("info,[[["), "{err}");
    }
}
