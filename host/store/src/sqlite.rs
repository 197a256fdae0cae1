//! The SQLite backend: the embedded default, one file in WAL mode.
//!
//! SQLite has one writer at a time, so every writing call goes to one writer
//! task that commits the calls waiting together ([`crate::group_commit`]),
//! in a transaction begun with `BEGIN IMMEDIATE`: it takes the write lock up
//! front instead of failing when a read turns into a write. That also makes
//! several consumers in one process safe without row locks. Reads use the
//! pool's other connections, and see each group once it has committed.

use std::path::Path;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

use crate::Result;
use crate::group_commit::GroupCommit;
use crate::support::Work;

/// The migrations of `migrations/sqlite`.
pub(crate) static MIGRATOR: LazyLock<Migrator> =
    LazyLock::new(|| crate::schema::migrator(&crate::schema::migrations!("sqlite")));

/// The task store in a SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    writer: GroupCommit,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it.
    pub async fn open(path: &Path) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true);
        Self::connect_with(options).await
    }

    /// Opens a database by URL (`sqlite://file.db`, `sqlite::memory:`).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(SqliteConnectOptions::from_str(url)?.create_if_missing(true)).await
    }

    async fn connect_with(options: SqliteConnectOptions) -> Result<Self> {
        let in_memory = options.get_filename().as_os_str() == ":memory:";
        let file = options.get_filename().to_owned();
        let options = options
            .journal_mode(SqliteJournalMode::Wal)
            // Durable: a committed task survives a power cut.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        // An in-memory database exists once per connection: keep one.
        let connections = if in_memory { 1 } else { 4 };
        let pool = SqlitePoolOptions::new()
            .max_connections(connections)
            .connect_with(options)
            .await?;
        crate::schema::migrate(&pool, &MIGRATOR, || {
            let file = file.display();
            format!(
                "move {file} aside (with its -wal and -shm files), or point store.url (or \
                 --data-dir) elsewhere"
            )
        })
        .await?;
        let writer = GroupCommit::start(pool.clone());
        Ok(Self { pool, writer })
    }

    /// How many write transactions this store has committed since it was
    /// opened: beside the number of writing calls, how well they group.
    pub fn commits(&self) -> u64 {
        self.writer.commits()
    }

    /// How long the writer has been busy since the store was opened.
    fn busy(&self) -> Option<Duration> {
        Some(self.writer.busy())
    }

    /// Runs a writing call's work in a transaction, with other calls'.
    async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> Work<'c, T> + Send + 'static,
    {
        self.writer.write(work).await
    }
}

// The shared SQL (`sql/`), compiled for this backend's types. The same
// files are mounted in the other backend too, on purpose: see sql/mod.rs.
#[path = "sql/mod.rs"]
#[allow(clippy::duplicate_mod, reason = "one copy per backend's types")]
mod sql;

type Store = SqliteStore;
type Connection = SqliteConnection;
type Row = SqliteRow;
const DIALECT: crate::dialect::Dialect = crate::dialect::Dialect::SQLITE;

/// A store for the plan tests of `sql/`, with what keeps it alive. Empty:
/// SQLite plans without statistics (none is ever gathered), so its plans
/// do not depend on what the tables hold.
#[cfg(test)]
async fn plan_store() -> Option<(Store, Box<dyn std::any::Any>)> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(&dir.path().join("waft.db"))
        .await
        .expect("a store");
    Some((store, Box::new(dir)))
}

/// The plan SQLite takes for `statement` with text parameters `binds`: one
/// step a line.
#[cfg(test)]
async fn plan(store: &Store, statement: &str, binds: &[String]) -> String {
    let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(crate::support::sql(format!(
        "EXPLAIN QUERY PLAN {statement}"
    )));
    for bind in binds {
        query = query.bind(bind);
    }
    let steps = query.fetch_all(&store.pool).await.expect("a plan");
    steps
        .into_iter()
        .map(|(.., detail)| detail)
        .collect::<Vec<_>>()
        .join("\n")
}
