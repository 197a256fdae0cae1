//! Group commit: SQLite's one writer, shared by every writing call.
//!
//! SQLite commits one writing transaction at a time, and with
//! `synchronous=FULL` every commit waits for the disk to sync its log. The
//! roles write at once — the Frontend inserts, the Store Consumer polls, the
//! Controller claims, the HSC records heartbeats and results — and each call
//! used to pay a commit of its own, one after another, while callers that
//! found the write lock taken slept in SQLite's busy handler (1, 2, 5, 10 ms…)
//! instead of queueing for it.
//!
//! Here every writing call is a job for one writer task. The writer takes
//! the jobs waiting, runs them one after another in one `BEGIN IMMEDIATE`
//! transaction, each in a savepoint of its own (a job that fails is undone
//! alone), commits once, and only then answers each caller. So a caller
//! still hears of its write only once it is durable, and each call still
//! happens whole or not at all, in the order the writer ran it; while the
//! disk syncs one group, the next one gathers. The queue is bounded: when
//! it is full, callers wait to enter it (none is dropped).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::SqliteConnection;
use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use crate::support::Work;
use crate::{Result, StoreError};

/// The most jobs one transaction carries, so that a flood of callers cannot
/// grow one transaction (and the time before any of them hears back)
/// without bound.
const MAX_GROUP: usize = 256;

/// The most calls waiting for the writer: a full next group gathers while
/// one commits; beyond that, callers wait their turn to queue (in order),
/// so a flood of callers holds the writer's memory to this many jobs
/// instead of growing it for as long as the flood lasts.
const QUEUE: usize = MAX_GROUP;

/// The handle of a store's writer; clones share it. The writer stops when
/// the last handle is dropped.
#[derive(Clone, Debug)]
pub(crate) struct GroupCommit {
    jobs: mpsc::Sender<Box<dyn Job>>,
    /// Transactions committed so far.
    commits: Arc<AtomicU64>,
    /// How long the writer has been busy so far, in nanoseconds: from
    /// taking a group's first job to answering the group.
    busy: Arc<AtomicU64>,
}

impl GroupCommit {
    /// Starts the writer, on the current tokio runtime, over `pool`.
    pub(crate) fn start(pool: SqlitePool) -> Self {
        let (jobs, queue) = mpsc::channel(QUEUE);
        let commits = Arc::new(AtomicU64::new(0));
        let busy = Arc::new(AtomicU64::new(0));
        tokio::spawn(writer(pool, queue, commits.clone(), busy.clone()));
        Self {
            jobs,
            commits,
            busy,
        }
    }

    /// How many transactions the writer has committed.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// How long the writer has been busy since it started: the groups it
    /// has run, each counted once it has answered. Its growth over a span
    /// of time is how much of that span the writer had work.
    pub(crate) fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }

    /// Runs `work` in the next group's transaction; answers once that
    /// transaction has committed (or with why it did not).
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> Work<'c, T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        // Waits while the queue is full. A caller that gives up meanwhile
        // leaves nothing behind: its work never queued.
        self.jobs
            .send(Box::new(Pending { work, reply }))
            .await
            .map_err(|_| StoreError::Commit("the store's writer has stopped".into()))?;
        answer.await.map_err(|_| {
            StoreError::Commit("the write failed in the store's writer; see the log".into())
        })?
    }
}

/// The writer: one group at a time, each run in a task of its own so that a
/// job that panics fails its group's callers, not the writer.
async fn writer(
    pool: SqlitePool,
    mut queue: mpsc::Receiver<Box<dyn Job>>,
    commits: Arc<AtomicU64>,
    busy: Arc<AtomicU64>,
) {
    while let Some(first) = queue.recv().await {
        let started = Instant::now();
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let pool = pool.clone();
        match tokio::spawn(async move { commit_group(&pool, group).await }).await {
            Ok(true) => {
                commits.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(error) => {
                tracing::error!(%error, "a write to the task store panicked; its group was rolled back");
            }
        }
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        busy.fetch_add(took, Ordering::Relaxed);
    }
}

/// Runs a group's jobs in one transaction and answers each; whether it
/// committed.
async fn commit_group(pool: &SqlitePool, group: Vec<Box<dyn Job>>) -> bool {
    let mut conn = match pool.acquire().await {
        Ok(conn) => Lent(Some(conn)),
        Err(error) => {
            refuse_all(group, &error.to_string());
            return false;
        }
    };
    // One job alone needs no savepoint: if it fails, the whole transaction
    // is rolled back. Between jobs, the end of one savepoint and the start
    // of the next (or the commit) go to SQLite together: every statement is
    // a round trip to the connection's thread.
    let alone = group.len() == 1;
    let begin = if alone {
        "BEGIN IMMEDIATE"
    } else {
        "BEGIN IMMEDIATE; SAVEPOINT job"
    };
    if let Err(error) = execute(&mut conn, begin).await {
        refuse_all(group, &error.to_string());
        return false;
    }
    let mut ran: Vec<Box<dyn Ran>> = Vec::with_capacity(group.len());
    let mut jobs = group.into_iter().peekable();
    while let Some(job) = jobs.next() {
        let done = job.run(&mut conn).await;
        let last = jobs.peek().is_none();
        let boundary = match (alone, done.failed(), last) {
            (true, true, _) => "ROLLBACK",
            (true, false, _) => "COMMIT",
            (false, false, false) => "RELEASE job; SAVEPOINT job",
            (false, true, false) => "ROLLBACK TO job; RELEASE job; SAVEPOINT job",
            (false, false, true) => "RELEASE job; COMMIT",
            (false, true, true) => "ROLLBACK TO job; RELEASE job; COMMIT",
        };
        ran.push(done);
        if let Err(error) = execute(&mut conn, boundary).await {
            // A statement that failed took the transaction with it (SQLite
            // rolls back on a full disk or an I/O error), or the commit
            // failed: nothing of the group stands.
            abort(ran, jobs.collect(), &error);
            return false;
        }
    }
    conn.give_back();
    let committed = !(alone && ran.iter().any(|done| done.failed()));
    answer_all(ran, None);
    committed
}

/// The writer's connection for one group, in a transaction it begins and
/// ends with plain statements. Given back to the pool only once that
/// transaction has ended; dropped before (a lost transaction, a failed
/// commit, a job that panicked), it is closed instead, which rolls back
/// whatever is still open, so no other caller ever gets a connection in
/// the middle of a transaction.
struct Lent(Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>);

impl Lent {
    fn give_back(mut self) {
        self.0.take();
    }
}

impl std::ops::Deref for Lent {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        self.0.as_ref().expect("a lent connection until given back")
    }
}

impl std::ops::DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.0.as_mut().expect("a lent connection until given back")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

async fn execute(conn: &mut SqliteConnection, statement: &'static str) -> Result<()> {
    sqlx::raw_sql(statement).execute(conn).await?;
    Ok(())
}

/// Ends a group whose transaction was lost: the jobs that ran are answered
/// with the error (their work was rolled back with it), the others refused.
fn abort(ran: Vec<Box<dyn Ran>>, rest: Vec<Box<dyn Job>>, error: &StoreError) {
    let error = error.to_string();
    answer_all(ran, Some(&error));
    refuse_all(rest, &error);
}

fn answer_all(ran: Vec<Box<dyn Ran>>, commit_error: Option<&str>) {
    for done in ran {
        done.answer(commit_error);
    }
}

fn refuse_all(jobs: Vec<Box<dyn Job>>, error: &str) {
    for job in jobs {
        job.refuse(error);
    }
}

/// A call waiting for the writer.
trait Job: Send {
    /// Runs the call's work on the group's connection.
    fn run<'c>(
        self: Box<Self>,
        conn: &'c mut SqliteConnection,
    ) -> Pin<Box<dyn Future<Output = Box<dyn Ran>> + Send + 'c>>;
    /// Answers the call without running it.
    fn refuse(self: Box<Self>, error: &str);
}

/// A call whose work has run, waiting for its group's commit.
trait Ran: Send {
    /// Whether its own work failed (and so must be rolled back).
    fn failed(&self) -> bool;
    /// Answers the call: its own result if the group committed or its work
    /// failed anyway, else why the commit did not happen.
    fn answer(self: Box<Self>, commit_error: Option<&str>);
}

struct Pending<T, F> {
    work: F,
    reply: oneshot::Sender<Result<T>>,
}

struct Done<T> {
    result: Result<T>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> Work<'c, T> + Send + 'static,
{
    fn run<'c>(
        self: Box<Self>,
        conn: &'c mut SqliteConnection,
    ) -> Pin<Box<dyn Future<Output = Box<dyn Ran>> + Send + 'c>> {
        let Pending { work, reply } = *self;
        Box::pin(async move {
            let result = work(conn).await;
            Box::new(Done { result, reply }) as Box<dyn Ran>
        })
    }

    fn refuse(self: Box<Self>, error: &str) {
        // A caller that gave up waiting does not need the answer.
        let _ = self.reply.send(Err(StoreError::Commit(error.to_owned())));
    }
}

impl<T: Send> Ran for Done<T> {
    fn failed(&self) -> bool {
        self.result.is_err()
    }

    fn answer(self: Box<Self>, commit_error: Option<&str>) {
        let answer = match (self.result, commit_error) {
            (Err(error), _) => Err(error),
            (Ok(_), Some(error)) => Err(StoreError::Commit(error.to_owned())),
            (Ok(value), None) => Ok(value),
        };
        // A caller that gave up waiting does not need the answer.
        let _ = self.reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn open() -> (tempfile::TempDir, SqlitePool, GroupCommit) {
        let dir = tempfile::tempdir().unwrap();
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("t.db"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let pool = SqlitePool::connect_with(options).await.unwrap();
        sqlx::raw_sql("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            .execute(&pool)
            .await
            .unwrap();
        let writer = GroupCommit::start(pool.clone());
        (dir, pool, writer)
    }

    /// Writes `x`; then, with `fail`, fails, so what it wrote must not
    /// stand.
    fn insert(
        writer: &GroupCommit,
        x: i64,
        fail: bool,
    ) -> impl Future<Output = Result<i64>> + use<> {
        let writer = writer.clone();
        async move {
            writer
                .write(move |conn| {
                    Box::pin(async move {
                        sqlx::query("INSERT INTO t (x) VALUES ($1)")
                            .bind(x)
                            .execute(&mut *conn)
                            .await?;
                        if fail {
                            return Err(StoreError::Invalid(format!("refused {x}")));
                        }
                        Ok(x)
                    })
                })
                .await
        }
    }

    async fn stored(pool: &SqlitePool) -> Vec<i64> {
        sqlx::query_scalar("SELECT x FROM t ORDER BY x")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    /// Calls made while the writer is busy share one commit; a call that
    /// fails among them is undone alone, and each hears its own answer.
    #[tokio::test(flavor = "current_thread")]
    async fn waiting_calls_share_one_commit_and_a_failure_is_undone_alone() {
        let (_dir, pool, writer) = open().await;
        // On one thread, every call is queued before the writer runs.
        let calls = (0..10).map(|x| {
            if x == 4 {
                insert(&writer, 100, true)
            } else {
                insert(&writer, x, false)
            }
        });
        let answers = futures::future::join_all(calls).await;
        assert_eq!(writer.commits(), 1);
        for (x, answer) in answers.into_iter().enumerate() {
            match (x, answer) {
                (4, Err(StoreError::Invalid(message))) => assert_eq!(message, "refused 100"),
                (x, Ok(stored)) => assert_eq!(stored, x as i64),
                (x, other) => panic!("call {x}: {other:?}"),
            }
        }
        assert_eq!(stored(&pool).await, vec![0, 1, 2, 3, 5, 6, 7, 8, 9]);

        // Alone, a failing call commits nothing.
        assert!(insert(&writer, 200, true).await.is_err());
        assert_eq!(writer.commits(), 1);
        insert(&writer, 300, false).await.unwrap();
        assert_eq!(writer.commits(), 2);
        assert_eq!(stored(&pool).await.last(), Some(&300));
    }

    /// While the writer is stalled, at most [`QUEUE`] calls wait in its
    /// queue; the rest wait to enter it. A caller that gives up before its
    /// call was queued leaves no write behind; the queued ones all run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_writer_queues_at_most_its_capacity() {
        let (_dir, pool, writer) = open().await;
        // A call that holds the writer until released.
        let (started, running) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let stall = tokio::spawn({
            let writer = writer.clone();
            async move {
                writer
                    .write(move |_conn| {
                        Box::pin(async move {
                            let _ = started.send(());
                            let _ = released.await;
                            Ok(0)
                        })
                    })
                    .await
            }
        });
        running.await.unwrap();

        // Three queues' worth of callers; each counts itself in first.
        let callers = 3 * QUEUE;
        let waiting = Arc::new(AtomicU64::new(0));
        let calls: Vec<_> = (1..=callers as i64)
            .map(|x| {
                let (writer, waiting) = (writer.clone(), waiting.clone());
                tokio::spawn(async move {
                    waiting.fetch_add(1, Ordering::Relaxed);
                    insert(&writer, x, false).await
                })
            })
            .collect();
        // On one thread, a caller that has counted itself has run up to
        // its first wait, in the queue or before it.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while waiting.load(Ordering::Relaxed) < callers as u64 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the callers never ran"
            );
            tokio::task::yield_now().await;
        }
        for call in &calls {
            call.abort();
        }
        for call in calls {
            assert!(call.await.unwrap_err().is_cancelled());
        }

        release.send(()).unwrap();
        stall.await.unwrap().unwrap();
        // A last call, queued behind every earlier one, answers once they
        // have all run.
        insert(&writer, 0, false).await.unwrap();
        let ran = stored(&pool).await.len() - 1;
        assert_eq!(
            ran, QUEUE,
            "{ran} calls were queued behind the stalled writer"
        );
    }

    /// The writer's busy time grows by at least as long as a call held
    /// it, and not at all while no call comes.
    #[tokio::test(flavor = "current_thread")]
    async fn busy_time_is_the_time_calls_hold_the_writer() {
        let (_dir, _pool, writer) = open().await;
        assert_eq!(writer.busy(), Duration::ZERO);
        let hold = Duration::from_millis(30);
        writer
            .write(move |_conn| {
                Box::pin(async move {
                    tokio::time::sleep(hold).await;
                    Ok(())
                })
            })
            .await
            .unwrap();
        // A group's time is counted once it has answered: wait for the
        // writer to be done with it.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let busy = writer.busy();
        assert!(
            busy >= hold,
            "busy {busy:?} after a call held the writer {hold:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(writer.busy(), busy, "the writer was idle");
    }

    /// A call that takes the transaction down with it (here by rolling it
    /// back itself, as SQLite does on a full disk) fails its whole group:
    /// nothing of the group stands, and every caller hears so.
    #[tokio::test(flavor = "current_thread")]
    async fn a_lost_transaction_fails_its_whole_group() {
        let (_dir, pool, writer) = open().await;
        let killer = {
            let writer = writer.clone();
            async move {
                writer
                    .write(|conn| {
                        Box::pin(async move {
                            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
                            Ok(-1)
                        })
                    })
                    .await
            }
        };
        let (before, lost, after) =
            tokio::join!(insert(&writer, 1, false), killer, insert(&writer, 2, false));
        for answer in [before, lost, after] {
            assert!(matches!(answer, Err(StoreError::Commit(_))), "{answer:?}");
        }
        assert_eq!(stored(&pool).await, Vec::<i64>::new());
        assert_eq!(writer.commits(), 0);
        // The writer goes on.
        insert(&writer, 3, false).await.unwrap();
        assert_eq!(stored(&pool).await, vec![3]);
    }
}
