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
//!   (Secret `{name}-webhook-tls`, e.g. from cert-manager) and the webhook configurations; with
//!   `--monitoring`, the app's alerts (a PrometheusRule) and Grafana dashboard (a ConfigMap), and
//!   with `--scrape` a ServiceMonitor or PodMonitor ([`kubeapp_sdk::monitoring`]);
//! - `run`: logs and traces from [`OperatorArgs`](crate::cli::OperatorArgs) (flushed on exit), the client from the
//!   environment (in-cluster or kubeconfig), one [`Runner`](kubeapp_runner::Runner) serving
//!   `/metrics`, `/livez`, `/readyz` (and the webhooks), the app built with the Runner's shared informers and metrics
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
mod error;
mod monitoring;
mod parse;
mod run;
#[cfg(test)]
mod tests;
mod webhooks;

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;

use kube::CustomResourceExt;
use kubeapp_operator::{BoxError, MetricsRegistry};
use kubeapp_sdk::crd::CrdBuilder;
use kubeapp_sdk::deploy::{OperatorDeployment, WebhookServing};
use kubeapp_sdk::error::error_chain;
use kubeapp_sdk::manifest::{ManifestData, ManifestError, to_yaml_documents};
use kubeapp_sdk::rbac::{RbacBuilder, RoleScope};
use kubeapp_sdk::webhooks::admission_configurations;

use self::commands::{Command, CrdArgs, ManifestArgs, RbacArgs};
pub use self::context::{AppContext, CommandContext, CommandFuture, NoArgs, NoCommands};
use self::context::{AppFn, CommandFn};
use self::dry_run::{DryRunArgs, DryRunFn};
pub use self::error::OperatorError;
use self::parse::{Chosen, Invocation};
pub use self::webhooks::WebhookError;
use crate::config::AppConfig;

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
    pub(crate) async fn execute(&self, command: Command, own: &A) -> Result<(), OperatorError> {
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
    pub(crate) fn rbac_yaml(&self, args: &RbacArgs, own: &A) -> Result<String, OperatorError> {
        let manifest = self.manifest()?;
        if args.gate_users {
            let role = kubeapp_sdk::rbac::gate_users_role(manifest)?;
            return kubeapp_sdk::manifest::to_yaml_documents(&[role]).map_err(OperatorError::Yaml);
        }
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
    pub(crate) fn manifests_yaml(
        &self,
        args: &ManifestArgs,
        own: &A,
    ) -> Result<String, OperatorError> {
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
        let reviews_tokens = args.metrics_auth;
        let mut deployment = OperatorDeployment::new(manifest, image)
            .name(name)
            .namespace(args.namespace.clone())
            .replicas(args.replicas)
            .env_from_field("POD_NAME", "metadata.name")
            .rbac(move |builder| {
                let mut builder = app.rbac(builder);
                if leases {
                    builder = builder.owned::<k8s_openapi::api::coordination::v1::Lease>();
                }
                if reviews_tokens {
                    builder = builder.reviews_tokens();
                }
                builder
            });
        let mut run_args = vec!["run".to_string(), "--log-format".into(), "json".into()];
        if let Some(prefix) = &args.metrics_prefix {
            run_args.extend(["--metrics-prefix".to_string(), prefix.clone()]);
        }
        if args.metrics_auth {
            run_args.push("--metrics-auth".into());
        }
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
        if args.metrics_auth {
            docs.push(metrics_reader_role(
                &self.deployment_name(manifest),
                manifest,
            ));
        }
        docs.extend(configurations);
        docs.extend(monitoring::objects(
            manifest,
            &self.deployment_name(manifest),
            args,
        )?);
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

/// The ClusterRole a scraper of an operator run with `--metrics-auth` is bound to: `get` on
/// `/metrics` and `/debug/kubeapp` (non-resource URLs; a ClusterRole is the only kind that can
/// grant them).
fn metrics_reader_role(name: &str, manifest: &ManifestData) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": format!("{name}-metrics-reader"),
            "labels": {
                "app.kubernetes.io/name": manifest.app_name,
                "app.kubernetes.io/component": "operator",
            },
        },
        "rules": [{"nonResourceURLs": ["/metrics", "/debug/kubeapp"], "verbs": ["get"]}],
    })
}
