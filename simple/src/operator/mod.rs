//! [`Operator`]: a whole operator binary from its manifest, its CRD types and its app (feature
//! `cli`).
//!
//! `main` is one expression: [`Operator::main`] parses the command line and runs one of the
//! subcommands every operator needs ([`commands`]):
//!
//! - `crd`: the CRDs of the kinds given with [`Operator::crd`], from the manifest (versions,
//!   conversion webhook when declared) and their Rust types;
//! - `rbac`: least privilege from the manifest (its kinds, `extraPermissions`) and from the app's
//!   kinds ([`AppConfig::rbac`]: unmanaged kinds, `owns`, `watches`);
//! - `manifests`: `rbac` plus the Deployment (probes, resource requests), the metrics Service and,
//!   when the manifest declares webhooks, the webhook Service, the certificate Secret's mount
//!   (Secret `{name}-webhook-tls`, e.g. from cert-manager) and the webhook configurations;
//! - `run`: logs and traces from [`OperatorArgs`] (flushed on exit), the client from the
//!   environment (in-cluster or kubeconfig), one [`Runner`] serving `/metrics`, `/livez`,
//!   `/readyz` (and the webhooks), the app built with the Runner's shared informers and metrics
//!   (`--metrics-prefix`) and `--namespace`, until SIGTERM or SIGINT.
//!
//! The operator grows without leaving `main`: [`Operator::args`] flattens its own clap `Args` into
//! the command line (global: given before or after the subcommand, listed in every `--help`), and
//! [`Operator::commands`] adds its own clap `Subcommand` next to the common ones, run by an async
//! handler with the exit codes below. The app builder of [`Operator::app_with_context`] gets an
//! [`AppContext`] in every command that builds the app: the manifest, the registry its metric
//! sets go to (`context.metrics.set::<PhaseMetrics>()?`: for `run` the Runner's, under
//! `--metrics-prefix`), the operator's own flags and `run`'s (their defaults for `rbac` and
//! `manifests`). Own flags or subcommands named like common ones are refused at start (exit 1).
//!
//! Every failure is one message on stderr naming what failed (the manifest, a flag and its
//! variable, the apiserver), and exit code 1; a usage error exits 2 with clap's message. A `run`
//! that stopped but abandoned handler calls at the shutdown timeout exits 3
//! ([`OperatorError::exit_code`], the Runner's `EXIT_WORK_ABANDONED`) with a line naming how many.
//! Before `run` starts anything it checks each managed kind's Rust type against the manifest
//! (group, kind, version, plural: [`crate::manifest_match`]) and reports a disagreement as one
//! line naming the manifest file ([`Operator::manifest_file`]), the field and both values.
//!
//! ```no_run
//! use kubeapp_simple::operator::Operator;
//! use kubeapp_simple::AppConfig;
//!
//! # async fn demo() -> std::process::ExitCode {
//! Operator::new("appName: empty\ngroup: empty.example.com\nversions: []\n")
//!     .app(AppConfig::from_manifest)
//!     .main()
//!     .await
//! # }
//! ```

pub mod commands;
mod context;
pub mod dry_run;
mod parse;
#[cfg(test)]
mod tests;
mod webhooks;

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;

use kube::CustomResourceExt;
use kubeapp_operator::election::{ElectionMetrics, LeaderElector};
use kubeapp_operator::runner::{ClientError, RunnerError, default_client_with_metrics};
use kubeapp_operator::sharding::{ShardMetrics, ShardRing};
use kubeapp_operator::{
    BoxError, CancellationToken, MetricsRegistry, MetricsRegistryError, Runner,
};
use kubeapp_sdk::crd::{CrdBuilder, CrdError};
use kubeapp_sdk::deploy::{DeployError, OperatorDeployment, WebhookServing};
use kubeapp_sdk::error::error_chain;
use kubeapp_sdk::manifest::{ManifestData, ManifestError, to_yaml_documents};
use kubeapp_sdk::rbac::{RbacBuilder, RbacError, RoleScope};
use kubeapp_sdk::webhooks::admission_configurations;

use self::commands::{Command, CrdArgs, ManifestArgs, RbacArgs};
pub use self::context::{AppContext, CommandContext, CommandFuture, NoArgs, NoCommands};
use self::context::{AppFn, CommandFn};
use self::dry_run::{DryRunArgs, DryRunFn};
use self::parse::{Chosen, Invocation};
pub use self::webhooks::WebhookError;
use crate::app::App;
use crate::cli::{OperatorArgs, OperatorArgsError};
use crate::config::{AppConfig, AppConfigError};
use crate::manifest_match::{self, KindMismatch};
use crate::telemetry::{self, TelemetryError};

/// Adds one CRD type to a [`CrdBuilder`].
type CrdFn = for<'m> fn(CrdBuilder<'m>) -> CrdBuilder<'m>;

fn add_crd<'m, K: CustomResourceExt>(builder: CrdBuilder<'m>) -> CrdBuilder<'m> {
    builder.kind::<K>()
}

/// An operator binary; see the [module docs](self). `A` are the operator's own flags and `S` its
/// own subcommands ([`args`](Self::args), [`commands`](Self::commands)), none by default.
pub struct Operator<A = NoArgs, S = NoCommands> {
    /// The manifest, or why it did not load (reported by every command).
    manifest: Result<ManifestData, String>,
    /// The manifest's file, for messages ([`Operator::manifest_file`]).
    manifest_file: String,
    /// The Deployment's name, also its ServiceAccount's, role's and Services' prefix.
    name: Option<String>,
    crds: Vec<CrdFn>,
    app: Box<AppFn<A>>,
    dry_run: Option<Box<DryRunFn>>,
    /// Runs the operator's own subcommands (none without [`Operator::commands`]).
    commands: Option<Box<CommandFn<A, S>>>,
}

impl<A, S> fmt::Debug for Operator<A, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Operator")
            .field("manifest", &self.manifest.as_ref().map(|m| &m.app_name))
            .field("crds", &self.crds.len())
            .finish_non_exhaustive()
    }
}

/// Why an [`Operator`] command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// The manifest given to [`Operator::new`] is invalid.
    #[error("the operator's manifest: {0}")]
    Manifest(String),
    /// The CRDs could not be built (a type disagrees with the manifest, say).
    #[error("building the CRDs")]
    Crd(#[from] CrdError),
    /// The RBAC could not be built.
    #[error("building the RBAC")]
    Rbac(#[from] RbacError),
    /// The deployment could not be built.
    #[error("building the deployment")]
    Deploy(#[from] DeployError),
    /// Objects could not be written as YAML.
    #[error("writing YAML: {0}")]
    Yaml(String),
    /// Writing to stdout failed.
    #[error("writing to stdout")]
    Stdout(#[source] std::io::Error),
    /// A flag of `run` has a value the operator cannot run with.
    #[error(transparent)]
    Args(#[from] OperatorArgsError),
    /// The webhooks cannot be served or reached as configured.
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
    /// Logs and traces could not be set up or flushed.
    #[error("telemetry")]
    Telemetry(#[from] TelemetryError),
    /// No Kubernetes client could be made from the environment.
    #[error("connecting to Kubernetes")]
    Client(#[from] ClientError),
    /// The app does not match its manifest, or cannot be built.
    #[error(transparent)]
    App(#[from] AppConfigError),
    /// Managed kinds whose Rust types disagree with the manifest on group, kind, version or
    /// plural (found by `run` before it starts anything).
    #[error(
        "{}: make the manifest and the types' #[kube(..)] attributes agree (the CRD and the RBAC \
         come from the manifest, the watch from the type)",
        mismatch_lines(.file, .mismatches)
    )]
    KindMismatch {
        /// The manifest's file ([`Operator::manifest_file`]).
        file: String,
        /// Each kind's first mismatch.
        mismatches: Vec<KindMismatch>,
    },
    /// The Runner failed.
    #[error("running the operator")]
    Runner(#[from] RunnerError),
    /// `manifests` needs the image to deploy (unless `--webhook-url` asks for the webhook
    /// configurations only).
    #[error(
        "manifests: pass --image with the operator's container image (or --webhook-url for the \
         webhook configurations of an operator outside the cluster)"
    )]
    NoImage,
    /// The operator's dry run failed.
    #[error("dry run: {0}")]
    DryRun(String),
    /// Leader election could not start.
    #[error("leader election: {0}")]
    Election(String),
    /// The shard ring could not start.
    #[error("{0}")]
    Sharding(String),
    /// `dry-run` on an operator that gave no [`Operator::dry_run`].
    #[error("dry-run: this operator renders nothing without a cluster (it has no dry run)")]
    NoDryRun,
    /// One of the operator's own subcommands failed.
    #[error("{command}")]
    Command {
        /// The subcommand's name.
        command: String,
        /// What failed.
        #[source]
        source: BoxError,
    },
    /// The operator's own flags or subcommands take names of the common ones.
    #[error("the operator's command line: {}", .0.join("; "))]
    CommandLine(Vec<String>),
    /// The app builder of [`Operator::app_with_context`] failed.
    #[error("building the app: {0}")]
    AppBuilder(String),
    /// A metrics registry for an app could not be made.
    #[error("the app's metrics")]
    Metrics(#[from] MetricsRegistryError),
    /// The defaults of `run`'s flags do not parse (for a command that builds the app without
    /// running it).
    #[error("the defaults of run's flags: {0}")]
    DefaultArgs(String),
}

impl OperatorError {
    /// The process exit status for this error: the Runner's
    /// ([`RunnerError::exit_code`]: 3 when work was abandoned at shutdown), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Runner(error) => error.exit_code(),
            _ => 1,
        }
    }
}

impl Operator {
    /// An operator of the manifest `manifest` (YAML or JSON text, e.g. `include_str!` of the
    /// project's manifest file). A manifest that does not parse is reported by every command.
    pub fn new(manifest: &str) -> Self {
        Self::from_manifest(ManifestData::from_embedded(manifest))
    }

    /// An operator of an already parsed manifest (or the error parsing it gave).
    pub fn from_manifest(manifest: Result<ManifestData, ManifestError>) -> Self {
        Self {
            manifest: manifest.map_err(|error| error_chain(&error)),
            manifest_file: "the operator's manifest".to_string(),
            name: None,
            crds: Vec::new(),
            app: Box::new(|context| Ok(AppConfig::from_manifest(context.manifest))),
            dry_run: None,
            commands: None,
        }
    }
}

impl<S: 'static> Operator<NoArgs, S> {
    /// Adds the operator's own flags `B` (a `#[derive(clap::Args)]` struct) to its command line:
    /// they may be given before or after the subcommand, are listed in every `--help`, and are
    /// handed to the app builder ([`AppContext::args`]) and to the operator's own subcommands.
    ///
    /// ```no_run
    /// use kubeapp_simple::operator::Operator;
    /// use kubeapp_simple::AppConfig;
    ///
    /// #[derive(clap::Args)]
    /// struct Flags {
    ///     /// Where success rates are read from.
    ///     #[arg(long, env = "PROMETHEUS_URL")]
    ///     prometheus_url: Option<String>,
    /// }
    ///
    /// # async fn demo() -> std::process::ExitCode {
    /// Operator::new("appName: empty\ngroup: empty.example.com\nversions: []\n")
    ///     .args::<Flags>()
    ///     .app_with_context(|context| {
    ///         let _url = context.args.prometheus_url.clone();
    ///         Ok(AppConfig::from_manifest(context.manifest))
    ///     })
    ///     .main()
    ///     .await
    /// # }
    /// ```
    #[must_use]
    pub fn args<B: clap::Args + Send + Sync + 'static>(self) -> Operator<B, S> {
        Operator {
            manifest: self.manifest,
            manifest_file: self.manifest_file,
            name: self.name,
            crds: self.crds,
            app: context::with_args(self.app),
            dry_run: self.dry_run,
            commands: self.commands.map(context::command_with_args),
        }
    }
}

impl<A: 'static> Operator<A, NoCommands> {
    /// Adds the operator's own subcommands `T` (a `#[derive(clap::Subcommand)]` enum) next to
    /// the common ones; `run` is called with the one chosen and the operator's flags, and its
    /// error is reported like the common commands' (one line on stderr, exit code 1). A name of
    /// a common subcommand, or a flag of one, is refused when the binary starts.
    ///
    /// ```no_run
    /// use kubeapp_simple::operator::Operator;
    ///
    /// #[derive(clap::Subcommand)]
    /// enum Tools {
    ///     /// Print the app's name.
    ///     Name,
    /// }
    ///
    /// # async fn demo() -> std::process::ExitCode {
    /// Operator::new("appName: empty\ngroup: empty.example.com\nversions: []\n")
    ///     .commands(|tool: Tools, context| async move {
    ///         match tool {
    ///             Tools::Name => println!("{}", context.manifest.app_name),
    ///         }
    ///         Ok(())
    ///     })
    ///     .main()
    ///     .await
    /// # }
    /// ```
    #[must_use]
    pub fn commands<T, F, Fut>(self, run: F) -> Operator<A, T>
    where
        T: clap::Subcommand + Send + 'static,
        F: Fn(T, CommandContext<A>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        Operator {
            manifest: self.manifest,
            manifest_file: self.manifest_file,
            name: self.name,
            crds: self.crds,
            app: self.app,
            dry_run: self.dry_run,
            commands: Some(Box::new(move |command, context| {
                Box::pin(run(command, context))
            })),
        }
    }
}

impl<A, S> Operator<A, S>
where
    A: clap::Args + Send + Sync + 'static,
    S: clap::Subcommand + 'static,
{
    /// The file the manifest was read from (e.g. `manifest.yaml` for
    /// `Operator::new(include_str!("../manifest.yaml"))`), named in the errors about it: a kind
    /// whose Rust type disagrees with the manifest is reported by `run` as
    /// `manifest.yaml: versions[0].kinds[0].plural: the manifest says .., the Rust type ..`.
    #[must_use]
    pub fn manifest_file(mut self, file: impl Into<String>) -> Self {
        self.manifest_file = file.into();
        self
    }

    /// The name of the operator's Deployment, ServiceAccount and role (default
    /// `{appName}-operator`); the webhook Service is `{name}-webhook`, the certificate Secret
    /// `{name}-webhook-tls`.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds the Rust type of one version of a manifest kind to the `crd` command's output.
    #[must_use]
    pub fn crd<K: CustomResourceExt>(mut self) -> Self {
        self.crds.push(add_crd::<K>);
        self
    }

    /// How the app is built from the manifest: usually
    /// `AppConfig::from_manifest(manifest).managed_kind(..)`. Called for `run` (then given the
    /// Runner's shared informers, metrics and `--namespace`) and for `rbac` and `manifests`
    /// (which read its kinds); it needs no cluster.
    #[must_use]
    pub fn app(mut self, app: impl Fn(ManifestData) -> AppConfig + Send + Sync + 'static) -> Self {
        self.app = Box::new(move |context| Ok(app(context.manifest)));
        self
    }

    /// [`app`](Self::app) for an app that needs more than the manifest: the registry its metric
    /// sets go to ([`AppContext::metrics`]: `context.metrics.set::<PhaseMetrics>()?`), the
    /// operator's own flags ([`args`](Self::args)) or `run`'s (`--instance`, say). An error is
    /// reported by the command that built the app (one line, exit code 1).
    #[must_use]
    pub fn app_with_context(
        mut self,
        app: impl for<'a> Fn(AppContext<'a, A>) -> Result<AppConfig, BoxError> + Send + Sync + 'static,
    ) -> Self {
        self.app = Box::new(app);
        self
    }

    /// What the `dry-run` command does: render what the operator would apply for the custom
    /// object in `--object` (with the objects under `--existing`) into `--out`, with no cluster;
    /// `render` returns a summary to print. Without it, `dry-run` says the operator has none.
    #[must_use]
    pub fn dry_run<F, Fut>(mut self, render: F) -> Self
    where
        F: Fn(DryRunArgs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, BoxError>> + Send + 'static,
    {
        self.dry_run = Some(Box::new(move |args| Box::pin(render(args))));
        self
    }

    /// Parses the command line and runs the command; the exit code says how it went (errors
    /// are printed on stderr). The whole body of an operator's `main`.
    pub async fn main(self) -> ExitCode {
        let clashes = parse::clashes::<A, S>();
        let result = if clashes.is_empty() {
            let mut cli = self.command();
            if let Some(name) = binary_name() {
                cli = cli.bin_name(name);
            }
            match parse::parse::<A, S>(cli, std::env::args_os()) {
                Ok(invocation) => self.dispatch(invocation).await,
                // Usage errors exit 2 with clap's message; --help and --version exit 0.
                Err(error) => error.exit(),
            }
        } else {
            Err(OperatorError::CommandLine(clashes))
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                // Logs may not be set up (or not to stderr): say it plainly.
                eprintln!("error: {}", error_chain(&error));
                ExitCode::from(error.exit_code())
            }
        }
    }

    /// The whole command line (for its `--help`): the common subcommands, the operator's own
    /// flags and subcommands.
    pub fn command(&self) -> clap::Command {
        parse::command::<A, S>(self.about())
    }

    /// Runs the command a command line chose.
    async fn dispatch(&self, invocation: Invocation<A, S>) -> Result<(), OperatorError> {
        match invocation.command {
            Chosen::Builtin(command) => self.execute(command, &invocation.args).await,
            Chosen::Own { name, command } => {
                let manifest = self.manifest()?.clone();
                let Some(run) = &self.commands else {
                    // `S` is `NoCommands` (no value) unless `commands` set a handler.
                    return Ok(());
                };
                run(
                    command,
                    CommandContext {
                        manifest,
                        args: invocation.args,
                    },
                )
                .await
                .map_err(|source| OperatorError::Command {
                    command: name,
                    source,
                })
            }
        }
    }

    /// The `--help` line: the app and its group from the manifest.
    fn about(&self) -> String {
        match &self.manifest {
            Ok(manifest) => format!(
                "The {} operator (group {}), built with kubeapp.",
                manifest.app_name, manifest.group
            ),
            Err(_) => "An operator built with kubeapp (its manifest does not load).".to_string(),
        }
    }

    /// Runs one of the common commands, with the operator's own flags `own`.
    ///
    /// # Errors
    ///
    /// See [`OperatorError`].
    pub async fn execute(&self, command: Command, own: &A) -> Result<(), OperatorError> {
        match command {
            Command::Crd(args) => print(&self.crd_yaml(&args)?),
            Command::Rbac(args) => print(&self.rbac_yaml(&args, own)?),
            Command::Manifests(args) => print(&self.manifests_yaml(&args, own)?),
            Command::Run(args) => self.run(&args, own).await,
            Command::DryRun(args) => {
                let render = self.dry_run.as_ref().ok_or(OperatorError::NoDryRun)?;
                let summary = render(args)
                    .await
                    .map_err(|e| OperatorError::DryRun(error_chain(e.as_ref())))?;
                print(&format!("{summary}\n"))
            }
        }
    }

    fn manifest(&self) -> Result<&ManifestData, OperatorError> {
        self.manifest
            .as_ref()
            .map_err(|error| OperatorError::Manifest(error.clone()))
    }

    /// Whether the manifest is usable, for a check before anything else.
    ///
    /// # Errors
    ///
    /// [`OperatorError::Manifest`] with the parser's or validator's message.
    pub fn check_manifest(&self) -> Result<(), OperatorError> {
        self.manifest().map(|_| ())
    }

    /// What `crd` prints.
    ///
    /// # Errors
    ///
    /// An invalid manifest, a type that disagrees with it, or a conversion webhook whose CA
    /// was not given.
    pub fn crd_yaml(&self, args: &CrdArgs) -> Result<String, OperatorError> {
        let manifest = self.manifest()?;
        let mut builder = self
            .crds
            .iter()
            .fold(CrdBuilder::new(manifest), |builder, add| add(builder));
        if manifest_converts(manifest) {
            let endpoint = webhooks::endpoint(
                manifest,
                &args.webhook,
                &args.namespace,
                &self.webhook_service(manifest),
            )?;
            builder = builder.conversion_webhook(endpoint.conversion_client());
        }
        let crds = builder.build()?;
        Ok(kubeapp_sdk::crd::to_yaml(&crds)?)
    }

    /// The app as a command that does not run builds it: a registry of its own that nothing
    /// serves, and `run`'s default flags.
    fn app_not_running(
        &self,
        manifest: &ManifestData,
        own: &A,
    ) -> Result<AppConfig, OperatorError> {
        let operator = context::default_operator_args()
            .map_err(|e| OperatorError::DefaultArgs(e.to_string()))?;
        let metrics = MetricsRegistry::new(None)?;
        (self.app)(AppContext {
            manifest: manifest.clone(),
            metrics,
            args: own,
            operator: &operator,
        })
        .map_err(|e| OperatorError::AppBuilder(error_chain(e.as_ref())))
    }

    /// What `rbac` prints, with the operator's own flags `own`.
    ///
    /// # Errors
    ///
    /// An invalid manifest, or a namespaced role for a manifest with cluster-scoped kinds.
    pub fn rbac_yaml(&self, args: &RbacArgs, own: &A) -> Result<String, OperatorError> {
        let manifest = self.manifest()?;
        let name = self.deployment_name(manifest);
        let mut builder = self
            .app_not_running(manifest, own)?
            .rbac(RbacBuilder::new(manifest))
            .name(&name)
            .service_account(&name, &args.namespace);
        if let Some(namespace) = &args.watch_namespace {
            builder = builder.scope(RoleScope::Namespace(namespace.clone()));
        }
        Ok(builder.build()?.to_yaml()?)
    }

    /// What `manifests` prints, with the operator's own flags `own`.
    ///
    /// # Errors
    ///
    /// An invalid manifest or image, or webhooks whose CA was not given.
    pub fn manifests_yaml(&self, args: &ManifestArgs, own: &A) -> Result<String, OperatorError> {
        let manifest = self.manifest()?;
        let name = self.deployment_name(manifest);
        let mut configurations = Vec::new();
        let mut serving = None;
        if !manifest.declared_webhooks().is_empty() {
            let endpoint = webhooks::endpoint(
                manifest,
                &args.webhook,
                &args.namespace,
                &self.webhook_service(manifest),
            )?;
            let (validating, mutating) = admission_configurations(manifest, &endpoint);
            configurations.extend(validating.map(serde_json::to_value));
            configurations.extend(mutating.map(serde_json::to_value));
            let mut webhooks = WebhookServing::new(format!("{name}-webhook-tls"));
            webhooks.service_name = Some(self.webhook_service(manifest));
            serving = Some(webhooks);
        }
        let configurations = configurations
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| OperatorError::Yaml(e.to_string()))?;
        if args.webhook.webhook_url.is_some() {
            // The operator runs outside the cluster: nothing to deploy but the configurations.
            return to_yaml_documents(&configurations).map_err(OperatorError::Yaml);
        }
        let image = args.image.clone().ok_or(OperatorError::NoImage)?;
        let app = self.app_not_running(manifest, own)?;
        // Sharded replicas coordinate through Leases too, whatever their number: the
        // Deployment may be scaled later without new manifests.
        let elected = args.replicas > 1 && !args.shard;
        let leases = elected || args.shard;
        let mut deployment = OperatorDeployment::new(manifest, image)
            .name(name)
            .namespace(args.namespace.clone())
            .replicas(args.replicas)
            .env_from_field("POD_NAME", "metadata.name")
            .rbac(move |builder| {
                let builder = app.rbac(builder);
                if leases {
                    builder.owned::<k8s_openapi::api::coordination::v1::Lease>()
                } else {
                    builder
                }
            });
        let mut run_args = vec!["run".to_string(), "--log-format".into(), "json".into()];
        if leases {
            deployment = deployment.env_from_field("POD_NAMESPACE", "metadata.namespace");
            run_args.push(
                if args.shard {
                    "--shard"
                } else {
                    "--leader-elect"
                }
                .into(),
            );
        }
        if let Some(webhooks) = serving {
            run_args.extend([
                "--webhook-cert-file".to_string(),
                webhooks.cert_file(),
                "--webhook-key-file".to_string(),
                webhooks.key_file(),
            ]);
            deployment = deployment.webhooks(webhooks);
        }
        let mut docs = deployment.args(run_args).build()?.to_values()?;
        docs.extend(configurations);
        to_yaml_documents(&docs).map_err(OperatorError::Yaml)
    }

    /// The Deployment's (and ServiceAccount's and role's) name.
    fn deployment_name(&self, manifest: &ManifestData) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}-operator", manifest.app_name))
    }

    /// The webhook Service's name.
    fn webhook_service(&self, manifest: &ManifestData) -> String {
        format!("{}-webhook", self.deployment_name(manifest))
    }

    /// What `run` does with `run`'s flags `args` and the operator's own flags `own`: telemetry,
    /// client, Runner, app, until a signal.
    ///
    /// # Errors
    ///
    /// Invalid flags, telemetry that cannot start, no client, an app that does not match its
    /// manifest, or the Runner failing.
    pub async fn run(&self, args: &OperatorArgs, own: &A) -> Result<(), OperatorError> {
        let manifest = self.manifest()?.clone();
        let guard = telemetry::init(args.telemetry_config(manifest.app_name.clone()))?;
        let result = self.run_app(manifest, args, own).await;
        if let Err(error) = &result {
            tracing::error!(error = %error_chain(error), "operator failed");
        }
        let flushed = guard.shutdown().await;
        result?;
        Ok(flushed?)
    }

    async fn run_app(
        &self,
        manifest: ManifestData,
        args: &OperatorArgs,
        own: &A,
    ) -> Result<(), OperatorError> {
        // Checked before anything starts, on an app built with a registry nothing serves.
        let mismatches = manifest_match::mismatches(
            &(self.app)(AppContext {
                manifest: manifest.clone(),
                metrics: MetricsRegistry::new(None)?,
                args: own,
                operator: args,
            })
            .map_err(|e| OperatorError::AppBuilder(error_chain(e.as_ref())))?
            .kinds,
            &manifest,
        );
        if !mismatches.is_empty() {
            return Err(OperatorError::KindMismatch {
                file: self.manifest_file.clone(),
                mismatches,
            });
        }
        webhooks::require_server(&manifest, args)?;
        let election = args.election_config(&manifest.app_name)?;
        let manifest_name = manifest.app_name.clone();
        let runner_config = args.runner_config()?;
        let runner = Runner::new(runner_config)?;
        let client = default_client_with_metrics(runner.metrics()).await?;
        let mut config = (self.app)(AppContext {
            manifest,
            metrics: runner.metrics().clone(),
            args: own,
            operator: args,
        })
        .map_err(|e| OperatorError::AppBuilder(error_chain(e.as_ref())))?
        .namespace(args.namespace.clone())
        .informers(runner.informers().clone())
        .metrics(runner.metrics().clone());
        // In-flight handler calls may run on for 90% of --shutdown-timeout, so the app has
        // returned cleanly before the Runner gives up on it.
        let grace = args
            .shutdown_timeout
            .saturating_sub(args.shutdown_timeout / 10);
        config.controller = config.controller.clone().shutdown_grace(grace);
        if let Some(instance) = &args.instance {
            config.controller = config.controller.clone().instance(instance.clone());
        }
        if let Some(threshold) = args.ready_requires_writes {
            config = config.ready_requires_writes(threshold);
        }
        // The elector outlives the app: it releases the Lease only after the handlers stopped.
        let elector_stop = CancellationToken::new();
        let elector = match election {
            Some(election) => {
                let metrics = runner
                    .metrics()
                    .set::<ElectionMetrics>()
                    .map_err(|e| OperatorError::Election(error_chain(&e)))?;
                let elector = LeaderElector::new(client.clone(), election)
                    .map_err(|e| OperatorError::Election(error_chain(&e)))?
                    .report_to(&metrics);
                config = config.leadership(elector.leadership());
                if args.leader_ready {
                    config = config.ready_only_when_leading();
                }
                Some(tokio::spawn(elector.run(elector_stop.clone())))
            }
            None => None,
        };
        // The ring outlives the app too: it deletes its Lease (handing the share over) only
        // after the handlers stopped.
        let ring = match args.sharding_config(&manifest_name)? {
            Some(sharding) => {
                let metrics = runner.metrics().set::<ShardMetrics>().map_err(|e| {
                    OperatorError::Sharding(format!("sharding metrics: {}", error_chain(&e)))
                })?;
                let ring = ShardRing::new(client.clone(), sharding)
                    .map_err(|e| OperatorError::Sharding(error_chain(&e)))?
                    .report_to(&metrics);
                config = config.sharding(ring.membership());
                Some(tokio::spawn(ring.run(elector_stop.clone())))
            }
            None => None,
        };
        let runner = runner.app(App::new(config, client)?);
        tracing::info!(
            metrics_addr = %args.metrics_addr,
            namespace = args.namespace.as_deref().unwrap_or("(all)"),
            leader_elect = args.leader_elect,
            shard = args.shard,
            "operator starting"
        );
        let ran = runner.run().await;
        elector_stop.cancel();
        if let Some(elector) = elector {
            let _ = elector.await;
        }
        if let Some(ring) = ring {
            let _ = ring.await;
        }
        ran?;
        tracing::info!("operator stopped");
        Ok(())
    }
}

/// `file: mismatch` for each mismatch, on one line.
fn mismatch_lines(file: &str, mismatches: &[KindMismatch]) -> String {
    let lines: Vec<String> = mismatches
        .iter()
        .map(|found| format!("{file}: {found}"))
        .collect();
    lines.join("; ")
}

/// The file name the binary was started as, for usage lines.
fn binary_name() -> Option<String> {
    let path = std::env::args_os().next()?;
    let name = std::path::Path::new(&path).file_name()?;
    Some(name.to_string_lossy().into_owned())
}

/// Whether the manifest declares a conversion webhook (a converting kind in several versions).
fn manifest_converts(manifest: &ManifestData) -> bool {
    manifest
        .kinds()
        .iter()
        .any(|kind| kind.conversion && kind.versions.len() > 1)
}

fn print(text: &str) -> Result<(), OperatorError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(OperatorError::Stdout)
}
