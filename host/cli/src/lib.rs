//! The `waft` command line.
//!
//! Every subcommand parses and validates its arguments here, then calls the
//! libraries that do the work; nothing here is needed to use Waft as a
//! library. Errors a person can fix are printed as one `error:` line that
//! says what to change, with a non-zero exit code from [`exit`].

pub mod commands;
pub mod exit;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Waft runs asynchronous tasks as sandboxed WebAssembly lambdas.
#[derive(Debug, Parser)]
#[command(name = "waft", version)]
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
    /// Measure the runtime: per-task overhead of instantiate + call + drop.
    Bench(commands::bench::BenchArgs),
}

/// Parses the process's arguments and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WAFT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Invoke(args) => commands::invoke::run(args),
        Command::Dev(args) => commands::serve::dev(args),
        Command::Serve(args) => commands::serve::serve(args),
        Command::Lambda(args) => commands::lambda::run(args),
        Command::Task(args) => commands::task::run(args),
        Command::Gate(args) => commands::gate::run(args),
        Command::Dlq(args) => commands::gate::run_dlq(args),
        Command::Cron(args) => commands::cron::run(args),
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Clap checks a subcommand's definition only when it is used; this
    /// checks every one (duplicate names, bad defaults) at once.
    #[test]
    fn every_command_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
