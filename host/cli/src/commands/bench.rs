//! `waft bench invoke FILE`: the runtime's per-task overhead.
//!
//! Runs the same task many times, sequentially, each in a fresh instance
//! (store + instantiate + call + drop, as the executor does), and prints the
//! latency distribution for several runtime set-ups in one run, so their
//! ratios can be compared on a noisy machine. With `--replay`, each set-up
//! is measured twice: live, then answered from the journal one live run
//! wrote — what replaying a journal costs beyond the lambda's own work.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use waft_core::model::JournalEntry;
use waft_runtime::{
    Allocator, KillSwitch, PreparedLambda, RecordingHost, Runtime, RuntimeConfig, Sandbox,
    TaskInput,
};

use crate::commands::invoke::{LimitArgs, read_wasm};
use crate::commands::lambda::GrantArgs;
use crate::exit::Failure;

/// Arguments of `waft bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub target: BenchTarget,
}

#[derive(Debug, Subcommand)]
pub enum BenchTarget {
    /// Per-task overhead of running a lambda: instantiate + call + drop.
    Invoke(InvokeBenchArgs),
    /// End to end: tasks/s from schedule to terminal, and schedule→start
    /// latency at half that load.
    Pipeline(crate::commands::bench_pipeline::PipelineBenchArgs),
    /// Many long tasks at once on one executor: heartbeat calls, CPU and
    /// memory while they run.
    Running(crate::commands::bench_running::RunningBenchArgs),
    /// Durable waits at scale: memory and store per suspended task, and how
    /// late many sleeps ending at one instant resume.
    Waits(crate::commands::bench_waits::WaitsBenchArgs),
    /// A long run at a steady load: whether the store stays the same size
    /// once retention keeps up.
    Steady(crate::commands::bench_steady::SteadyBenchArgs),
    /// How long a task of one key waits behind another key's backlog, with
    /// or without fairness between keys.
    Fairness(crate::commands::bench_fairness::FairnessBenchArgs),
}

#[derive(Debug, Args)]
pub struct InvokeBenchArgs {
    /// The lambda to run (e.g. the `hello` sample).
    pub file: std::path::PathBuf,
    /// The payload each task carries (not validated: sent as is).
    #[arg(long, default_value = r#"{"name":"Ada"}"#)]
    pub payload: String,
    /// Measured runs per set-up.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: u64,
    /// Unmeasured runs before measuring.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: u64,
    /// Run only the set-ups whose name contains this text (e.g. `pooling`).
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// Also measure each set-up answered from the journal of one live run
    /// (every entry replayed, nothing live).
    #[arg(long)]
    pub replay: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Grants the task runs with (unused by a lambda that does not call
    /// out: what they cost by being there).
    #[command(flatten)]
    pub grants: GrantArgs,
}

/// The runtime set-ups compared.
const SETUPS: &[(&str, Allocator, bool)] = &[
    ("pooling + InstancePre", Allocator::Pooling, false),
    ("pooling, relinked per task", Allocator::Pooling, true),
    ("on-demand + InstancePre", Allocator::OnDemand, false),
    ("on-demand, relinked per task", Allocator::OnDemand, true),
];

/// Runs `waft bench`.
pub fn run(args: BenchArgs) -> Result<ExitCode, Failure> {
    match args.target {
        BenchTarget::Invoke(args) => invoke(args),
        BenchTarget::Pipeline(args) => crate::commands::bench_pipeline::run(args),
        BenchTarget::Running(args) => crate::commands::bench_running::run(args),
        BenchTarget::Waits(args) => crate::commands::bench_waits::run(args),
        BenchTarget::Steady(args) => crate::commands::bench_steady::run(args),
        BenchTarget::Fairness(args) => crate::commands::bench_fairness::run(args),
    }
}

fn invoke(args: InvokeBenchArgs) -> Result<ExitCode, Failure> {
    let sandbox = Sandbox {
        limits: args.limits.limits()?,
        grants: Arc::new(args.grants.grants()?),
        secrets: Arc::default(),
        ..Sandbox::default()
    };
    let wasm = read_wasm(&args.file)?;
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?;
    println!(
        "{} sequential tasks per set-up after {} warm-up runs; {} (debug builds are ~20x slower)",
        args.iterations,
        args.warmup,
        if cfg!(debug_assertions) {
            "DEBUG BUILD"
        } else {
            "release build"
        },
    );
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "set-up", "median", "p90", "p99", "max", "tasks/s"
    );
    tokio.block_on(async {
        let chosen = SETUPS.iter().filter(|(name, ..)| {
            args.only
                .as_ref()
                .is_none_or(|only| name.contains(only.as_str()))
        });
        for (name, allocator, relink) in chosen {
            let runtime = Runtime::new(RuntimeConfig {
                allocator: *allocator,
                ..RuntimeConfig::default()
            })
            .map_err(|e| Failure::internal(e.to_string()))?;
            let prepared = runtime.prepare(&wasm).await.map_err(|e| Failure {
                code: crate::exit::NOT_A_LAMBDA,
                message: format!("{} is not a Waft lambda: {e}", args.file.display()),
            })?;
            let lambda = if *relink {
                prepared.relinking_every_task()
            } else {
                prepared
            };
            let run = Measured {
                lambda: &lambda,
                payload: args.payload.as_bytes(),
                sandbox: &sandbox,
                journal: Vec::new(),
            };
            run.measure(name, &args).await?;
            if args.replay {
                let (_, written) = run.once().await?;
                let replaying = Measured {
                    journal: written,
                    ..run
                };
                let label = format!("{name}, {} replayed", replaying.journal.len());
                replaying.measure(&label, &args).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A lambda measured with one payload, answered from `journal`.
struct Measured<'a> {
    lambda: &'a PreparedLambda,
    payload: &'a [u8],
    sandbox: &'a Sandbox,
    journal: Vec<JournalEntry>,
}

impl Measured<'_> {
    /// Warms up, runs `iterations` tasks and prints their distribution.
    async fn measure(&self, name: &str, args: &InvokeBenchArgs) -> Result<(), Failure> {
        for _ in 0..args.warmup {
            self.once().await?;
        }
        let progress = ProgressBar::new(args.iterations).with_style(
            ProgressStyle::with_template("{msg:<30} [{bar:30}] {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        progress.set_message(name.to_owned());
        let mut samples = Vec::with_capacity(args.iterations as usize);
        let started = Instant::now();
        for i in 0..args.iterations {
            samples.push(self.once().await?.0);
            if i % 256 == 0 {
                progress.set_position(i);
            }
        }
        let elapsed = started.elapsed();
        progress.finish_and_clear();
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        println!(
            "{name:<36} {:>9} {:>9} {:>9} {:>9} {:>11.0}",
            micros(at(0.5)),
            micros(at(0.9)),
            micros(at(0.99)),
            micros(at(1.0)),
            args.iterations as f64 / elapsed.as_secs_f64(),
        );
        Ok(())
    }

    /// One task, timed from the call to `run` to its return (which
    /// includes dropping the store), and the journal it wrote (at its
    /// durability points, then with its result).
    async fn once(&self) -> Result<(Duration, Vec<JournalEntry>), Failure> {
        let (lambda, payload, sandbox) = (self.lambda, self.payload, self.sandbox);
        let task = TaskInput {
            id: "bench".into(),
            lambda: "bench".into(),
            collection: "default".into(),
            priority: 0,
            attempt: 1,
            scheduled_at: SystemTime::now(),
            payload: payload.to_vec(),
            journal: self.journal.clone(),
        };
        let host = Arc::new(RecordingHost::default());
        let kill = KillSwitch::new();
        let started = Instant::now();
        let execution = lambda.run(task, sandbox, host.clone(), &kill).await;
        let took = started.elapsed();
        if execution.outcome.kind() != "success" {
            return Err(Failure::usage(format!(
                "the benchmark needs a lambda that succeeds; this one ended with {:?}",
                execution.outcome
            )));
        }
        if execution.replayed as usize != self.journal.len() {
            return Err(Failure::usage(format!(
                "the benchmark needs a lambda that replays its whole journal; this one replayed {} \
             of {} entries",
                execution.replayed,
                self.journal.len()
            )));
        }
        let mut journal = Vec::new();
        for write in host.journal_writes().into_iter().chain([execution.journal]) {
            journal.truncate(write.from as usize);
            journal.extend(write.entries);
        }
        Ok((took, journal))
    }
}

fn micros(duration: Duration) -> String {
    format!("{:.1}µs", duration.as_secs_f64() * 1e6)
}
