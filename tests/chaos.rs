//! The fault-injection soak: Waft's guarantees checked under fire.
//!
//! A distributed cluster — Postgres, the SQS-compatible server, every role
//! its own `waft serve` process, two executors that reach the HSC through a
//! proxy the test controls — runs N tasks of `sleepy` (a few steps of
//! 5–60 ms, a heartbeat after each) while a chaos driver, fault after
//! fault, SIGKILLs and restarts each role, drops and duplicates queue
//! messages, slows and cuts the executors' HSC traffic and crashes Postgres.
//! The tasks are scheduled as a stream (at most 5,000 unfinished at a time)
//! while the faults come, with retries on the same idempotency keys (a
//! retried batch must not make a task twice). Beside them an operator
//! (`chaos/operator.rs`), dealt into the same deck, pauses and resumes a
//! gate, drops a collection, cancels tasks and redrives dead ones, among
//! tasks of its own, one lambda of which writes NUL bytes. And durable
//! tasks (`chaos/durable.rs`) make outbound calls to a real HTTP server
//! and schedule children, resumed from their journals after each fault.
//!
//! Afterwards the store and the executors' own journals (which record when
//! each instance really started and was gone) must show:
//! - **none lost**: every scheduled task is in the store and ended, and
//!   succeeded (the lambda never fails, and its attempt budget exceeds what
//!   the faults can spend);
//! - **every success ran**: an execution under the success's lease, the
//!   task's last, ended in success;
//! - **no overlap**: no two executions of a task overlapped in time, and
//!   no lease ran twice;
//! - **no key over its limit**: half the tasks have one of a few keys, and
//!   `sleepy` runs at most [`KEY_CONCURRENCY`] of a key at once: no more
//!   executions of a key ever overlapped;
//! - **no stale result**: no result was accepted for a lease after a newer
//!   lease of the same task had started running;
//! - the operator's checks: nothing ran under a paused gate beyond what
//!   was already executing, nothing after a drop or a cancel, no ended task
//!   ran again but by a redrive, NUL bytes came back intact;
//! - the durable checks: no request reached the server again once its
//!   answer was journaled (only requests in flight at a fault repeat, with
//!   their keys), each task's children scheduled once, no divergence.
//!
//! It prints a summary: tasks, faults by kind, executions, re-executions,
//! violations, throughput under chaos. CI runs the short default; a long
//! run (docs/benchmarks/faults.md) sets the size:
//!
//! ```text
//! WAFT_CHAOS_TASKS=100000 WAFT_CHAOS_MIN_FAULTS=200 \
//!     cargo test --release -p waft-cli --test chaos -- --nocapture
//! ```
//!
//! `WAFT_CHAOS_TASKS` (default 1,500), `WAFT_CHAOS_MIN_FAULTS` (faults
//! injected at least, even after the tasks ended; default one of each, 12),
//! `WAFT_CHAOS_PAUSE_MS` (between faults, default 500), `WAFT_CHAOS_SEED`
//! (default: from the clock; printed, so a run can be repeated).

#[path = "chaos/durable.rs"]
mod durable;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/operator.rs"]
mod operator;
mod support;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durable::Durable;
use faults::{Chaos, Fault};
use operator::Operator;
use sqlx::{PgPool, Row};
use support::{Cluster, Layout, Run};
use waft_api::FrontendClient;
use waft_core::machine;
use waft_queue::{QueueKey, SqsQueue};
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, RunAt, TaskRequest};

/// Tasks scheduled per request.
const BATCH: usize = 250;

struct Settings {
    tasks: usize,
    min_faults: usize,
    pause: Duration,
    seed: u64,
}

impl Settings {
    fn from_env() -> Self {
        let number = |name: &str| {
            std::env::var(name).ok().map(|v| {
                v.parse::<u64>()
                    .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
            })
        };
        let clock = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Self {
            tasks: number("WAFT_CHAOS_TASKS").unwrap_or(1_500) as usize,
            min_faults: number("WAFT_CHAOS_MIN_FAULTS").map_or(Fault::deck().len(), |n| n as usize),
            pause: Duration::from_millis(number("WAFT_CHAOS_PAUSE_MS").unwrap_or(500)),
            seed: number("WAFT_CHAOS_SEED").unwrap_or(clock),
        }
    }
}

/// Tasks scheduled but not yet ended, at most: a steady stream rather than
/// the whole run at once. (The SQS-compatible server of the tests slows to
/// a crawl once a queue holds tens of thousands of messages; a real soak's
/// load is a stream too.)
const IN_FLIGHT: i64 = 5_000;

/// Schedules `count` tasks in batches, retrying each batch (same
/// idempotency keys) until the Frontend takes it, and holding back while
/// [`IN_FLIGHT`] tasks are unfinished; their ids.
async fn schedule_all(
    frontend: FrontendClient,
    pool: PgPool,
    count: usize,
    seed: u64,
) -> Vec<String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ids = Vec::with_capacity(count);
    let mut retries = 0;
    for start in (0..count).step_by(BATCH) {
        let batch: Vec<TaskRequest> = (start..count.min(start + BATCH))
            .map(|i| TaskRequest {
                lambda: "sleepy".into(),
                payload: serde_json::json!({
                    "steps": rng.u32(1..=4),
                    "step_ms": rng.u32(5..=60),
                })
                .to_string()
                .into_bytes(),
                run_at: RunAt::Now,
                idempotency_key: Some(format!("soak-{i}")),
                key: (i % 2 == 0).then(|| format!("key-{}", i / 2 % KEYS)),
                ..TaskRequest::default()
            })
            .collect();
        // While the store cannot answer (Postgres is down), wait too.
        while unfinished(&pool).await.is_none_or(|n| n >= IN_FLIGHT) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        loop {
            match frontend.task_schedule_many(batch.clone()).await {
                Ok(inserted) => {
                    ids.extend(inserted.into_iter().map(|t| t.id));
                    break;
                }
                Err(_) => {
                    retries += 1;
                    assert!(retries < 10_000, "the Frontend never came back");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    ids
}

/// Tasks of the soak not yet ended, per the store; `None` while the store
/// cannot answer (Postgres is down).
async fn unfinished(pool: &PgPool) -> Option<i64> {
    let statement = format!(
        "SELECT count(*) FROM tasks WHERE lambda = 'sleepy' \
         AND status IN {}",
        machine::UNFINISHED.sql()
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(statement))
        .fetch_one(pool)
        .await
        .ok()
}

/// Keys among the soak's tasks (every other task has one).
const KEYS: usize = 40;
/// `sleepy`'s concurrency per key.
const KEY_CONCURRENCY: usize = 2;

/// What the store says of one task.
struct Stored {
    lambda: String,
    key: Option<String>,
    status: String,
    lease: i64,
}

/// An ended execution as the store recorded it.
struct Accepted {
    lease: i64,
    outcome: String,
    /// When the store accepted the result (ms since the epoch).
    at_ms: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guarantees_hold_under_chaos() {
    let settings = Settings::from_env();
    let Some(mut cluster) = Cluster::distributed_with(Layout {
        executors: 2,
        hsc_link: true,
        sqs_link: false,
        env: &[],
    })
    .await
    else {
        return;
    };
    cluster
        .deploy("sleepy", samples::SLEEPY, |config| {
            config.max_attempts = 1_000;
            config.concurrency = 64;
            config.key_concurrency = Some(KEY_CONCURRENCY as u32);
        })
        .await;
    let pool = PgPool::connect(cluster.database.as_deref().unwrap())
        .await
        .unwrap();
    let mut chaos = Chaos {
        rng: fastrand::Rng::with_seed(settings.seed),
        deck: Vec::new(),
        queue: SqsQueue::new(cluster.sqs.clone().unwrap()).await,
        key: QueueKey::new("sleepy", 0),
        injected: BTreeMap::new(),
        messages_dropped: 0,
        messages_duplicated: 0,
        operator: Operator::start(
            &cluster,
            settings.seed,
            Duration::from_secs(10) + Duration::from_millis(2 * settings.tasks as u64),
        )
        .await,
    };
    let durable = Durable::start(
        &cluster,
        &pool,
        settings.seed,
        Duration::from_secs(10) + Duration::from_millis(2 * settings.tasks as u64),
    )
    .await;
    eprintln!(
        "soak: {} tasks, seed {} (WAFT_CHAOS_SEED repeats it)",
        settings.tasks, settings.seed
    );

    let began = Instant::now();
    let scheduling = tokio::spawn(schedule_all(
        cluster.frontend.clone(),
        pool.clone(),
        settings.tasks,
        settings.seed,
    ));
    // Faults for as long as tasks run, and at least `min_faults`.
    let deadline = Duration::from_secs(120)
        + Duration::from_millis(40 * settings.tasks as u64)
        + Duration::from_secs(5 * settings.min_faults as u64);
    let mut faults = 0;
    // When the last task ended, as seen between two faults.
    let mut ended: Option<Duration> = None;
    loop {
        if ended.is_none()
            && scheduling.is_finished()
            && unfinished(&pool).await == Some(0)
            && Operator::unfinished(&pool).await == Some(0)
            && Durable::unfinished(&pool).await == Some(0)
        {
            ended = Some(began.elapsed());
        }
        if ended.is_some() && faults >= settings.min_faults {
            break;
        }
        if began.elapsed() >= deadline {
            let stuck: Vec<(String, String, String, i64)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT id, lambda, status, attempt FROM tasks WHERE status IN {} LIMIT 10",
                    machine::UNFINISHED.sql()
                )))
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
            for (id, ..) in stuck.iter().take(3) {
                let attempts: Vec<(i64, String, Option<String>)> = sqlx::query_as(
                    "SELECT attempt, outcome, error FROM attempts WHERE task_id = $1 \
                     ORDER BY attempt DESC LIMIT 3",
                )
                .bind(id)
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
                let journal: Vec<(i64, String, String, i64)> = sqlx::query_as(
                    "SELECT seq, call, summary, attempt FROM journal WHERE task_id = $1 ORDER BY seq",
                )
                .bind(id)
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
                eprintln!("{id}: last attempts {attempts:#?}\njournal {journal:#?}");
            }
            for process in cluster.processes.values() {
                for line in process.log().lines() {
                    if stuck
                        .iter()
                        .take(3)
                        .any(|(id, ..)| line.contains(id.as_str()))
                    {
                        eprintln!("{}: {line}", process.name);
                    }
                }
            }
            panic!(
                "tasks still running after {deadline:?}: {:?} soak, {:?} operator, {:?} durable \
                 unfinished; some: {stuck:?}",
                unfinished(&pool).await,
                Operator::unfinished(&pool).await,
                Durable::unfinished(&pool).await,
            );
        }
        chaos.inject_next(&mut cluster).await;
        faults += 1;
        tokio::time::sleep(settings.pause).await;
    }
    let elapsed = ended.expect("the tasks ended");
    let ids = scheduling.await.unwrap();
    // Anything a fault left running has had time to end (or overlap).
    tokio::time::sleep(Duration::from_secs(1)).await;

    let stored: HashMap<String, Stored> = sqlx::query(
        "SELECT id, lambda, key, status, lease_token FROM tasks \
         WHERE lambda IN ('sleepy', 'durable')",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| {
        (
            row.get("id"),
            Stored {
                lambda: row.get("lambda"),
                key: row.get("key"),
                status: row.get("status"),
                lease: row.get("lease_token"),
            },
        )
    })
    .collect();
    let mut accepted: HashMap<String, Vec<Accepted>> = HashMap::new();
    for row in sqlx::query(
        "SELECT task_id, lease_token, outcome, ended_at FROM attempts WHERE outcome <> 'lost'",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    {
        accepted
            .entry(row.get("task_id"))
            .or_default()
            .push(Accepted {
                lease: row.get("lease_token"),
                outcome: row.get("outcome"),
                at_ms: row.get("ended_at"),
            });
    }
    let mut runs: HashMap<String, Vec<Run>> = HashMap::new();
    for run in cluster.runs() {
        runs.entry(run.task.clone()).or_default().push(run);
    }

    let mut violations = Vec::new();
    let mut executions = 0;
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    let sleepy = stored.values().filter(|t| t.lambda == "sleepy").count();
    if distinct.len() != ids.len() || sleepy != ids.len() {
        violations.push(format!(
            "{} tasks scheduled, {} distinct ids, {sleepy} in the store",
            settings.tasks,
            distinct.len(),
        ));
    }
    let durable_ids = Durable::ids(&pool).await;
    let mut by_key: BTreeMap<String, Vec<(SystemTime, SystemTime, String)>> = BTreeMap::new();
    for id in ids.iter().chain(&durable_ids) {
        let Some(task) = stored.get(id) else {
            violations.push(format!("{id}: lost (not in the store)"));
            continue;
        };
        let mut task_runs = runs.remove(id).unwrap_or_default();
        task_runs.sort_by_key(|run| run.start);
        executions += task_runs.len();
        if let Some(key) = &task.key {
            let spans = task_runs.iter().map(|r| (r.start, r.end, id.clone()));
            by_key.entry(key.clone()).or_default().extend(spans);
        }
        if task.status != "success" {
            violations.push(format!("{id}: ended {}", task.status));
        }
        // Every success ran, under the task's last lease.
        let newest = task_runs.iter().map(|r| r.lease).max();
        let ran = task_runs
            .iter()
            .any(|r| r.lease == task.lease && r.outcome.as_deref() == Some("success"));
        if task.status == "success" && (!ran || newest != Some(task.lease)) {
            violations.push(format!(
                "{id}: success under lease {} without a matching execution (newest ran: {newest:?})",
                task.lease
            ));
        }
        // No overlap, no lease twice.
        for pair in task_runs.windows(2) {
            if pair[1].start < pair[0].end {
                violations.push(format!(
                    "{id}: executions overlapped: lease {} on {} {:?}–{:?} and lease {} on {} from {:?}",
                    pair[0].lease,
                    pair[0].process,
                    pair[0].start,
                    pair[0].end,
                    pair[1].lease,
                    pair[1].process,
                    pair[1].start
                ));
            }
        }
        let mut leases: Vec<i64> = task_runs.iter().map(|r| r.lease).collect();
        leases.sort_unstable();
        if leases.windows(2).any(|w| w[0] == w[1]) {
            violations.push(format!("{id}: a lease ran twice: {leases:?}"));
        }
        // No result accepted after a newer lease started.
        for result in accepted.get(id).into_iter().flatten() {
            let newer_started = task_runs.iter().find(|r| {
                r.lease > result.lease
                    && (r.start.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64)
                        < result.at_ms
            });
            if let Some(newer) = newer_started {
                violations.push(format!(
                    "{id}: {} accepted for stale lease {} after lease {} started",
                    result.outcome, result.lease, newer.lease
                ));
            }
        }
    }
    // No key ever had more executions at once than its limit.
    for (key, spans) in &by_key {
        if let Some(crowd) = crowded(spans, KEY_CONCURRENCY) {
            violations.push(format!(
                "key {key}: {} executions at once (limit {KEY_CONCURRENCY}): {crowd:?}",
                crowd.len()
            ));
        }
    }
    violations.extend(chaos.operator.check(&pool, &mut runs).await);
    violations.extend(durable.check(&pool).await);
    // Executions of tasks nobody scheduled.
    for (task, strays) in &runs {
        violations.push(format!(
            "{task}: {} executions of an unknown task",
            strays.len()
        ));
    }

    let mut summary = String::new();
    let _ = writeln!(summary, "== soak summary (seed {})", settings.seed);
    let _ = writeln!(summary, "tasks: {}", settings.tasks);
    let _ = writeln!(
        summary,
        "faults: {faults} ({} kills), by kind:",
        chaos.kills()
    );
    for (kind, n) in &chaos.injected {
        let _ = writeln!(summary, "  {kind}: {n}");
    }
    let _ = writeln!(summary, "{}", chaos.operator.summary());
    let _ = writeln!(summary, "{}", durable.summary());
    let _ = writeln!(
        summary,
        "queue messages dropped: {}, duplicated: {}",
        chaos.messages_dropped, chaos.messages_duplicated
    );
    let _ = writeln!(
        summary,
        "executions: {executions}, re-executions: {}",
        executions.saturating_sub(ids.len() + durable_ids.len())
    );
    let _ = writeln!(
        summary,
        "tasks ended after {elapsed:.1?}: {:.0} tasks/s under chaos",
        ids.len() as f64 / elapsed.as_secs_f64()
    );
    let _ = writeln!(summary, "violations: {}", violations.len());
    for violation in violations.iter().take(20) {
        let _ = writeln!(summary, "  {violation}");
    }
    eprintln!("{summary}");
    if !violations.is_empty() {
        // What every process said of the first tasks in question.
        let suspects: Vec<&str> = violations
            .iter()
            .filter_map(|v| v.split(':').next())
            .take(3)
            .collect();
        for process in cluster.processes.values() {
            for line in process.log().lines() {
                if suspects.iter().any(|id| line.contains(id)) {
                    eprintln!("{}: {line}", process.name);
                }
            }
        }
    }
    assert!(violations.is_empty(), "{summary}");
}

/// The first moment more than `limit` of `spans` (start, end, task) ran at
/// once, as the tasks running then; spans that only touch do not overlap.
fn crowded(spans: &[(SystemTime, SystemTime, String)], limit: usize) -> Option<Vec<String>> {
    let mut starts: Vec<&(SystemTime, SystemTime, String)> = spans.iter().collect();
    starts.sort_by_key(|span| span.0);
    for (i, span) in starts.iter().enumerate() {
        let running: Vec<String> = starts[..=i]
            .iter()
            .filter(|other| other.1 > span.0)
            .map(|other| other.2.clone())
            .collect();
        if running.len() > limit {
            return Some(running);
        }
    }
    None
}
