//! `waft cron …`: periodic tasks, one per occurrence of a cron expression.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use waft_services::{ClientApi, CronRequest};
use waft_store::{Cron, Millis};

use crate::commands::client::{ClientArgs, PayloadArgs, block_on, json_bytes, time};
use crate::exit::Failure;

/// Arguments of `waft cron`.
#[derive(Debug, Args)]
pub struct CronArgs {
    #[command(subcommand)]
    pub command: CronCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Run LAMBDA at every occurrence of SCHEDULE: five cron fields
    /// (`0 3 * * *`: minute, hour, day of month, month, day of week) or six
    /// with seconds first.
    Add(AddArgs),
    /// Every periodic schedule, with its next occurrence.
    List,
    /// Stop a periodic schedule; tasks it already created stay.
    Remove { id: String },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    pub lambda: String,
    pub schedule: String,
    /// The IANA time zone the schedule is read in (`Europe/Paris`).
    #[arg(long, value_name = "TZ", default_value = waft_core::cron::DEFAULT_TIMEZONE)]
    pub timezone: String,
    #[command(flatten)]
    pub payload: PayloadArgs,
    /// Collection of the tasks (`default` when absent).
    #[arg(long)]
    pub collection: Option<String>,
    /// Priority of the tasks; the lambda's default when absent.
    #[arg(long)]
    pub priority: Option<u8>,
    /// The key of the tasks (see `waft task schedule --key`).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// After downtime, run every missed occurrence instead of only the
    /// most recent one.
    #[arg(long)]
    pub catch_up: bool,
}

/// Runs `waft cron …`.
pub fn run(args: CronArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    block_on(async move {
        let frontend = client.frontend()?;
        match args.command {
            CronCommand::Add(add) => {
                let payload = add.payload.read()?;
                let schedule = frontend
                    .cron_create(CronRequest {
                        lambda: add.lambda,
                        cron: add.schedule,
                        timezone: Some(add.timezone),
                        payload,
                        collection: add.collection,
                        key: add.key,
                        priority: add.priority,
                        catch_up: add.catch_up,
                    })
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", cron_json(&schedule));
                } else {
                    println!("{}  first at {}", schedule.id, next(schedule.next_at));
                }
            }
            CronCommand::List => {
                let schedules = frontend.cron_list().await.map_err(|e| client.failure(e))?;
                if client.json {
                    let all: Vec<_> = schedules.iter().map(cron_json).collect();
                    println!("{}", serde_json::Value::Array(all));
                } else {
                    for s in schedules {
                        println!(
                            "{}  {:<20} {:<20} {:<16} next {}{}",
                            s.id,
                            s.lambda,
                            s.cron,
                            s.timezone,
                            next(s.next_at),
                            if s.catch_up { "  (catch up)" } else { "" }
                        );
                    }
                }
            }
            CronCommand::Remove { id } => {
                frontend
                    .cron_delete(&id)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", json!({ "removed": id }));
                } else {
                    println!("{id} removed");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn next(at: Millis) -> String {
    if at == Millis::MAX {
        "never".into()
    } else {
        time(at)
    }
}

fn cron_json(s: &Cron) -> serde_json::Value {
    json!({
        "id": s.id,
        "lambda": s.lambda,
        "schedule": s.cron,
        "timezone": s.timezone,
        "payload": json_bytes(&s.payload),
        "collection": s.collection,
        "key": s.key,
        "priority": s.priority,
        "catch_up": s.catch_up,
        "next_at": (s.next_at != Millis::MAX).then(|| time(s.next_at)),
        "created_at": time(s.created_at),
    })
}
