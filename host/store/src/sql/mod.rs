//! The store's SQL, written once for both backends.
//!
//! This module is mounted twice, once inside each backend's module
//! (`sqlite.rs`, `postgres.rs`), which names what the SQL needs of it:
//! `Store` (with its `pool`, a `write(work)` that runs work in a writing
//! transaction and `busy()`, how long its one writer has worked, if it has
//! one), the `Connection` and `Row` types, and its [`Dialect`]
//! (`DIALECT`). So every statement is plain Rust, compiled against each
//! driver's concrete types, instead of a generic maze of sqlx bounds or one
//! macro body that rustfmt and rust-analyzer cannot read.
//!
//! One file per entity or step, listed with what each holds in
//! `docs/architecture.md` ("`host/store/src/sql/`, file by file"); the test
//! below holds that list to this directory. The decisions that need no
//! database (admitting a task, planning a retry, what a gate does) live in
//! [`crate::rules`], with unit tests; status names come from
//! [`crate::names`].
//!
//! Each writing function takes the connection of a transaction that the
//! trait's implementation below opens with the backend's `write` (and
//! commits once the function returns `Ok`): on SQLite together with other
//! calls ([`crate::group_commit`]), on Postgres alone. So the transaction
//! boundaries of every call are in one place.
//!
//! The hot paths (insert, poll, claim, heartbeat, result) are one statement
//! per batch: the batch travels as one JSON array parameter and is joined to
//! `tasks` by primary key. A statement per row was a round trip per row,
//! even to SQLite's worker thread: three to ten times slower.
//!
//! [`Dialect`]: crate::dialect::Dialect

mod attempt;
mod child_ends;
mod cron;
mod fan_in;
mod gate;
mod generation;
mod history;
mod insert;
mod journal;
mod journaled;
mod keys;
mod lambda;
mod lease;
mod pace;
mod poll;
mod prune;
mod rate;
mod result;
mod secret;
mod signal;
mod stats;
mod task;
mod token;

use async_trait::async_trait;

use super::{Connection, DIALECT, Row, Store};
use crate::names::GATE_OF_TASK;
use crate::{
    Artifact, Attempt, Backlog, ChildrenState, ClaimedTask, Cron, CronMaterialize, DeadPurge,
    DeadRedrive, DutyTake, EnqueueReport, Gate, GateSet, GcReport, HistoryAdd, HistoryDepth,
    HistoryMinute, HistoryPrune, HistoryRead, JournalEntry, JournaledTask, JournaledTasks, Lambda,
    LambdaDelete, LambdaDeleted, LambdaDeploy, LambdaGc, LambdaRollback, LambdaStats,
    LambdaVersion, Materialized, Millis, Pruned, Refusal, Result, ResultRecorded, SealedSecrets,
    SecretInfo, SecretSet, SignalSent, StatusCount, Task, TaskChildrenRead, TaskClaimMany,
    TaskCount, TaskEnqueueReady, TaskHeartbeatMany, TaskInsertMany, TaskInserted, TaskJournalRead,
    TaskJournalWrite, TaskList, TaskMove, TaskPrune, TaskSetResultMany, TaskSignal, TaskSignalRead,
    TaskStore, Token, TokenCreate,
};

/// Runs a deploy or rollback, again while it gives way to the row locks
/// of results and heartbeats ([`StoreError::gave_way`]): a few times, a
/// little later each time.
///
/// [`StoreError::gave_way`]: crate::StoreError::gave_way
async fn giving_way<T, F, C>(mut call: C) -> Result<T>
where
    C: FnMut() -> F,
    F: std::future::Future<Output = Result<T>>,
{
    let mut tries: u64 = 0;
    loop {
        match call().await {
            Err(error) if error.gave_way() && tries < 10 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20 * tries)).await;
            }
            answer => return answer,
        }
    }
}

/// Runs a dialect's lock statement, if it has one.
async fn take_lock(conn: &mut Connection, statement: &'static str) -> Result<()> {
    if !statement.is_empty() {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    Ok(())
}

impl crate::rows::RowExt for Row {
    fn int(&self, column: &str) -> Result<i64> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn text(&self, column: &str) -> Result<String> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn flag(&self, column: &str) -> Result<bool> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
}

#[async_trait]
impl TaskStore for Store {
    async fn clock_now(&self) -> Result<Millis> {
        let mut conn = self.pool.acquire().await?;
        Ok(sqlx::query_scalar(DIALECT.clock)
            .fetch_one(&mut *conn)
            .await?)
    }

    async fn lambda_deploy(&self, params: LambdaDeploy) -> Result<Lambda> {
        let params = std::sync::Arc::new(params);
        giving_way(|| {
            let params = std::sync::Arc::clone(&params);
            self.write(move |tx| Box::pin(async move { lambda::deploy(tx, &params).await }))
        })
        .await
    }
    async fn lambda_get(&self, name: &str) -> Result<Option<Lambda>> {
        lambda::get(self, name).await
    }
    async fn lambda_get_version(&self, name: &str, version: u32) -> Result<Option<Lambda>> {
        lambda::get_version(self, name, version).await
    }
    async fn lambda_list(&self) -> Result<Vec<Lambda>> {
        lambda::list(self).await
    }
    async fn lambda_versions(&self, name: &str) -> Result<Vec<LambdaVersion>> {
        lambda::versions(self, name).await
    }
    async fn lambda_rollback(&self, params: LambdaRollback) -> Result<Lambda> {
        giving_way(|| {
            let params = params.clone();
            self.write(move |tx| Box::pin(lambda::rollback(tx, params)))
        })
        .await
    }
    async fn lambda_gc(&self, params: LambdaGc) -> Result<GcReport> {
        self.write(move |tx| Box::pin(lambda::gc(tx, params))).await
    }
    async fn component_get(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        lambda::component(self, digest).await
    }
    async fn artifact_get(&self, digest: &str, engine: &str) -> Result<Option<Artifact>> {
        lambda::artifact(self, digest, engine).await
    }

    async fn task_insert_many(&self, params: TaskInsertMany) -> Result<Vec<TaskInserted>> {
        self.write(move |tx| Box::pin(task::insert_many(tx, params)))
            .await
    }
    async fn task_get(&self, id: &str) -> Result<Option<Task>> {
        task::get(self, id).await
    }
    async fn task_list(&self, params: TaskList) -> Result<Vec<Task>> {
        task::list(self, params).await
    }
    async fn task_count(&self, params: TaskCount) -> Result<Vec<StatusCount>> {
        task::count(self, params).await
    }
    async fn lambda_stats(&self, now: Millis, since: Millis) -> Result<Vec<LambdaStats>> {
        stats::lambda_stats(self, now, since).await
    }
    async fn task_cancel(&self, id: &str, now: Millis) -> Result<Task> {
        let id = id.to_owned();
        self.write(move |tx| Box::pin(async move { task::cancel(tx, &id, now).await }))
            .await
    }
    async fn task_signal(&self, params: TaskSignal) -> Result<SignalSent> {
        self.write(move |tx| Box::pin(signal::send(tx, params)))
            .await
    }
    async fn task_signal_read(
        &self,
        params: TaskSignalRead,
    ) -> Result<Result<Option<Vec<u8>>, Refusal>> {
        signal::read(self, params).await
    }
    async fn task_children_read(
        &self,
        params: TaskChildrenRead,
    ) -> Result<Result<ChildrenState, Refusal>> {
        fan_in::read(self, params).await
    }

    async fn task_enqueue_ready(&self, params: TaskEnqueueReady) -> Result<EnqueueReport> {
        self.write(move |tx| Box::pin(poll::enqueue_ready(tx, params)))
            .await
    }
    async fn task_recover(&self, now: Millis) -> Result<u64> {
        self.write(move |tx| Box::pin(poll::recover(tx, now))).await
    }
    async fn task_claim_many(
        &self,
        params: TaskClaimMany,
    ) -> Result<Vec<Result<ClaimedTask, Refusal>>> {
        self.write(move |tx| Box::pin(lease::claim_many(tx, params)))
            .await
    }
    async fn task_heartbeat_many(
        &self,
        params: TaskHeartbeatMany,
    ) -> Result<Vec<Result<(), Refusal>>> {
        self.write(move |tx| Box::pin(lease::heartbeat_many(tx, params)))
            .await
    }
    async fn task_record_many(
        &self,
        params: TaskSetResultMany,
    ) -> Result<Vec<Result<ResultRecorded, Refusal>>> {
        self.write(move |tx| Box::pin(result::set_result_many(tx, params)))
            .await
    }

    async fn task_journal_write(&self, params: TaskJournalWrite) -> Result<Result<(), Refusal>> {
        self.write(move |tx| Box::pin(generation::write(tx, params)))
            .await
    }
    async fn task_journal(&self, params: TaskJournalRead) -> Result<Vec<JournalEntry>> {
        journal::read(self, params).await
    }
    async fn task_journals(&self, params: JournaledTasks) -> Result<Vec<JournaledTask>> {
        journaled::page(self, params).await
    }
    async fn task_move(&self, params: TaskMove) -> Result<u64> {
        self.write(move |tx| Box::pin(journaled::move_checked(tx, params)))
            .await
    }

    async fn task_backlog(&self, now: Millis) -> Result<Vec<Backlog>> {
        task::backlog(self, now).await
    }
    fn writer_busy(&self) -> Option<std::time::Duration> {
        self.busy()
    }
    async fn attempt_list(&self, task_id: &str) -> Result<Vec<Attempt>> {
        task::attempts(self, task_id).await
    }

    async fn gate_set(&self, params: GateSet) -> Result<u64> {
        self.write(move |tx| Box::pin(gate::set(tx, params))).await
    }
    async fn gate_list(&self) -> Result<Vec<Gate>> {
        gate::list(self).await
    }

    async fn dead_redrive(&self, params: DeadRedrive) -> Result<u64> {
        self.write(move |tx| Box::pin(task::redrive(tx, params)))
            .await
    }

    async fn task_prune(&self, params: TaskPrune) -> Result<Pruned> {
        self.write(move |tx| Box::pin(prune::prune(tx, params)))
            .await
    }
    async fn lambda_delete(&self, params: LambdaDelete) -> Result<LambdaDeleted> {
        self.write(move |tx| Box::pin(lambda::delete(tx, params)))
            .await
    }
    async fn dead_purge(&self, params: DeadPurge) -> Result<Pruned> {
        self.write(move |tx| Box::pin(prune::purge(tx, params)))
            .await
    }
    async fn duty_take(&self, params: DutyTake) -> Result<bool> {
        self.write(move |tx| Box::pin(prune::take_duty(tx, params)))
            .await
    }
    async fn queue_retired(&self, limit: u32) -> Result<Vec<String>> {
        lambda::retired(self, limit).await
    }
    async fn queue_retired_done(&self, lambda: &str) -> Result<()> {
        let lambda = lambda.to_owned();
        self.write(move |tx| Box::pin(async move { lambda::retired_done(tx, &lambda).await }))
            .await
    }

    async fn token_create(&self, params: TokenCreate) -> Result<()> {
        self.write(move |tx| Box::pin(token::create(tx, params)))
            .await
    }
    async fn token_list(&self) -> Result<Vec<Token>> {
        token::list(self).await
    }
    async fn token_revoke(&self, id: &str, now: Millis) -> Result<bool> {
        let id = id.to_owned();
        self.write(move |tx| Box::pin(async move { token::revoke(tx, &id, now).await }))
            .await
    }
    async fn token_find(&self, hash: &str) -> Result<Option<Token>> {
        token::find(self, hash).await
    }

    async fn secret_set(&self, params: SecretSet) -> Result<()> {
        self.write(move |tx| Box::pin(secret::set(tx, params)))
            .await
    }
    async fn secret_list(&self, lambda: &str) -> Result<Vec<SecretInfo>> {
        secret::list(self, lambda).await
    }
    async fn secret_remove(&self, lambda: &str, name: &str) -> Result<bool> {
        let (lambda, name) = (lambda.to_owned(), name.to_owned());
        self.write(move |tx| Box::pin(async move { secret::remove(tx, &lambda, &name).await }))
            .await
    }
    async fn secret_sealed(&self, lambda: &str) -> Result<SealedSecrets> {
        secret::sealed(self, lambda).await
    }

    async fn history_add(&self, params: HistoryAdd) -> Result<()> {
        self.write(move |tx| Box::pin(history::add(tx, params)))
            .await
    }
    async fn history_depth(&self, params: HistoryDepth) -> Result<()> {
        self.write(move |tx| Box::pin(history::depth(tx, params)))
            .await
    }
    async fn history_read(&self, params: HistoryRead) -> Result<Vec<HistoryMinute>> {
        history::read(self, params).await
    }
    async fn history_prune(&self, params: HistoryPrune) -> Result<u64> {
        self.write(move |tx| Box::pin(history::prune(tx, params)))
            .await
    }

    async fn cron_create(&self, cron: Cron) -> Result<()> {
        self.write(move |tx| Box::pin(cron::create(tx, cron))).await
    }
    async fn cron_list(&self) -> Result<Vec<Cron>> {
        cron::list(self).await
    }
    async fn cron_delete(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.write(move |tx| Box::pin(async move { cron::delete(tx, &id).await }))
            .await
    }
    async fn cron_due(&self, now: Millis, limit: u32) -> Result<Vec<Cron>> {
        cron::due(self, now, limit).await
    }
    async fn cron_materialize(&self, params: CronMaterialize) -> Result<Materialized> {
        self.write(move |tx| Box::pin(cron::materialize(tx, params)))
            .await
    }
}

/// `docs/architecture.md` lists the files of this directory, one table row
/// each: the one list of them, held to the directory here (this module is
/// mounted once per backend, so the check runs twice).
#[cfg(test)]
mod tests {
    #[test]
    fn the_architecture_page_lists_every_sql_file() {
        let page = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/architecture.md"
        ));
        let heading = "### `host/store/src/sql/`, file by file";
        let section = page
            .split_once(heading)
            .map(|(_, rest)| rest.split("\n#").next().unwrap_or(rest))
            .expect("docs/architecture.md lists the sql/ files under its heading");
        let mut listed: Vec<&str> = section
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|rest| rest.split_once('`').map(|(name, _)| name))
            .collect();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sql");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("src/sql")
            .map(|entry| entry.expect("an entry of src/sql").file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".rs") && name != "mod.rs")
            .collect();
        listed.sort_unstable();
        files.sort_unstable();
        assert_eq!(
            listed, files,
            "docs/architecture.md's list of sql/ files against the directory"
        );
    }
}
