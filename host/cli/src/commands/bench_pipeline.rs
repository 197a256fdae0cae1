//! `waft bench pipeline FILE`: end-to-end throughput and latency.
//!
//! Deploys the lambda, schedules tasks through the Frontend's gRPC API in
//! batches and measures:
//! - throughput: tasks from the first schedule to the last terminal state,
//!   with every task scheduled at once (scheduling and running overlap);
//! - scheduling and processing apart, as the peers report them: the tasks
//!   scheduled into a paused collection (`ScheduleBatch` alone), then run
//!   from the moment it opens until the last has ended;
//! - latency, from the store's own timestamps: schedule → claim percentiles
//!   of immediate tasks scheduled at half the measured throughput, and
//!   claim → end of the same tasks (what a lambda's own calls cost: a
//!   journaled outbound call, say, with `--payload` and `--allow-outbound`);
//! - punctuality: due → claim percentiles of delayed tasks, each scheduled
//!   some 0.2–2 s ahead of its due time (`--delayed`; none with 0);
//! - with `--backlog N --prune-backlog`, all of it while the pruner deletes
//!   a backlog of ended tasks (`bench_backlog.rs`).
//!
//! Without `--server` it starts `waft dev` in-process on a fresh data
//! directory (durable SQLite; `WAFT_*` settings apply); with it, it measures whatever installation
//! listens there (e.g. the distributed mode).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use waft_client::FrontendClient;
use waft_core::{LambdaConfig, TaskStatus};
use waft_services::{ClientApi, TaskRequest};
use waft_store::GateState;
use waft_store::{TaskCount, TaskList};

use crate::commands::bench_backlog::Backlog;
use crate::commands::invoke::read_wasm;
use crate::commands::lambda::GrantArgs;
use crate::exit::Failure;

#[derive(Debug, Args)]
pub struct PipelineBenchArgs {
    /// The lambda to run (e.g. the `hello` sample).
    pub file: std::path::PathBuf,
    /// An installation to measure; an in-process `waft dev` when absent.
    #[arg(long, value_name = "ADDR")]
    pub server: Option<String>,
    /// Tasks of the throughput run (the latency run schedules half as many).
    #[arg(long, default_value_t = 20_000)]
    pub tasks: usize,
    /// Tasks per schedule request.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub senders: usize,
    /// Tasks one executor runs at once.
    #[arg(long, default_value_t = 256)]
    pub concurrency: u32,
    /// Delayed tasks of the punctuality run, due over some 10 s.
    #[arg(long, default_value_t = 200)]
    pub delayed: usize,
    /// The payload every task carries (the `hello` sample's input by
    /// default; sent as is).
    #[arg(long, default_value = r#"{"name":"bench"}"#)]
    pub payload: String,
    /// Grants the lambda is deployed with (a lambda that calls out needs
    /// `--allow-outbound`).
    #[command(flatten)]
    pub grants: GrantArgs,
    /// Ended tasks of a second lambda left in the store before the runs
    /// (what pruning costs: see `--prune-backlog`).
    #[arg(long, default_value_t = 0)]
    pub backlog: usize,
    /// The backlog is past its retention as the runs begin: they are
    /// measured while the pruner deletes it.
    #[arg(long, requires = "backlog")]
    pub prune_backlog: bool,
    /// Gives the tasks keys, `k0` to `k<N-1>` in turn (what keys cost);
    /// 0: no key.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keys: usize,
    /// The lambda's concurrency per key (with `--keys`).
    #[arg(long, value_name = "N")]
    pub key_concurrency: Option<u32>,
}

pub(crate) fn failed(what: &str) -> impl Fn(waft_services::ServiceError) -> Failure + '_ {
    move |e| Failure::internal(format!("{what}: {e}"))
}

/// Starts `waft dev` in-process on a fresh data directory (durable SQLite;
/// `WAFT_*` settings apply, as they do to `waft dev`), its executor with
/// `max_tasks` slots.
pub(crate) async fn start_dev(
    executor: impl FnOnce(&mut waft_services::ExecutorConfig),
) -> Result<(tempfile::TempDir, waft_node::Node), Failure> {
    let data = tempfile::TempDir::new().map_err(|e| Failure::internal(e.to_string()))?;
    let mut config = waft_node::Config::load(None, std::env::vars())
        .map_err(|e| Failure::usage(e.to_string()))?;
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    executor(&mut config.executor);
    let node = waft_node::start_dev(waft_node::DevOptions {
        data_dir: data.path().to_owned(),
        config,
    })
    .await
    .map_err(|e| Failure::internal(e.to_string()))?;
    Ok((data, node))
}

/// What a benchmark loads: the installation at `server`, or else a `waft
/// dev` started here with `concurrency` executor slots (its data directory
/// and the node, to stop at the end); and the Frontend's address.
pub(crate) async fn target(
    server: Option<&str>,
    concurrency: u32,
) -> Result<(Option<tempfile::TempDir>, String, Option<waft_node::Node>), Failure> {
    Ok(match server {
        Some(address) => (None, address.to_owned(), None),
        None => {
            let (data, node) = start_dev(|e| e.max_tasks = concurrency as usize).await?;
            (Some(data), node.addr.to_string(), Some(node))
        }
    })
}

/// The runtime a benchmark runs on (and its in-process `waft dev` with it).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(e.to_string()))
}

/// A client of the Frontend at `address`, and the lambda it deployed
/// there under a name of this run's own.
pub(crate) async fn deploy(
    address: &str,
    wasm: Vec<u8>,
    config: LambdaConfig,
) -> Result<(Arc<FrontendClient>, String), Failure> {
    let frontend = Arc::new(FrontendClient::new(
        waft_client::channel(address).map_err(|e| Failure::usage(e.to_string()))?,
    ));
    let lambda = format!("bench-{}", std::process::id());
    frontend
        .lambda_deploy(&lambda, wasm, config)
        .await
        .map_err(failed("deploy"))?;
    Ok((frontend, lambda))
}

/// Runs the benchmark.
pub fn run(args: PipelineBenchArgs) -> Result<std::process::ExitCode, Failure> {
    let wasm = read_wasm(&args.file)?;
    runtime()?.block_on(async move {
        let (_data, address, node) = target(args.server.as_deref(), args.concurrency).await?;
        let config = LambdaConfig {
            concurrency: args.concurrency,
            grants: args.grants.grants()?,
            key_concurrency: args.key_concurrency,
            ..LambdaConfig::default()
        };
        let (frontend, lambda) = deploy(&address, wasm.clone(), config).await?;
        println!(
            "waft bench pipeline: {} tasks of {} against {}",
            args.tasks,
            args.file.display(),
            args.server
                .as_deref()
                .unwrap_or("an in-process waft dev (SQLite, durable)")
        );

        let payload = args.payload.as_bytes();
        let backlog = match args.backlog {
            0 => None,
            count => Some(
                Backlog::fill(
                    &frontend,
                    format!("{lambda}-backlog"),
                    wasm,
                    count,
                    args.prune_backlog,
                    payload,
                )
                .await?,
            ),
        };
        // Warm up: load the lambda in the executor.
        schedule(
            &frontend, &lambda, "warmup", 10, 10, 1, None, payload, args.keys,
        )
        .await?;
        wait_all(&frontend, &lambda, "warmup", 10, None).await?;
        let throughput = measure_throughput(&frontend, &lambda, &args).await?;
        if let Some(backlog) = &backlog {
            backlog.report(&frontend, "the throughput run").await?;
        }
        measure_apart(&frontend, &lambda, &args).await?;
        if let Some(backlog) = &backlog {
            backlog.report(&frontend, "the runs apart").await?;
        }
        measure_latency(&frontend, &lambda, &args, throughput).await?;
        if args.delayed > 0 {
            punctuality(&frontend, &lambda, args.delayed, payload).await?;
        }
        if let Some(node) = node {
            node.shutdown().await;
        }
        Ok(std::process::ExitCode::SUCCESS)
    })
}

/// Tasks scheduled and run together, from the first sent to the last
/// ended; the tasks per second, which the latency phase halves.
async fn measure_throughput(
    frontend: &Arc<FrontendClient>,
    lambda: &str,
    args: &PipelineBenchArgs,
) -> Result<f64, Failure> {
    let started = wall_clock();
    let bar = progress(args.tasks);
    schedule(
        frontend,
        lambda,
        "throughput",
        args.tasks,
        args.batch,
        args.senders,
        None,
        args.payload.as_bytes(),
        args.keys,
    )
    .await?;
    let scheduled_in = wall_clock() - started;
    wait_all(frontend, lambda, "throughput", args.tasks, Some(&bar)).await?;
    bar.finish_and_clear();
    let took = last_ended(frontend, lambda, "throughput").await? - started;
    let throughput = per_second(args.tasks, took);
    println!(
        "throughput: {throughput:.0} tasks/s ({} tasks in {took} ms; scheduling took {scheduled_in} ms)",
        args.tasks
    );
    Ok(throughput)
}

/// Like the peers' figures: scheduling alone, the tasks held in the store
/// by a paused gate on their collection; then processing alone, from the
/// moment the gate opens until the last has ended.
async fn measure_apart(
    frontend: &Arc<FrontendClient>,
    lambda: &str,
    args: &PipelineBenchArgs,
) -> Result<(), Failure> {
    frontend
        .gate_set(lambda, Some("prefilled"), GateState::Paused)
        .await
        .map_err(failed("pause"))?;
    let started = wall_clock();
    schedule(
        frontend,
        lambda,
        "prefilled",
        args.tasks,
        args.batch,
        args.senders,
        None,
        args.payload.as_bytes(),
        args.keys,
    )
    .await?;
    let scheduled_in = wall_clock() - started;
    let bar = progress(args.tasks);
    let opened = wall_clock();
    frontend
        .gate_set(lambda, Some("prefilled"), GateState::Open)
        .await
        .map_err(failed("resume"))?;
    wait_all(frontend, lambda, "prefilled", args.tasks, Some(&bar)).await?;
    bar.finish_and_clear();
    let took = last_ended(frontend, lambda, "prefilled").await? - opened;
    println!(
        "schedule alone: {:.0} tasks/s ({} tasks through ScheduleBatch in {scheduled_in} ms, none running)",
        per_second(args.tasks, scheduled_in),
        args.tasks
    );
    println!(
        "throughput of processing alone: {:.0} tasks/s ({} tasks waiting in the store; gate opened → last ended in {took} ms)",
        per_second(args.tasks, took),
        args.tasks
    );
    Ok(())
}

/// Schedule-to-start delays at half the peak throughput, by percentile.
async fn measure_latency(
    frontend: &Arc<FrontendClient>,
    lambda: &str,
    args: &PipelineBenchArgs,
    throughput: f64,
) -> Result<(), Failure> {
    let half = (throughput / 2.0).max(1.0);
    let count = (args.tasks / 2).max(1);
    let bar = progress(count);
    schedule(
        frontend,
        lambda,
        "latency",
        count,
        args.batch.min(50),
        1,
        Some(half),
        args.payload.as_bytes(),
        args.keys,
    )
    .await?;
    wait_all(frontend, lambda, "latency", count, Some(&bar)).await?;
    bar.finish_and_clear();
    let tasks = list_all(frontend, lambda, "latency").await?;
    let (started, percentiles) = spans(&tasks, |t| t.claimed_at.map(|c| c - t.scheduled_at))?;
    println!("schedule→start at {half:.0} tasks/s (half of peak), {started} tasks: {percentiles}");
    let (ran, percentiles) = spans(&tasks, |t| Some(t.finished_at? - t.claimed_at?))?;
    println!("claim→end of the same {ran} tasks: {percentiles}");
    Ok(())
}

/// Schedules `count` delayed tasks, one every 50 ms, each due a varying
/// 0.2–2 s after it is scheduled, and reports how late each was claimed.
async fn punctuality(
    frontend: &Arc<FrontendClient>,
    lambda: &str,
    count: usize,
    payload: &[u8],
) -> Result<(), Failure> {
    let mut last_due = Instant::now();
    for i in 0..count {
        // A spread of lead times that does not line up with any tick.
        let lead = Duration::from_millis(200 + (i as u64 * 337) % 1800);
        let task = TaskRequest {
            lambda: lambda.to_owned(),
            payload: payload.to_vec(),
            collection: Some("delayed".to_owned()),
            run_at: waft_services::RunAt::After(lead),
            ..TaskRequest::default()
        };
        frontend
            .task_schedule_many(vec![task])
            .await
            .map_err(failed("schedule"))?;
        last_due = last_due.max(Instant::now() + lead);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep_until(last_due.into()).await;
    wait_all(frontend, lambda, "delayed", count, None).await?;
    let tasks = list_all(frontend, lambda, "delayed").await?;
    let (started, percentiles) = spans(&tasks, |t| t.claimed_at.map(|c| c - t.scheduled_at))?;
    println!("due→start of {started} delayed tasks: {percentiles}");
    Ok(())
}

/// A span of each task (in ms; `None` where the task has not reached its
/// end): how many have it, and their percentiles.
pub(crate) fn spans(
    tasks: &[waft_store::Task],
    span: impl Fn(&waft_store::Task) -> Option<i64>,
) -> Result<(usize, String), Failure> {
    let mut delays: Vec<i64> = tasks.iter().filter_map(span).collect();
    if delays.is_empty() {
        return Err(Failure::internal("no task got that far"));
    }
    delays.sort_unstable();
    let at = |q: f64| delays[((delays.len() as f64 - 1.0) * q).round() as usize];
    let percentiles = format!(
        "p50 {} ms, p95 {} ms, p99 {} ms, max {} ms",
        at(0.5),
        at(0.95),
        at(0.99),
        at(1.0)
    );
    Ok((delays.len(), percentiles))
}

fn progress(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tasks done, {per_sec}")
            .expect("a valid template"),
    );
    bar
}

/// Schedules `count` tasks carrying `payload` in `batch`es from `senders`
/// concurrent callers, paced at `rate` tasks/s when given; with `keys`
/// above 0, the tasks have keys `k0` to `k<keys-1>` in turn.
#[allow(clippy::too_many_arguments, reason = "each is a knob of the load")]
pub(crate) async fn schedule(
    frontend: &Arc<FrontendClient>,
    lambda: &str,
    collection: &str,
    count: usize,
    batch: usize,
    senders: usize,
    rate: Option<f64>,
    payload: &[u8],
    keys: usize,
) -> Result<(), Failure> {
    let batches: Vec<usize> = (0..count)
        .step_by(batch.max(1))
        .map(|start| batch.min(count - start))
        .collect();
    let per_sender = batches.len().div_ceil(senders.max(1));
    let started = Instant::now();
    let mut handles = Vec::new();
    for (sender, chunk) in batches.chunks(per_sender.max(1)).enumerate() {
        let frontend = frontend.clone();
        let lambda = lambda.to_owned();
        let collection = collection.to_owned();
        let chunk = chunk.to_vec();
        let payload = payload.to_vec();
        handles.push(tokio::spawn(async move {
            let mut sent = 0usize;
            for size in chunk {
                if let Some(rate) = rate {
                    let due = Duration::from_secs_f64((sender * per_sender + sent) as f64 / rate);
                    tokio::time::sleep_until((started + due).into()).await;
                }
                let first = sender * per_sender * batch + sent;
                let tasks = (first..first + size)
                    .map(|i| TaskRequest {
                        lambda: lambda.clone(),
                        payload: payload.clone(),
                        collection: Some(collection.clone()),
                        key: (keys > 0).then(|| format!("k{}", i % keys)),
                        ..TaskRequest::default()
                    })
                    .collect();
                frontend.task_schedule_many(tasks).await?;
                sent += size;
            }
            Ok::<_, waft_services::ServiceError>(())
        }));
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| Failure::internal(e.to_string()))?
            .map_err(failed("schedule"))?;
    }
    Ok(())
}

/// Every task of a collection, by pages.
pub(crate) async fn list_all(
    frontend: &FrontendClient,
    lambda: &str,
    collection: &str,
) -> Result<Vec<waft_store::Task>, Failure> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = frontend
            .task_list(TaskList {
                lambda: Some(lambda.to_owned()),
                collection: Some(collection.to_owned()),
                after: after.clone(),
                limit: 1000,
                ..TaskList::default()
            })
            .await
            .map_err(failed("list"))?;
        let done = page.len() < 1000;
        after = page.last().map(|t| t.id.clone());
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

/// Waits until `count` tasks of the collection have ended, reading their
/// counts per status every 500 ms (not the tasks, and not often: the
/// benchmark must not load what it measures; when the last ended is read
/// from the store after);
/// fails as soon as one ends other than in success.
pub(crate) async fn wait_all(
    frontend: &FrontendClient,
    lambda: &str,
    collection: &str,
    count: usize,
    bar: Option<&ProgressBar>,
) -> Result<(), Failure> {
    loop {
        let counts = frontend
            .task_count(TaskCount {
                lambda: lambda.to_owned(),
                collection: Some(collection.to_owned()),
                parent_id: None,
                ..TaskCount::default()
            })
            .await
            .map_err(failed("count"))?;
        let ended: u64 = counts
            .iter()
            .filter(|c| c.status.is_terminal())
            .map(|c| c.count)
            .sum();
        if let Some(bar) = bar {
            bar.set_position(ended);
        }
        if let Some(failure) = counts
            .iter()
            .find(|c| c.status.is_terminal() && c.status != TaskStatus::Success)
        {
            return Err(first_failure(frontend, lambda, collection, failure.status).await);
        }
        if ended >= count as u64 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// When the last task of a collection ended, by the store's timestamps
/// (Unix ms): read once the run is over.
async fn last_ended(
    frontend: &FrontendClient,
    lambda: &str,
    collection: &str,
) -> Result<i64, Failure> {
    list_all(frontend, lambda, collection)
        .await?
        .iter()
        .filter_map(|t| t.finished_at)
        .max()
        .ok_or_else(|| Failure::internal(format!("no task of {collection} ended")))
}

/// This machine's clock in Unix ms, as the store's timestamps read.
fn wall_clock() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

fn per_second(tasks: usize, millis: i64) -> f64 {
    tasks as f64 * 1000.0 / millis.max(1) as f64
}

/// Says which task of the collection ended in `status`, and why.
async fn first_failure(
    frontend: &FrontendClient,
    lambda: &str,
    collection: &str,
    status: TaskStatus,
) -> Failure {
    let found = frontend
        .task_list(TaskList {
            lambda: Some(lambda.to_owned()),
            collection: Some(collection.to_owned()),
            status: Some(status),
            limit: 1,
            ..TaskList::default()
        })
        .await;
    match found.as_deref() {
        Ok([task, ..]) => Failure::internal(format!(
            "task {} ended {}: {}",
            task.id,
            status.as_str(),
            task.last_error.as_deref().unwrap_or("")
        )),
        _ => Failure::internal(format!("a task of {collection} ended {}", status.as_str())),
    }
}
