//! Hostile lambdas at scale: isolation, on `waft dev` (every role in one
//! process, so the process's memory is the executor's).
//!
//! A well-behaved lambda (`hello`) is measured alone, then again while
//! backlogs of `runaway` (a CPU loop stopped by its deadline), `hog`
//! (allocates until its memory limit stops it), `panic` (traps) and
//! `escape` (tries files, environment, network) keep every slot of theirs
//! busy. Each lambda's concurrency is its own: the hostile ones hold at most
//! their slots and never the well-behaved one's. What is asserted:
//!
//! - every task of `hello` succeeds, alone and beside them, while every
//!   hostile lambda ran and still had a backlog when `hello` was done (its
//!   slots were busy throughout);
//! - `escape` ran, and every execution of it that ended reports nothing
//!   escaped, or was stopped (its deadline missed, heartbeats unanswered in
//!   time: a busy machine's doing), never trapped;
//! - the process's peak resident memory ≤ its solo peak + what the hostile
//!   lambdas may hold (concurrency × memory limit, each) + 128 MiB: `hog`
//!   unbounded would take gigabytes.
//!
//! How `hello` fares beside them — schedule→start latency of a steady
//! trickle, throughput of a burst, and their ratio to the solo figures of
//! the same run — is a benchmark, not a test: a debug build on a busy
//! machine says little about it. The figures are printed (`--nocapture`);
//! docs/benchmarks/faults.md records release runs.

mod support;

#[path = "hostile/budgets.rs"]
mod budgets;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Cluster;
use waft_core::{ByteSize, TaskStatus};
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, RunAt, TaskRequest};
use waft_store::{AttemptOutcome, Task, TaskList};

/// One test at a time: each measures a process's memory and its
/// well-behaved lambda's attempts, which the others' clusters, on the same
/// cores, would only blur.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TRICKLE: usize = 100;
const TRICKLE_EVERY: Duration = Duration::from_millis(30);
const BURST: usize = 2_000;

/// The hostile lambdas: name, file, concurrency, memory limit.
const HOSTILE: &[(&str, &str, u32, u64)] = &[
    ("runaway", samples::RUNAWAY, 2, 16),
    ("hog", samples::HOG, 2, 64),
    ("panic", samples::PANIC, 2, 16),
    ("escape", samples::ESCAPE, 2, 16),
];

/// What one phase measured of `hello`.
#[derive(Debug)]
struct Figures {
    median_ms: i64,
    p95_ms: i64,
    tasks_per_sec: f64,
}

async fn schedule(cluster: &Cluster, lambda: &str, collection: &str, count: usize) {
    for start in (0..count).step_by(500) {
        let batch = (start..count.min(start + 500))
            .map(|_| TaskRequest {
                lambda: lambda.into(),
                payload: json!({"name": "waft"}).to_string().into_bytes(),
                collection: Some(collection.into()),
                run_at: RunAt::Now,
                ..TaskRequest::default()
            })
            .collect();
        cluster.frontend.task_schedule_many(batch).await.unwrap();
    }
}

/// Every task of `lambda` in `collection`.
async fn tasks(cluster: &Cluster, lambda: &str, collection: &str) -> Vec<Task> {
    let mut all = Vec::new();
    loop {
        let page = cluster
            .frontend
            .task_list(TaskList {
                lambda: Some(lambda.into()),
                collection: Some(collection.into()),
                after: all.last().map(|t: &Task| t.id.clone()),
                limit: 1000,
                ..TaskList::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

/// Waits until every task of `collection` ended, as long as they keep
/// ending: how fast is a figure of the machine, a minute without one is a
/// stall. Returns them.
async fn ended(cluster: &Cluster, collection: &str, count: usize) -> Vec<Task> {
    const STALL: Duration = Duration::from_secs(60);
    let (mut done, mut progress) = (0, Instant::now());
    loop {
        let tasks = tasks(cluster, "hello", collection).await;
        let now_done = tasks.iter().filter(|t| t.status.is_terminal()).count();
        if tasks.len() == count && now_done == count {
            let failed = tasks.iter().find(|t| t.status != TaskStatus::Success);
            assert!(failed.is_none(), "{failed:#?}");
            return tasks;
        }
        if now_done > done {
            (done, progress) = (now_done, Instant::now());
        }
        assert!(
            progress.elapsed() < STALL,
            "{collection}: {done} of {count} ended, none in the last {STALL:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Trickle latency and burst throughput of `hello`.
async fn measure(cluster: &Cluster, phase: &str) -> Figures {
    let trickle = format!("{phase}-trickle");
    for _ in 0..TRICKLE {
        schedule(cluster, "hello", &trickle, 1).await;
        tokio::time::sleep(TRICKLE_EVERY).await;
    }
    let mut latencies: Vec<i64> = ended(cluster, &trickle, TRICKLE)
        .await
        .iter()
        .map(|t| t.claimed_at.unwrap() - t.created_at)
        .collect();
    latencies.sort_unstable();

    let burst = format!("{phase}-burst");
    schedule(cluster, "hello", &burst, BURST).await;
    let done = ended(cluster, &burst, BURST).await;
    let first = done.iter().map(|t| t.created_at).min().unwrap();
    let last = done.iter().filter_map(|t| t.finished_at).max().unwrap();
    Figures {
        median_ms: latencies[latencies.len() / 2],
        p95_ms: latencies[latencies.len() * 95 / 100],
        tasks_per_sec: BURST as f64 / ((last - first).max(1) as f64 / 1000.0),
    }
}

/// The process's resident memory now and at its peak (`VmHWM`), in MiB.
pub(crate) fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib / 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_lambdas_in_volume_leave_a_well_behaved_one_within_bounds() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::dev().await;
    let pid = cluster.process("dev").pid().expect("waft dev runs");
    cluster
        .deploy("hello", samples::HELLO, |c| c.concurrency = 8)
        .await;
    for (name, file, concurrency, mib) in HOSTILE {
        cluster
            .deploy(name, file, |c| {
                c.concurrency = *concurrency;
                c.max_attempts = 2;
                c.limits.max_memory = ByteSize::mib(*mib);
                c.limits.timeout = Duration::from_millis(500);
            })
            .await;
    }
    // Warm up (first compilation, caches), then the solo figures.
    schedule(&cluster, "hello", "warm-up", 50).await;
    ended(&cluster, "warm-up", 50).await;
    let solo = measure(&cluster, "solo").await;
    let (_, solo_peak) = memory(pid);

    // Backlogs deep enough to keep every hostile slot busy throughout.
    for (name, ..) in HOSTILE {
        let backlog = if *name == "runaway" { 200 } else { 2_000 };
        schedule(&cluster, name, "flood", backlog).await;
    }
    let hostile = measure(&cluster, "hostile").await;
    let (_, hostile_peak) = memory(pid);

    // The hostile lambdas were really running meanwhile, and still had
    // work waiting when the measurement ended: their slots were busy
    // throughout it.
    let mut hostile_ran = Vec::new();
    let mut escaped_checked = 0;
    for (name, ..) in HOSTILE {
        let tasks = tasks(&cluster, name, "flood").await;
        let executions: u32 = tasks.iter().map(|t| t.attempt).sum();
        hostile_ran.push(format!("{name} {executions}"));
        assert!(executions > 0, "no {name} task ran during the measurement");
        assert!(
            tasks.iter().any(|t| !t.status.is_terminal()),
            "{name}'s backlog ran out before the measurement ended: deepen it"
        );
        if *name == "escape" {
            for task in tasks.iter().filter(|t| t.status.is_terminal()) {
                if task.attempt > 1 || task.status != TaskStatus::Success {
                    // A busy machine may stop an execution until the
                    // attempts run out; a trap, or any answer but its
                    // report, is not what `escape` does.
                    let attempts = cluster.frontend.task_attempts(&task.id).await.unwrap();
                    assert!(
                        attempts.iter().all(|a| {
                            let error = a.error.as_deref().unwrap_or_default();
                            a.outcome != AttemptOutcome::Fatal && !error.contains("crashed")
                        }),
                        "{task:#?}\n{attempts:#?}"
                    );
                }
                if task.status != TaskStatus::Success {
                    continue;
                }
                let report: serde_json::Value =
                    serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
                assert_eq!(report["escaped"], json!([]), "{report}");
                escaped_checked += 1;
            }
        }
    }
    // Else nothing above was checked: every `escape` might have trapped.
    assert!(escaped_checked > 0, "no escape execution reported anything");
    for (name, ..) in HOSTILE {
        for task in tasks(&cluster, name, "flood").await {
            if !task.status.is_terminal() {
                let _ = cluster.frontend.task_cancel(&task.id).await;
            }
        }
    }

    let allowance: u64 = HOSTILE
        .iter()
        .map(|(_, _, c, mib)| u64::from(*c) * mib)
        .sum();
    eprintln!(
        "hello alone: median {} ms, p95 {} ms schedule→start, {:.0} tasks/s\n\
         hello among hostile lambdas: median {} ms, p95 {} ms, {:.0} tasks/s \
         (throughput ratio {:.2})\n\
         hostile executions started meanwhile: {}; {escaped_checked} escape reports checked\n\
         peak resident memory: {solo_peak} MiB alone, {hostile_peak} MiB among them \
         (allowance {allowance} MiB + 128)",
        solo.median_ms,
        solo.p95_ms,
        solo.tasks_per_sec,
        hostile.median_ms,
        hostile.p95_ms,
        hostile.tasks_per_sec,
        hostile.tasks_per_sec / solo.tasks_per_sec,
        hostile_ran.join(", "),
    );
    assert!(
        hostile_peak <= solo_peak + allowance + 128,
        "peak {hostile_peak} MiB, solo {solo_peak} MiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_greedy_lambdas_stay_within_their_budgets() {
    let _alone = ONE_AT_A_TIME.lock().await;
    budgets::budgets(Cluster::dev().await, "dev").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_greedy_lambdas_stay_within_their_budgets() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(cluster) = Cluster::distributed(1).await else {
        eprintln!("skipped: PostgreSQL or the SQS server is unavailable (see tests/README.md)");
        return;
    };
    budgets::budgets(cluster, "executor1").await;
}
