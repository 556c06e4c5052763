//! `OperatorArgs` (feature `cli`): defaults, every flag's environment fallback, flag over
//! environment, errors for bad values naming the flag, and the conversions to the library's
//! settings.
//!
//! clap reads the environment while parsing, and the environment is process-global: every parse
//! in this file runs under one lock, inside [`with_env`], which starts from none of the operator
//! variables set and removes them again afterwards (also when the test panics).
// Setting environment variables is `unsafe` in edition 2024 because another thread may read the
// environment at the same time. Here only `with_env` touches it, under `ENV_LOCK`.
#![allow(unsafe_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use kubeapp_simple::cli::{OperatorArgs, OperatorArgsError};
use kubeapp_simple::telemetry::{LogFormat, Otlp, OtlpProtocol, TelemetryConfig};

/// An operator's command line: nothing but the shared flags.
#[derive(Debug, Parser)]
#[command(name = "my-operator")]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

/// Every environment variable `OperatorArgs` reads.
const VARIABLES: [&str; 21] = [
    "SHARD",
    "SHARD_RING",
    "METRICS_ADDR",
    "METRICS_PREFIX",
    "WATCH_NAMESPACE",
    "LOG_FORMAT",
    "OTLP_ENDPOINT",
    "OTLP_PROTOCOL",
    "SHUTDOWN_TIMEOUT",
    "SHUTDOWN_DELAY",
    "WEBHOOK_CERT_FILE",
    "WEBHOOK_KEY_FILE",
    "WEBHOOK_ADDR",
    "POD_NAME",
    "LEADER_ELECT",
    "LEADER_READY",
    "POD_NAMESPACE",
    "LEADER_ELECTION_ID",
    "LEASE_DURATION",
    "RENEW_DEADLINE",
    "RETRY_PERIOD",
];

static ENV_LOCK: Mutex<()> = Mutex::new(());

/// Holds the environment lock; unsets every operator variable on creation and on drop.
struct CleanEnv {
    _lock: MutexGuard<'static, ()>,
}

impl CleanEnv {
    fn new() -> Self {
        let lock = ENV_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        unset_all();
        Self { _lock: lock }
    }

    fn set(&self, name: &str, value: &str) {
        // SAFETY: the lock is held; nothing else in this process reads the environment now.
        unsafe { std::env::set_var(name, value) };
    }
}

impl Drop for CleanEnv {
    fn drop(&mut self) {
        unset_all();
    }
}

fn unset_all() {
    for name in VARIABLES {
        // SAFETY: only called with ENV_LOCK held (by CleanEnv).
        unsafe { std::env::remove_var(name) };
    }
}

/// Runs `check` with these variables set (and no other operator variable).
fn with_env<T>(vars: &[(&str, &str)], check: impl FnOnce() -> T) -> T {
    let env = CleanEnv::new();
    for (name, value) in vars {
        env.set(name, value);
    }
    check()
}

fn parse(args: &[&str]) -> Result<OperatorArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("my-operator").chain(args.iter().copied()))
        .map(|cli| cli.operator)
}

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a test address")
}

/// `TelemetryConfig` has no getters: two configurations are compared by their Debug output.
fn same_telemetry(actual: &TelemetryConfig, expected: &TelemetryConfig) {
    assert_eq!(format!("{actual:?}"), format!("{expected:?}"));
}

#[test]
fn the_flattened_command_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn defaults_without_flags_or_environment() {
    let args = with_env(&[], || parse(&[])).expect("no flags parse");
    assert_eq!(args.metrics_addr, addr("0.0.0.0:9090"));
    assert_eq!(args.metrics_prefix, None);
    assert_eq!(args.namespace, None);
    assert_eq!(args.log_format, LogFormat::Text);
    assert_eq!(args.otlp_endpoint, None);
    assert_eq!(args.otlp_protocol, OtlpProtocol::Grpc);
    assert_eq!(args.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(args.shutdown_delay, Duration::ZERO);
    assert_eq!(args.webhook_cert_file, None);
    assert_eq!(args.webhook_key_file, None);
    assert_eq!(args.webhook_addr, addr("0.0.0.0:8443"));

    let runner = args.runner_config().expect("no webhook is fine");
    assert_eq!(runner.metrics_addr, addr("0.0.0.0:9090"));
    assert_eq!(runner.metrics_prefix, None);
    assert_eq!(runner.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(runner.shutdown_delay, Duration::ZERO);
    assert!(runner.webhook.is_none());
    same_telemetry(
        &args.telemetry_config("svc"),
        &TelemetryConfig::new("svc")
            .log_format(LogFormat::Text)
            .otlp(Otlp::FromEnv),
    );
}

#[test]
fn every_flag_falls_back_to_its_environment_variable_and_a_flag_beats_it() {
    let from_env = [
        ("METRICS_ADDR", "127.0.0.1:9100"),
        ("METRICS_PREFIX", "from_env"),
        ("WATCH_NAMESPACE", "team-a"),
        ("LOG_FORMAT", "json"),
        ("OTLP_ENDPOINT", "http://collector:4318"),
        ("OTLP_PROTOCOL", "http/protobuf"),
        ("SHUTDOWN_TIMEOUT", "45s"),
        ("SHUTDOWN_DELAY", "5s"),
        ("WEBHOOK_CERT_FILE", "/env/tls.crt"),
        ("WEBHOOK_KEY_FILE", "/env/tls.key"),
        ("WEBHOOK_ADDR", "127.0.0.1:9443"),
        ("POD_NAME", "pod-env"),
        ("LEADER_ELECT", "true"),
        ("LEADER_READY", "true"),
        ("POD_NAMESPACE", "ops-env"),
        ("LEADER_ELECTION_ID", "lease-env"),
        ("LEASE_DURATION", "20s"),
        ("RENEW_DEADLINE", "12s"),
        ("RETRY_PERIOD", "3s"),
    ];
    // The list above covers every variable the module reads, but SHARD and SHARD_RING, which
    // conflict with LEADER_ELECT (the sharding test covers them).
    let mut named: Vec<&str> = from_env.iter().map(|(name, _)| *name).collect();
    named.extend(["SHARD", "SHARD_RING"]);
    named.sort_unstable();
    let mut all = VARIABLES.to_vec();
    all.sort_unstable();
    assert_eq!(named, all);

    let args = with_env(&from_env, || parse(&[])).expect("the environment parses");
    assert_eq!(args.metrics_addr, addr("127.0.0.1:9100"));
    assert_eq!(args.metrics_prefix.as_deref(), Some("from_env"));
    assert_eq!(args.namespace.as_deref(), Some("team-a"));
    assert_eq!(args.log_format, LogFormat::Json);
    assert_eq!(args.otlp_endpoint.as_deref(), Some("http://collector:4318"));
    assert_eq!(args.otlp_protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(args.shutdown_timeout, Duration::from_secs(45));
    assert_eq!(args.shutdown_delay, Duration::from_secs(5));
    assert_eq!(
        args.webhook_cert_file.as_deref(),
        Some(Path::new("/env/tls.crt"))
    );
    assert_eq!(
        args.webhook_key_file.as_deref(),
        Some(Path::new("/env/tls.key"))
    );
    assert_eq!(args.webhook_addr, addr("127.0.0.1:9443"));
    assert_eq!(args.instance.as_deref(), Some("pod-env"));
    assert!(args.leader_elect);
    assert!(args.leader_ready);
    let election = args
        .election_config("shop")
        .expect("consistent")
        .expect("elected");
    assert_eq!(
        (
            election.namespace.as_str(),
            election.name.as_str(),
            election.identity.as_str()
        ),
        ("ops-env", "lease-env", "pod-env")
    );
    assert_eq!(
        (
            election.timings.lease_duration,
            election.timings.renew_deadline,
            election.timings.retry_period
        ),
        (
            Duration::from_secs(20),
            Duration::from_secs(12),
            Duration::from_secs(3)
        )
    );

    let flags = [
        "--metrics-addr",
        "127.0.0.2:9200",
        "--metrics-prefix",
        "from_flag",
        "--namespace",
        "team-b",
        "--log-format",
        "text",
        "--otlp-endpoint",
        "http://other:4317",
        "--otlp-protocol",
        "grpc",
        "--shutdown-timeout",
        "2m",
        "--shutdown-delay",
        "500ms",
        "--webhook-cert-file",
        "/flag/tls.crt",
        "--webhook-key-file",
        "/flag/tls.key",
        "--webhook-addr",
        "127.0.0.2:9444",
        "--instance",
        "pod-flag",
        "--leader-election-namespace",
        "ops-flag",
        "--leader-election-id",
        "lease-flag",
        "--lease-duration",
        "30s",
        "--renew-deadline",
        "20s",
        "--retry-period",
        "5s",
    ];
    let args = with_env(&from_env, || parse(&flags)).expect("flags parse");
    assert_eq!(args.metrics_addr, addr("127.0.0.2:9200"));
    assert_eq!(args.metrics_prefix.as_deref(), Some("from_flag"));
    assert_eq!(args.namespace.as_deref(), Some("team-b"));
    assert_eq!(args.log_format, LogFormat::Text);
    assert_eq!(args.otlp_endpoint.as_deref(), Some("http://other:4317"));
    assert_eq!(args.otlp_protocol, OtlpProtocol::Grpc);
    assert_eq!(args.shutdown_timeout, Duration::from_secs(120));
    assert_eq!(args.shutdown_delay, Duration::from_millis(500));
    assert_eq!(
        args.webhook_cert_file.as_deref(),
        Some(Path::new("/flag/tls.crt"))
    );
    assert_eq!(
        args.webhook_key_file.as_deref(),
        Some(Path::new("/flag/tls.key"))
    );
    assert_eq!(args.webhook_addr, addr("127.0.0.2:9444"));
    let election = args
        .election_config("shop")
        .expect("consistent")
        .expect("elected");
    assert_eq!(
        (
            election.namespace.as_str(),
            election.name.as_str(),
            election.identity.as_str()
        ),
        ("ops-flag", "lease-flag", "pod-flag")
    );
    assert_eq!(election.timings.retry_period, Duration::from_secs(5));
}

#[test]
fn leader_election_needs_an_identity_and_timings_that_fit() {
    let off = with_env(&[], || parse(&[])).expect("parses");
    assert!(
        off.election_config("shop").expect("fine").is_none(),
        "off by default"
    );
    let defaults = with_env(&[], || parse(&["--leader-elect", "--instance", "p"]))
        .expect("parses")
        .election_config("shop")
        .expect("fine")
        .expect("elected");
    assert_eq!(defaults.name, "shop-leader");
    assert_eq!(defaults.namespace, "default");
    assert_eq!(
        (
            defaults.timings.lease_duration,
            defaults.timings.renew_deadline,
            defaults.timings.retry_period
        ),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    let anonymous = with_env(&[], || parse(&["--leader-elect"]))
        .expect("parses")
        .election_config("shop")
        .expect("the hostname stands in for --instance")
        .expect("elected");
    assert!(!anonymous.identity.is_empty());
    let error = with_env(&[], || parse(&["--leader-ready"])).expect_err("needs --leader-elect");
    assert!(error.to_string().contains("--leader-elect"), "{error}");
    let inverted = with_env(&[], || {
        parse(&[
            "--leader-elect",
            "--instance",
            "p",
            "--renew-deadline",
            "20s",
        ])
    })
    .expect("parses");
    let error = inverted
        .election_config("shop")
        .expect_err("deadline too long");
    let message = error.to_string();
    assert!(
        message.contains("--renew-deadline") && message.contains("lease duration"),
        "{message}"
    );
}

#[test]
fn sharding_takes_its_ring_from_the_flags_or_environment_and_excludes_leader_election() {
    let off = with_env(&[], || parse(&[])).expect("parses");
    assert!(
        off.sharding_config("shop").expect("fine").is_none(),
        "off by default"
    );
    let defaults = with_env(&[], || parse(&["--shard", "--instance", "p"]))
        .expect("parses")
        .sharding_config("shop")
        .expect("fine")
        .expect("sharded");
    assert_eq!(
        (
            defaults.ring.as_str(),
            defaults.namespace.as_str(),
            defaults.identity.as_str()
        ),
        ("shop-shards", "default", "p")
    );
    assert_eq!(defaults.lease_name(), "shop-shards-p");
    let from_env = with_env(
        &[
            ("SHARD", "true"),
            ("SHARD_RING", "ring-x"),
            ("POD_NAME", "q"),
            ("POD_NAMESPACE", "ops"),
        ],
        || parse(&[]),
    )
    .expect("parses")
    .sharding_config("shop")
    .expect("fine")
    .expect("sharded from SHARD");
    assert_eq!(
        (
            from_env.ring.as_str(),
            from_env.namespace.as_str(),
            from_env.identity.as_str()
        ),
        ("ring-x", "ops", "q")
    );
    let both =
        with_env(&[], || parse(&["--shard", "--leader-elect"])).expect_err("one or the other");
    assert!(both.to_string().contains("--leader-elect"), "{both}");
    let error = with_env(&[], || parse(&["--shard", "--instance", "a,b"]))
        .expect("parses")
        .sharding_config("shop")
        .expect_err("a comma in the identity");
    assert!(
        error.to_string().contains("--shard") && error.to_string().contains("comma"),
        "{error}"
    );
}

#[test]
fn the_metrics_prefix_falls_back_to_metrics_prefix_and_reaches_the_runner_config() {
    let from_env = with_env(&[("METRICS_PREFIX", "shop")], || parse(&[])).expect("parses");
    assert_eq!(from_env.metrics_prefix.as_deref(), Some("shop"));
    let runner = from_env.runner_config().expect("no webhook is fine");
    assert_eq!(runner.metrics_prefix.as_deref(), Some("shop"));

    let flag = with_env(&[("METRICS_PREFIX", "shop")], || {
        parse(&["--metrics-prefix", "store"])
    })
    .expect("parses");
    let runner = flag.runner_config().expect("no webhook is fine");
    assert_eq!(runner.metrics_prefix.as_deref(), Some("store"));

    let help = Cli::command().render_long_help().to_string();
    assert!(
        help.contains("--metrics-prefix <PREFIX>") && help.contains("METRICS_PREFIX"),
        "{help}"
    );
}

/// Asserts a parse failed on a bad value, and that the first line of the message names `flag`
/// and the value given.
fn assert_names_flag(result: Result<OperatorArgs, clap::Error>, flag: &str, value: &str) {
    let err = result.expect_err("a bad value must not parse");
    assert!(
        matches!(
            err.kind(),
            clap::error::ErrorKind::InvalidValue | clap::error::ErrorKind::ValueValidation
        ),
        "{flag}: unexpected error kind {:?}: {err}",
        err.kind()
    );
    let message = err.to_string();
    let first = message.lines().next().unwrap_or_default();
    assert!(
        first.contains(flag) && first.contains(value),
        "{flag}: the first line does not name the flag and value {value:?}: {message}"
    );
}

#[test]
fn bad_values_are_refused_naming_the_flag_on_the_first_line() {
    let cases: [(&[&str], &str, &str); 7] = [
        (
            &["--metrics-addr", "localhost"],
            "--metrics-addr",
            "localhost",
        ),
        (&["--webhook-addr", "0.0.0.0"], "--webhook-addr", "0.0.0.0"),
        (
            &["--shutdown-timeout", "soon"],
            "--shutdown-timeout",
            "soon",
        ),
        (
            &["--shutdown-delay", "5 parsecs"],
            "--shutdown-delay",
            "5 parsecs",
        ),
        (&["--log-format", "yaml"], "--log-format", "yaml"),
        (
            &["--otlp-endpoint", "http://c:4317", "--otlp-protocol", "udp"],
            "--otlp-protocol",
            "udp",
        ),
        (&["--shutdown-timeout=-1s"], "--shutdown-timeout", "-1s"),
    ];
    for (args, flag, value) in cases {
        assert_names_flag(with_env(&[], || parse(args)), flag, value);
    }
    // A duration's reason is on the same line as the flag.
    let err = with_env(&[], || parse(&["--shutdown-timeout", "soon"])).expect_err("bad duration");
    let message = err.to_string();
    let first = message.lines().next().unwrap_or_default();
    assert!(
        first.contains("--shutdown-timeout") && first.contains("expected number"),
        "{message}"
    );
}

#[test]
fn bad_values_from_the_environment_name_the_flag() {
    let cases = [
        ("METRICS_ADDR", "nowhere", "--metrics-addr"),
        ("WEBHOOK_ADDR", "nowhere", "--webhook-addr"),
        ("SHUTDOWN_TIMEOUT", "later", "--shutdown-timeout"),
        ("SHUTDOWN_DELAY", "later", "--shutdown-delay"),
        ("LOG_FORMAT", "xml", "--log-format"),
    ];
    for (name, value, flag) in cases {
        assert_names_flag(with_env(&[(name, value)], || parse(&[])), flag, value);
    }
}

#[test]
fn the_otlp_protocol_takes_the_otel_spellings_and_needs_an_endpoint() {
    for (value, protocol) in [
        ("grpc", OtlpProtocol::Grpc),
        ("http/protobuf", OtlpProtocol::HttpProtobuf),
        ("http", OtlpProtocol::HttpProtobuf),
    ] {
        let args = with_env(&[], || {
            parse(&["--otlp-endpoint", "http://c:4318", "--otlp-protocol", value])
        })
        .expect("a known protocol parses");
        assert_eq!(args.otlp_protocol, protocol, "{value}");
        same_telemetry(
            &args.telemetry_config("svc"),
            &TelemetryConfig::new("svc").otlp(Otlp::Endpoint {
                url: "http://c:4318".into(),
                protocol,
            }),
        );
    }
    let err = with_env(&[], || parse(&["--otlp-protocol", "grpc"]))
        .expect_err("a protocol without an endpoint is a mistake");
    assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
}

#[test]
fn the_webhook_server_needs_both_certificate_and_key() {
    let both = with_env(&[], || {
        parse(&[
            "--webhook-cert-file",
            "/tls/tls.crt",
            "--webhook-key-file",
            "/tls/tls.key",
            "--webhook-addr",
            "127.0.0.1:10443",
            "--shutdown-delay",
            "5s",
        ])
    })
    .expect("parses");
    let runner = both.runner_config().expect("both files given");
    assert_eq!(runner.shutdown_delay, Duration::from_secs(5));
    let webhook = runner.webhook.expect("the webhook server is configured");
    assert_eq!(webhook.cert_path, Path::new("/tls/tls.crt"));
    assert_eq!(webhook.key_path, Path::new("/tls/tls.key"));
    assert_eq!(webhook.addr, addr("127.0.0.1:10443"));

    for (given, missing) in [
        ("--webhook-cert-file", "--webhook-key-file"),
        ("--webhook-key-file", "--webhook-cert-file"),
    ] {
        let args = with_env(&[], || parse(&[given, "/tls/file.pem"])).expect("parses");
        let err = args
            .runner_config()
            .expect_err("one of certificate and key is not enough");
        assert!(
            matches!(
                err,
                OperatorArgsError::IncompleteWebhookTls { given: g, missing: m }
                    if g == given && m == missing
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains(missing) && !message.contains('\n'),
            "{message}"
        );
    }
}
