//! Migration 0015 (journals) under a database with work in flight: a task
//! claimed before the upgrade finishes after it with a journal write, which
//! pins the version the task runs though its claim recorded none; rows
//! written before read back with the new columns' defaults.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use waft_core::{OnDivergence, TaskStatus};
use waft_store::{
    AttemptOutcome, JournalEntry, JournalWrite, PostgresStore, ResultOutcome, SqliteStore,
    TaskClaimMany, TaskEnqueueReady, TaskJournalRead, TaskResult, TaskSetResultMany, TaskStore,
};

const T0: i64 = 1_800_000_000_000;

/// Migrates `$pool` to 0014, writes a lambda at version 1 and a task
/// claimed under lease 1 with one attempt lost before, then reopens the
/// store with `$reopen` (which migrates to the newest) and finishes it.
macro_rules! a_claim_made_before_0015_finishes_after_it {
    ($pool:expr, $migrations:literal, $reopen:expr) => {{
        let pool = $pool;
        sqlx::migrate!($migrations).run_to(14, &pool).await.unwrap();
        let rows = [
            sqlx::query("INSERT INTO components (digest, bytes, created_at) VALUES ('d', $1, 0)")
                .bind(vec![0u8]),
            sqlx::query(
                "INSERT INTO lambdas (name, current_version, created_at) VALUES ('l', 1, 0)",
            ),
            sqlx::query(
                "INSERT INTO lambda_versions (lambda, version, digest, max_memory, timeout_ms, \
                 max_output, max_log, max_attempts, backoff_base_ms, backoff_factor, \
                 backoff_max_ms, priorities, default_priority, max_payload, concurrency, \
                 created_at) VALUES ('l', 1, 'd', 1048576, 1000, 1024, 1024, 3, 10, 2.0, 100, \
                 1, 0, 1024, 1, 0)",
            ),
            sqlx::query(
                "INSERT INTO tasks (id, lambda, collection, priority, payload, status, attempt, \
                 max_attempts, scheduled_at, due_at, next_trigger_at, lease_token, created_at, \
                 claimed_at) VALUES ('t', 'l', 'default', 0, $1, $2, 1, 3, $3, $3, $4, 1, $3, $3)",
            )
            .bind(vec![0u8])
            .bind(TaskStatus::Claimed.as_str())
            .bind(T0)
            .bind(T0 + 30_000),
            sqlx::query(
                "INSERT INTO attempts (task_id, lease_token, attempt, outcome, ended_at) \
                 VALUES ('t', 0, 1, $1, $2)",
            )
            .bind(AttemptOutcome::Lost.as_str())
            .bind(T0),
        ];
        for row in rows {
            row.execute(&pool).await.unwrap();
        }
        pool.close().await;
        let store = $reopen.await;
        finishes_and_replays(&store).await;
    }};
}

/// The upgraded store finishes the in-flight task with a journal write and
/// hands the journal, on version 1, to its next claim.
async fn finishes_and_replays(store: &dyn TaskStore) {
    let lambda = store.lambda_get("l").await.unwrap().unwrap();
    assert_eq!(lambda.config.on_divergence, OnDivergence::Fail);
    let entry = JournalEntry {
        seq: 0,
        call: "wasi:random/random.get-random-u64".into(),
        digest: vec![1; 32],
        answer: vec![2; 8],
        summary: "a random number".into(),
        outside: false,
        attempt: 1,
        at: T0 + 1,
        took_us: 5,
    };
    let answers = store
        .task_set_result_many(TaskSetResultMany {
            results: vec![TaskResult {
                id: "t".into(),
                lease_token: 1,
                outcome: ResultOutcome::Retriable {
                    error: "again".into(),
                    retry_after: Some(Duration::from_millis(1)),
                },
                log: None,
                journal: Some(JournalWrite {
                    from: 0,
                    entries: vec![entry.clone()],
                }),
                replayed: 0,
            }],
            now: T0 + 2,
        })
        .await
        .unwrap();
    assert_eq!(answers, [Ok(TaskStatus::RetriableFailure)]);
    let read = TaskJournalRead {
        id: "t".into(),
        from: 0,
        limit: 10,
        without_answers: false,
    };
    assert_eq!(store.task_journal(read).await.unwrap(), [entry]);
    let replayed: Vec<_> = store
        .attempt_list("t")
        .await
        .unwrap()
        .iter()
        .map(|a| (a.lease_token, a.replayed))
        .collect();
    assert_eq!(replayed, [(0, 0), (1, 0)]);
    let queued = store
        .task_enqueue_ready(TaskEnqueueReady {
            now: T0 + 10,
            limit: 10,
            enqueue_timeout: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .enqueued;
    let claimed = store
        .task_claim_many(TaskClaimMany {
            claims: vec![("t".into(), queued[0].enqueue_token)],
            now: T0 + 10,
            claim_timeout: Duration::from_secs(30),
        })
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!((claimed.lambda_version, claimed.journal_len), (1, 1));
}

#[tokio::test]
async fn sqlite_a_claim_made_before_0015_finishes_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waft.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .foreign_keys(true);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    a_claim_made_before_0015_finishes_after_it!(pool, "./migrations/sqlite", async {
        SqliteStore::open(&path).await.unwrap()
    });
}

#[tokio::test]
async fn postgres_a_claim_made_before_0015_finishes_after_it() {
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let url = server.fresh_database().await;
    let pool = PgPool::connect(&url).await.unwrap();
    a_claim_made_before_0015_finishes_after_it!(pool, "./migrations/postgres", async {
        PostgresStore::connect(&url, 2).await.unwrap()
    });
}
