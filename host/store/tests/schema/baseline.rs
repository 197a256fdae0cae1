//! The baseline of each dialect against the chain of migrations it
//! replaces: a database migrated by either holds one schema, exactly.

use std::path::{Path, PathBuf};

use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

use crate::{read, shape};

/// A directory of migrations of this crate.
fn migrations(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// `dir`'s migrations run on a fresh SQLite file, read back.
async fn sqlite_schema(dir: &str) -> shape::Schema {
    let file = tempfile::tempdir().unwrap();
    let options = SqliteConnectOptions::new()
        .filename(file.path().join("waft.db"))
        .create_if_missing(true)
        .foreign_keys(true);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    let migrator = Migrator::new(migrations(dir)).await.unwrap();
    migrator.run(&pool).await.unwrap();
    read::sqlite(&pool).await
}

/// `dir`'s migrations run on a fresh database of the test cluster, read
/// back; `None` (outside CI only) when PostgreSQL is unavailable here.
async fn postgres_schema(dir: &str) -> Option<shape::Schema> {
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping: PostgreSQL is not available here");
        return None;
    };
    let pool = PgPool::connect(&server.fresh_database().await)
        .await
        .unwrap();
    let migrator = Migrator::new(migrations(dir)).await.unwrap();
    migrator.run(&pool).await.unwrap();
    Some(read::postgres(&pool).await)
}

fn assert_one_schema(chain: &shape::Schema, baseline: &shape::Schema) {
    assert!(chain.tables.contains_key("tasks"), "{chain:?}");
    let differences = shape::exact_differences(chain, baseline, "the chain", "the baseline");
    assert!(
        differences.is_empty(),
        "the baseline differs from the chain:\n{}",
        differences.join("\n")
    );
    eprintln!(
        "one schema: {} lines alike ({} tables, {} triggers, {} views, {} definitions, {} rows)",
        shape::lines(chain).len(),
        chain.tables.len(),
        chain.triggers.len(),
        chain.views.len(),
        chain.native.len(),
        chain.rows.values().map(Vec::len).sum::<usize>(),
    );
}

#[tokio::test]
async fn sqlite_baseline_makes_the_chains_schema() {
    let chain = sqlite_schema("migrations/sqlite").await;
    let baseline = sqlite_schema("tests/schema/baseline/sqlite").await;
    assert_one_schema(&chain, &baseline);
}

#[tokio::test]
async fn postgres_baseline_makes_the_chains_schema() {
    let Some(chain) = postgres_schema("migrations/postgres").await else {
        return;
    };
    let Some(baseline) = postgres_schema("tests/schema/baseline/postgres").await else {
        return;
    };
    assert_one_schema(&chain, &baseline);
}
