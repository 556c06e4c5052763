//! Every public error type of the library crates (sdk, operator, runner, ha, testing, simple,
//! components, phases) walks down its `source()` chain without printing any text twice (issue #33): an error
//! either returns its cause from `source()` or includes it in its message, never both (see
//! `kubeapp::sdk::error`).
//!
//! [`every_error`] builds one value of every variant of every public error type, each with a
//! source where the variant has one (with distinctive texts, so a repeat cannot be a
//! coincidence). The list is kept complete by [`the_list_covers_every_public_error_type`], which
//! reads the crates' sources for every `pub enum`/`pub struct` deriving an `Error` and each of
//! its variants, and fails naming any the list misses. `ClientError::NoConfig` is the one
//! variant built elsewhere ([`a_client_error_without_a_configuration`]): its source, kube's
//! `InferConfigError`, only comes out of `kube::Config::infer` in an environment without a
//! kubeconfig.
//!
//! The error types of the binaries and tools (`cli`, `bench`, `soak`, the examples), private ones
//! included, are held to the same rule by reading their sources:
//! [`no_error_type_in_the_workspace_prints_a_source_it_returns`] fails on any `#[error(..)]`
//! whose message prints a field that is also the error's source (a field named `source`, or
//! marked `#[source]` or `#[from]`).

use std::collections::BTreeSet;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kubeapp::components::dry_run::DryRunError;
use kubeapp::components::{ComponentError, GraphError};
use kubeapp::ha::election::ElectionError;
use kubeapp::ha::sharding::ShardingError;
use kubeapp::operator::controller::ControllerError;
use kubeapp::operator::metrics::MetricsError;
use kubeapp::operator::opinionated::finalizer::{FinalizerNameError, FinalizerPatchError};
use kubeapp::operator::opinionated::undecodable::UndecodableHeld;
use kubeapp::operator::view::WrongObjectType;
use kubeapp::operator::{
    ApplyError, EventError, HandlerError, MetricSetError, MetricsRegistryError, ObjectKey,
    StoreError,
};
use kubeapp::phases::PhaseError;
use kubeapp::phases::analysis::{AnalysisError, ComparisonError, IntervalError, TemplateError};
use kubeapp::phases::gate::UnknownGate;
use kubeapp::phases::provider::MetricError;
use kubeapp::runner::ClientError;
use kubeapp::runner::RunnerError;
use kubeapp::runner::metrics_auth::MetricsAuthError;
use kubeapp::sdk::app::{AdmissionError, AppError, ConversionError};
use kubeapp::sdk::benchmark::audit::AuditError;
use kubeapp::sdk::benchmark::metrics_text::FetchError;
use kubeapp::sdk::benchmark::process::ProcessError;
use kubeapp::sdk::crd::CrdError;
use kubeapp::sdk::deploy::DeployError;
use kubeapp::sdk::manifest::{Format, ManifestError, ManifestProblem};
use kubeapp::sdk::monitoring::MonitoringError;
use kubeapp::sdk::rbac::RbacError;
use kubeapp::sdk::testenv::TestEnvError;
use kubeapp::simple::cli::OperatorArgsError;
use kubeapp::simple::manifest_match::KindMismatch;
use kubeapp::simple::operator::OperatorError;
use kubeapp::simple::telemetry::{OtlpProtocol, TelemetryError};
use kubeapp::simple::{AppConfigError, AppProblem, Capability};
use kubeapp::testing::{FaultProxyError, HarnessError, NotQuiescent};

/// The library crates whose public errors are held to the rule, with their crate names.
const CRATES: &[(&str, &str)] = &[
    ("sdk", "kubeapp_sdk"),
    ("operator", "kubeapp_operator"),
    ("runner", "kubeapp_runner"),
    ("ha", "kubeapp_ha"),
    ("testing", "kubeapp_testing"),
    ("simple", "kubeapp_simple"),
    ("components", "kubeapp_components"),
    ("phases", "kubeapp_phases"),
];

/// Variants built by another test of this file (crate, type, variant).
const BUILT_ELSEWHERE: &[(&str, &str, &str)] = &[("kubeapp_runner", "ClientError", "NoConfig")];

/// One error value: its crate, type and variant (from its type name and its `Debug`), and it.
struct Built {
    krate: String,
    type_name: String,
    variant: String,
    error: Box<dyn Error + Send + Sync>,
}

#[derive(Default)]
struct Errors(Vec<Built>);

impl Errors {
    fn add<E: Error + Send + Sync + 'static>(&mut self, error: E) {
        let path = std::any::type_name::<E>();
        let krate = path.split("::").next().unwrap_or_default().to_string();
        let type_name = path.rsplit("::").next().unwrap_or_default().to_string();
        let debug = format!("{error:?}");
        let variant = debug
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or_default()
            .to_string();
        self.0.push(Built {
            krate,
            type_name,
            variant,
            error: Box::new(error),
        });
    }
}

// Causes with texts no message of ours contains.
fn io() -> std::io::Error {
    std::io::Error::other("io cause 7f3")
}

fn kube_error() -> kube::Error {
    let status = kube::core::Status::failure("status cause 91c", "Forbidden").with_code(403);
    kube::Error::Api(status.boxed())
}

fn json_error() -> serde_json::Error {
    serde_json::from_str::<serde_json::Value>("{").expect_err("not JSON")
}

fn prometheus_error() -> prometheus::Error {
    prometheus::Error::Msg("prometheus cause 5d2".into())
}

fn metrics_error() -> MetricsError {
    MetricsError {
        name: "m".into(),
        source: prometheus_error(),
    }
}

fn manifest_error() -> ManifestError {
    ManifestError::Read {
        path: "manifest.yaml".into(),
        source: io(),
    }
}

fn key() -> ObjectKey {
    ObjectKey {
        namespace: Some("ns".into()),
        name: "a".into(),
    }
}

fn finalizer_name_error() -> FinalizerNameError {
    FinalizerNameError::MissingPrefix {
        finalizer: "f".into(),
    }
}

fn mismatch() -> KindMismatch {
    KindMismatch {
        kind: "Widget".into(),
        field: "versions[0].kinds[0].plural".into(),
        manifest: "\"widgetz\"".into(),
        rust: "\"widgets\"".into(),
    }
}

fn sdk_errors(errors: &mut Errors) {
    errors.add(MonitoringError::Thresholds {
        origin: "thresholds.yaml".into(),
        message: "pending: \"soon\" is not a Prometheus duration".into(),
    });
    errors.add(MonitoringError::InvalidPrefix {
        prefix: "9x".into(),
    });
    errors.add(MonitoringError::Serialize {
        what: "dashboard",
        message: "m".into(),
    });
    errors.add(AppError::Build {
        app: "a".into(),
        message: "m".into(),
    });
    errors.add(AppError::Run {
        app: "a".into(),
        source: "run cause 0a1".into(),
    });
    errors.add(AppError::Abandoned {
        app: "a".into(),
        calls: 5,
    });
    errors.add(AdmissionError::NotImplemented {
        hook: "validation",
        kind: "Widget".into(),
        operation: kube::core::admission::Operation::Create,
    });
    errors.add(AdmissionError::denied("no"));
    errors.add(AdmissionError::Internal("i".into()));
    errors.add(ConversionError::NotImplemented {
        kind: "Widget".into(),
        desired_api_version: "v2".into(),
    });
    errors.add(ConversionError::Failed {
        kind: "Widget".into(),
        desired_api_version: "v2".into(),
        message: "m".into(),
    });
    let (s, v) = (String::from, |items: &[&str]| {
        items.iter().map(|i| i.to_string()).collect::<Vec<_>>()
    });
    errors.add(CrdError::Manifest(manifest_error()));
    errors.add(CrdError::MissingType {
        kind: s("K"),
        version: s("v1"),
    });
    errors.add(CrdError::GroupMismatch {
        type_name: s("T"),
        type_group: s("a"),
        manifest_group: s("b"),
    });
    errors.add(CrdError::UnknownKind {
        type_name: s("T"),
        kind: s("K"),
        manifest_kinds: v(&["L"]),
    });
    errors.add(CrdError::UnknownVersion {
        type_name: s("T"),
        kind: s("K"),
        version: s("v2"),
        manifest_versions: v(&["v1"]),
    });
    errors.add(CrdError::PluralMismatch {
        type_name: s("T"),
        kind: s("K"),
        type_plural: s("ks"),
        manifest_plural: s("kz"),
    });
    errors.add(CrdError::ScopeMismatch {
        type_name: s("T"),
        kind: s("K"),
        type_scope: s("Namespaced"),
        manifest_scope: s("Cluster"),
    });
    errors.add(CrdError::DuplicateType {
        kind: s("K"),
        version: s("v1"),
        first: s("A"),
        second: s("B"),
    });
    errors.add(CrdError::InvalidSchema {
        kind: s("K"),
        version: s("v1"),
        field: s("f"),
        message: s("m"),
    });
    errors.add(CrdError::Yaml { message: s("m") });
    errors.add(DeployError::InvalidField {
        field: "image",
        reason: s("r"),
    });
    errors.add(DeployError::Rbac(RbacError::Manifest(manifest_error())));
    errors.add(DeployError::Serialize {
        object: "Deployment",
        message: s("m"),
    });
    errors.add(manifest_error());
    errors.add(ManifestError::Parse {
        origin: s("o"),
        format: Format::Yaml,
        field: s("f"),
        line: Some(1),
        column: Some(2),
        message: s("m"),
    });
    errors.add(ManifestError::Invalid {
        origin: s("o"),
        problems: vec![ManifestProblem {
            field: s("f"),
            message: s("m"),
        }],
    });
    errors.add(ManifestError::Serialize {
        format: Format::Json,
        message: s("m"),
    });
    errors.add(RbacError::Manifest(manifest_error()));
    errors.add(RbacError::ClusterScopedKindInRole {
        kind: s("K"),
        namespace: s("ns"),
    });
    errors.add(RbacError::Yaml { message: s("m") });
    testenv_errors(errors);
    benchmark_errors(errors);
}

fn benchmark_errors(errors: &mut Errors) {
    let s = String::from;
    errors.add(AuditError::Io {
        path: "/a/audit.log".into(),
        source: io(),
    });
    errors.add(AuditError::Parse {
        path: "/a/audit.log".into(),
        line: 3,
        source: json_error(),
    });
    errors.add(ProcessError::Spawn {
        binary: "/a/op".into(),
        source: io(),
    });
    errors.add(ProcessError::Log {
        path: "/a/op.log".into(),
        source: io(),
    });
    errors.add(ProcessError::PeakRss {
        pid: 7,
        reason: s("r"),
    });
    errors.add(ProcessError::CpuTime {
        pid: 7,
        reason: s("r"),
    });
    errors.add(FetchError {
        addr: ([127, 0, 0, 1], 9).into(),
        problem: s("p"),
    });
}

fn testenv_errors(errors: &mut Errors) {
    let s = String::from;
    errors.add(TestEnvError::BinaryNotFound {
        binary: "etcd",
        searched: vec![PathBuf::from("/a")],
    });
    errors.add(TestEnvError::Spawn {
        binary: "etcd",
        path: "/a/etcd".into(),
        source: io(),
    });
    errors.add(TestEnvError::Exited {
        binary: "etcd",
        status: s("exit status: 1"),
        log: "/a/log".into(),
        tail: s("t"),
    });
    errors.add(TestEnvError::NotReady {
        binary: "etcd",
        waited: Duration::from_secs(1),
        reason: s("r"),
        log: "/a/log".into(),
        tail: s("t"),
    });
    errors.add(TestEnvError::Certificate {
        what: "a CA",
        source: rcgen::Error::CouldNotParseKeyPair,
    });
    errors.add(TestEnvError::Io {
        action: "writing",
        path: "/a".into(),
        source: io(),
    });
    errors.add(TestEnvError::Kubeconfig {
        context: s("c"),
        source: kube::config::KubeconfigError::CurrentContextNotSet,
    });
    errors.add(TestEnvError::Kube {
        action: s("a"),
        source: kube_error(),
    });
    errors.add(TestEnvError::Timeout {
        what: s("w"),
        waited: Duration::from_secs(1),
    });
    errors.add(TestEnvError::Watch {
        what: s("w"),
        message: s("m"),
    });
    errors.add(TestEnvError::InvalidYaml {
        what: s("w"),
        message: s("m"),
    });
    errors.add(TestEnvError::ApiServerStopped);
}

fn operator_errors(errors: &mut Errors) {
    let s = String::from;
    errors.add(ApplyError::MissingName { kind: s("K") });
    errors.add(ApplyError::MissingNamespace {
        kind: s("K"),
        name: s("a"),
    });
    errors.add(ApplyError::OwnerWithoutUid {
        owner_kind: s("K"),
        owner: s("o"),
        object: s("a"),
    });
    errors.add(ApplyError::CrossNamespaceOwner {
        owner_kind: s("K"),
        owner: s("o"),
        object: s("a"),
    });
    errors.add(ApplyError::OtherController {
        owner: s("o"),
        object: s("a"),
        current: s("c"),
    });
    errors.add(ApplyError::Serialize {
        object: s("a"),
        source: json_error(),
    });
    errors.add(ApplyError::Api {
        operation: "apply",
        object: s("a"),
        field_manager: s("f"),
        source: Box::new(kube_error()),
    });
    errors.add(ControllerError::AlreadyRan);
    errors.add(ControllerError::NotRestartable(s("k")));
    errors.add(ElectionError::Config(s("c")));
    errors.add(ElectionError::Api(kube_error()));
    errors.add(FaultProxyError::Bind(io()));
    errors.add(HarnessError::Setup {
        run: s("the fault-free run"),
        what: s("start the operator"),
        source: Box::new(io()),
    });
    errors.add(HarnessError::Step {
        run: s("plan crash right after write 3"),
        step: s("create"),
        source: Box::new(kube_error()),
    });
    errors.add(HarnessError::NotQuiescent {
        run: s("plan write 2 answered with 409 Conflict"),
        step: s("update"),
        source: NotQuiescent {
            addr: ([127, 0, 0, 1], 8081).into(),
            timeout: Duration::from_secs(2),
            unsettled: vec![s(
                "templates: 1 queued, 0 being handled, 0 waiting for a retry",
            )],
        },
    });
    errors.add(HarnessError::CallChecks {
        run: s("the fault-free run"),
        violations: vec![s(
            "parents ns/p3 was deleted, and no handler call saw its deletion (the last call: #4 \
             reconciler[0] update in process 1)",
        )],
    });
    errors.add(NotQuiescent {
        addr: ([127, 0, 0, 1], 8080).into(),
        timeout: Duration::from_secs(1),
        unsettled: vec![s("the ConfigMap informer has not synced")],
    });
    errors.add(FaultProxyError::Client {
        url: s("http://127.0.0.1:1"),
        source: kube_error(),
    });
    errors.add(FaultProxyError::Kubeconfig {
        path: "/kubeconfig".into(),
        source: io(),
    });
    errors.add(EventError {
        type_: "Normal",
        reason: s("R"),
        object: s("a"),
        source: Box::new(kube_error()),
    });
    errors.add(HandlerError::failed("handler cause 3b4".into()));
    errors.add(HandlerError::Panicked(s("p")));
    errors.add(HandlerError::TimedOut(Duration::from_secs(1)));
    errors.add(HandlerError::Cancelled);
    errors.add(metrics_error());
    errors.add(MetricsRegistryError::InvalidPrefix { prefix: s("9") });
    errors.add(MetricsRegistryError::Metrics(metrics_error()));
    errors.add(MetricSetError::Create {
        set: "Orders",
        source: Box::new(metrics_error()),
    });
    errors.add(MetricSetError::Clash {
        set: "Orders",
        metric: s("orders_total"),
        source: prometheus::Error::AlreadyReg,
    });
    errors.add(FinalizerNameError::Empty);
    errors.add(finalizer_name_error());
    errors.add(FinalizerNameError::InvalidPrefix {
        finalizer: s("f"),
        prefix: s("p"),
        rule: "r",
    });
    errors.add(FinalizerNameError::TooLong {
        finalizer: s("f"),
        length: 70,
    });
    errors.add(FinalizerNameError::InvalidName {
        finalizer: s("f"),
        name: s("n"),
        rule: "r",
    });
    errors.add(FinalizerNameError::Same(s("f")));
    errors.add(FinalizerPatchError::Read {
        kind: s("K"),
        object: key(),
        source: kube_error(),
    });
    errors.add(FinalizerPatchError::Patch {
        kind: s("K"),
        object: key(),
        source: kube_error(),
    });
    errors.add(FinalizerPatchError::Conflict {
        kind: s("K"),
        object: key(),
        attempts: 3,
    });
    errors.add(FinalizerPatchError::Cancelled {
        kind: s("K"),
        object: key(),
    });
    errors.add(UndecodableHeld {
        kind: s("K"),
        object: key(),
        expected: "T",
        error: s("e"),
    });
    errors.add(ClientError::Metrics(metrics_error()));
    errors.add(ClientError::Registry(MetricSetError::Clash {
        set: "ClientMetrics",
        metric: s("kubernetes_client_requests_total"),
        source: prometheus::Error::AlreadyReg,
    }));
    errors.add(ClientError::Client {
        cluster_url: s("https://a"),
        source: kube_error(),
    });
    errors.add(ShardingError::Config(s("c")));
    errors.add(StoreError::NotIndexed { index: s("i") });
    errors.add(StoreError::OpaqueVersion { rv: s("x") });
    errors.add(StoreError::Timeout {
        rv: s("1"),
        waited: Duration::from_secs(1),
    });
    errors.add(StoreError::Stopped);
    errors.add(WrongObjectType {
        expected: "A",
        actual: "B",
    });
    for webhook in webhook_errors() {
        errors.add(webhook);
    }
    runner_errors(errors);
}

fn webhook_errors() -> Vec<kubeapp::runner::webhook::WebhookError> {
    use kubeapp::runner::webhook::WebhookError;
    vec![
        WebhookError::Certificate {
            path: "/a.crt".into(),
            message: "m".into(),
        },
        WebhookError::Tls(rustls::Error::General("tls cause 8e1".into())),
        WebhookError::Bind {
            addr: ([127, 0, 0, 1], 8443).into(),
            source: io(),
        },
    ]
}

fn runner_errors(errors: &mut Errors) {
    errors.add(MetricsAuthError::Unauthenticated {
        reason: "no Authorization header".into(),
    });
    errors.add(MetricsAuthError::Forbidden {
        user: "system:serviceaccount:a:b".into(),
        path: "/metrics".into(),
    });
    errors.add(MetricsAuthError::ReviewFailed {
        reason: "connection refused".into(),
    });
    let s = String::from;
    errors.add(RunnerError::InvalidMetricsPrefix { prefix: s("9") });
    errors.add(RunnerError::Bind {
        addr: ([127, 0, 0, 1], 9090).into(),
        source: io(),
    });
    errors.add(RunnerError::Metrics {
        app: s("a"),
        source: prometheus_error(),
    });
    errors.add(RunnerError::WebhooksRequired {
        app: s("a"),
        declared: s("K: validation"),
    });
    errors.add(RunnerError::RunnerMetrics(metrics_error()));
    for webhook in webhook_errors() {
        errors.add(RunnerError::Webhook(webhook));
    }
    errors.add(RunnerError::Signal(io()));
    errors.add(RunnerError::App {
        app: s("failing"),
        source: AppError::Run {
            app: s("failing"),
            source: "run error".into(),
        },
    });
    errors.add(RunnerError::AppPanicked {
        app: s("a"),
        message: s("m"),
    });
    errors.add(RunnerError::AppExited { app: s("a") });
    errors.add(RunnerError::Server {
        server: "metrics",
        source: io(),
    });
    errors.add(RunnerError::ShutdownTimeout {
        timeout: Duration::from_secs(1),
        apps: vec![s("a")],
    });
    errors.add(RunnerError::Abandoned {
        app: s("a"),
        calls: 5,
    });
    errors.add(RunnerError::SecondSignal { signal: "SIGTERM" });
}

fn simple_errors(errors: &mut Errors) {
    use kubeapp::simple::operator::WebhookError;
    let s = String::from;
    errors.add(OperatorArgsError::IncompleteWebhookTls {
        given: "--webhook-cert-file",
        missing: "--webhook-key-file",
    });
    errors.add(OperatorArgsError::LeaderWithoutInstance);
    errors.add(OperatorArgsError::ShardWithoutInstance);
    errors.add(OperatorArgsError::Sharding(s("s")));
    errors.add(OperatorArgsError::LeaderElection(s("l")));
    errors.add(AppConfigError::Invalid {
        app: s("a"),
        problems: vec![AppProblem::NoHandler { kind: s("K") }],
    });
    errors.add(AppConfigError::Finalizer {
        app: s("a"),
        kind: s("K"),
        source: finalizer_name_error(),
    });
    errors.add(AppConfigError::Metrics {
        app: s("a"),
        source: metrics_error(),
    });
    let webhooks = || {
        vec![
            WebhookError::NoServerCertificate { declared: s("d") },
            WebhookError::NoCa { declared: s("d") },
            WebhookError::ReadCa {
                path: "/ca.crt".into(),
                source: io(),
            },
            WebhookError::NotPem {
                path: "/ca.crt".into(),
            },
            WebhookError::NotHttps { url: s("http://a") },
        ]
    };
    for webhook in webhooks() {
        errors.add(webhook);
    }
    let telemetry = || {
        vec![
            TelemetryError::InvalidSetting {
                setting: s("s"),
                value: s("v"),
                expected: "e",
            },
            TelemetryError::InvalidFilter {
                directives: s("a=notalevel"),
                source: tracing_subscriber::EnvFilter::builder()
                    .parse("a=notalevel")
                    .expect_err("not a level"),
            },
            TelemetryError::Exporter {
                protocol: OtlpProtocol::Grpc,
                source: opentelemetry_otlp::ExporterBuildError::InvalidConfiguration(
                    "otlp cause 2c9".into(),
                ),
            },
            TelemetryError::OtlpNotBuilt {
                configured: s("HttpProtobuf to http://collector:4318"),
            },
            TelemetryError::NoRuntime,
            TelemetryError::AlreadyInitialized(s("i")),
            TelemetryError::Shutdown(s("s")),
        ]
    };
    for telemetry in telemetry() {
        errors.add(telemetry);
    }
    let problems = [
        AppProblem::ManifestKindNotManaged { kind: s("K") },
        AppProblem::ManagedKindNotInManifest {
            kind: s("K"),
            group: s("g"),
        },
        AppProblem::CapabilityWithoutHandler {
            kind: s("K"),
            capability: Capability::Validation,
        },
        AppProblem::HandlerWithoutCapability {
            kind: s("K"),
            capability: Capability::Mutation,
        },
        AppProblem::ReconcilerAndWatcher { kind: s("K") },
        AppProblem::NoHandler { kind: s("K") },
        AppProblem::CleanupWithoutFinalizer { kind: s("K") },
        AppProblem::DuplicateKind { kind: s("K") },
        AppProblem::KindMismatch(mismatch()),
    ];
    for problem in problems {
        errors.add(problem);
    }
    let operator = vec![
        OperatorError::Manifest(s("m")),
        OperatorError::Crd(CrdError::Manifest(manifest_error())),
        OperatorError::Rbac(RbacError::Manifest(manifest_error())),
        OperatorError::Deploy(DeployError::Rbac(RbacError::Manifest(manifest_error()))),
        OperatorError::Yaml(s("y")),
        OperatorError::Monitoring(MonitoringError::InvalidPrefix { prefix: s("9x") }),
        OperatorError::ThresholdsFile {
            path: "thresholds.yaml".into(),
            source: io(),
        },
        OperatorError::Stdout(io()),
        OperatorError::Args(OperatorArgsError::LeaderWithoutInstance),
        OperatorError::Webhooks(webhooks().remove(2)),
        OperatorError::Telemetry(telemetry().remove(1)),
        OperatorError::Client(ClientError::Metrics(metrics_error())),
        OperatorError::App(AppConfigError::Metrics {
            app: s("a"),
            source: metrics_error(),
        }),
        OperatorError::KindMismatch {
            file: s("manifest.yaml"),
            mismatches: vec![mismatch()],
        },
        OperatorError::Runner(RunnerError::App {
            app: s("failing"),
            source: AppError::Run {
                app: s("failing"),
                source: "run error".into(),
            },
        }),
        OperatorError::NoImage,
        OperatorError::DryRun(s("d")),
        OperatorError::Election(s("e")),
        OperatorError::Sharding(s("s")),
        OperatorError::NoDryRun,
        OperatorError::Command {
            command: s("prices"),
            source: "command cause 7c1".into(),
        },
        OperatorError::CommandLine(vec![s("clash one"), s("clash two")]),
        OperatorError::AppBuilder(s("no price list")),
        OperatorError::Metrics(MetricsRegistryError::InvalidPrefix { prefix: s("8") }),
        OperatorError::DefaultArgs(s("default cause 5d2")),
    ];
    for error in operator {
        errors.add(error);
    }
}

fn extension_errors(errors: &mut Errors) {
    let s = String::from;
    errors.add(ComponentError::Waiting(s("w")));
    errors.add(ComponentError::Failed(s("f")));
    errors.add(DryRunError::Io {
        path: "/out".into(),
        source: io(),
    });
    errors.add(DryRunError::Parse {
        path: "/in.yaml".into(),
        message: s("m"),
    });
    errors.add(DryRunError::NotRendered(s("n")));
    errors.add(GraphError::Duplicate { name: s("a") });
    errors.add(GraphError::UnknownDependency {
        component: s("a"),
        missing: s("b"),
    });
    errors.add(GraphError::Cycle {
        cycle: vec![s("a"), s("b")],
    });
    errors.add(GraphError::NoComponent { on: s("a") });
    errors.add(PhaseError::InitialNotListed(s("P")));
    errors.add(PhaseError::InitialIsFinal(s("P")));
    errors.add(PhaseError::NoFinalPhase);
    errors.add(PhaseError::BadName(s("P")));
    errors.add(PhaseError::MissingWorker(s("P")));
    errors.add(PhaseError::WorkerOnFinal(s("P")));
    errors.add(PhaseError::DuplicateInput {
        phase: s("P"),
        input: s("I"),
    });
    errors.add(PhaseError::AnalysisOnFinal(s("P")));
    errors.add(PhaseError::NoMetricProvider(s("P")));
    errors.add(ComparisonError {
        text: s("~ 1"),
        reason: "no operator",
    });
    errors.add(IntervalError(s("3d")));
    let template = || TemplateError {
        placeholder: s("spec.nope"),
        reason: "no such field in the object",
    };
    errors.add(template());
    errors.add(AnalysisError::NoCondition(s("rate")));
    errors.add(AnalysisError::ZeroCount(s("rate")));
    errors.add(AnalysisError::Query {
        metric: s("rate"),
        source: template(),
    });
    errors.add(UnknownGate(s("promot")));
    let url = || s("http://prometheus:9090/api/v1/query?query=up");
    let request = reqwest::Client::new()
        .get("no scheme, no host")
        .build()
        .expect_err("not a URL");
    errors.add(MetricError::Request {
        url: url(),
        source: request,
    });
    errors.add(MetricError::Status {
        url: url(),
        status: 503,
        body: s("unavailable"),
    });
    errors.add(MetricError::TooLong { url: url() });
    errors.add(MetricError::Answer {
        url: url(),
        reason: s("2 series"),
    });
}

/// One value of every variant of every public error type (but [`BUILT_ELSEWHERE`]).
fn every_error() -> Vec<Built> {
    let mut errors = Errors::default();
    sdk_errors(&mut errors);
    operator_errors(&mut errors);
    simple_errors(&mut errors);
    extension_errors(&mut errors);
    errors.0
}

/// The messages down `error`'s chain, the error's own first.
fn messages(error: &(dyn Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |&error| error.source())
        .map(ToString::to_string)
        .collect()
}

/// What is wrong with the chain of one of our errors: its own message contains the message of
/// a level below it. (Only its own: below it may be foreign errors that break the rule, such as
/// `kube::Error::Api`, which prints its `Status` and returns it; our errors nested in it are in
/// the list themselves.)
fn repeated_text(error: &(dyn Error + 'static)) -> Vec<String> {
    let levels = messages(error);
    levels
        .iter()
        .skip(1)
        .filter(|deeper| !deeper.is_empty() && levels[0].contains(deeper.as_str()))
        .map(|deeper| format!("{:?} repeats {deeper:?}", levels[0]))
        .collect()
}

#[test]
fn every_public_error_walks_its_chain_without_repeating_text() {
    let errors = every_error();
    let mut failures = Vec::new();
    for built in &errors {
        let error: &(dyn Error + 'static) = built.error.as_ref();
        for problem in repeated_text(error) {
            failures.push(format!(
                "{}::{}::{}: {problem}",
                built.krate, built.type_name, built.variant
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "chains that print a cause twice:\n{}",
        failures.join("\n")
    );
    // The example of the issue: a failing app under the Runner.
    let runner = errors
        .iter()
        .find(|b| b.type_name == "RunnerError" && b.variant == "App")
        .expect("RunnerError::App is in the list");
    assert_eq!(
        messages(runner.error.as_ref()),
        [
            "an app failed; the runner stopped the others",
            "app failing failed",
            "run error"
        ]
    );
}

/// `ClientError::NoConfig` (see the module docs): this test runs itself again with no
/// kubeconfig to find and no in-cluster environment, where `kube::Config::infer` fails.
#[tokio::test]
async fn a_client_error_without_a_configuration() {
    const CHILD: &str = "KUBEAPP_ERROR_CHAINS_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let output = std::process::Command::new(std::env::current_exe().expect("this test"))
            .args(["--exact", "a_client_error_without_a_configuration"])
            .env(CHILD, "1")
            .env("KUBECONFIG", "/nonexistent/kubeapp/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("run this test again");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "{}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let Err(error) = kubeapp::runner::default_client().await else {
        panic!("a client, with no kubeconfig at /nonexistent and not in a pod");
    };
    assert!(matches!(error, ClientError::NoConfig { .. }), "{error:?}");
    assert_eq!(repeated_text(&error), Vec::<String>::new());
}

// ---- completeness: every public error type and variant in the sources is in the list ----

/// `(crate, type, variant)` of every public error type in `dir`'s sources (structs: the type
/// name as the variant); test modules inside files are left out.
fn declared_errors(dir: &Path, krate: &str, out: &mut BTreeSet<(String, String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            declared_errors(&path, krate, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            declared_in(&text, krate, out);
        }
    }
}

fn declared_in(text: &str, krate: &str, out: &mut BTreeSet<(String, String, String)>) {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut rest = text;
    while let Some(at) = rest.find("#[derive(") {
        let derive_end = rest[at..].find(")]").map_or(rest.len(), |end| at + end);
        let derives = &rest[at..derive_end];
        rest = &rest[derive_end..];
        if !derives.contains("Error") {
            continue;
        }
        // Attributes and comments may follow the derive; then the item.
        let item = skip_attributes(rest.trim_start_matches(")]"));
        let is_enum = item.starts_with("pub enum ");
        if !is_enum && !item.starts_with("pub struct ") {
            continue; // a private item
        }
        let after = &item[if is_enum { 9 } else { 11 }..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !is_enum {
            out.insert((krate.into(), name.clone(), name));
            continue;
        }
        let body_start = after.find('{').expect("an enum body") + 1;
        for variant in top_level_variants(&after[body_start..]) {
            out.insert((krate.into(), name.clone(), variant));
        }
    }
}

/// `text` from its first item on: leading attributes (`#[..]`, brackets balanced, strings
/// skipped) and comments dropped.
fn skip_attributes(mut text: &str) -> &str {
    loop {
        text = text.trim_start();
        if text.starts_with("//") {
            text = text.find('\n').map_or("", |end| &text[end..]);
        } else if text.starts_with("#[") {
            let (mut depth, mut in_string, mut escaped) = (0, false, false);
            let mut end = text.len();
            for (at, c) in text.char_indices() {
                match (in_string, escaped, c) {
                    (true, false, '\\') => escaped = true,
                    (true, false, '"') => in_string = false,
                    (true, _, _) => escaped = false,
                    (false, _, '"') => in_string = true,
                    (false, _, '[') => depth += 1,
                    (false, _, ']') => {
                        depth -= 1;
                        if depth == 0 {
                            end = at + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            text = &text[end..];
        } else {
            return text;
        }
    }
}

/// The variant names of an enum body (from just after its `{` to its closing `}`).
fn top_level_variants(body: &str) -> Vec<String> {
    let mut variants = Vec::new();
    let (mut depth, mut expect_name) = (0_i32, true);
    let mut chars = body.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '/' if body[at..].starts_with("//") => {
                while chars.peek().is_some_and(|(_, c)| *c != '\n') {
                    chars.next();
                }
            }
            '"' => {
                let mut escaped = false;
                for (_, c) in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
            }
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth -= 1;
                if depth < 0 {
                    break;
                }
            }
            ',' if depth == 0 => expect_name = true,
            '#' if depth == 0 => {}
            c if depth == 0 && expect_name && c.is_ascii_uppercase() => {
                let name: String = body[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                for _ in 1..name.len() {
                    chars.next();
                }
                variants.push(name);
                expect_name = false;
            }
            _ => {}
        }
    }
    variants
}

#[test]
fn the_list_covers_every_public_error_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut declared = BTreeSet::new();
    for (dir, krate) in CRATES {
        declared_errors(&root.join(dir).join("src"), krate, &mut declared);
    }
    assert!(
        declared.len() > 150,
        "the source scan found too little: {declared:?}"
    );
    let built: BTreeSet<(String, String, String)> = every_error()
        .into_iter()
        .map(|b| (b.krate, b.type_name, b.variant))
        .chain(
            BUILT_ELSEWHERE
                .iter()
                .map(|(k, t, v)| (k.to_string(), t.to_string(), v.to_string())),
        )
        .collect();
    let missing: Vec<_> = declared.difference(&built).collect();
    assert!(
        missing.is_empty(),
        "public error variants missing from every_error() (add one value of each): {missing:#?}"
    );
    let unknown: Vec<_> = built.difference(&declared).collect();
    assert!(
        unknown.is_empty(),
        "every_error() has variants the source scan did not find (fix the scan): {unknown:#?}"
    );
}

// ---- the rule, read from the sources of every crate in the workspace ----

/// Every directory of Rust sources in the workspace: the crates' `src/` and the examples'.
fn workspace_sources(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "src",
        "sdk",
        "operator",
        "runner",
        "ha",
        "testing",
        "simple",
        "components",
        "phases",
    ]
    .iter()
    .chain(&["cli", "bench", "soak", "testbin"])
    .map(|dir| {
        if *dir == "src" {
            root.join("src")
        } else {
            root.join(dir).join("src")
        }
    })
    .collect();
    for example in std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .flatten()
    {
        dirs.push(example.path().join("src"));
    }
    dirs.retain(|dir| dir.is_dir());
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("a source directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `text` split at the commas outside brackets, strings and comments.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '/' if text[at..].starts_with("//") => {
                while chars.peek().is_some_and(|(_, c)| *c != '\n') {
                    chars.next();
                }
            }
            '"' => {
                let mut escaped = false;
                for (_, c) in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
            }
            '{' | '(' | '[' | '<' => depth += 1,
            '}' | ')' | ']' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The text between the bracket at `open` (`{` or `(`) and its match.
fn bracketed(text: &str, open: usize) -> &str {
    let (opening, closing) = match text.as_bytes()[open] {
        b'{' => ('{', '}'),
        _ => ('(', ')'),
    };
    let mut depth = 0;
    for (at, c) in text[open..].char_indices() {
        if c == opening {
            depth += 1;
        } else if c == closing {
            depth -= 1;
            if depth == 0 {
                return &text[open + 1..open + at];
            }
        }
    }
    &text[open + 1..]
}

/// The names a message may print a source as: named fields called `source` or marked
/// `#[source]`/`#[from]`, positional ones (by index) marked so.
fn source_fields(fields: &str, named: bool) -> Vec<String> {
    split_top_level(fields)
        .into_iter()
        .enumerate()
        .filter_map(|(index, field)| {
            let marked = field.contains("#[source]") || field.contains("#[from]");
            if !named {
                return marked.then(|| index.to_string());
            }
            let declaration = skip_attributes(field.trim());
            let name = declaration
                .trim_start_matches("pub ")
                .split(':')
                .next()?
                .trim()
                .to_string();
            (marked || name == "source").then_some(name)
        })
        .collect()
}

/// The `#[error(..)]` of an item's or a variant's leading attributes.
fn error_attribute(attributes: &str) -> Option<&str> {
    let at = attributes.find("#[error(")?;
    Some(bracketed(attributes, at + "#[error".len()))
}

/// Whether `format` prints the field `name`.
fn prints(format: &str, name: &str) -> bool {
    format.contains(&format!("{{{name}}}")) || format.contains(&format!("{{{name}:"))
}

/// `Type::Variant: ...` for every message in `text` that prints a source field.
fn printed_sources(text: &str, file: &Path) -> Vec<String> {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[derive(") {
        let derive_end = rest[at..].find(")]").map_or(rest.len(), |end| at + end + 2);
        let derives = &rest[at..derive_end];
        let after_derive = &rest[derive_end..];
        rest = after_derive;
        if !derives.contains("Error") {
            continue;
        }
        let item = skip_attributes(after_derive);
        let item_attributes = &after_derive[..after_derive.len() - item.len()];
        let declaration = item
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        let (is_enum, after) = if let Some(after) = declaration.strip_prefix("enum ") {
            (true, after)
        } else if let Some(after) = declaration.strip_prefix("struct ") {
            (false, after)
        } else {
            continue;
        };
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = after.find(['{', '(', ';']) else {
            continue;
        };
        if after.as_bytes()[open] == b';' {
            continue;
        }
        let body = bracketed(after, open);
        let mut check = |label: String, format: Option<&str>, fields: &str, named: bool| {
            let Some(format) = format else { return };
            if format.trim_start().starts_with("transparent") {
                return;
            }
            for field in source_fields(fields, named) {
                if prints(format, &field) {
                    found.push(format!(
                        "{}: {label}: #[error({format})] prints `{field}`, also its source",
                        file.display()
                    ));
                }
            }
        };
        if !is_enum {
            check(
                name.clone(),
                error_attribute(item_attributes),
                body,
                after.as_bytes()[open] == b'{',
            );
            continue;
        }
        for variant in split_top_level(body) {
            let declaration = skip_attributes(variant);
            let attributes = &variant[..variant.len() - declaration.len()];
            let variant_name: String = declaration
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if variant_name.is_empty() {
                continue;
            }
            let fields_at = declaration.find(['{', '(']);
            let (fields, named) = match fields_at {
                Some(open) => (
                    bracketed(declaration, open),
                    declaration.as_bytes()[open] == b'{',
                ),
                None => ("", true),
            };
            check(
                format!("{name}::{variant_name}"),
                error_attribute(attributes),
                fields,
                named,
            );
        }
    }
    found
}

#[test]
fn no_error_type_in_the_workspace_prints_a_source_it_returns() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in workspace_sources(root) {
        rust_files(&dir, &mut files);
    }
    assert!(
        files.len() > 200,
        "the scan found too few files: {}",
        files.len()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        found.extend(printed_sources(&text, file));
    }
    assert!(
        found.is_empty(),
        "messages that print a source they also return:\n{}",
        found.join("\n")
    );
    // The scan sees the mistake it looks for.
    let bad = "#[derive(Debug, thiserror::Error)]\npub enum E {\n    #[error(\"reading {path}: {source}\")]\n    Read { path: String, source: std::io::Error },\n    #[error(\"parsing: {0}\")]\n    Parse(#[from] std::fmt::Error),\n    #[error(\"fine: {0}\")]\n    Fine(String),\n}\n#[derive(Debug, thiserror::Error)]\n#[error(\"wrapped: {0}\")]\nstruct W(#[source] std::io::Error);\n";
    let flagged = printed_sources(bad, Path::new("bad.rs"));
    assert_eq!(flagged.len(), 3, "{flagged:#?}");
}
