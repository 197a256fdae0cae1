//! `waft task …`: schedule tasks and follow them.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;
use waft_core::{TaskStatus, TraceContext};
use waft_services::{ClientApi, RunAt, TaskRequest};
use waft_store::{Continuation, Task, TaskList};

use waft_client::FrontendClient;

use crate::commands::client::{ClientArgs, PayloadArgs, block_on, parse_time, time};
use crate::commands::invoke::parse_duration_arg;
use crate::commands::task_view::{descendants, print_task, task_json, waiting_for};
use crate::commands::{journal, journal_file};
use crate::exit::{self, Failure};

/// Arguments of `waft task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub command: TaskCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Schedule a task; prints its id.
    Schedule(ScheduleArgs),
    /// Show a task: status, attempts, times, output, last error, log.
    Get { id: String },
    /// List tasks, oldest first.
    List(ListArgs),
    /// Cancel a task that has not ended.
    Cancel { id: String },
    /// Send a task a signal NAME (an approval, another system's answer):
    /// kept until a wait of the task's lambda for a signal of that name
    /// takes it; a task suspended in such a wait resumes at once. Refused
    /// for a task that has ended.
    Signal {
        id: String,
        name: String,
        #[command(flatten)]
        payload: PayloadArgs,
    },
    /// Print what the task's last execution logged.
    Logs { id: String },
    /// Show a task and its descendants (child tasks), with statuses.
    Tree { id: String },
    /// Show a task's journal: every host call its executions made (clocks,
    /// randomness, configuration, outbound HTTP, children), in order, with
    /// the attempt that made it live and those that replayed it, when, and
    /// how long it took. Answers are not shown; `--json` prints one
    /// document with the task and every entry with its answer (bytes in
    /// base64, secrets masked): what `waft invoke FILE --replay J` replays.
    Journal { id: String },
    /// Wait until a task ends; the exit code says how it ended (0 success,
    /// 20 fatal failure, 21 dead, 22 dropped, 23 cancelled, 7 timed out).
    Wait {
        id: String,
        /// Give up after this long.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
        timeout: Option<Duration>,
    },
}

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// The lambda to run.
    pub lambda: String,
    #[command(flatten)]
    pub payload: PayloadArgs,
    /// Run at this time (RFC 3339, or Unix milliseconds).
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "delay")]
    pub at: Option<i64>,
    /// Run after this delay (`30s`, `5m`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub delay: Option<Duration>,
    /// Priority level (higher runs first); the lambda's default when absent.
    #[arg(long)]
    pub priority: Option<u8>,
    /// Collection (`default` when absent).
    #[arg(long)]
    pub collection: Option<String>,
    /// The task's key within its lambda (a customer, an account, a
    /// document): the lambda's limits per key count by it.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Collapse with the key's other debounced tasks: the first waits
    /// until none has come for this long (at most ten windows after it
    /// came) and runs with the last one's payload and options; every one
    /// prints its id.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, requires = "key",
          conflicts_with_all = ["at", "delay", "idempotency_key"])]
    pub debounce: Option<Duration>,
    /// Schedule at most one task per idempotency key and lambda; repeats
    /// return it.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Run this version of the lambda, not the one current when it starts.
    #[arg(long, value_name = "VERSION")]
    pub pin_version: Option<u32>,
    /// On success, run a task of this lambda with the output as payload.
    #[arg(long, value_name = "LAMBDA")]
    pub then: Option<String>,
    /// The continuation's collection.
    #[arg(long, value_name = "C", requires = "then")]
    pub then_collection: Option<String>,
    /// The continuation's priority.
    #[arg(long, value_name = "P", requires = "then")]
    pub then_priority: Option<u8>,
    /// The continuation's key (a key is not passed on by itself).
    #[arg(long, value_name = "KEY", requires = "then")]
    pub then_key: Option<String>,
    /// The W3C trace context the task's spans join
    /// (`00-<trace id>-<span id>-<flags>`), e.g. a CI job's or a script's.
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// Vendor data of that trace (W3C `tracestate`); only with a
    /// traceparent.
    #[arg(long, value_name = "TRACESTATE", env = "TRACESTATE")]
    pub tracestate: Option<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub lambda: Option<String>,
    #[arg(long)]
    pub collection: Option<String>,
    /// Tasks with this key.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    #[arg(long, value_parser = parse_status, help = status_help())]
    pub status: Option<TaskStatus>,
    /// Children of this task.
    #[arg(long, value_name = "ID")]
    pub parent: Option<String>,
    /// Tasks past this id in the list's order (the last of the previous
    /// page).
    #[arg(long, value_name = "ID")]
    pub after: Option<String>,
    /// Newest first.
    #[arg(long)]
    pub newest_first: bool,
    /// At most this many (up to 1000).
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}

/// Every status, as `--status` takes them: `new, enqueued, … or cancelled`.
fn status_help() -> String {
    let names: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn parse_status(text: &str) -> Result<TaskStatus, String> {
    TaskStatus::ALL
        .into_iter()
        .find(|s| s.as_str() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown status {text:?}; one of {}", names.join(", "))
        })
}

/// Runs `waft task …`.
pub fn run(args: TaskArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    block_on(async move {
        let frontend = client.frontend()?;
        let call = Call {
            frontend: &frontend,
            client: &client,
        };
        match args.command {
            TaskCommand::Schedule(schedule) => call.schedule(schedule).await?,
            TaskCommand::Get { id } => call.get(id).await?,
            TaskCommand::List(list) => call.list(list).await?,
            TaskCommand::Cancel { id } => call.cancel(&id).await?,
            TaskCommand::Signal { id, name, payload } => {
                call.signal(&id, &name, payload.read()?).await?;
            }
            TaskCommand::Logs { id } => call.logs(&id).await?,
            TaskCommand::Tree { id } => call.tree(&id).await?,
            TaskCommand::Journal { id } => call.journal(&id).await?,
            TaskCommand::Wait { id, timeout } => return call.wait(&id, timeout).await,
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// One subcommand's call: the Frontend, and how to print and fail.
struct Call<'a> {
    frontend: &'a FrontendClient,
    client: &'a ClientArgs,
}

impl Call<'_> {
    /// `waft task schedule`: prints the new task's id.
    async fn schedule(&self, schedule: ScheduleArgs) -> Result<(), Failure> {
        let request = schedule_request(schedule)?;
        let inserted = self
            .frontend
            .task_schedule_many(vec![request])
            .await
            .map_err(|e| self.client.failure(e))?;
        let inserted = inserted
            .into_iter()
            .next()
            .ok_or_else(|| Failure::internal("the server answered no task"))?;
        if self.client.json {
            println!(
                "{}",
                json!({ "id": inserted.id, "created": inserted.created })
            );
        } else {
            println!("{}", inserted.id);
        }
        Ok(())
    }

    /// `waft task get`: the task and its children's ids.
    async fn get(&self, id: String) -> Result<(), Failure> {
        let task = self.task(&id).await?;
        let children = self
            .frontend
            .task_list(TaskList {
                parent_id: Some(id),
                limit: 1000,
                ..TaskList::default()
            })
            .await
            .map_err(|e| self.client.failure(e))?;
        if self.client.json {
            let mut shown = task_json(&task);
            shown["children"] = children.iter().map(|c| json!(c.id)).collect();
            println!("{shown}");
        } else {
            print_task(&task, false);
            for child in &children {
                println!(
                    "{:<13}{} {} {}",
                    "child", child.id, child.lambda, child.status
                );
            }
        }
        Ok(())
    }

    /// `waft task list`: one line per task.
    async fn list(&self, list: ListArgs) -> Result<(), Failure> {
        let filter = TaskList {
            lambda: list.lambda,
            collection: list.collection,
            key: list.key,
            status: list.status,
            parent_id: list.parent,
            newest_first: list.newest_first,
            after: list.after,
            limit: list.limit,
            ..TaskList::default()
        };
        let tasks = self
            .frontend
            .task_list(filter)
            .await
            .map_err(|e| self.client.failure(e))?;
        if self.client.json {
            let tasks: Vec<_> = tasks.iter().map(task_json).collect();
            println!("{}", serde_json::Value::Array(tasks));
            return Ok(());
        }
        for task in &tasks {
            let waiting = waiting_for(task).map_or(String::new(), |w| format!("  waiting for {w}"));
            let key = task
                .key
                .as_deref()
                .map_or(String::new(), |key| format!("  key {key:?}"));
            println!(
                "{}  {:<17}  {}  attempt {}/{}  created {}{key}{waiting}",
                task.id,
                task.status.as_str(),
                task.lambda,
                task.attempt,
                task.max_attempts,
                time(task.created_at)
            );
        }
        Ok(())
    }

    /// `waft task cancel`: the task as cancelling left it.
    async fn cancel(&self, id: &str) -> Result<(), Failure> {
        let task = self
            .frontend
            .task_cancel(id)
            .await
            .map_err(|e| self.client.failure(e))?;
        print_task(&task, self.client.json);
        Ok(())
    }

    /// `waft task signal`: says whether the signal woke the task.
    async fn signal(&self, id: &str, name: &str, payload: Vec<u8>) -> Result<(), Failure> {
        let sent = self
            .frontend
            .task_signal(id, name, payload)
            .await
            .map_err(|e| self.client.failure(e))?;
        if self.client.json {
            println!(
                "{}",
                json!({ "id": id, "name": name, "seq": sent.seq, "woke": sent.woke })
            );
        } else if sent.woke {
            println!(
                "signal {name:?} sent to task {id} (signal {}): it resumes",
                sent.seq
            );
        } else {
            println!(
                "signal {name:?} sent to task {id} (signal {}): kept until the task waits for it",
                sent.seq
            );
        }
        Ok(())
    }

    /// `waft task logs`: the task's log as it stands.
    async fn logs(&self, id: &str) -> Result<(), Failure> {
        let task = self.task(id).await?;
        if self.client.json {
            println!("{}", json!({ "id": task.id, "log": task.log }));
        } else {
            print!("{}", task.log.unwrap_or_default());
        }
        Ok(())
    }

    /// `waft task tree`: the task and its descendants.
    async fn tree(&self, id: &str) -> Result<(), Failure> {
        let root = self.task(id).await?;
        let tree = descendants(self.frontend, root)
            .await
            .map_err(|e| self.client.failure(e))?;
        if self.client.json {
            println!("{}", tree.to_json());
        } else {
            tree.print(0);
        }
        Ok(())
    }

    /// `waft task journal`: the task's journal, with how each entry was
    /// used (from the attempts' `replayed`).
    async fn journal(&self, id: &str) -> Result<(), Failure> {
        if self.client.json {
            // Everything a local replay needs: the task, and each entry
            // with its answer.
            let (task, entries, attempts) = tokio::try_join!(
                self.frontend.task_get(id),
                self.frontend.task_journal(id, true),
                self.frontend.task_attempts(id)
            )
            .map_err(|e| self.client.failure(e))?;
            println!("{}", journal_file::export(&task, &entries, &attempts));
            return Ok(());
        }
        let (entries, attempts) = tokio::try_join!(
            self.frontend.task_journal(id, false),
            self.frontend.task_attempts(id)
        )
        .map_err(|e| self.client.failure(e))?;
        if entries.is_empty() {
            println!("task {id} has no journal: its executions made no host call to record");
        } else {
            print!("{}", journal::table(&entries, &attempts));
        }
        Ok(())
    }

    /// `waft task wait`: polls, backing off to 500ms, until the task ends;
    /// exits with the code of how it ended.
    async fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<ExitCode, Failure> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut pause = Duration::from_millis(20);
        loop {
            let task = self.task(id).await?;
            if let Some(code) = ended_code(task.status) {
                print_task(&task, self.client.json);
                return Ok(ExitCode::from(code));
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() + pause > d) {
                return Err(Failure {
                    code: exit::TIMED_OUT,
                    message: format!(
                        "task {id} is still {} after {:?}",
                        task.status.as_str(),
                        timeout.unwrap_or_default()
                    ),
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    async fn task(&self, id: &str) -> Result<Task, Failure> {
        self.frontend
            .task_get(id)
            .await
            .map_err(|e| self.client.failure(e))
    }
}

/// The request `waft task schedule`'s arguments describe.
fn schedule_request(schedule: ScheduleArgs) -> Result<TaskRequest, Failure> {
    let payload = schedule.payload.read()?;
    let run_at = match (schedule.at, schedule.delay) {
        (Some(at), _) => RunAt::At(at),
        (None, Some(delay)) => RunAt::After(delay),
        (None, None) => RunAt::Now,
    };
    let trace = schedule
        .traceparent
        .map(|parent| TraceContext::parse(&parent, schedule.tracestate.as_deref()))
        .transpose()
        .map_err(|e| Failure::usage(e.to_string()))?;
    Ok(TaskRequest {
        trace,
        lambda: schedule.lambda,
        payload,
        collection: schedule.collection,
        priority: schedule.priority,
        run_at,
        idempotency_key: schedule.idempotency_key,
        key: schedule.key,
        debounce: schedule.debounce,
        parent_id: None,
        version: schedule.pin_version,
        parent_lease: None,
        id: None,
        then: schedule.then.map(|lambda| Continuation {
            lambda,
            collection: schedule.then_collection,
            priority: schedule.then_priority,
            key: schedule.then_key,
        }),
    })
}

/// The exit code of `waft task wait` for each state that ends a task (a
/// test holds it to the state table's `ENDED`).
const EXIT_CODES: [(TaskStatus, u8); 5] = [
    (TaskStatus::Success, exit::SUCCESS),
    (TaskStatus::FatalFailure, exit::TASK_FATAL),
    (TaskStatus::Dead, exit::TASK_DEAD),
    (TaskStatus::Dropped, exit::TASK_DROPPED),
    (TaskStatus::Cancelled, exit::TASK_CANCELLED),
];

/// The exit code of `waft task wait` for a task in `status`; `None` while
/// it has not ended.
fn ended_code(status: TaskStatus) -> Option<u8> {
    EXIT_CODES
        .iter()
        .find(|(ended, _)| *ended == status)
        .map(|(_, code)| *code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state that ends a task has its exit code, and no other state
    /// has one.
    #[test]
    fn every_ended_state_has_an_exit_code() {
        for status in TaskStatus::ALL {
            assert_eq!(
                ended_code(status).is_some(),
                waft_core::machine::ENDED.contains(status),
                "{status}"
            );
        }
    }

    /// `docs/cli.md` names every status `--status` takes, and no other,
    /// in the order of `TaskStatus::ALL`.
    #[test]
    fn the_reference_lists_exactly_the_task_statuses() {
        let reference = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md"));
        let mut lines = reference.lines();
        lines
            .find(|line| line.trim() == "--status <STATUS>")
            .expect("docs/cli.md documents waft task list --status");
        let listed: Vec<&str> = lines
            .next()
            .expect("the statuses under --status")
            .trim()
            .split([',', ' '])
            .filter(|word| !word.is_empty() && *word != "or")
            .collect();
        let statuses: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(listed, statuses);
    }
}
