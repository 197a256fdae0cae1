//! The `waft` command line.
//!
//! Every subcommand parses and validates its arguments here, then calls the
//! libraries that do the work; nothing here is needed to use Waft as a
//! library. Errors a person can fix are printed as one `error:` line that
//! says what to change, with a non-zero exit code from [`exit`].

pub mod commands;
pub mod exit;
pub mod logging;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// What `waft --version` prints after the name: the release, then the
/// commit it was built from and that commit's date (`unknown` for a build
/// outside a git checkout, such as from a source tarball).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("WAFT_COMMIT"), ")");

/// Waft runs asynchronous tasks as sandboxed WebAssembly lambdas.
#[derive(Debug, Parser)]
#[command(name = "waft", version = VERSION)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one task of a lambda locally, without a server, and print the
    /// outcome, output and log.
    Invoke(commands::invoke::InvokeArgs),
    /// Run every role in one process: SQLite store, in-process queues,
    /// gRPC on a loopback port.
    Dev(commands::serve::DevArgs),
    /// Run one role of the distributed mode (Postgres and SQS).
    Serve(commands::serve::ServeArgs),
    /// Deploy and inspect lambdas.
    Lambda(commands::lambda::LambdaArgs),
    /// Schedule, inspect, cancel and wait for tasks.
    Task(commands::task::TaskArgs),
    /// Pause, resume or drop a lambda's tasks (or one collection's).
    Gate(commands::gate::GateArgs),
    /// Dead letters: list them, redrive them.
    Dlq(commands::gate::DlqArgs),
    /// Periodic tasks: add, list and remove cron schedules.
    Cron(commands::cron::CronArgs),
    /// API tokens: create, list, revoke (admin only).
    Token(commands::token::TokenArgs),
    /// A lambda's secrets: set (from stdin or a file), list names, remove.
    Secret(commands::secret::SecretArgs),
    /// Measure the runtime: per-task overhead of instantiate + call + drop.
    Bench(commands::bench::BenchArgs),
}

/// Parses the process's arguments and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The servers install theirs once their configuration says where
    // traces go (`logging`).
    if !matches!(cli.command, Command::Dev(_) | Command::Serve(_)) {
        logging::init(None);
    }
    let result = match cli.command {
        Command::Invoke(args) => commands::invoke::run(args),
        Command::Dev(args) => commands::serve::dev(args),
        Command::Serve(args) => commands::serve::serve(args),
        Command::Lambda(args) => commands::lambda::run(args),
        Command::Task(args) => commands::task::run(args),
        Command::Gate(args) => commands::gate::run(args),
        Command::Dlq(args) => commands::gate::run_dlq(args),
        Command::Cron(args) => commands::cron::run(args),
        Command::Token(args) => commands::token::run(args),
        Command::Secret(args) => commands::secret::run(args),
        Command::Bench(args) => commands::bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// The command-line reference (`docs/cli.md`): every command's full help,
/// generated from the same definitions that parse the arguments.
pub fn reference() -> String {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    let mut text = String::from(
        "# Command-line reference\n\n\
         Generated from the `waft` command definitions; a test fails when this file \
         and the code disagree. Regenerate it with \
         `WAFT_BLESS=1 cargo test -p waft-cli the_cli_reference_is_current`.\n",
    );
    fn walk(command: &mut clap::Command, path: &str, text: &mut String) {
        // The same text whatever the environment of whoever generates it.
        *command = std::mem::take(command).mut_args(|arg| arg.hide_env_values(true));
        let help = command.render_long_help().to_string();
        text.push_str(&format!(
            "\n## `{path}`\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
        for sub in command.get_subcommands_mut() {
            if sub.get_name() == "help" {
                continue;
            }
            let path = format!("{path} {}", sub.get_name());
            walk(sub, &path, text);
        }
    }
    walk(&mut command, "waft", &mut text);
    text
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    /// `docs/cli.md` is the generated reference, byte for byte.
    #[test]
    fn the_cli_reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md");
        let generated = super::reference();
        if std::env::var_os("WAFT_BLESS").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let written = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            written == generated,
            "docs/cli.md is out of date: run WAFT_BLESS=1 cargo test -p waft-cli the_cli_reference_is_current"
        );
    }

    /// `waft --version`: the release, then the commit and its date, or
    /// `unknown`.
    #[test]
    fn the_version_names_the_release_and_the_commit() {
        let error = super::Cli::try_parse_from(["waft", "--version"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::DisplayVersion);
        let printed = error.to_string();
        assert!(printed.starts_with("waft 0.1.0 ("), "{printed:?}");
        let commit = printed
            .trim_end()
            .strip_prefix("waft 0.1.0 (")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{printed:?}"));
        let well_formed = match commit.split_once(' ') {
            None => commit == "unknown",
            Some((hash, date)) => {
                hash.len() >= 7
                    && hash.bytes().all(|b| b.is_ascii_hexdigit())
                    && date.len() == 10
                    && date.split('-').map(str::len).eq([4, 2, 2])
            }
        };
        assert!(well_formed, "{printed:?}");
    }

    /// Clap checks a subcommand's definition only when it is used; this
    /// checks every one (duplicate names, bad defaults) at once.
    #[test]
    fn every_command_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
