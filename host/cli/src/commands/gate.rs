//! `waft gate …` and `waft dlq …`: hold a lambda's tasks back, and bring
//! dead ones back.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use waft_core::TaskStatus;
use waft_services::FrontendApi;
use waft_store::{DeadSelector, GateState, TaskList};

use crate::commands::client::{ClientArgs, block_on, time};
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
    /// Give dead tasks a fresh attempt budget and run them again: the ids
    /// given (all must be dead, or none is redriven), or every dead task of
    /// a lambda.
    Redrive {
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
            DlqCommand::List { lambda, limit } => {
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
                } else {
                    for t in tasks {
                        println!(
                            "{}  {}  after {} attempts: {}",
                            t.id,
                            t.lambda,
                            t.attempt,
                            t.last_error.as_deref().unwrap_or("")
                        );
                    }
                }
            }
            DlqCommand::Redrive {
                ids,
                lambda,
                collection,
            } => {
                let selector = match lambda {
                    Some(lambda) => DeadSelector::Filter { lambda, collection },
                    None if !ids.is_empty() => DeadSelector::Ids(ids),
                    None => {
                        return Err(Failure::usage(
                            "name the dead tasks to redrive, or --lambda L",
                        ));
                    }
                };
                let redriven = frontend
                    .dead_redrive(selector)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", json!({ "redriven": redriven }));
                } else {
                    println!("{redriven} dead tasks redriven");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
