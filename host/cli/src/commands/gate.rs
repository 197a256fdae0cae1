//! `waft gate …` and `waft dlq …`: hold a lambda's tasks back, and inspect
//! dead ones and bring them back.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use waft_client::FrontendClient;
use waft_core::TaskStatus;
use waft_services::ClientApi;
use waft_store::{Attempt, DeadSelector, GateState, Task, TaskList};

use crate::commands::client::{ClientArgs, block_on, show_bytes, time};
use crate::commands::task_view::task_json;
use crate::exit::Failure;

/// Arguments of `waft gate`.
#[derive(Debug, Args)]
pub struct GateArgs {
    #[command(subcommand)]
    pub command: GateCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Which tasks a gate holds.
#[derive(Debug, Args)]
pub struct GateTarget {
    pub lambda: String,
    /// Only this collection of the lambda.
    #[arg(long)]
    pub collection: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Hold tasks in the store; running ones finish.
    Pause(GateTarget),
    /// Release held tasks, in their due order.
    Resume(GateTarget),
    /// End tasks as `dropped` when they come due.
    Drop(GateTarget),
    /// Every gate that is not open.
    List,
}

/// Runs `waft gate …`.
pub fn run(args: GateArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    block_on(async move {
        let frontend = client.frontend()?;
        let (target, state) = match args.command {
            GateCommand::Pause(target) => (target, GateState::Paused),
            GateCommand::Resume(target) => (target, GateState::Open),
            GateCommand::Drop(target) => (target, GateState::Dropped),
            GateCommand::List => {
                let gates = frontend.gate_list().await.map_err(|e| client.failure(e))?;
                if client.json {
                    let gates: Vec<_> = gates
                        .iter()
                        .map(|g| {
                            json!({
                                "lambda": g.lambda,
                                "collection": g.collection,
                                "state": g.state.as_str(),
                                "updated_at": time(g.updated_at),
                            })
                        })
                        .collect();
                    println!("{}", serde_json::Value::Array(gates));
                } else {
                    for gate in gates {
                        println!(
                            "{:<24} {:<16} {:<8} since {}",
                            gate.lambda,
                            gate.collection.as_deref().unwrap_or("(all)"),
                            gate.state.as_str(),
                            time(gate.updated_at)
                        );
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
        };
        let released = frontend
            .gate_set(&target.lambda, target.collection.as_deref(), state)
            .await
            .map_err(|e| client.failure(e))?;
        if client.json {
            println!(
                "{}",
                json!({ "state": state.as_str(), "released": released })
            );
        } else if state == GateState::Open {
            println!("{} open; {released} held tasks released", target.lambda);
        } else {
            println!("{} {}", target.lambda, state.as_str());
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Arguments of `waft dlq`.
#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub command: DlqCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Dead tasks, oldest first.
    List {
        #[arg(long)]
        lambda: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// A task and every execution it had: how each ended, its error and
    /// its log.
    Show { id: String },
    /// Give dead tasks a fresh attempt budget and run them again: the ids
    /// given (all must be dead, or none is redriven), or every dead task of
    /// a lambda. A durable task replays its journal first (the host calls
    /// its executions made), on the version that wrote it, unless
    /// `--fresh` or `--version` discards the journal.
    Redrive {
        ids: Vec<String>,
        #[arg(long, conflicts_with = "ids")]
        lambda: Option<String>,
        #[arg(long, requires = "lambda")]
        collection: Option<String>,
        /// Run them on this version of the lambda (pinned), not the
        /// current one. Discards their journals: a journal replays only on
        /// the version that wrote it.
        #[arg(long)]
        version: Option<u32>,
        /// Discard their journals: every host call runs live again, as in
        /// a first attempt.
        #[arg(long)]
        fresh: bool,
    },
    /// Delete dead tasks for good, with their attempts, logs and journals:
    /// the ids given (all must be dead, or none is deleted), or every dead
    /// task of a lambda (and collection). Dead letters are never pruned by
    /// retention; this is how they go.
    Purge {
        ids: Vec<String>,
        #[arg(long, conflicts_with = "ids")]
        lambda: Option<String>,
        #[arg(long, requires = "lambda")]
        collection: Option<String>,
    },
}

/// Runs `waft dlq …`.
pub fn run_dlq(args: DlqArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    block_on(async move {
        let frontend = client.frontend()?;
        match args.command {
            DlqCommand::List { lambda, limit } => dlq_list(&frontend, &client, lambda, limit).await,
            DlqCommand::Show { id } => dlq_show(&frontend, &client, &id).await,
            DlqCommand::Redrive {
                ids,
                lambda,
                collection,
                version,
                fresh,
            } => {
                let selector = dead_selector(ids, lambda, collection, "redrive")?;
                dlq_redrive(&frontend, &client, selector, version, fresh).await
            }
            DlqCommand::Purge {
                ids,
                lambda,
                collection,
            } => {
                let selector = dead_selector(ids, lambda, collection, "purge")?;
                dlq_purge(&frontend, &client, selector).await
            }
        }?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The dead tasks named on the command line: ids, or `--lambda`.
fn dead_selector(
    ids: Vec<String>,
    lambda: Option<String>,
    collection: Option<String>,
    verb: &str,
) -> Result<DeadSelector, Failure> {
    match lambda {
        Some(lambda) => Ok(DeadSelector::Filter { lambda, collection }),
        None if !ids.is_empty() => Ok(DeadSelector::Ids(ids)),
        None => Err(Failure::usage(format!(
            "name the dead tasks to {verb}, or --lambda L"
        ))),
    }
}

/// `waft dlq list`: dead tasks, one line each.
async fn dlq_list(
    frontend: &FrontendClient,
    client: &ClientArgs,
    lambda: Option<String>,
    limit: u32,
) -> Result<(), Failure> {
    let tasks = frontend
        .task_list(TaskList {
            lambda,
            status: Some(TaskStatus::Dead),
            limit,
            ..TaskList::default()
        })
        .await
        .map_err(|e| client.failure(e))?;
    if client.json {
        let tasks: Vec<_> = tasks
            .iter()
            .map(|t| {
                json!({
                    "id": t.id, "lambda": t.lambda, "collection": t.collection,
                    "attempt": t.attempt, "last_error": t.last_error,
                    "finished_at": t.finished_at.map(time),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(tasks));
        return Ok(());
    }
    for t in tasks {
        println!(
            "{}  {}  after {} attempts: {}",
            t.id,
            t.lambda,
            t.attempt,
            t.last_error.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// `waft dlq show`: a task and every execution it had.
async fn dlq_show(frontend: &FrontendClient, client: &ClientArgs, id: &str) -> Result<(), Failure> {
    let task = frontend.task_get(id).await.map_err(|e| client.failure(e))?;
    let attempts = frontend
        .task_attempts(id)
        .await
        .map_err(|e| client.failure(e))?;
    if client.json {
        let attempts: Vec<_> = attempts.iter().map(attempt_json).collect();
        println!(
            "{}",
            json!({ "task": task_json(&task), "attempts": attempts })
        );
    } else {
        print_attempts(&task, &attempts);
    }
    Ok(())
}

/// `waft dlq redrive`: how many dead tasks run again.
async fn dlq_redrive(
    frontend: &FrontendClient,
    client: &ClientArgs,
    selector: DeadSelector,
    version: Option<u32>,
    fresh: bool,
) -> Result<(), Failure> {
    let redriven = frontend
        .dead_redrive(selector, version, fresh)
        .await
        .map_err(|e| client.failure(e))?;
    if client.json {
        println!("{}", json!({ "redriven": redriven }));
    } else {
        println!("{redriven} dead tasks redriven");
    }
    Ok(())
}

/// `waft dlq purge`: how many dead tasks were deleted.
async fn dlq_purge(
    frontend: &FrontendClient,
    client: &ClientArgs,
    selector: DeadSelector,
) -> Result<(), Failure> {
    let purged = frontend
        .dead_purge(selector)
        .await
        .map_err(|e| client.failure(e))?;
    if client.json {
        println!("{}", json!({ "purged": purged }));
    } else {
        println!("{purged} dead tasks deleted");
    }
    Ok(())
}

pub(crate) fn attempt_json(a: &Attempt) -> serde_json::Value {
    json!({
        "attempt": a.attempt,
        "lease_token": a.lease_token,
        "outcome": a.outcome.as_str(),
        "error": a.error,
        "log": a.log,
        "started_at": a.started_at.map(time),
        "ended_at": time(a.ended_at),
        "replayed": a.replayed,
    })
}

fn print_attempts(task: &Task, attempts: &[Attempt]) {
    println!("{}  {}  {}", task.id, task.lambda, task.status);
    println!("  payload   {}", show_bytes(&task.payload));
    if let Some(error) = &task.last_error {
        println!("  error     {error}");
    }
    for a in attempts {
        let took = a
            .started_at
            .map(|at| format!(" after {} ms", a.ended_at - at))
            .unwrap_or_default();
        let replayed = match a.replayed {
            0 => String::new(),
            n => format!(", {n} journal entries replayed"),
        };
        println!(
            "attempt {} ({}) at {}{took}{replayed}: {}",
            a.attempt,
            a.outcome.as_str(),
            time(a.ended_at),
            a.error.as_deref().unwrap_or("")
        );
        for line in a.log.as_deref().unwrap_or("").lines() {
            println!("    {line}");
        }
    }
}
