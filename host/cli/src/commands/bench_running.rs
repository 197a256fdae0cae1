//! `waft bench running FILE`: many long tasks at once on one executor.
//!
//! Starts `waft dev` in-process with one executor of `--tasks` slots,
//! deploys the lambda (the `sleepy` sample: steps of a sleep and a
//! heartbeat) with that concurrency, schedules `--tasks` tasks of `--steps`
//! steps of `--step-ms` each, and samples every second until they have all
//! ended: how many run (from `CountTasks`), the HSC's heartbeat calls and
//! beats (its metrics), and the process's CPU time and resident memory
//! (`/proc/self`). What it answers: whether one executor holds them all at
//! once, at what cost, and whether any missed its heartbeat timeout (a task
//! that did would have run again: every one must end in success on its
//! first attempt).

use std::time::{Duration, Instant};

use clap::Args;
use waft_client::FrontendClient;
use waft_core::{LambdaConfig, TaskStatus};
use waft_services::ClientApi;
use waft_store::TaskCount;

use crate::commands::bench_pipeline::{deploy, failed, list_all, runtime, schedule, start_dev};
use crate::commands::invoke::read_wasm;
use crate::exit::Failure;

#[derive(Debug, Args)]
pub struct RunningBenchArgs {
    /// The lambda to run: the `sleepy` sample, or one that takes its
    /// payload (`{"steps": N, "step_ms": MS}`).
    pub file: std::path::PathBuf,
    /// Tasks running at once (the executor's slots and the lambda's
    /// concurrency).
    #[arg(long, default_value_t = 10_000)]
    pub tasks: usize,
    /// Steps of each task, a heartbeat after each.
    #[arg(long, default_value_t = 30)]
    pub steps: u32,
    /// Milliseconds of each step.
    #[arg(long, default_value_t = 1_000)]
    pub step_ms: u64,
}

/// One sample of the process and the HSC.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    running: u64,
    cpu: Duration,
    rss_kib: u64,
    calls: u64,
    beats: u64,
}

/// Runs the benchmark.
pub fn run(args: RunningBenchArgs) -> Result<std::process::ExitCode, Failure> {
    let wasm = read_wasm(&args.file)?;
    runtime()?.block_on(async move {
        // Tasks held running, as the benchmark means them: none suspended
        // in its steps' sleeps.
        let (_data, node) = start_dev(|e| {
            e.max_tasks = args.tasks;
            e.suspend_after = Duration::ZERO;
        })
        .await?;
        let mut config = LambdaConfig {
            concurrency: u32::try_from(args.tasks).unwrap_or(u32::MAX),
            ..LambdaConfig::default()
        };
        let runs_for = Duration::from_millis(args.step_ms.saturating_mul(u64::from(args.steps)));
        config.limits.timeout = runs_for + Duration::from_secs(60);
        let (frontend, lambda) = deploy(&node.addr.to_string(), wasm, config).await?;
        println!(
            "waft bench running: {} tasks of {} steps of {} ms ({runs_for:?} each) on one executor",
            args.tasks, args.steps, args.step_ms
        );
        let payload =
            serde_json::json!({ "steps": args.steps, "step_ms": args.step_ms }).to_string();
        let started = Instant::now();
        schedule(&frontend, &lambda, "running", args.tasks, 500, 4, None, payload.as_bytes(), 0)
            .await?;
        let ticks = clock_ticks();
        let mut samples = vec![sample(&frontend, &lambda, ticks).await?];
        let deadline = started + runs_for * 3 + Duration::from_secs(120);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = sample(&frontend, &lambda, ticks).await?;
            samples.push(now);
            let ended = ended(&frontend, &lambda).await?;
            if ended >= args.tasks as u64 {
                break;
            }
            if Instant::now() > deadline {
                return Err(Failure::internal(format!(
                    "only {ended} of {} tasks ended in {:?}",
                    args.tasks,
                    started.elapsed()
                )));
            }
        }
        report(&samples, args.tasks as u64);
        let tasks = list_all(&frontend, &lambda, "running").await?;
        let again = tasks
            .iter()
            .filter(|t| t.status != TaskStatus::Success || t.attempt != 1)
            .count();
        println!(
            "tasks that did not succeed on their first attempt (a missed heartbeat timeout): {again}"
        );
        node.shutdown().await;
        if again > 0 {
            let first = tasks
                .iter()
                .find(|t| t.status != TaskStatus::Success || t.attempt != 1);
            return Err(Failure::internal(format!(
                "{again} tasks ran more than once or failed, e.g. {first:?}"
            )));
        }
        Ok(std::process::ExitCode::SUCCESS)
    })
}

/// Prints what the samples show: the peak of running tasks, and over the
/// seconds when at least 95% of them ran, HSC calls and beats per second and
/// the CPU the process used; the peak resident memory.
fn report(samples: &[Sample], tasks: u64) {
    let peak = samples.iter().map(|s| s.running).max().unwrap_or(0);
    let peak_rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    println!("peak running at once: {peak} of {tasks}");
    let full: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.running * 100 >= tasks * 95)
        .collect();
    if let (Some(first), Some(last)) = (full.first(), full.last())
        && last.at > first.at
    {
        let seconds = (last.at - first.at).as_secs_f64();
        println!(
            "while ≥ 95% ran ({seconds:.0} s): {:.1} HSC heartbeat calls/s carrying {:.0} beats/s; \
             CPU {:.0}% of one core",
            (last.calls - first.calls) as f64 / seconds,
            (last.beats - first.beats) as f64 / seconds,
            (last.cpu - first.cpu).as_secs_f64() / seconds * 100.0,
        );
    } else {
        println!("fewer than 95% of the tasks ever ran at once");
    }
    println!("peak resident memory: {:.0} MiB", peak_rss as f64 / 1024.0);
}

async fn sample(frontend: &FrontendClient, lambda: &str, ticks: f64) -> Result<Sample, Failure> {
    let counts = count(frontend, lambda, "running").await?;
    let running = counts
        .iter()
        .filter(|(status, _)| matches!(status, TaskStatus::Claimed | TaskStatus::Processing))
        .map(|(_, n)| n)
        .sum();
    let metrics = waft_services::metrics::metrics();
    Ok(Sample {
        at: Instant::now(),
        running,
        cpu: process_cpu(ticks),
        rss_kib: resident_kib(),
        calls: metrics.heartbeat_calls.get(),
        beats: metrics.heartbeats.get(),
    })
}

/// How many of `lambda`'s tasks in `collection` are in each status.
pub(crate) async fn count(
    frontend: &FrontendClient,
    lambda: &str,
    collection: &str,
) -> Result<Vec<(TaskStatus, u64)>, Failure> {
    Ok(frontend
        .task_count(TaskCount {
            lambda: lambda.to_owned(),
            collection: Some(collection.to_owned()),
            parent_id: None,
            ..TaskCount::default()
        })
        .await
        .map_err(failed("count"))?
        .into_iter()
        .map(|c| (c.status, c.count))
        .collect())
}

async fn ended(frontend: &FrontendClient, lambda: &str) -> Result<u64, Failure> {
    Ok(count(frontend, lambda, "running")
        .await?
        .iter()
        .filter(|(status, _)| status.is_terminal())
        .map(|(_, n)| n)
        .sum())
}

/// The kernel's clock ticks per second, in which `/proc` counts CPU time.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User plus system CPU time of this process so far.
fn process_cpu(ticks: f64) -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are the 14th and 15th fields, the 12th and 13th after
    // the name.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Duration::from_secs_f64((tick(11) + tick(12)) / ticks)
}

/// This process's resident memory in KiB.
pub(crate) fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
