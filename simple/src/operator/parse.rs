//! The command line of an [`Operator`](super::Operator) with the operator's own flags and
//! subcommands flattened in, and which command it chose.

use clap::{Args, CommandFactory as _, FromArgMatches as _, Subcommand};

use super::commands::{Command, OperatorCommand};

/// A command line parsed: the operator's own flags and the command to run.
#[derive(Debug)]
pub(crate) struct Invocation<A, S> {
    /// The operator's own flags.
    pub(crate) args: A,
    /// The command.
    pub(crate) command: Chosen<S>,
}

/// Which command the command line chose.
#[derive(Debug)]
pub(crate) enum Chosen<S> {
    /// One every operator has (`crd`, `rbac`, `manifests`, `run`, `dry-run`).
    Builtin(Command),
    /// One of the operator's own.
    Own {
        /// Its name on the command line.
        name: String,
        /// The subcommand and its arguments.
        command: S,
    },
}

/// The whole command line: the common subcommands, the operator's own flags (global: given
/// before or after a subcommand) and its own subcommands.
pub(crate) fn command<A: Args, S: Subcommand>(about: String) -> clap::Command {
    let mut cli = A::augment_args(OperatorCommand::command());
    for id in own_flags::<A>() {
        cli = cli.mut_arg(id, |arg| arg.global(true));
    }
    // After the flags: a derived `Args` sets its doc comment as the command's about.
    S::augment_subcommands(cli).about(about).long_about(None)
}

/// The ids of the operator's own flags (not its positional arguments, which cannot be global).
fn own_flags<A: Args>() -> Vec<clap::Id> {
    A::augment_args(clap::Command::new("own"))
        .get_arguments()
        .filter(|arg| !arg.is_positional())
        .map(|arg| arg.get_id().clone())
        .collect()
}

/// Where the operator's own flags or subcommands take a name of the common ones (clap would
/// panic at the clash, or one would hide the other): one message naming each.
pub(crate) fn clashes<A: Args, S: Subcommand>() -> Vec<String> {
    let common = OperatorCommand::command();
    let mut found = Vec::new();
    for sub in common.get_subcommands() {
        if S::has_subcommand(sub.get_name()) {
            found.push(format!(
                "the operator's own subcommand `{}` has the name of a common one",
                sub.get_name()
            ));
        }
    }
    let own = A::augment_args(clap::Command::new("own"));
    for arg in own.get_arguments().filter(|arg| !arg.is_positional()) {
        let Some(long) = arg.get_long() else {
            continue;
        };
        let taken = common.get_subcommands().find(|sub| {
            sub.get_arguments()
                .any(|theirs| theirs.get_long() == Some(long) || theirs.get_id() == arg.get_id())
        });
        if let Some(sub) = taken {
            found.push(format!(
                "the operator's own flag --{long} is a flag of `{}`",
                sub.get_name()
            ));
        }
    }
    found
}

/// Parses `argv` (the binary's name first) with `cli` (from [`command`]).
///
/// # Errors
///
/// clap's usage error (exit code 2), or its `--help`/`--version` "error" (exit code 0).
pub(crate) fn parse<A: Args, S: Subcommand>(
    mut cli: clap::Command,
    argv: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<Invocation<A, S>, clap::Error> {
    let matches = cli.try_get_matches_from_mut(argv)?;
    let args = A::from_arg_matches(&matches).map_err(|error| error.format(&mut cli))?;
    let command = match matches.subcommand_name() {
        Some(name) if S::has_subcommand(name) => {
            S::from_arg_matches(&matches).map(|command| Chosen::Own {
                name: name.to_string(),
                command,
            })
        }
        _ => Command::from_arg_matches(&matches).map(Chosen::Builtin),
    }
    .map_err(|error| error.format(&mut cli))?;
    Ok(Invocation { args, command })
}
