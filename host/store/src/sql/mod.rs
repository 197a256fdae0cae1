//! The store's SQL, written once for both backends.
//!
//! This module is mounted twice, once inside each backend's module
//! (`sqlite.rs`, `postgres.rs`), which names what the SQL needs of it:
//! `Store` (with its `pool` and a `write()` that begins a writing
//! transaction), the `Connection` and `Row` types, and its [`Dialect`]
//! (`DIALECT`). So every statement is plain Rust, compiled against each
//! driver's concrete types, instead of a generic maze of sqlx bounds or one
//! macro body that rustfmt and rust-analyzer cannot read.
//!
//! One file per entity: `lambda` (versions, components), `task` (insert,
//! read, cancel, redrive), `poll` (the Store Consumer's poll, gates' holds
//! and drops, pacing), `lease` (claims, heartbeats, results, attempts,
//! continuations), `gate`, `token`, `cron`. The decisions that need no
//! database (admitting a task, planning a retry, what a gate does) live in
//! [`crate::rules`], with unit tests; status names come from
//! [`crate::names`].
//!
//! The hot paths (insert, poll, claim, heartbeat, result) are one statement
//! per batch: the batch travels as one JSON array parameter and is joined to
//! `tasks` by primary key. A statement per row was a round trip per row,
//! even to SQLite's worker thread: three to ten times slower.
//!
//! [`Dialect`]: crate::dialect::Dialect

mod cron;
mod gate;
mod lambda;
mod lease;
mod poll;
mod secret;
mod task;
mod token;

use async_trait::async_trait;

use super::{Connection, DIALECT, Row, Store};
use crate::names::GATE_OF_TASK;
use crate::{
    Attempt, Backlog, ClaimedTask, Cron, CronMaterialize, DeadRedrive, EnqueueReport, Gate,
    GateSet, GcReport, Lambda, LambdaDeploy, LambdaGc, LambdaRollback, Materialized, Millis,
    Refusal, Result, SealedSecrets, SecretInfo, SecretSet, Task, TaskClaimMany, TaskEnqueueReady,
    TaskHeartbeatMany, TaskInsertMany, TaskInserted, TaskList, TaskSetResultMany, TaskStore, Token,
    TokenCreate,
};

/// Runs a dialect's lock statement, if it has one.
async fn lock_gates(conn: &mut Connection, statement: &'static str) -> Result<()> {
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
    fn real(&self, column: &str) -> Result<f64> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn opt_real(&self, column: &str) -> Result<Option<f64>> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn text(&self, column: &str) -> Result<String> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn bytes(&self, column: &str) -> Result<Vec<u8>> {
        Ok(sqlx::Row::try_get(self, column)?)
    }
    fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>> {
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
        lambda::deploy(self, params).await
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
    async fn lambda_versions(&self, name: &str) -> Result<Vec<Lambda>> {
        lambda::versions(self, name).await
    }
    async fn lambda_rollback(&self, params: LambdaRollback) -> Result<Lambda> {
        lambda::rollback(self, params).await
    }
    async fn lambda_gc(&self, params: LambdaGc) -> Result<GcReport> {
        lambda::gc(self, params).await
    }
    async fn component_get(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        lambda::component(self, digest).await
    }

    async fn task_insert_many(&self, params: TaskInsertMany) -> Result<Vec<TaskInserted>> {
        task::insert_many(self, params).await
    }
    async fn task_get(&self, id: &str) -> Result<Option<Task>> {
        task::get(self, id).await
    }
    async fn task_list(&self, params: TaskList) -> Result<Vec<Task>> {
        task::list(self, params).await
    }
    async fn task_cancel(&self, id: &str, now: Millis) -> Result<Task> {
        task::cancel(self, id, now).await
    }

    async fn task_enqueue_ready(&self, params: TaskEnqueueReady) -> Result<EnqueueReport> {
        poll::enqueue_ready(self, params).await
    }
    async fn task_claim_many(
        &self,
        params: TaskClaimMany,
    ) -> Result<Vec<Result<ClaimedTask, Refusal>>> {
        lease::claim_many(self, params).await
    }
    async fn task_heartbeat_many(
        &self,
        params: TaskHeartbeatMany,
    ) -> Result<Vec<Result<(), Refusal>>> {
        lease::heartbeat_many(self, params).await
    }
    async fn task_set_result_many(
        &self,
        params: TaskSetResultMany,
    ) -> Result<Vec<Result<waft_core::TaskStatus, Refusal>>> {
        lease::set_result_many(self, params).await
    }

    async fn task_backlog(&self, now: Millis) -> Result<Vec<Backlog>> {
        task::backlog(self, now).await
    }
    async fn attempt_list(&self, task_id: &str) -> Result<Vec<Attempt>> {
        task::attempts(self, task_id).await
    }

    async fn gate_set(&self, params: GateSet) -> Result<u64> {
        gate::set(self, params).await
    }
    async fn gate_list(&self) -> Result<Vec<Gate>> {
        gate::list(self).await
    }

    async fn dead_redrive(&self, params: DeadRedrive) -> Result<u64> {
        task::redrive(self, params).await
    }

    async fn token_create(&self, params: TokenCreate) -> Result<()> {
        token::create(self, params).await
    }
    async fn token_list(&self) -> Result<Vec<Token>> {
        token::list(self).await
    }
    async fn token_revoke(&self, id: &str, now: Millis) -> Result<bool> {
        token::revoke(self, id, now).await
    }
    async fn token_find(&self, hash: &str) -> Result<Option<Token>> {
        token::find(self, hash).await
    }

    async fn secret_set(&self, params: SecretSet) -> Result<()> {
        secret::set(self, params).await
    }
    async fn secret_list(&self, lambda: &str) -> Result<Vec<SecretInfo>> {
        secret::list(self, lambda).await
    }
    async fn secret_remove(&self, lambda: &str, name: &str) -> Result<bool> {
        secret::remove(self, lambda, name).await
    }
    async fn secret_sealed(&self, lambda: &str) -> Result<SealedSecrets> {
        secret::sealed(self, lambda).await
    }

    async fn cron_create(&self, cron: Cron) -> Result<()> {
        cron::create(self, cron).await
    }
    async fn cron_list(&self) -> Result<Vec<Cron>> {
        cron::list(self).await
    }
    async fn cron_delete(&self, id: &str) -> Result<bool> {
        cron::delete(self, id).await
    }
    async fn cron_due(&self, now: Millis, limit: u32) -> Result<Vec<Cron>> {
        cron::due(self, now, limit).await
    }
    async fn cron_materialize(&self, params: CronMaterialize) -> Result<Materialized> {
        cron::materialize(self, params).await
    }
}
