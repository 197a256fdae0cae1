//! Postgres only: a poll decides as of one moment, whatever other
//! transactions commit while it runs. Each of its statements (READ
//! COMMITTED) sees what has committed when it starts, so the checks here
//! hold a poll between two of its statements (a trigger of the test's own
//! waits for an advisory lock the test holds), commit a change meanwhile,
//! let the poll go, and require an outcome of one serial order: the poll
//! wholly before the change, or wholly after it.

use std::time::Duration;

use sqlx::Connection as _;
use waft_store::{PostgresStore, TaskStore};

use crate::support::*;

/// The advisory lock the test's trigger waits for (a key of its own).
const PAUSE: i64 = 7_301;

/// A poll held where it has consumed the keys' landing marks, on a fresh
/// database, with the connection that holds it.
struct Held {
    store: PostgresStore,
    admin: sqlx::PgConnection,
    url: String,
}

impl Held {
    /// A fresh database whose polls wait, once they have consumed the
    /// landing marks, for [`PAUSE`] while the test holds it.
    async fn new() -> Option<Held> {
        let server = waft_testing::postgres()?;
        let url = server.fresh_database().await;
        let store = PostgresStore::connect(&url, 8).await.unwrap();
        let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
        for statement in [
            "CREATE FUNCTION test_pause() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_advisory_xact_lock_shared(7301); RETURN NULL; END $$",
            "CREATE TRIGGER test_pause AFTER DELETE ON key_landings \
             FOR EACH STATEMENT EXECUTE FUNCTION test_pause()",
        ] {
            sqlx::query(statement).execute(&mut admin).await.unwrap();
        }
        Some(Held { store, admin, url })
    }

    async fn hold(&mut self) {
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(PAUSE)
            .execute(&mut self.admin)
            .await
            .unwrap();
    }

    async fn release(&mut self) {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(PAUSE)
            .execute(&mut self.admin)
            .await
            .unwrap();
    }

    /// Backends of the database waiting for a lock.
    async fn waiting(&mut self) -> i64 {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut self.admin)
        .await
        .unwrap()
    }

    /// Waits until `n` backends wait for a lock, or `done` says the
    /// change ended (it did not wait for the poll), for ten seconds at most.
    async fn until_waiting(&mut self, n: i64, done: impl Fn() -> bool) {
        for _ in 0..1_000 {
            if done() || self.waiting().await >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("nothing waited for the held poll");
    }
}

/// The poll that raced (`report`) did not start `due` while `older` waited
/// (parked, or for its turn), and `older` went, then or at the next poll.
async fn the_older_goes_first(
    store: &PostgresStore,
    report: &waft_store::EnqueueReport,
    older: &str,
    due: &str,
) {
    let went: Vec<&str> = report.enqueued.iter().map(|t| t.id.as_str()).collect();
    assert!(
        !went.contains(&due),
        "the due task went while the older one waited: {report:?}"
    );
    let next = poll(store, T0 + 20).await;
    let all: Vec<&str> = went
        .iter()
        .copied()
        .chain(next.enqueued.iter().map(|t| t.id.as_str()))
        .collect();
    assert_eq!(all, [older], "{report:?} then {next:?}");
}

fn keyed(key: &str) -> waft_store::NewTask {
    waft_store::NewTask {
        key: Some(key.into()),
        ..new_task("mail")
    }
}

/// A key with a limit of one: its task in flight is cancelled while a
/// poll runs, with an older task of the key parked and a younger one due.
/// The poll before the cancel parks the due task (no place); after it, it
/// unparks the parked task, which goes first. The due task never goes
/// while the older one stays parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_landing_during_a_poll_never_lets_a_due_task_pass_a_parked_one() {
    let Some(mut held) = Held::new().await else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let store = held.store.clone();
    let limited = waft_core::LambdaConfig {
        key_concurrency: Some(1),
        ..config()
    };
    deploy_with(&store, "mail", limited).await;
    let flying = insert(&store, keyed("acme"), T0).await;
    assert_eq!(poll(&store, T0 + 1).await.enqueued.len(), 1);
    let parked = insert(&store, keyed("acme"), T0 + 2).await;
    assert_eq!(poll(&store, T0 + 3).await.parked, 1);
    let due = insert(&store, keyed("acme"), T0 + 4).await;

    held.hold().await;
    let polling = tokio::spawn({
        let store = store.clone();
        async move { poll(&store, T0 + 10).await }
    });
    held.until_waiting(1, || false).await;
    let cancelling = tokio::spawn({
        let (store, flying) = (store.clone(), flying.clone());
        async move { store.task_cancel(&flying, T0 + 10).await }
    });
    held.until_waiting(2, || cancelling.is_finished()).await;
    held.release().await;
    let report = polling.await.unwrap();
    cancelling.await.unwrap().unwrap();

    assert_eq!(report.parked, 1, "the due task parks: {report:?}");
    // Before the cancel or after it, the parked task goes next.
    the_older_goes_first(&store, &report, &parked, &due).await;
}

/// A fair key with a lookahead of one: its queued task is claimed while a
/// poll runs (it leaves the queue: the key's turn comes), with an older
/// task of the key parked for its turn and a younger one come due. As for
/// a landing, the younger never goes while the older stays parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_during_a_poll_never_lets_a_due_task_pass_one_awaiting_its_turn() {
    let Some(mut held) = Held::new().await else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let store = held.store.clone();
    let fair = waft_core::LambdaConfig {
        key_fairness: Some(waft_core::KeyFairness {
            weights: Default::default(),
            lookahead: 1,
        }),
        ..config()
    };
    deploy_with(&store, "mail", fair).await;
    // Due at once, each is stored parked for its turn; the first goes.
    insert(&store, keyed("acme"), T0).await;
    let first = poll(&store, T0 + 1).await.enqueued.remove(0);
    let parked = insert(&store, keyed("acme"), T0 + 2).await;
    assert_eq!(poll(&store, T0 + 3).await.enqueued.len(), 0);
    let later = waft_store::NewTask {
        run_at: Some(T0 + 5),
        ..keyed("acme")
    };
    let due = insert(&store, later, T0 + 4).await;

    held.hold().await;
    let polling = tokio::spawn({
        let store = store.clone();
        async move { poll(&store, T0 + 10).await }
    });
    held.until_waiting(1, || false).await;
    let claiming = tokio::spawn({
        let store = store.clone();
        async move { claim(&store, &first.id, first.enqueue_token, T0 + 10).await }
    });
    held.until_waiting(2, || claiming.is_finished()).await;
    held.release().await;
    let report = polling.await.unwrap();
    claiming.await.unwrap().expect("the claim wins its task");

    the_older_goes_first(&store, &report, &parked, &due).await;
}

/// A key with a limit of one and a free place (its task in flight was
/// cancelled), two tasks parked and a younger one due: a poll unparks the
/// oldest parked task while a cancel of that very task holds its row. The
/// poll waits, finds it ended, and unparks the next one instead (as a poll
/// after the cancel does), which then goes before the due task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_parked_task_cancelled_during_an_unpark_gives_its_place_to_the_next() {
    let Some(mut held) = Held::new().await else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let store = held.store.clone();
    let limited = waft_core::LambdaConfig {
        key_concurrency: Some(1),
        ..config()
    };
    deploy_with(&store, "mail", limited).await;
    let flying = insert(&store, keyed("acme"), T0).await;
    assert_eq!(poll(&store, T0 + 1).await.enqueued.len(), 1);
    let first = insert(&store, keyed("acme"), T0 + 2).await;
    let second = insert(&store, keyed("acme"), T0 + 3).await;
    assert_eq!(poll(&store, T0 + 4).await.parked, 2);
    let due = insert(&store, keyed("acme"), T0 + 5).await;
    store.task_cancel(&flying, T0 + 6).await.unwrap();

    // The cancel of the first parked task, under way.
    let url = held.url.clone();
    let mut cancel = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut cancel).await.unwrap();
    let cancelled = format!(
        "UPDATE tasks SET status = '{}', next_trigger_at = NULL, parked = FALSE, \
         awaits_turn = FALSE, finished_at = $2 WHERE id = $1",
        waft_core::TaskStatus::Cancelled.as_str()
    );
    sqlx::query(sqlx::AssertSqlSafe(cancelled))
        .bind(&first)
        .bind(T0 + 10)
        .execute(&mut cancel)
        .await
        .unwrap();
    let polling = tokio::spawn({
        let store = store.clone();
        async move { poll(&store, T0 + 10).await }
    });
    held.until_waiting(1, || false).await;
    sqlx::query("COMMIT").execute(&mut cancel).await.unwrap();
    let report = polling.await.unwrap();

    let went: Vec<&str> = report.enqueued.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        (went, report.parked),
        (vec![second.as_str()], 1),
        "the next parked task goes, and the due one ({due}) parks"
    );
}
