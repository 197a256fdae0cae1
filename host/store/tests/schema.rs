//! The schema, as each database holds it once migrated.
//!
//! The two backends' migrations are written twice, once per database
//! (`migrations/sqlite`, `migrations/postgres`). The checks here migrate a
//! SQLite file and a database of the throwaway PostgreSQL cluster (see
//! `waft-testing`; under `CI=true` the Postgres half fails rather than skips
//! when it cannot start), and ask each database what it holds.

use sqlx::error::ErrorKind;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{Executor, PgPool};
use waft_core::TaskStatus;
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
                .bind("suspended")
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
