//! What an [`Operator`](super::Operator) hands the code of the operator it runs: the context the
//! app is built in ([`AppContext`]) and the context of one of the operator's own subcommands
//! ([`CommandContext`]), with the operator's own flags (`A`, default [`NoArgs`]) and subcommands
//! (`S`, default [`NoCommands`]) as clap parsed them.

use std::future::Future;
use std::pin::Pin;

use clap::{ArgMatches, Args, FromArgMatches, Subcommand};
use kubeapp_operator::{BoxError, MetricsRegistry};
use kubeapp_sdk::manifest::ManifestData;

use crate::cli::OperatorArgs;
use crate::config::AppConfig;

/// What the app builder of [`Operator::app_with_context`](super::Operator::app_with_context) is
/// given, in every command that builds the app (`run`, and `rbac` and `manifests`, which read its
/// kinds).
#[derive(Debug)]
#[non_exhaustive]
pub struct AppContext<'a, A> {
    /// The operator's manifest.
    pub manifest: ManifestData,
    /// Where every metric set goes: for `run` the Runner's registry (served on `/metrics`, under
    /// `--metrics-prefix`), e.g. `context.metrics.set::<PhaseMetrics>()?`; for the commands that
    /// do not run, a registry of their own that nothing serves.
    pub metrics: MetricsRegistry,
    /// The operator's own flags ([`Operator::args`](super::Operator::args)).
    pub args: &'a A,
    /// The flags of `run`; for the commands that do not run, their defaults (as `run` with no
    /// flags and none of their environment variables).
    pub operator: &'a OperatorArgs,
}

/// What a handler of the operator's own subcommands
/// ([`Operator::commands`](super::Operator::commands)) is given.
#[derive(Debug)]
#[non_exhaustive]
pub struct CommandContext<A> {
    /// The operator's manifest.
    pub manifest: ManifestData,
    /// The operator's own flags.
    pub args: A,
}

/// Builds the app in its context.
pub(crate) type AppFn<A> =
    dyn for<'a> Fn(AppContext<'a, A>) -> Result<AppConfig, BoxError> + Send + Sync;

/// What a handler of the operator's own subcommands returns.
pub type CommandFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// Runs one of the operator's own subcommands.
pub(crate) type CommandFn<A, S> = dyn Fn(S, CommandContext<A>) -> CommandFuture + Send + Sync;

/// The operator's own flags when it has none (the default of [`Operator`](super::Operator)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoArgs;

impl FromArgMatches for NoArgs {
    fn from_arg_matches(_: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self)
    }

    fn update_from_arg_matches(&mut self, _: &ArgMatches) -> Result<(), clap::Error> {
        Ok(())
    }
}

impl Args for NoArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

/// The operator's own subcommands when it has none (the default of
/// [`Operator`](super::Operator)): there is no value of this type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoCommands {}

impl FromArgMatches for NoCommands {
    fn from_arg_matches(_: &ArgMatches) -> Result<Self, clap::Error> {
        Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))
    }

    fn update_from_arg_matches(&mut self, _: &ArgMatches) -> Result<(), clap::Error> {
        match *self {}
    }
}

impl Subcommand for NoCommands {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn has_subcommand(_: &str) -> bool {
        false
    }
}

/// Runs the app builder of an operator without flags of its own as one with flags `B`
/// (what [`Operator::args`](super::Operator::args) does with an app given before it).
pub(crate) fn with_args<B: 'static>(app: Box<AppFn<NoArgs>>) -> Box<AppFn<B>> {
    Box::new(move |context: AppContext<'_, B>| {
        app(AppContext {
            manifest: context.manifest,
            metrics: context.metrics,
            args: &NoArgs,
            operator: context.operator,
        })
    })
}

/// As [`with_args`], for a handler of the operator's own subcommands.
pub(crate) fn command_with_args<B: 'static, S: 'static>(
    handler: Box<CommandFn<NoArgs, S>>,
) -> Box<CommandFn<B, S>> {
    Box::new(move |command, context: CommandContext<B>| {
        handler(
            command,
            CommandContext {
                manifest: context.manifest,
                args: NoArgs,
            },
        )
    })
}

/// The flags of `run` with their defaults, for the commands that build the app without running
/// it (environment variables are not read: `rbac` and `manifests` print the same whatever the
/// shell has set).
pub(crate) fn default_operator_args() -> Result<OperatorArgs, clap::Error> {
    let command = OperatorArgs::augment_args(clap::Command::new("run"))
        .mut_args(|arg| arg.env(None))
        .no_binary_name(true);
    OperatorArgs::from_arg_matches(&command.try_get_matches_from(std::iter::empty::<&str>())?)
}
