//! `waft bench fairness FILE`: how long a task of one key waits behind
//! another key's backlog.
//!
//! Deploys the lambda (fair between keys with `--key-fairness`), schedules
//! `--backlog` tasks of key `a`, all ready at once, then a probe of key
//! `b` every `--interval` while the backlog runs, and prints the probes'
//! schedule → start percentiles (from the store's own timestamps: a start
//! is the claim's, taken before its write commits), with how fast the
//! backlog ran meanwhile and how much of it was still waiting when the
//! last probe started. Run it with and without `--key-fairness` (and with
//! `--key-lookahead`s) to compare.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use waft_core::{KeyFairness, LambdaConfig};
use waft_services::{ClientApi, TaskRequest};
use waft_store::TaskCount;

use crate::commands::bench_pipeline::{deploy, failed, runtime, schedule, spans, target, wait_all};
use crate::commands::invoke::read_wasm;
use crate::exit::Failure;

#[derive(Debug, Args)]
pub struct FairnessBenchArgs {
    /// The lambda to run (e.g. the `hello` sample).
    pub file: PathBuf,
    /// An installation to measure; an in-process `waft dev` when absent.
    #[arg(long, value_name = "ADDR")]
    pub server: Option<String>,
    /// Tasks of key `a`, scheduled ready before the probes.
    #[arg(long, default_value_t = 1_000_000)]
    pub backlog: usize,
    /// Tasks of key `b` scheduled one by one while the backlog runs.
    #[arg(long, default_value_t = 200)]
    pub probes: usize,
    /// Time between two probes.
    #[arg(long, default_value = "50ms", value_parser = waft_core::parse_duration)]
    pub interval: Duration,
    /// Deploy the lambda fair between keys.
    #[arg(long)]
    pub key_fairness: bool,
    /// The fair lambda's lookahead (the default when absent); implies
    /// --key-fairness.
    #[arg(long, value_name = "TASKS", value_parser = clap::value_parser!(u32).range(1..=i64::from(KeyFairness::MAX_LOOKAHEAD)))]
    pub key_lookahead: Option<u32>,
    /// Tasks one executor runs at once.
    #[arg(long, default_value_t = 256)]
    pub concurrency: u32,
    /// The payload every task carries.
    #[arg(long, default_value = r#"{"name":"Ada"}"#)]
    pub payload: String,
}

/// Runs the benchmark.
pub fn run(args: FairnessBenchArgs) -> Result<std::process::ExitCode, Failure> {
    let wasm = read_wasm(&args.file)?;
    runtime()?.block_on(async move {
        let (_data, address, node) = target(args.server.as_deref(), args.concurrency).await?;
        let config = LambdaConfig {
            concurrency: args.concurrency,
            key_fairness: (args.key_fairness || args.key_lookahead.is_some()).then(|| {
                let mut fairness = KeyFairness::default();
                if let Some(lookahead) = args.key_lookahead {
                    fairness.lookahead = lookahead;
                }
                fairness
            }),
            ..LambdaConfig::default()
        };
        let fairness = match &config.key_fairness {
            Some(fairness) => format!("fair between keys (lookahead {})", fairness.lookahead),
            None => "first come, first served".to_owned(),
        };
        let (frontend, lambda) = deploy(&address, wasm, config).await?;
        println!(
            "waft bench fairness: {} tasks of key a, then {} of key b one every {:?}, {}, against {}",
            args.backlog,
            args.probes,
            args.interval,
            fairness,
            args.server
                .as_deref()
                .unwrap_or("an in-process waft dev (SQLite, durable)")
        );
        let payload = args.payload.as_bytes();
        schedule(&frontend, &lambda, "warmup", 10, 10, 1, None, payload, 0).await?;
        wait_all(&frontend, &lambda, "warmup", 10, None).await?;

        let started = Instant::now();
        // One key: `schedule` names it k0.
        schedule(
            &frontend,
            &lambda,
            "backlog",
            args.backlog,
            1000,
            4,
            None,
            payload,
            1,
        )
        .await?;
        println!(
            "backlog: {} tasks scheduled in {:.1} s",
            args.backlog,
            started.elapsed().as_secs_f64()
        );

        let before = backlog_waiting(&frontend, &lambda).await?;
        let probing = Instant::now();
        let mut next = Instant::now();
        let mut waiting = Vec::with_capacity(args.probes);
        for _ in 0..args.probes {
            tokio::time::sleep_until(next.into()).await;
            next += args.interval;
            let scheduled = frontend
                .task_schedule_many(vec![TaskRequest {
                    lambda: lambda.clone(),
                    payload: payload.to_vec(),
                    collection: Some("probes".to_owned()),
                    key: Some("b".to_owned()),
                    ..TaskRequest::default()
                }])
                .await
                .map_err(failed("schedule a probe"))?;
            waiting.extend(scheduled.into_iter().map(|task| task.id));
        }
        let after = backlog_waiting(&frontend, &lambda).await?;
        println!(
            "backlog: {:.0} tasks of key a started a second while the probes were scheduled",
            before.saturating_sub(after) as f64 / probing.elapsed().as_secs_f64()
        );
        let probes = probes_started(&frontend, waiting).await?;
        let waiting = backlog_waiting(&frontend, &lambda).await?;
        let (started, percentiles) =
            spans(&probes, |t| t.claimed_at.map(|c| c - t.scheduled_at))?;
        println!("schedule→start of {started} tasks of key b: {percentiles}");
        let (_, enqueued) = spans(&probes, |t| t.enqueued_at.map(|e| e - t.scheduled_at))?;
        println!("  of which schedule→enqueue: {enqueued}");
        println!(
            "backlog: {waiting} of {} tasks of key a not yet started when the last probe had",
            args.backlog
        );
        if let Some(node) = node {
            node.shutdown().await;
        }
        Ok(std::process::ExitCode::SUCCESS)
    })
}

/// The probes once each has started, read one by one (counting a
/// collection's tasks reads the lambda's million; a probe is one row).
async fn probes_started(
    frontend: &waft_client::FrontendClient,
    mut waiting: Vec<String>,
) -> Result<Vec<waft_store::Task>, Failure> {
    let mut started = Vec::with_capacity(waiting.len());
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for id in waiting {
            let task = frontend
                .task_get(&id)
                .await
                .map_err(failed("get a probe"))?;
            match task.claimed_at {
                Some(_) => started.push(task),
                None => still.push(id),
            }
        }
        waiting = still;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(started)
}

/// The backlog's tasks that have not started.
async fn backlog_waiting(
    frontend: &waft_client::FrontendClient,
    lambda: &str,
) -> Result<u64, Failure> {
    let counts = frontend
        .task_count(TaskCount {
            lambda: lambda.to_owned(),
            collection: Some("backlog".to_owned()),
            ..TaskCount::default()
        })
        .await
        .map_err(failed("count"))?;
    Ok(counts
        .iter()
        .filter(|c| waft_core::machine::WAITING.contains(c.status))
        .map(|c| c.count)
        .sum())
}
