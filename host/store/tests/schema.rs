//! The schema, as each database holds it once migrated.
//!
//! The two backends' migrations are written twice, once per database
//! (`migrations/sqlite`, `migrations/postgres`). The checks here migrate a
//! SQLite file and a database of the throwaway PostgreSQL cluster (see
//! `waft-testing`; under `CI=true` the Postgres half fails rather than skips
//! when it cannot start), and ask each database what it holds: the two
//! schemas must be one (`schema/shape.rs` says which spellings of a type or
//! a predicate mean the same in both).

#[path = "schema/baseline.rs"]
mod baseline;
#[path = "schema/journal_upgrade.rs"]
mod journal_upgrade;
#[path = "schema/read.rs"]
mod read;
#[path = "schema/shape.rs"]
mod shape;

use sqlx::error::ErrorKind;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{Executor, PgPool};
use waft_core::TaskStatus;
use waft_store::{AttemptOutcome, GateState, TaskStore, TokenRole};
use waft_store::{PostgresStore, SqliteStore};

/// A migrated SQLite file, opened directly.
async fn sqlite() -> (SqlitePool, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waft.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .foreign_keys(true);
    (SqlitePool::connect_with(options).await.unwrap(), dir)
}

/// A migrated database of the test cluster, opened directly; `None`
/// (outside CI only) when PostgreSQL is unavailable here.
async fn postgres() -> Option<PgPool> {
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping the Postgres half: PostgreSQL is not available here");
        return None;
    };
    let url = server.fresh_database().await;
    drop(PostgresStore::connect(&url, 2).await.unwrap());
    Some(PgPool::connect(&url).await.unwrap())
}

/// Writes a task, then a name outside the model into each state column:
/// the database refuses every one with a check violation. The same
/// statements run on both backends.
macro_rules! refuses_unknown_states {
    ($pool:expr) => {{
        let pool = $pool;
        pool.execute("INSERT INTO lambdas (name, current_version, created_at) VALUES ('l', 1, 0)")
            .await
            .unwrap();
        let insert_task = "INSERT INTO tasks (id, lambda, collection, priority, payload, status, \
             max_attempts, scheduled_at, due_at, created_at) \
             VALUES ('t', 'l', 'default', 0, $1, $2, 1, 0, 0, 0)";
        sqlx::query(insert_task)
            .bind(b"{}".to_vec())
            .bind(TaskStatus::New.as_str())
            .execute(&pool)
            .await
            .expect("a known status is written");
        let unknown = [
            "UPDATE tasks SET status = $1 WHERE id = 't'",
            "INSERT INTO attempts (task_id, lease_token, attempt, outcome, ended_at) \
             VALUES ('t', 1, 1, $1, 0)",
            "INSERT INTO gates (lambda, collection, state, updated_at) VALUES ('l', '', $1, 0)",
            "INSERT INTO tokens (id, name, role, lambdas, hash, created_at) \
             VALUES ('k', 'k', $1, '[]', 'h', 0)",
        ];
        for statement in unknown {
            let refused = sqlx::query(statement)
                .bind("snoozed")
                .execute(&pool)
                .await
                .expect_err(statement);
            let kind = refused.as_database_error().map(|error| error.kind());
            assert!(
                matches!(kind, Some(ErrorKind::CheckViolation)),
                "{statement}: {refused}"
            );
        }
    }};
}

#[tokio::test]
async fn sqlite_refuses_unknown_states() {
    let (pool, _dir) = sqlite().await;
    refuses_unknown_states!(pool);
}

#[tokio::test]
async fn postgres_refuses_unknown_states() {
    let Some(pool) = postgres().await else { return };
    refuses_unknown_states!(pool);
}

/// Rows written before migration 0014 (on a database migrated to 0013)
/// are all there after it: tasks, their attempts, gates, tokens, and a
/// periodic occurrence whose key moves to the `cron:` prefix while a
/// client's key stays as it was.
macro_rules! upgrade_keeps_every_row {
    ($pool:expr, $migrations:literal, $reopen:expr) => {{
        let pool = $pool;
        sqlx::migrate!($migrations).run_to(13, &pool).await.unwrap();
        let payload = Vec::<u8>::new();
        let rows = [
            sqlx::query(
                "INSERT INTO lambdas (name, current_version, created_at) VALUES ('l', 1, 0)",
            ),
            sqlx::query(
                "INSERT INTO schedules (id, lambda, cron, timezone, payload, catch_up, next_at, \
                 created_at) VALUES ('c1', 'l', '* * * * *', 'UTC', $1, FALSE, 0, 0)",
            )
            .bind(payload.clone()),
            sqlx::query(
                "INSERT INTO tasks (id, lambda, collection, priority, payload, status, \
                 max_attempts, scheduled_at, due_at, created_at, idempotency_key, schedule_id) \
                 VALUES ('t1', 'l', 'default', 0, $1, $2, 1, 0, 0, 0, 'schedule:c1:60000', 'c1'), \
                 ('t2', 'l', 'default', 0, $1, $3, 1, 0, 0, 0, 'schedule:mine', NULL)",
            )
            .bind(payload)
            .bind(TaskStatus::Dead.as_str())
            .bind(TaskStatus::New.as_str()),
            sqlx::query(
                "INSERT INTO attempts (task_id, lease_token, attempt, outcome, ended_at) \
                 VALUES ('t1', 1, 1, $1, 0)",
            )
            .bind(AttemptOutcome::Lost.as_str()),
            sqlx::query(
                "INSERT INTO gates (lambda, collection, state, updated_at) VALUES ('l', '', $1, 0)",
            )
            .bind(GateState::Paused.as_str()),
            sqlx::query(
                "INSERT INTO tokens (id, name, role, lambdas, hash, created_at) \
                 VALUES ('k', 'k', $1, '[]', 'h', 0)",
            )
            .bind(TokenRole::Admin.as_str()),
        ];
        for row in rows {
            row.execute(&pool).await.unwrap();
        }
        pool.close().await;
        let (store, pool) = $reopen.await;
        let t1 = store.task_get("t1").await.unwrap().unwrap();
        assert_eq!(t1.idempotency_key.as_deref(), Some("cron:c1:60000"));
        assert_eq!(t1.cron_id.as_deref(), Some("c1"));
        let t2 = store.task_get("t2").await.unwrap().unwrap();
        assert_eq!(t2.idempotency_key.as_deref(), Some("schedule:mine"));
        assert_eq!(store.attempt_list("t1").await.unwrap().len(), 1);
        assert_eq!(store.gate_list().await.unwrap().len(), 1);
        assert_eq!(store.token_list().await.unwrap().len(), 1);
        assert_eq!(store.cron_list().await.unwrap().len(), 1);
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tasks")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(count, 2);
    }};
}

#[tokio::test]
async fn sqlite_upgrade_keeps_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waft.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .foreign_keys(true);
    let pool = SqlitePool::connect_with(options.clone()).await.unwrap();
    upgrade_keeps_every_row!(pool, "./migrations/sqlite", async {
        let store = SqliteStore::open(&path).await.unwrap();
        let pool = SqlitePool::connect_with(options).await.unwrap();
        let broken: Vec<(String,)> =
            sqlx::query_as("SELECT \"table\" FROM pragma_foreign_key_check")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert!(broken.is_empty(), "foreign keys broken in {broken:?}");
        (store, pool)
    });
}

#[tokio::test]
async fn postgres_upgrade_keeps_every_row() {
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let url = server.fresh_database().await;
    let pool = PgPool::connect(&url).await.unwrap();
    upgrade_keeps_every_row!(pool, "./migrations/postgres", async {
        let store = PostgresStore::connect(&url, 2).await.unwrap();
        (store, PgPool::connect(&url).await.unwrap())
    });
}

/// Both backends, migrated, hold the same tables, columns (by the type
/// mapping of [`shape::SAME_TYPE`]), nullability, keys, checks and indexes
/// with their predicates.
#[tokio::test]
async fn both_databases_hold_one_schema() {
    let (sqlite, _dir) = sqlite().await;
    let Some(postgres) = postgres().await else {
        return;
    };
    let sqlite = read::sqlite(&sqlite).await;
    let postgres = read::postgres(&postgres).await;
    assert!(sqlite.tables.contains_key("tasks"), "{sqlite:?}");
    let differences = shape::differences(&sqlite, &postgres);
    assert!(
        differences.is_empty(),
        "the schemas differ:\n{}",
        differences.join("\n")
    );
}

/// What opening a database that a newer release migrated answers.
fn assert_refused_as_newer(error: waft_store::StoreError) {
    assert!(
        matches!(
            error,
            waft_store::StoreError::SchemaNewer { applied: 9999, .. }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("migration 9999") && message.contains("newer Waft"),
        "{message}"
    );
}

/// A migration this binary does not carry, as a newer release records it.
const NEWER_MIGRATION: &str = "INSERT INTO _sqlx_migrations \
     (version, description, success, checksum, execution_time) \
     VALUES (9999, 'from a newer release', true, X'00', 0)";

#[tokio::test]
async fn sqlite_a_schema_newer_than_the_binary_is_refused_at_start() {
    let (pool, dir) = sqlite().await;
    pool.execute(NEWER_MIGRATION).await.unwrap();
    pool.close().await;
    let error = SqliteStore::open(&dir.path().join("waft.db"))
        .await
        .unwrap_err();
    assert_refused_as_newer(error);
}

#[tokio::test]
async fn postgres_a_schema_newer_than_the_binary_is_refused_at_start() {
    let Some(server) = waft_testing::postgres() else {
        return;
    };
    let url = server.fresh_database().await;
    drop(PostgresStore::connect(&url, 2).await.unwrap());
    let pool = PgPool::connect(&url).await.unwrap();
    // Postgres spells a bytea literal its own way.
    pool.execute(sqlx::AssertSqlSafe(
        NEWER_MIGRATION.replace("X'00'", "'\\x00'::bytea"),
    ))
    .await
    .unwrap();
    pool.close().await;
    let error = PostgresStore::connect(&url, 2).await.unwrap_err();
    assert_refused_as_newer(error);
}

/// Lambda versions deployed fair before migration 0030 keep the lookahead
/// of that time, 500; versions that were not fair stay so.
macro_rules! fair_versions_keep_their_lookahead {
    ($pool:expr, $migrations:literal, $reopen:expr) => {{
        let pool = $pool;
        sqlx::migrate!($migrations).run_to(29, &pool).await.unwrap();
        sqlx::query("INSERT INTO components (digest, bytes, created_at) VALUES ('d', $1, 0)")
            .bind(vec![0u8])
            .execute(&pool)
            .await
            .unwrap();
        let rows = [
            "INSERT INTO lambdas (name, current_version, created_at) \
             VALUES ('fair', 1, 0), ('plain', 1, 0)",
            "INSERT INTO lambda_versions (lambda, version, digest, max_memory, timeout_ms, \
             max_output, max_log, max_attempts, backoff_base_ms, backoff_factor, \
             backoff_max_ms, priorities, default_priority, max_payload, concurrency, \
             created_at, key_fairness) VALUES \
             ('fair', 1, 'd', 1048576, 1000, 1024, 1024, 3, 1000, 2.0, 60000, 1, 0, 1024, 1, 0, \
              '{\"gold\":2}'), \
             ('plain', 1, 'd', 1048576, 1000, 1024, 1024, 3, 1000, 2.0, 60000, 1, 0, 1024, 1, 0, \
              NULL)",
        ];
        for row in rows {
            sqlx::query(row).execute(&pool).await.unwrap();
        }
        pool.close().await;
        let store = $reopen.await;
        let fair = store.lambda_get("fair").await.unwrap().unwrap();
        let fairness = fair.config.key_fairness.unwrap();
        assert_eq!((fairness.lookahead, fairness.weight("gold")), (500, 2));
        let plain = store.lambda_get("plain").await.unwrap().unwrap();
        assert_eq!(plain.config.key_fairness, None);
    }};
}

#[tokio::test]
async fn sqlite_fair_versions_keep_their_lookahead() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waft.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    fair_versions_keep_their_lookahead!(pool, "./migrations/sqlite", async {
        SqliteStore::open(&path).await.unwrap()
    });
}

#[tokio::test]
async fn postgres_fair_versions_keep_their_lookahead() {
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let url = server.fresh_database().await;
    let pool = PgPool::connect(&url).await.unwrap();
    fair_versions_keep_their_lookahead!(pool, "./migrations/postgres", async {
        PostgresStore::connect(&url, 2).await.unwrap()
    });
}
