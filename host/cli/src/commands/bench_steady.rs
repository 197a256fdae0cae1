//! `waft bench steady FILE --rate N`: a long run at a steady load, to see
//! whether the store stays the same size once retention keeps up.
//!
//! Deploys the lambda with its own retention (`--retain`, success kept
//! 5 minutes by default), schedules `--rate` tasks a second for
//! `--minutes`, and every `--report` prints what the store holds of it (by
//! the Frontend's `CountTasks`: kept, live, ended), what was scheduled and
//! ended since the last line, and, against an in-process `waft dev`, the
//! sizes of `waft.db` and its write-ahead log. With `--server` it loads
//! whatever installation listens there; the store's sizes are then the
//! operator's to read (`scripts/bench-steady` reads Postgres's).
//!
//! Past the first retention period the pruner deletes as much as is
//! scheduled: what the store keeps, and the file, should stay flat. The
//! last lines say whether they did.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use waft_client::FrontendClient;
use waft_core::LambdaConfig;
use waft_core::retention::{End, Keep, Retention};
use waft_services::{ClientApi, TaskRequest};
use waft_store::TaskCount;

use crate::commands::bench_pipeline::{deploy, failed, runtime, target};
use crate::commands::invoke::read_wasm;
use crate::exit::Failure;

#[derive(Debug, Args)]
pub struct SteadyBenchArgs {
    /// The lambda to run (e.g. the `hello` sample).
    pub file: PathBuf,
    /// An installation to load; an in-process `waft dev` when absent.
    #[arg(long, value_name = "ADDR")]
    pub server: Option<String>,
    /// Tasks scheduled a second.
    #[arg(long)]
    pub rate: f64,
    /// How long to schedule, in minutes.
    #[arg(long, default_value_t = 60)]
    pub minutes: u64,
    /// The lambda's retention, END=DURATION as `waft lambda deploy` takes
    /// it (repeatable; default success=5m).
    #[arg(long = "retain", value_name = "END=DURATION")]
    pub retain: Vec<String>,
    /// Seconds between two report lines.
    #[arg(long, default_value_t = 60)]
    pub report: u64,
    /// Tasks per schedule request.
    #[arg(long, default_value_t = 50)]
    pub batch: usize,
    /// Tasks one executor runs at once.
    #[arg(long, default_value_t = 256)]
    pub concurrency: u32,
    /// The payload every task carries.
    #[arg(long, default_value = r#"{"name":"steady"}"#)]
    pub payload: String,
}

/// One report line's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    minute: f64,
    kept: u64,
    live: u64,
    file: u64,
    wal: u64,
}

/// Runs the benchmark.
pub fn run(args: SteadyBenchArgs) -> Result<std::process::ExitCode, Failure> {
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        return Err(Failure::usage("--rate must be a number of tasks above 0"));
    }
    let retention = retention(&args.retain)?;
    let wasm = read_wasm(&args.file)?;
    runtime()?.block_on(async move {
        let (data, address, node) = target(args.server.as_deref(), args.concurrency).await?;
        let config = LambdaConfig {
            concurrency: args.concurrency,
            retention: retention.clone(),
            ..LambdaConfig::default()
        };
        let (frontend, lambda) = deploy(&address, wasm, config).await?;
        let kept_for = retention
            .get(End::Success)
            .map_or("forever".to_owned(), |keep| keep.to_string());
        println!(
            "waft bench steady: {} tasks/s of {} for {} min, successes kept {kept_for}, against {}",
            args.rate,
            args.file.display(),
            args.minutes,
            args.server
                .as_deref()
                .unwrap_or("an in-process waft dev (SQLite, durable)")
        );
        let files = data.is_some();
        println!(
            "minute\tscheduled/s\tended/s\tkept\tlive{}",
            if files { "\twaft.db MiB\tWAL MiB" } else { "" }
        );
        let scheduled = Arc::new(AtomicU64::new(0));
        let until = Instant::now() + Duration::from_secs(args.minutes * 60);
        let sender = tokio::spawn(schedule_steadily(
            frontend.clone(),
            lambda.clone(),
            args.rate,
            args.batch.max(1),
            args.payload.clone().into_bytes(),
            until,
            scheduled.clone(),
        ));
        let size = |name: &str| {
            data.as_ref()
                .and_then(|dir| std::fs::metadata(dir.path().join(name)).ok())
                .map_or(0, |m| m.len())
        };
        let started = Instant::now();
        let every = Duration::from_secs(args.report.max(1));
        let mut samples = Vec::new();
        let (mut last_scheduled, mut last_ended) = (0, 0);
        let mut next = started + every;
        while Instant::now() < until {
            tokio::time::sleep_until(next.into()).await;
            next += every;
            let (kept, live) = counts(&frontend, &lambda).await?;
            let sent = scheduled.load(Ordering::Relaxed);
            // Every task sent that is not live has ended, pruned or not.
            let ended = sent.saturating_sub(live);
            let sample = Sample {
                minute: started.elapsed().as_secs_f64() / 60.0,
                kept,
                live,
                file: size("waft.db"),
                wal: size("waft.db-wal"),
            };
            let per_second = |n: u64| n as f64 / every.as_secs_f64();
            let sizes = match files {
                true => format!("\t{:.1}\t{:.1}", mib(sample.file), mib(sample.wal)),
                false => String::new(),
            };
            println!(
                "{:.1}\t{:.0}\t{:.0}\t{}\t{}{sizes}",
                sample.minute,
                per_second(sent - last_scheduled),
                per_second(ended.saturating_sub(last_ended)),
                sample.kept,
                sample.live,
            );
            (last_scheduled, last_ended) = (sent, ended);
            samples.push(sample);
        }
        sender
            .await
            .map_err(|e| Failure::internal(e.to_string()))??;
        summarize(&samples, &retention, files);
        if let Some(node) = node {
            node.shutdown().await;
        }
        Ok(std::process::ExitCode::SUCCESS)
    })
}

/// The `--retain` items, success=5m when none is given.
fn retention(items: &[String]) -> Result<Retention, Failure> {
    if items.is_empty() {
        let mut retention = Retention::default();
        retention.set(End::Success, Keep::For(Duration::from_secs(300)));
        return Ok(retention);
    }
    Retention::parse_each(items.iter().map(String::as_str)).map_err(Failure::usage)
}

/// Schedules `rate` tasks a second, `batch` at a time, until `until`;
/// behind schedule, it catches up as fast as the Frontend takes them.
async fn schedule_steadily(
    frontend: Arc<FrontendClient>,
    lambda: String,
    rate: f64,
    batch: usize,
    payload: Vec<u8>,
    until: Instant,
    scheduled: Arc<AtomicU64>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < until {
        let due = started + Duration::from_secs_f64(sent as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let tasks = (0..batch)
            .map(|_| TaskRequest {
                lambda: lambda.clone(),
                payload: payload.clone(),
                ..TaskRequest::default()
            })
            .collect();
        frontend
            .task_schedule_many(tasks)
            .await
            .map_err(failed("schedule"))?;
        sent += batch as u64;
        scheduled.store(sent, Ordering::Relaxed);
    }
    Ok(())
}

/// The lambda's tasks in the store: all kept, and those not ended.
async fn counts(frontend: &FrontendClient, lambda: &str) -> Result<(u64, u64), Failure> {
    let counts = frontend
        .task_count(TaskCount {
            lambda: lambda.to_owned(),
            collection: None,
            parent_id: None,
            ..TaskCount::default()
        })
        .await
        .map_err(failed("count"))?;
    let kept: u64 = counts.iter().map(|c| c.count).sum();
    let live: u64 = counts
        .iter()
        .filter(|c| !c.status.is_terminal())
        .map(|c| c.count)
        .sum();
    Ok((kept, live))
}

/// After the first retention period (and one report more), the least and
/// most the store kept, and the file's size.
fn summarize(samples: &[Sample], retention: &Retention, files: bool) {
    let settle = retention.get(End::Success).and_then(|keep| match keep {
        Keep::For(duration) => Some(duration.as_secs_f64() / 60.0),
        Keep::Forever => None,
    });
    let Some(settle) = settle else {
        println!("successes are kept forever: nothing settles");
        return;
    };
    let steady: Vec<&Sample> = samples.iter().filter(|s| s.minute > settle + 1.0).collect();
    if steady.is_empty() {
        println!("the run ended before the first retention period had passed");
        return;
    }
    let range = |value: fn(&Sample) -> u64| {
        let values = steady.iter().map(|s| value(s));
        (values.clone().min().unwrap_or(0), values.max().unwrap_or(0))
    };
    let (least, most) = range(|s| s.kept);
    let (small, large) = range(|s| s.file + s.wal);
    let sizes = match files {
        true => format!(
            "; waft.db with its WAL {:.1}–{:.1} MiB",
            mib(small),
            mib(large)
        ),
        false => String::new(),
    };
    println!(
        "after minute {:.0}, over {} reports: kept {least}–{most} tasks{sizes}",
        settle + 1.0,
        steady.len(),
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
