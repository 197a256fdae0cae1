//! Store throughput and poll cost, for every backend, in one run.
//!
//! ```sh
//! cargo bench -p waft-store --bench throughput            # defaults
//! cargo bench -p waft-store --bench throughput -- 200000 1000 1000000
//! #                                    tasks ^  batch ^  future tasks ^
//! WAFT_BENCH_KEYS=1000 WAFT_BENCH_BACKENDS=sqlite cargo bench -p waft-store --bench throughput
//! ```
//!
//! With `WAFT_BENCH_KEYS=N`, each backend runs its rounds twice more, the
//! tasks spread over N keys (in a lambda without limits), alternated with
//! rounds without keys: what a key costs each transition, in one run.
//! `WAFT_BENCH_BACKENDS=sqlite` (or `postgres`) measures one backend.
//!
//! Both backends run durable: SQLite with `synchronous=FULL` in WAL mode,
//! Postgres on a cluster of its own with PostgreSQL's default `fsync=on`.
//! Each phase drives one state transition for every task, in batches:
//! insert (→ new), poll (→ enqueued), claim (→ claimed), heartbeat
//! (→ processing), result (→ success), first from one caller, then from two
//! at once (as several replicas would). Then it measures the poll's latency
//! with a million future tasks in the table against an empty table.

use std::time::{Duration, Instant};

use futures::future::join_all;
use waft_core::LambdaConfig;
use waft_store::{
    EnqueuedTask, Heartbeat, LambdaDeploy, NewTask, PostgresStore, ResultOutcome, SqliteStore,
    TaskClaimMany, TaskEnqueueReady, TaskHeartbeatMany, TaskInsertMany, TaskResult,
    TaskSetResultMany, TaskStore,
};
use waft_testing::{Durability, TestPostgres};

const NOW: i64 = 1_800_000_000_000;
const LONG: Duration = Duration::from_secs(3600);

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let tasks = args.first().copied().unwrap_or(100_000);
    let batch = args.get(1).copied().unwrap_or(1_000);
    let future = args.get(2).copied().unwrap_or(1_000_000);
    let shape = Shape {
        tasks,
        batch,
        future,
        keys: std::env::var("WAFT_BENCH_KEYS")
            .ok()
            .and_then(|k| k.parse().ok())
            .filter(|&keys: &usize| keys > 0),
    };
    let backends = std::env::var("WAFT_BENCH_BACKENDS").unwrap_or_default();
    let measures = |backend: &str| backends.is_empty() || backends.contains(backend);
    let runtime = tokio::runtime::Runtime::new().expect("tokio");
    runtime.block_on(async {
        println!("{tasks} tasks in batches of {batch}; poll latency with {future} future tasks");
        println!(
            "{:<20} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "backend", "insert/s", "poll/s", "claim/s", "beat/s", "result/s"
        );
        if measures("sqlite") {
            let dir = tempfile::tempdir().expect("tempdir");
            let sqlite = SqliteStore::open(&dir.path().join("bench.db"))
                .await
                .expect("sqlite");
            run("sqlite", &sqlite, &shape).await;
            println!(
                "sqlite: {} write transactions committed in all (concurrent calls share them)",
                sqlite.commits()
            );
        }
        if measures("postgres") {
            let server =
                TestPostgres::start(Durability::Full).expect("a durable PostgreSQL cluster");
            let url = server.fresh_database().await;
            let postgres = PostgresStore::connect(&url, 8).await.expect("postgres");
            run("postgres", &postgres, &shape).await;
        }
    });
}

/// What one run measures.
struct Shape {
    tasks: usize,
    batch: usize,
    future: usize,
    /// Keys the keyed rounds spread their tasks over; no keyed rounds when
    /// absent.
    keys: Option<usize>,
}

async fn run(name: &str, store: &dyn TaskStore, shape: &Shape) {
    let Shape {
        tasks,
        batch,
        future,
        keys,
    } = *shape;
    store
        .lambda_deploy(LambdaDeploy {
            name: "bench".into(),
            digest: "bench".into(),
            component: Vec::new(),
            artifact: None,
            config: LambdaConfig::default(),
            now: NOW,
        })
        .await
        .expect("deploy");
    // Keyed rounds alternate with unkeyed ones, so that both see a table
    // of about the same size.
    let rounds: &[Option<usize>] = match keys {
        Some(keys) => &[None, Some(keys), None, Some(keys)],
        None => &[None],
    };
    for streams in [1, 2] {
        for &keys in rounds {
            let [insert, poll, claim, beat, result] =
                throughput(store, tasks, batch, streams, keys).await;
            let label = match keys {
                Some(keys) => format!("{name} x{streams} {keys} keys"),
                None => format!("{name} x{streams}"),
            };
            println!(
                "{label:<20} {insert:>10.0} {poll:>10.0} {claim:>10.0} {beat:>10.0} {result:>10.0}"
            );
        }
    }
    // Poll latency: 100 due tasks, first alone, then beside `future` tasks
    // scheduled far ahead.
    let empty = poll_latency(store).await;
    let far = NOW + 365 * 86_400_000;
    for _ in 0..future.div_ceil(10_000) {
        let tasks = (0..10_000)
            .map(|_| NewTask {
                run_at: Some(far),
                ..task(None)
            })
            .collect();
        store
            .task_insert_many(TaskInsertMany { tasks, now: NOW })
            .await
            .expect("insert future");
    }
    let crowded = poll_latency(store).await;
    println!(
        "{name:<12} poll of 100 due tasks: {:.2} ms alone, {:.2} ms beside {future} future tasks",
        empty.as_secs_f64() * 1e3,
        crowded.as_secs_f64() * 1e3,
    );
}

/// The `n`th task of a round, of key `n % keys` when the round has keys.
fn task(keys: Option<(usize, usize)>) -> NewTask {
    NewTask {
        lambda: "bench".into(),
        payload: b"{\"n\":1}".to_vec(),
        key: keys.map(|(n, keys)| format!("customer-{}", n % keys)),
        ..NewTask::default()
    }
}

/// A claimed task: its id and lease.
struct Lease {
    id: String,
    token: i64,
}

/// Transitions per second of each phase (insert, poll, claim, heartbeat,
/// result), `tasks` tasks in all, split over `streams` concurrent callers
/// (as several consumers, controllers and HSC replicas would be), spread
/// over `keys` keys when given.
async fn throughput(
    store: &dyn TaskStore,
    tasks: usize,
    batch: usize,
    streams: usize,
    keys: Option<usize>,
) -> [f64; 5] {
    let started = Instant::now();
    let inserted = insert(store, tasks / streams, batch, streams, keys).await;
    let insert = rate(inserted, started);
    let started = Instant::now();
    let enqueued = poll(store, batch, streams).await;
    let poll = rate(enqueued.len(), started);
    let started = Instant::now();
    let leases = claim(store, &enqueued, batch, streams).await;
    let claim = rate(leases.len(), started);
    let slices: Vec<&[Lease]> = leases
        .chunks(leases.len().div_ceil(streams).max(1))
        .collect();
    let started = Instant::now();
    heartbeat(store, &slices, batch).await;
    let beat = rate(leases.len(), started);
    let started = Instant::now();
    succeed(store, &slices, batch).await;
    let result = rate(leases.len(), started);
    [insert, poll, claim, beat, result]
}

/// Inserts `share` tasks from each stream, `batch` a call; answers how many.
async fn insert(
    store: &dyn TaskStore,
    share: usize,
    batch: usize,
    streams: usize,
    keys: Option<usize>,
) -> usize {
    join_all((0..streams).map(|_| async {
        for call in 0..share.div_ceil(batch) {
            let tasks = (0..batch)
                .map(|n| task(keys.map(|keys| (call * batch + n, keys))))
                .collect();
            store
                .task_insert_many(TaskInsertMany { tasks, now: NOW })
                .await
                .expect("insert");
        }
    }))
    .await;
    share * streams
}

/// Polls from every stream until nothing is due; answers what was enqueued.
async fn poll(store: &dyn TaskStore, batch: usize, streams: usize) -> Vec<EnqueuedTask> {
    join_all((0..streams).map(|_| async {
        let mut mine = Vec::new();
        loop {
            let report = store
                .task_enqueue_ready(TaskEnqueueReady {
                    now: NOW,
                    limit: batch as u32,
                    enqueue_timeout: LONG,
                })
                .await
                .expect("poll");
            if report.enqueued.is_empty() {
                return mine;
            }
            mine.extend(report.enqueued);
        }
    }))
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// Claims the enqueued tasks, a slice per stream; answers the leases.
async fn claim(
    store: &dyn TaskStore,
    enqueued: &[EnqueuedTask],
    batch: usize,
    streams: usize,
) -> Vec<Lease> {
    let slices: Vec<&[EnqueuedTask]> = enqueued
        .chunks(enqueued.len().div_ceil(streams).max(1))
        .collect();
    join_all(slices.iter().map(|slice| async move {
        let mut mine = Vec::new();
        for chunk in slice.chunks(batch) {
            let claims = chunk
                .iter()
                .map(|t| (t.id.clone(), t.enqueue_token))
                .collect();
            let answers = store
                .task_claim_many(TaskClaimMany {
                    claims,
                    now: NOW,
                    claim_timeout: LONG,
                })
                .await
                .expect("claim");
            mine.extend(
                answers
                    .into_iter()
                    .map(|a| a.expect("claimed"))
                    .map(|c| Lease {
                        id: c.id,
                        token: c.lease_token,
                    }),
            );
        }
        mine
    }))
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// Heartbeats every lease once, a slice per stream.
async fn heartbeat(store: &dyn TaskStore, slices: &[&[Lease]], batch: usize) {
    join_all(slices.iter().map(|slice| async move {
        for chunk in slice.chunks(batch) {
            let beats = chunk
                .iter()
                .map(|lease| Heartbeat {
                    id: lease.id.clone(),
                    lease_token: lease.token,
                    progress: None,
                })
                .collect();
            store
                .task_heartbeat_many(TaskHeartbeatMany {
                    beats,
                    now: NOW,
                    heartbeat_timeout: LONG,
                })
                .await
                .expect("heartbeat");
        }
    }))
    .await;
}

/// Ends every lease with a success, a slice per stream.
async fn succeed(store: &dyn TaskStore, slices: &[&[Lease]], batch: usize) {
    join_all(slices.iter().map(|slice| async move {
        for chunk in slice.chunks(batch) {
            let results = chunk
                .iter()
                .map(|lease| TaskResult {
                    id: lease.id.clone(),
                    lease_token: lease.token,
                    outcome: ResultOutcome::Success { output: None },
                    log: None,
                    journal: None,
                    replayed: 0,
                })
                .collect();
            store
                .task_set_result_many(TaskSetResultMany { results, now: NOW })
                .await
                .expect("result");
        }
    }))
    .await;
}

fn rate(count: usize, started: Instant) -> f64 {
    count as f64 / started.elapsed().as_secs_f64()
}

/// Median time of a poll that finds 100 due tasks, over 20 rounds.
async fn poll_latency(store: &dyn TaskStore) -> Duration {
    let mut samples = Vec::new();
    for round in 0..20 {
        let now = NOW + 1 + round;
        let tasks = (0..100)
            .map(|_| NewTask {
                run_at: Some(now),
                ..task(None)
            })
            .collect();
        store
            .task_insert_many(TaskInsertMany { tasks, now: NOW })
            .await
            .expect("insert due");
        let started = Instant::now();
        let report = store
            .task_enqueue_ready(TaskEnqueueReady {
                now,
                limit: 100,
                enqueue_timeout: LONG,
            })
            .await
            .expect("poll");
        samples.push(started.elapsed());
        assert_eq!(report.enqueued.len(), 100);
    }
    samples.sort();
    samples[samples.len() / 2]
}
