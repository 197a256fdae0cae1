//! The schema, as each database holds it once migrated, and the databases
//! a binary refuses to start on.
//!
//! The two backends' migrations are written twice, once per database
//! (`migrations/sqlite`, `migrations/postgres`): the baseline of release
//! 0.1.0, then a pair per change. The checks here migrate a SQLite file and
//! a database of the throwaway PostgreSQL cluster (see `waft-testing`;
//! under `CI=true` the Postgres half fails rather than skips when it cannot
//! start), and ask each database what it holds: the two schemas must be one
//! (`schema/shape.rs` says which spellings of a type, a default or a
//! predicate mean the same in both). A database a newer release migrated,
//! or one a build from before 0.1.0 made, is refused at start with what to
//! do.

#[path = "schema/read.rs"]
mod read;
#[path = "schema/shape.rs"]
mod shape;

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

/// Both backends, migrated, hold the same tables, columns (by the type
/// mapping of [`shape::SAME_TYPE`]) in one order, nullability, defaults,
/// keys, checks, indexes with their predicates, triggers, views and rows.
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

/// The migrations of a build from before the first release, as far as
/// opening a database tells: a first migration of other text, and the
/// newest, 36. Written to a temporary directory.
fn pre_release_migrations() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "0001_tasks.sql",
            "CREATE TABLE early (id TEXT PRIMARY KEY);",
        ),
        (
            "0036_journal_generation.sql",
            "CREATE TABLE later (id TEXT PRIMARY KEY);",
        ),
    ];
    for (name, sql) in files {
        std::fs::write(dir.path().join(name), sql).unwrap();
    }
    dir
}

/// What opening a database a pre-release build made answers: what it is,
/// and what to do, naming the database (`place`).
fn assert_refused_as_pre_release(error: waft_store::StoreError, place: &str) {
    assert!(
        matches!(
            error,
            waft_store::StoreError::PreRelease { applied: 36, .. }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    let expected = format!(
        "this database was made by a pre-release build of Waft (schema version 36); \
         Waft {} starts from a new database",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        message.contains(&expected) && message.contains(place),
        "{message}"
    );
}

#[tokio::test]
async fn sqlite_a_pre_release_database_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waft.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    let migrations = pre_release_migrations();
    let old = sqlx::migrate::Migrator::new(migrations.path())
        .await
        .unwrap();
    old.run(&pool).await.unwrap();
    pool.close().await;
    let error = SqliteStore::open(&path).await.unwrap_err();
    assert_refused_as_pre_release(error, &format!("move {} aside", path.display()));
}

#[tokio::test]
async fn postgres_a_pre_release_database_is_refused_at_start() {
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let url = server.fresh_database().await;
    let pool = PgPool::connect(&url).await.unwrap();
    let migrations = pre_release_migrations();
    let old = sqlx::migrate::Migrator::new(migrations.path())
        .await
        .unwrap();
    old.run(&pool).await.unwrap();
    pool.close().await;
    let database = url.rsplit('/').next().unwrap();
    let error = PostgresStore::connect(&url, 2).await.unwrap_err();
    assert_refused_as_pre_release(error, &format!("drop database {database} and create"));
}
