//! Waft's task store: the source of truth every guarantee rests on.
//!
//! One narrow trait, [`TaskStore`], with methods named entity-first
//! (`task_claim_many`, `gate_set`...) and one params struct each, and two
//! backends on sqlx: [`SqliteStore`] (the embedded default, one file) and
//! [`PostgresStore`] (production). Both pass one conformance suite
//! (`tests/conformance.rs`), so the embedded mode cannot drift from
//! production; `tests/schema.rs` compares the schemas their migrations
//! (`migrations/`: the baseline of release 0.1.0, then one pair per change)
//! make.
//!
//! The store implements ATF's state table: every state change moves
//! `next_trigger_at` in the same statement, so a task whose queue message,
//! controller or executor is lost comes due again and is re-enqueued. Claims
//! issue a strictly increasing lease token per task; heartbeats and results
//! with an older token are refused, which is what keeps a stale execution
//! from writing over a newer one. A durable task's journal (the host calls
//! its executions made, which a retry replays) is written under the same
//! fence, and pins the task to the lambda version that wrote it.
//!
//! The tree: `sql/` holds the SQL, one file per entity (listed in
//! `docs/architecture.md`), written once and compiled for each backend;
//! `dialect.rs` names the few fragments in which SQLite and Postgres differ;
//! `rules.rs` holds the decisions that need no database (admitting a task,
//! planning a retry, what a gate does), with unit tests; `names.rs` spells
//! the model's statuses in SQL; `rows.rs` reads rows back.

mod dialect;
mod error;
mod group_commit;
mod names;
mod postgres;
mod rows;
mod rules;
mod schema;
mod sqlite;
mod support;

use async_trait::async_trait;

pub use error::StoreError;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use support::new_id;
pub use waft_core::model::{self, *};

/// Result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The task store. Every method is one transaction: it happens whole or not
/// at all.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// The store's own clock, in Unix milliseconds: the one clock the roles'
    /// lease arithmetic follows, whatever their hosts' clocks say.
    async fn clock_now(&self) -> Result<Millis>;
    /// Deploys a new version of a lambda; returns it.
    async fn lambda_deploy(&self, params: LambdaDeploy) -> Result<Lambda>;
    /// A lambda at its current version.
    async fn lambda_get(&self, name: &str) -> Result<Option<Lambda>>;
    /// A lambda at a given version.
    async fn lambda_get_version(&self, name: &str, version: u32) -> Result<Option<Lambda>>;
    /// Every lambda at its current version, by name.
    async fn lambda_list(&self) -> Result<Vec<Lambda>>;
    /// Every version of a lambda, oldest first.
    async fn lambda_versions(&self, name: &str) -> Result<Vec<LambdaVersion>>;
    /// Makes an earlier version current again, as a new version; returns it.
    async fn lambda_rollback(&self, params: LambdaRollback) -> Result<Lambda>;
    /// Deletes a lambda's old versions and the components nothing uses.
    async fn lambda_gc(&self, params: LambdaGc) -> Result<GcReport>;
    /// A component's bytes by digest.
    async fn component_get(&self, digest: &str) -> Result<Option<Vec<u8>>>;
    /// The compiled artifact of a component for an engine fingerprint.
    async fn artifact_get(&self, digest: &str, engine: &str) -> Result<Option<Artifact>>;

    /// Inserts tasks, all or none; validates each against its lambda.
    async fn task_insert_many(&self, params: TaskInsertMany) -> Result<Vec<TaskInserted>>;
    /// One task.
    async fn task_get(&self, id: &str) -> Result<Option<Task>>;
    /// Tasks by id order, filtered, one page.
    async fn task_list(&self, params: TaskList) -> Result<Vec<Task>>;
    /// How many of a lambda's tasks are in each status, in life order.
    async fn task_count(&self, params: TaskCount) -> Result<Vec<StatusCount>>;
    /// Every lambda that has unfinished or dead tasks, or executions that
    /// ended at or after `since`: what its tasks are doing at `now`.
    async fn lambda_stats(&self, now: Millis, since: Millis) -> Result<Vec<LambdaStats>>;
    /// Cancels a task that has not ended; a running one loses its lease.
    async fn task_cancel(&self, id: &str, now: Millis) -> Result<Task>;
    /// Keeps a signal for a task that has not ended, and wakes it when it
    /// is suspended waiting for a signal of that name.
    async fn task_signal(&self, params: TaskSignal) -> Result<SignalSent>;
    /// The next signal of a name a running execution has not taken, under
    /// its lease; `None` when none has come yet.
    async fn task_signal_read(
        &self,
        params: TaskSignalRead,
    ) -> Result<Result<Option<Vec<u8>>, Refusal>>;
    /// How the children a running execution waits for stand (a fan-in),
    /// under its lease: how many are live, or how each ended once none is.
    /// An id that is not a child of the task is refused as invalid.
    async fn task_children_read(
        &self,
        params: TaskChildrenRead,
    ) -> Result<Result<ChildrenState, Refusal>>;

    /// The Store Consumer's poll: takes up to `limit` due tasks and, in the
    /// same transaction, marks them enqueued (or held, dropped, dead, as
    /// their gates and attempts say). Safe with several consumers at once.
    async fn task_enqueue_ready(&self, params: TaskEnqueueReady) -> Result<EnqueueReport>;
    /// Makes every task in flight (enqueued or running) due at `now`, for
    /// the next poll to enqueue again or to count as a lost attempt; the
    /// number of tasks. Only for a store that one process holds alone
    /// (`waft dev` on its data directory), at that process's start: what
    /// it had in flight when it stopped is in flight nowhere.
    async fn task_recover(&self, now: Millis) -> Result<u64>;
    /// Claims enqueued tasks; each answer is a new lease or a refusal.
    async fn task_claim_many(
        &self,
        params: TaskClaimMany,
    ) -> Result<Vec<Result<ClaimedTask, Refusal>>>;
    /// Records heartbeats of running tasks; refuses stale leases.
    async fn task_heartbeat_many(
        &self,
        params: TaskHeartbeatMany,
    ) -> Result<Vec<Result<(), Refusal>>>;
    /// Records results; refuses stale leases. Answers each task's new status.
    async fn task_set_result_many(
        &self,
        params: TaskSetResultMany,
    ) -> Result<Vec<Result<waft_core::TaskStatus, Refusal>>> {
        Ok(self
            .task_record_many(params)
            .await?
            .into_iter()
            .map(|answer| answer.map(|recorded| recorded.status))
            .collect())
    }
    /// Records results as [`TaskStore::task_set_result_many`] does, and
    /// answers each accepted one's task's lambda beside its status (what
    /// the HSC counts in the task history).
    async fn task_record_many(
        &self,
        params: TaskSetResultMany,
    ) -> Result<Vec<Result<ResultRecorded, Refusal>>>;

    /// Writes a running execution's entries into its task's journal
    /// ([`JournalWrite`]); refused unless the execution still holds the
    /// lease. The first write pins the task to the execution's version.
    async fn task_journal_write(&self, params: TaskJournalWrite) -> Result<Result<(), Refusal>>;
    /// A page of a task's journal, in order.
    async fn task_journal(&self, params: TaskJournalRead) -> Result<Vec<JournalEntry>>;
    /// A page of a lambda's live tasks that hold a journal, each with its
    /// whole journal ([`JournaledTasks`]).
    async fn task_journals(&self, params: JournaledTasks) -> Result<Vec<JournaledTask>>;
    /// Moves the tasks a check found clean to the version it checked, each
    /// only if it stands as it was checked and is not running ([`TaskMove`]);
    /// answers how many moved.
    async fn task_move(&self, params: TaskMove) -> Result<u64>;

    /// Per `<lambda, priority>`, the oldest task that is due and waiting to
    /// start (new, retrying or in its queue; not held by a gate).
    async fn task_backlog(&self, now: Millis) -> Result<Vec<Backlog>>;
    /// How long the store's one writer has been busy since the store was
    /// opened, for a backend whose writes all go through one (SQLite's
    /// group commit); `None` for one whose writes run side by side
    /// (Postgres). What the pruner reads to leave that writer to the
    /// pipeline.
    fn writer_busy(&self) -> Option<std::time::Duration>;
    /// The ended executions of a task, oldest first.
    async fn attempt_list(&self, task_id: &str) -> Result<Vec<Attempt>>;

    /// Opens, pauses or drops a lambda or collection. Opening releases the
    /// tasks the gate held, in their due order. Returns how many.
    async fn gate_set(&self, params: GateSet) -> Result<u64>;
    /// Every gate that is not open.
    async fn gate_list(&self) -> Result<Vec<Gate>>;

    /// Redrives dead tasks; returns how many.
    async fn dead_redrive(&self, params: DeadRedrive) -> Result<u64>;
    /// Deletes a lambda and all it has ([`LambdaDelete`]).
    async fn lambda_delete(&self, params: LambdaDelete) -> Result<LambdaDeleted>;
    /// Deletes dead letters for good ([`DeadPurge`]).
    async fn dead_purge(&self, params: DeadPurge) -> Result<Pruned>;

    /// Deletes a batch of tasks past their retention ([`TaskPrune`]).
    async fn task_prune(&self, params: TaskPrune) -> Result<Pruned>;
    /// Takes or renews a duty one process holds at a time ([`DutyTake`]).
    async fn duty_take(&self, params: DutyTake) -> Result<bool>;
    /// Deleted lambdas whose queues are still to be deleted from the queue
    /// service, at most `limit`.
    async fn queue_retired(&self, limit: u32) -> Result<Vec<String>>;
    /// The queues of a deleted lambda are deleted: forgets it (nothing if
    /// it was deployed again meanwhile).
    async fn queue_retired_done(&self, lambda: &str) -> Result<()>;

    /// Stores a token by the hash of its secret.
    async fn token_create(&self, params: TokenCreate) -> Result<()>;
    /// Every token, revoked ones included, by id.
    async fn token_list(&self) -> Result<Vec<Token>>;
    /// Revokes a token; false if there is no such token.
    async fn token_revoke(&self, id: &str, now: Millis) -> Result<bool>;
    /// The unrevoked token whose secret hashes to `hash`.
    async fn token_find(&self, hash: &str) -> Result<Option<Token>>;

    /// Stores a secret of a lambda, sealed; replaces one of that name.
    async fn secret_set(&self, params: SecretSet) -> Result<()>;
    /// A lambda's secrets by name, without their values.
    async fn secret_list(&self, lambda: &str) -> Result<Vec<SecretInfo>>;
    /// Removes a secret; false if there was none.
    async fn secret_remove(&self, lambda: &str, name: &str) -> Result<bool>;
    /// A lambda's secrets, sealed, with their version.
    async fn secret_sealed(&self, lambda: &str) -> Result<SealedSecrets>;

    /// Adds the HSCs' counts to the history's minutes ([`HistoryAdd`]).
    async fn history_add(&self, params: HistoryAdd) -> Result<()>;
    /// Sets the sampled queue depth of lambdas at a minute.
    async fn history_depth(&self, params: HistoryDepth) -> Result<()>;
    /// The history's minutes in a range, of one lambda or of all added
    /// together, oldest first; minutes with nothing kept are left out.
    async fn history_read(&self, params: HistoryRead) -> Result<Vec<HistoryMinute>>;
    /// Deletes the history's minutes past its retention; how many rows.
    async fn history_prune(&self, params: HistoryPrune) -> Result<u64>;

    /// Creates a periodic schedule.
    async fn cron_create(&self, schedule: Cron) -> Result<()>;
    /// Every schedule, by id.
    async fn cron_list(&self) -> Result<Vec<Cron>>;
    /// Deletes a schedule; false if there was none.
    async fn cron_delete(&self, id: &str) -> Result<bool>;
    /// Schedules whose next occurrence is due.
    async fn cron_due(&self, now: Millis, limit: u32) -> Result<Vec<Cron>>;
    /// Materialises one occurrence, exactly once; an occurrence whose task
    /// is refused is skipped, so one broken schedule never blocks the rest.
    async fn cron_materialize(&self, params: CronMaterialize) -> Result<Materialized>;
}
