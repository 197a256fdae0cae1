//! The Postgres backend: production.
//!
//! Several consumers poll at once: the poll locks the due rows it takes with
//! `FOR UPDATE SKIP LOCKED`, so each consumer gets different tasks and none
//! waits for another. Claims, heartbeats and results are guarded updates
//! (`WHERE status = ... AND lease_token = ...`), which Postgres re-checks
//! after waiting for a concurrent writer: of two claims of one task, exactly
//! one succeeds.
//!
//! Every connection commits synchronously, whatever the server's default:
//! a claim or a result acknowledged and then lost in a crash of Postgres
//! would hand a lease out twice, and two executions of one task could
//! overlap. (The fault-injection soak caught exactly that against a server
//! running `synchronous_commit = off`.)
//!
//! And every statement is planned for the table as it is when it runs
//! (`plan_cache_mode = force_custom_plan`): a connection's prepared
//! statements otherwise settle on a generic plan made while the table was
//! small — a scan of every task for each batch of claims — and keep it while
//! the table grows, until an `ANALYZE` happens to come. Planning a batch's
//! statement costs a fraction of a millisecond; that scan cost milliseconds
//! per batch of claims once tens of thousands of tasks were stored.

use std::sync::LazyLock;

use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions, PgRow};

/// The channel of due-task notifications.
const DUE_CHANNEL: &str = "waft_due";
/// The channel of deploys and rollbacks.
const LAMBDAS_CHANNEL: &str = "waft_lambdas";
/// The channel of filled queues.
const FILLED_CHANNEL: &str = "waft_filled";
/// The most bytes of queues one fill notification carries (Postgres takes
/// payloads under 8000 bytes).
const FILLED_PAYLOAD: usize = 7000;

/// The migrations of `migrations/postgres`.
pub(crate) static MIGRATOR: LazyLock<Migrator> =
    LazyLock::new(|| crate::schema::migrator(&crate::schema::migrations!("postgres")));

/// The task store in a Postgres database.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host/db`) and migrates the
    /// database; `max_connections` bounds the pool.
    pub async fn connect(url: &str, max_connections: u32) -> crate::Result<Self> {
        let options = url.parse::<PgConnectOptions>()?.options([
            ("synchronous_commit", "on"),
            ("plan_cache_mode", "force_custom_plan"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(options.clone())
            .await?;
        crate::schema::migrate(&pool, &MIGRATOR, || match options.get_database() {
            Some(database) => format!(
                "point store.url at a new database, or drop database {database} and create \
                     it again"
            ),
            None => "point store.url at a new database".to_owned(),
        })
        .await?;
        Ok(Self { pool })
    }

    /// Tells every process listening (see [`PostgresStore::listen_due`])
    /// that tasks come due at `at` (Unix milliseconds, the notification's
    /// payload): how a Frontend wakes Store Consumers in other processes,
    /// for immediate and delayed tasks alike.
    pub async fn notify_due(&self, at: crate::Millis) -> crate::Result<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(DUE_CHANNEL)
            .bind(at.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The due time a notification of [`PostgresStore::notify_due`] carries;
    /// one without a readable time means now.
    pub fn due_time(notification: &sqlx::postgres::PgNotification) -> Option<crate::Millis> {
        notification.payload().parse().ok()
    }

    /// A listener that hears every [`PostgresStore::notify_due`]. It
    /// reconnects by itself; a notification sent while it was disconnected
    /// is lost, which only delays tasks until the next poll.
    pub async fn listen_due(&self) -> crate::Result<PgListener> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(DUE_CHANNEL).await?;
        Ok(listener)
    }

    /// Tells every process listening (see
    /// [`PostgresStore::listen_lambdas`]) that a lambda was deployed or
    /// rolled back: how a Frontend tells the others, whose executors and
    /// controllers then learn of it at once.
    pub async fn notify_lambdas(&self) -> crate::Result<()> {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(LAMBDAS_CHANNEL)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A listener that hears every [`PostgresStore::notify_lambdas`]; like
    /// [`PostgresStore::listen_due`]'s, a notification missed while it
    /// reconnects only waits for the next refresh.
    pub async fn listen_lambdas(&self) -> crate::Result<PgListener> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(LAMBDAS_CHANNEL).await?;
        Ok(listener)
    }

    /// Tells every process listening (see [`PostgresStore::listen_filled`])
    /// that messages were sent to the queues of these `<lambda, priority>`:
    /// how a Store Consumer tells the Frontends, whose Controllers then
    /// poll those queues. Many queues take several notifications.
    pub async fn notify_filled(&self, queues: &[(&str, u8)]) -> crate::Result<()> {
        let mut payload = String::new();
        for (lambda, priority) in queues {
            if !payload.is_empty() && payload.len() + lambda.len() + 5 > FILLED_PAYLOAD {
                self.notify(FILLED_CHANNEL, &payload).await?;
                payload.clear();
            }
            if !payload.is_empty() {
                payload.push('\n');
            }
            payload.push_str(&format!("{priority} {lambda}"));
        }
        if !payload.is_empty() {
            self.notify(FILLED_CHANNEL, &payload).await?;
        }
        Ok(())
    }

    /// The `<lambda, priority>` a notification of
    /// [`PostgresStore::notify_filled`] carries; lines it cannot read are
    /// left out (the Controllers' sweep finds their queues).
    pub fn filled_queues(notification: &sqlx::postgres::PgNotification) -> Vec<(String, u8)> {
        (notification.payload().lines())
            .filter_map(|line| {
                let (priority, lambda) = line.split_once(' ')?;
                Some((lambda.to_owned(), priority.parse().ok()?))
            })
            .collect()
    }

    /// A listener that hears every [`PostgresStore::notify_filled`]; a
    /// notification missed while it reconnects waits for the Controllers'
    /// sweep.
    pub async fn listen_filled(&self) -> crate::Result<PgListener> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(FILLED_CHANNEL).await?;
        Ok(listener)
    }

    async fn notify(&self, channel: &str, payload: &str) -> crate::Result<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(payload)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Runs a writing call's work in a transaction of its own. Concurrent
    /// calls run on connections of their own: Postgres syncs the commits
    /// that reach it together in one flush of its log.
    ///
    /// The transaction runs to its end on a task of its own, whether or not
    /// its caller still waits: a caller that gives up (an RPC past its
    /// deadline) must not cut a transaction between its statements, which
    /// can give a connection back to the pool still inside it — its row
    /// locks held, the next caller's `BEGIN` answered "already a
    /// transaction in progress" — and stall every later write of those
    /// rows. (A test of the pipeline caught heartbeats timing out behind
    /// such a connection.)
    async fn write<T, F>(&self, work: F) -> crate::Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut PgConnection) -> crate::support::Work<'c, T> + Send + 'static,
    {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            let mut tx = pool.begin().await?;
            let value = work(&mut tx).await?;
            tx.commit().await?;
            Ok(value)
        })
        .await
        .map_err(|error| {
            crate::StoreError::Commit(format!("the transaction's task failed: {error}"))
        })?
    }

    /// Postgres has no one writer: its transactions run side by side.
    fn busy(&self) -> Option<std::time::Duration> {
        None
    }
}

// The shared SQL (`sql/`), compiled for this backend's types. The same
// files are mounted in the other backend too, on purpose: see sql/mod.rs.
#[path = "sql/mod.rs"]
#[allow(clippy::duplicate_mod, reason = "one copy per backend's types")]
mod sql;

type Store = PostgresStore;
type Connection = PgConnection;
type Row = PgRow;
const DIALECT: crate::dialect::Dialect = crate::dialect::Dialect::POSTGRES;

/// A store for the plan tests of `sql/` (`None` outside CI when PostgreSQL
/// is unavailable here), holding tasks as a store does once history
/// outweighs the live tasks, with its statistics gathered: Postgres plans
/// by them. `hello`: 40,000 tasks ended (success), 200 dead, 100 enqueued,
/// 50 processing; `bulk`: 10,000 new tasks held, in ten collections.
#[cfg(test)]
async fn plan_store() -> Option<(Store, Box<dyn std::any::Any>)> {
    use waft_core::TaskStatus::{Dead, Enqueued, New, Processing, Success};
    let server = waft_testing::postgres()?;
    let store = PostgresStore::connect(&server.fresh_database().await, 2)
        .await
        .expect("a store");
    let setup = [
        "INSERT INTO components (digest, bytes, created_at) VALUES ('d', '\\x00', 0)".to_owned(),
        "INSERT INTO lambdas (name, current_version, created_at) VALUES ('hello', 1, 0), \
         ('bulk', 1, 0)"
            .to_owned(),
        "INSERT INTO lambda_versions (lambda, version, digest, max_memory, timeout_ms, \
         max_output, max_log, max_attempts, backoff_base_ms, backoff_factor, backoff_max_ms, \
         priorities, default_priority, max_payload, concurrency, created_at) \
         SELECT name, 1, 'd', 1, 1, 1, 1, 3, 1, 2.0, 1, 3, 1, 1, 1, 0 FROM lambdas"
            .to_owned(),
    ];
    let mut first = 0;
    let mut fills = Vec::new();
    for (lambda, status, n, held, collections) in [
        ("hello", Success, 40_000, false, 1),
        ("hello", Dead, 200, false, 1),
        ("hello", Enqueued, 100, false, 1),
        ("hello", Processing, 50, false, 1),
        ("bulk", New, 10_000, true, 10),
    ] {
        let finished = if status.is_terminal() { "i" } else { "NULL" };
        fills.push(format!(
            "INSERT INTO tasks (id, lambda, collection, priority, payload, status, \
             max_attempts, scheduled_at, due_at, created_at, held, finished_at) \
             SELECT lpad(i::text, 26, '0'), '{lambda}', 'c' || (i % {collections}), 1, \
             '\\x7b7d', '{status}', 3, 0, i, 0, {held}, {finished} \
             FROM generate_series({first}, {}) AS i",
            first + n - 1
        ));
        first += n;
    }
    for statement in setup.into_iter().chain(fills) {
        sqlx::query(crate::support::sql(statement))
            .execute(&store.pool)
            .await
            .expect("the plan tests' tasks");
    }
    sqlx::query("VACUUM ANALYZE tasks")
        .execute(&store.pool)
        .await
        .expect("statistics");
    Some((store, Box::new(())))
}

/// The plan Postgres takes for `statement` with text parameters `binds`:
/// one step a line.
#[cfg(test)]
async fn plan(store: &Store, statement: &str, binds: &[String]) -> String {
    let mut query =
        sqlx::query_scalar::<_, String>(crate::support::sql(format!("EXPLAIN {statement}")));
    for bind in binds {
        query = query.bind(bind);
    }
    let steps = query.fetch_all(&store.pool).await.expect("a plan");
    steps.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test server runs with `synchronous_commit = off`; the store's
    /// connections must not.
    #[tokio::test]
    async fn connections_commit_synchronously_whatever_the_server_says() {
        let Some(server) = waft_testing::postgres() else {
            return;
        };
        let store = PostgresStore::connect(&server.fresh_database().await, 2)
            .await
            .unwrap();
        let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(setting, "on");
    }

    /// A write whose caller gives up runs to its end: it is committed
    /// whole, and the connection goes back to the pool outside any
    /// transaction (one connection here, so the next call gets it).
    #[tokio::test]
    async fn a_write_whose_caller_gives_up_runs_to_its_end() {
        let Some(server) = waft_testing::postgres() else {
            return;
        };
        let store = PostgresStore::connect(&server.fresh_database().await, 1)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(&store.pool)
            .await
            .unwrap();
        let slow = store.write(|conn| {
            Box::pin(async move {
                sqlx::query("INSERT INTO t VALUES (1)")
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("SELECT pg_sleep(0.3)")
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("INSERT INTO t VALUES (2)")
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        });
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(50), slow).await;
        assert!(gave_up.is_err(), "the write should still have been running");
        let rows: Vec<i32> = store
            .write(|conn| {
                Box::pin(async move {
                    Ok(sqlx::query_scalar("SELECT x FROM t ORDER BY x")
                        .fetch_all(&mut *conn)
                        .await?)
                })
            })
            .await
            .unwrap();
        assert_eq!(rows, vec![1, 2]);
        let idle_in_transaction: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'idle in transaction'",
        )
        .fetch_one(&store.pool)
        .await
        .unwrap();
        assert_eq!(idle_in_transaction, 0);
    }

    /// Statements are planned for the table as it is, not once for good
    /// while it was small.
    #[tokio::test]
    async fn statements_are_planned_for_the_table_as_it_is() {
        let Some(server) = waft_testing::postgres() else {
            return;
        };
        let store = PostgresStore::connect(&server.fresh_database().await, 2)
            .await
            .unwrap();
        let setting: String = sqlx::query_scalar("SHOW plan_cache_mode")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(setting, "force_custom_plan");
    }
}
