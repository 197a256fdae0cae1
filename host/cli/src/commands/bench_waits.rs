//! `waft bench waits FILE`: durable waits at scale.
//!
//! Starts `waft dev` in-process (durable SQLite, the executor as
//! configured: `WAFT_*` settings apply, `--max-tasks` slots), deploys the
//! lambda (the `durable` sample, which sleeps `sleep_ms` of its payload)
//! and measures two things:
//!
//! - **suspended**: `--suspended` tasks that sleep `--sleep` (an hour by
//!   default), scheduled in stages up to each of `--checkpoints`; after each
//!   stage, once every task of it is `suspended`, the process's resident
//!   memory (`/proc/self`, the whole process: node and benchmark), the
//!   store's file sizes (`waft.db` and its write-ahead log) and how fast the
//!   stage was suspended. What it answers: whether the executor holds
//!   anything per suspended task, and what a waiting task costs the store.
//!   With `--held`, the control: the same tasks held by a paused gate,
//!   never run.
//! - **due**: `--due` tasks whose sleeps all end at one wall-clock instant
//!   T, `--lead` ahead: each batch is scheduled with `sleep_ms` = T − now
//!   and the next one only once it is suspended (so a task's wait starts
//!   close to when it was sent; the store's due instants, read before T,
//!   say how close). After T, for each task: end − T, end − its own due
//!   instant and claim − T (the resumed execution's claim), by percentile,
//!   and the share ended within 1 s of T; with counts by status every
//!   `--sample-ms` while they resume (where they wait).
//!
//! Nothing is mocked: the real store, consumer, controller, executor and
//! runtime of `waft dev`.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use waft_client::FrontendClient;
use waft_core::{LambdaConfig, TaskStatus};
use waft_services::{ClientApi, TaskRequest};
use waft_store::GateState;

use crate::commands::bench_pipeline::{deploy, failed, list_all, runtime, start_dev};
use crate::commands::bench_running::resident_kib;
use crate::commands::invoke::read_wasm;
use crate::commands::lambda::GrantArgs;
use crate::exit::Failure;

#[derive(Debug, Args)]
pub struct WaitsBenchArgs {
    /// The lambda to run: the `durable` sample, or one that sleeps
    /// `sleep_ms` of its JSON payload and then succeeds.
    pub file: std::path::PathBuf,
    /// Tasks left suspended in a long sleep (0: skip that part).
    #[arg(long, default_value_t = 100_000)]
    pub suspended: usize,
    /// Suspended tasks at which to measure memory and the store, in
    /// ascending order (those above `--suspended` are skipped; the last
    /// stage is always `--suspended`).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000")]
    pub checkpoints: Vec<usize>,
    /// A control for the suspended part: the same tasks held in the store
    /// by a paused gate on their collection, never run (what the store and
    /// the rest of the node cost them without the executor).
    #[arg(long)]
    pub held: bool,
    /// How long the suspended tasks sleep.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub sleep: Duration,
    /// Tasks whose sleeps end at one instant (0: skip that part). They run
    /// after the suspended ones, on the same node (those still waiting).
    #[arg(long, default_value_t = 10_000)]
    pub due: usize,
    /// How far ahead of the start of the due part their common instant is:
    /// every one of them must be suspended before it.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub lead: Duration,
    /// Tasks per schedule request of the suspended part.
    #[arg(long, default_value_t = 250)]
    pub batch: usize,
    /// Tasks per schedule request of the due part (the smaller, the closer
    /// their due instants: a batch's last task starts its wait later than
    /// its first).
    #[arg(long, default_value_t = 100)]
    pub due_batch: usize,
    /// The executor's slots (`max_tasks`) and the lambda's concurrency.
    #[arg(long, default_value_t = 256)]
    pub max_tasks: usize,
    /// How often counts by status are read while the due tasks resume.
    #[arg(long, default_value_t = 250)]
    pub sample_ms: u64,
    /// Once the suspended tasks wait, time a deploy's check of the same
    /// component against all of them (`waft lambda deploy --check`): every
    /// journal read and replayed.
    #[arg(long)]
    pub check: bool,
    /// Keep the node's data directory (its `waft.db`) when done, and say
    /// where it is: to look into the store after (e.g. its tables' sizes).
    #[arg(long)]
    pub keep: bool,
    /// Grants the lambda is deployed with: the `durable` sample imports
    /// outbound HTTP, so it needs one (`--allow-outbound http://127.0.0.1:9`:
    /// with no `posts` in its payload it calls nothing).
    #[command(flatten)]
    pub grants: GrantArgs,
}

/// Runs the benchmark.
pub fn run(args: WaitsBenchArgs) -> Result<std::process::ExitCode, Failure> {
    let wasm = read_wasm(&args.file)?;
    runtime()?.block_on(async move {
        let (data, node) = start_dev(|e| e.max_tasks = args.max_tasks).await?;
        let config = LambdaConfig {
            concurrency: u32::try_from(args.max_tasks).unwrap_or(u32::MAX),
            grants: args.grants.grants()?,
            ..LambdaConfig::default()
        };
        let checked = args.check.then(|| (wasm.clone(), config.clone()));
        let (frontend, lambda) = deploy(&node.addr.to_string(), wasm, config).await?;
        let executor = &node_config_line(args.max_tasks)?;
        println!(
            "waft bench waits: {} of an in-process waft dev (SQLite, durable); {executor}; {}",
            args.file.display(),
            if cfg!(debug_assertions) {
                "DEBUG BUILD"
            } else {
                "release build"
            },
        );
        let bench = Bench {
            frontend: &frontend,
            lambda: &lambda,
            data: data.path(),
            args: &args,
        };
        if args.suspended > 0 {
            bench.suspended().await?;
        }
        if let Some((wasm, config)) = checked {
            check(&frontend, &lambda, wasm, config).await?;
        }
        if args.due > 0 {
            bench.due().await?;
        }
        node.shutdown().await;
        // Closed, the store has moved its write-ahead log into the file.
        let (db, wal) = bench.store_sizes();
        let tasks = args.suspended + args.due;
        println!(
            "\nafter shutdown: waft.db {:.2} MiB (WAL {:.2} MiB), {:.0} bytes per task of the {tasks} \
             in the store",
            mib(db),
            mib(wal),
            (db + wal) as f64 / tasks.max(1) as f64
        );
        if args.keep {
            println!("data directory kept: {}", data.keep().display());
        }
        Ok(std::process::ExitCode::SUCCESS)
    })
}

/// Times a deploy's check of `wasm` against the lambda's live tasks.
async fn check(
    frontend: &FrontendClient,
    lambda: &str,
    wasm: Vec<u8>,
    config: LambdaConfig,
) -> Result<(), Failure> {
    let started = Instant::now();
    let report = frontend
        .lambda_check(lambda, wasm, config, &|_| {})
        .await
        .map_err(|e| Failure::internal(format!("the check failed: {e}")))?;
    let took = started.elapsed();
    println!(
        "\ncheck of the same component: {} tasks with a journal replayed in {:.2} s \
         ({:.0} tasks/s), {} depart",
        report.checked,
        took.as_secs_f64(),
        report.checked as f64 / took.as_secs_f64().max(1e-9),
        report.departed()
    );
    Ok(())
}

/// The settings the node runs with that bear on the figures, as `waft dev`
/// reads them (`WAFT_*` included).
fn node_config_line(max_tasks: usize) -> Result<String, Failure> {
    let config = waft_node::Config::load(None, std::env::vars())
        .map_err(|e| Failure::usage(e.to_string()))?;
    Ok(format!(
        "executor max_tasks {max_tasks}, suspend_after {:?}; lambda concurrency {max_tasks}; \
         consumer batch {}, poll_interval {:?}",
        config.executor.suspend_after, config.consumer.batch, config.consumer.poll_interval
    ))
}

struct Bench<'a> {
    frontend: &'a FrontendClient,
    lambda: &'a str,
    data: &'a Path,
    args: &'a WaitsBenchArgs,
}

impl Bench<'_> {
    /// Tasks suspended in stages; memory and store at each.
    async fn suspended(&self) -> Result<(), Failure> {
        let args = self.args;
        let mut stages: Vec<usize> = args
            .checkpoints
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < args.suspended)
            .collect();
        stages.push(args.suspended);
        stages.dedup();
        let payload = serde_json::json!({ "sleep_ms": args.sleep.as_millis() as u64 }).to_string();
        if args.held {
            self.frontend
                .gate_set(self.lambda, Some("sleeping"), GateState::Paused)
                .await
                .map_err(failed("pause"))?;
        }
        println!(
            "\nsuspended: {} tasks sleeping {:?} each, in stages to {stages:?}{}",
            args.suspended,
            args.sleep,
            if args.held {
                "; HELD by a paused gate, never run (the control)"
            } else {
                ""
            }
        );
        println!(
            "{:>9} {:>10} {:>12} {:>9} {:>10} {:>13} {:>15} {:>9}",
            "suspended",
            "RSS MiB",
            "waft.db MiB",
            "WAL MiB",
            "running",
            "stage tasks/s",
            "B/task(db+WAL)",
            "took s"
        );
        let (db0, wal0) = self.store_sizes();
        println!(
            "{:>9} {:>10.1} {:>12.2} {:>9.2} {:>10} {:>13} {:>15} {:>9}",
            0,
            resident_kib() as f64 / 1024.0,
            mib(db0),
            mib(wal0),
            0,
            "-",
            "-",
            "-"
        );
        let (mut done, mut previous) = (0usize, db0 + wal0);
        for stage in stages {
            let count = stage - done;
            let started = Instant::now();
            self.schedule(count, args.batch, |_| payload.clone(), "sleeping")
                .await?;
            if args.held {
                self.until_stored("sleeping", stage as u64).await?;
            } else {
                self.until_suspended("sleeping", stage as u64, None).await?;
            }
            let took = started.elapsed();
            let running = self.running("sleeping").await?;
            let (db, wal) = self.store_sizes();
            println!(
                "{:>9} {:>10.1} {:>12.2} {:>9.2} {:>10} {:>13.0} {:>15.0} {:>9.1}",
                stage,
                resident_kib() as f64 / 1024.0,
                mib(db),
                mib(wal),
                running,
                count as f64 / took.as_secs_f64(),
                (db + wal).saturating_sub(previous) as f64 / count as f64,
                took.as_secs_f64(),
            );
            done = stage;
            previous = db + wal;
        }
        let (db, wal) = self.store_sizes();
        println!(
            "waft.db and its WAL grew {:.0} bytes per suspended task over all {}",
            (db + wal).saturating_sub(db0 + wal0) as f64 / args.suspended as f64,
            args.suspended
        );
        Ok(())
    }

    /// Tasks whose sleeps end at one instant: how late each ends.
    async fn due(&self) -> Result<(), Failure> {
        let args = self.args;
        let collection = "due";
        let t = wall_clock() + i64::try_from(args.lead.as_millis()).unwrap_or(i64::MAX);
        println!(
            "\ndue: {} tasks whose sleeps end at one instant T, {:?} ahead; batches of {} \
             (each scheduled once the one before is suspended)",
            args.due, args.lead, args.due_batch
        );
        let started = Instant::now();
        let mut sent = 0usize;
        while sent < args.due {
            let size = args.due_batch.max(1).min(args.due - sent);
            self.schedule(
                size,
                size,
                |_| {
                    let left = (t - wall_clock()).max(0);
                    serde_json::json!({ "sleep_ms": left }).to_string()
                },
                collection,
            )
            .await?;
            sent += size;
            self.until_suspended(collection, sent as u64, Some(t))
                .await?;
        }
        let suspended_in = started.elapsed();
        let before_t = t - wall_clock();
        // Each task's own due instant, as the store holds it.
        let waiting = list_all(self.frontend, self.lambda, collection).await?;
        let due: HashMap<String, i64> = waiting
            .iter()
            .filter_map(|task| Some((task.id.clone(), task.next_trigger_at?)))
            .collect();
        let (first, last) = (
            due.values().copied().min().unwrap_or(t),
            due.values().copied().max().unwrap_or(t),
        );
        println!(
            "all {} suspended in {:.1} s ({:.0} tasks/s), {before_t} ms before T; their due \
             instants in the store: T{:+} ms to T{:+} ms",
            args.due,
            suspended_in.as_secs_f64(),
            args.due as f64 / suspended_in.as_secs_f64(),
            first - t,
            last - t,
        );
        if wall_clock() >= t {
            return Err(Failure::internal(
                "T passed before every task was suspended: raise --lead",
            ));
        }

        // While they resume: counts by status.
        tokio::time::sleep(Duration::from_millis(u64::try_from(before_t).unwrap_or(0))).await;
        let mut timeline = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let at = wall_clock() - t;
            let counts = self.counts(collection).await?;
            let of = |f: &dyn Fn(TaskStatus) -> bool| -> u64 {
                counts.iter().filter(|(s, _)| f(*s)).map(|(_, n)| n).sum()
            };
            let ended = of(&|s| s.is_terminal());
            if let Some((status, _)) = counts
                .iter()
                .find(|(s, n)| s.is_terminal() && *s != TaskStatus::Success && *n > 0)
            {
                return Err(Failure::internal(format!(
                    "a due task ended {}",
                    status.as_str()
                )));
            }
            timeline.push((
                at,
                of(&|s| s == TaskStatus::Suspended),
                of(&|s| matches!(s, TaskStatus::New | TaskStatus::Enqueued)),
                of(&|s| matches!(s, TaskStatus::Claimed | TaskStatus::Processing)),
                ended,
            ));
            if ended >= args.due as u64 {
                break;
            }
            if Instant::now() > deadline {
                return Err(Failure::internal(format!(
                    "only {ended} of {} due tasks ended by T+{at} ms",
                    args.due
                )));
            }
            tokio::time::sleep(Duration::from_millis(args.sample_ms)).await;
        }
        println!(
            "{:>9} {:>10} {:>10} {:>10} {:>10}",
            "at ms", "suspended", "enqueued", "running", "ended"
        );
        for (at, suspended, enqueued, running, ended) in &timeline {
            println!("T{at:>+8} {suspended:>10} {enqueued:>10} {running:>10} {ended:>10}");
        }

        let tasks = list_all(self.frontend, self.lambda, collection).await?;
        let ends: Vec<i64> = tasks.iter().filter_map(|task| task.finished_at).collect();
        let late = |span: Vec<i64>| percentiles(span);
        println!(
            "end − T:              {}",
            late(ends.iter().map(|end| end - t).collect())
        );
        println!(
            "end − own due:        {}",
            late(
                tasks
                    .iter()
                    .filter_map(|task| Some(task.finished_at? - due.get(&task.id)?))
                    .collect()
            )
        );
        println!(
            "claim − T (resumed):  {}",
            late(
                tasks
                    .iter()
                    .filter_map(|task| Some(task.claimed_at? - t))
                    .collect()
            )
        );
        let within = ends.iter().filter(|&&end| end - t <= 1000).count();
        let (first_end, last_end) = (
            ends.iter().copied().min().unwrap_or(t),
            ends.iter().copied().max().unwrap_or(t),
        );
        println!(
            "ended within 1 s of T: {within} of {} ({:.1}%); first to last end {} ms ({:.0} tasks/s)",
            args.due,
            within as f64 * 100.0 / args.due as f64,
            last_end - first_end,
            ends.len() as f64 * 1000.0 / (last_end - first_end).max(1) as f64,
        );
        let again = tasks
            .iter()
            .filter(|task| task.status != TaskStatus::Success || task.attempt != 1)
            .count();
        println!("due tasks not ended in success on their first attempt: {again}");
        Ok(())
    }

    /// Schedules `count` tasks in requests of `batch`, the payload of each
    /// made when its request is.
    async fn schedule(
        &self,
        count: usize,
        batch: usize,
        payload: impl Fn(usize) -> String,
        collection: &str,
    ) -> Result<(), Failure> {
        let mut sent = 0;
        while sent < count {
            let size = batch.max(1).min(count - sent);
            let tasks = (sent..sent + size)
                .map(|i| TaskRequest {
                    lambda: self.lambda.to_owned(),
                    payload: payload(i).into_bytes(),
                    collection: Some(collection.to_owned()),
                    ..TaskRequest::default()
                })
                .collect();
            self.frontend
                .task_schedule_many(tasks)
                .await
                .map_err(failed("schedule"))?;
            sent += size;
        }
        Ok(())
    }

    /// Waits until `count` tasks of the collection are suspended; fails if
    /// one ends, or (with `before`) if that instant passes first.
    async fn until_suspended(
        &self,
        collection: &str,
        count: u64,
        before: Option<i64>,
    ) -> Result<(), Failure> {
        loop {
            let counts = self.counts(collection).await?;
            if let Some((status, _)) = counts.iter().find(|(s, n)| s.is_terminal() && *n > 0) {
                return Err(Failure::internal(format!(
                    "a sleeping task ended {} before its wait was over",
                    status.as_str()
                )));
            }
            let suspended: u64 = counts
                .iter()
                .filter(|(s, _)| *s == TaskStatus::Suspended)
                .map(|(_, n)| n)
                .sum();
            if suspended >= count {
                return Ok(());
            }
            if before.is_some_and(|t| wall_clock() >= t) {
                return Err(Failure::internal(format!(
                    "T passed with {suspended} of {count} tasks suspended: raise --lead"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `count` tasks of the collection are in the store, ended
    /// or not.
    async fn until_stored(&self, collection: &str, count: u64) -> Result<(), Failure> {
        while self
            .counts(collection)
            .await?
            .iter()
            .map(|(_, n)| n)
            .sum::<u64>()
            < count
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn running(&self, collection: &str) -> Result<u64, Failure> {
        Ok(self
            .counts(collection)
            .await?
            .iter()
            .filter(|(s, _)| matches!(s, TaskStatus::Claimed | TaskStatus::Processing))
            .map(|(_, n)| n)
            .sum())
    }

    async fn counts(&self, collection: &str) -> Result<Vec<(TaskStatus, u64)>, Failure> {
        super::bench_running::count(self.frontend, self.lambda, collection).await
    }

    /// The sizes of `waft.db` and its write-ahead log, in bytes.
    fn store_sizes(&self) -> (u64, u64) {
        let size = |name: &str| {
            std::fs::metadata(self.data.join(name))
                .map(|m| m.len())
                .unwrap_or(0)
        };
        (size("waft.db"), size("waft.db-wal"))
    }
}

fn percentiles(mut spans: Vec<i64>) -> String {
    if spans.is_empty() {
        return "none".into();
    }
    spans.sort_unstable();
    let at = |q: f64| spans[((spans.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {} ms, p95 {} ms, p99 {} ms, max {} ms ({} tasks)",
        at(0.5),
        at(0.95),
        at(0.99),
        at(1.0),
        spans.len()
    )
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// This machine's clock in Unix ms, as the store's timestamps read.
fn wall_clock() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}
