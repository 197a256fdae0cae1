//! Lambdas: versions with their config, components by digest and their
//! compiled artifacts, rollback and garbage collection.

use std::collections::HashMap;

use waft_core::LambdaConfig;
use waft_core::task::check_lambda_name;

use super::{Connection, DIALECT, Store};
use super::{keys, pace, prune};
use crate::names::status::{LIVE, RUNNING, SUSPENDED};
use crate::rows::{self, LAMBDA_COLUMNS};
use crate::support::{millis, sql, text_in};
use crate::{
    Artifact, GcReport, Lambda, LambdaDelete, LambdaDeleted, LambdaDeploy, LambdaGc,
    LambdaRollback, LambdaVersion, Result, StoreError,
};

pub(super) async fn lambda_current(conn: &mut Connection, name: &str) -> Result<Option<Lambda>> {
    lambda_row(conn, name, "").await
}

/// The lambda `name` at its current version, the SELECT ending in `lock`.
async fn lambda_row(conn: &mut Connection, name: &str, lock: &str) -> Result<Option<Lambda>> {
    let row = sqlx::query(sql(format!(
        "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name AND v.version = l.current_version WHERE l.name = $1 {lock}"
    )))
    .bind(text_in(name))
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(rows::lambda).transpose()
}

pub(super) async fn require_lambda(conn: &mut Connection, name: &str) -> Result<Lambda> {
    lambda_current(conn, name)
        .await?
        .ok_or_else(|| StoreError::UnknownLambda(name.to_owned()))
}

/// A lambda at its current version, for a transaction that inserts tasks
/// of it: its row stays locked against a delete until the transaction ends
/// (on Postgres), so that the tasks cannot outlive it; an error if it is
/// missing, or deleted while the lock was awaited.
pub(super) async fn require_lambda_for_tasks(conn: &mut Connection, name: &str) -> Result<Lambda> {
    lambda_row(conn, name, DIALECT.lambda_key_lock)
        .await?
        .ok_or_else(|| StoreError::UnknownLambda(name.to_owned()))
}

/// A lambda at its current version, read (and locked, see
/// [`require_lambda_for_tasks`]) once per batch of inserts.
pub(super) async fn cached_lambda(
    conn: &mut Connection,
    lambdas: &mut HashMap<String, Lambda>,
    name: &str,
) -> Result<Lambda> {
    if let Some(lambda) = lambdas.get(name) {
        return Ok(lambda.clone());
    }
    let lambda = require_lambda_for_tasks(conn, name).await?;
    lambdas.insert(name.to_owned(), lambda.clone());
    Ok(lambda)
}

pub(super) async fn require_version(
    conn: &mut Connection,
    lambda: &str,
    version: u32,
) -> Result<()> {
    let found: Option<i64> = sqlx::query_scalar(
        "SELECT version FROM lambda_versions WHERE lambda = $1 AND version = $2",
    )
    .bind(lambda)
    .bind(i64::from(version))
    .fetch_optional(&mut *conn)
    .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::UnknownVersion {
            lambda: lambda.to_owned(),
            version,
        }),
    }
}

pub(super) async fn insert_version(
    conn: &mut Connection,
    params: &LambdaDeploy,
    version: i64,
) -> Result<()> {
    let LambdaConfig {
        limits,
        max_attempts,
        backoff,
        priorities,
        default_priority,
        max_payload,
        concurrency,
        quota_per_sec,
        key_concurrency,
        key_rate,
        key_fairness,
        allowed_children,
        grants,
        on_divergence,
        retention,
    } = &params.config;
    let grants = serde_json::to_string(grants).map_err(|e| StoreError::Invalid(e.to_string()))?;
    sqlx::query(
        "INSERT INTO lambda_versions (lambda, version, digest, max_memory, timeout_ms, fuel, \
         max_output, max_log, max_attempts, backoff_base_ms, backoff_factor, backoff_max_ms, \
         priorities, default_priority, max_payload, concurrency, quota_per_sec, created_at, \
         allowed_children, grants, on_divergence, retention, key_concurrency, key_rate_count, \
         key_rate_period_ms, key_fairness, key_lookahead) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
         $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)",
    )
    .bind(&params.name)
    .bind(version)
    .bind(&params.digest)
    .bind(limits.max_memory.bytes() as i64)
    .bind(millis(limits.timeout))
    .bind(limits.fuel.map(|f| i64::try_from(f).unwrap_or(i64::MAX)))
    .bind(limits.max_output.bytes() as i64)
    .bind(limits.max_log.bytes() as i64)
    .bind(i64::from(*max_attempts))
    .bind(millis(backoff.base))
    .bind(backoff.factor)
    .bind(millis(backoff.max))
    .bind(i64::from(*priorities))
    .bind(i64::from(*default_priority))
    .bind(max_payload.bytes() as i64)
    .bind(i64::from(*concurrency))
    .bind(*quota_per_sec)
    .bind(params.now)
    .bind(allowed_children.join("\n"))
    .bind(grants)
    .bind(on_divergence.as_str())
    .bind((!retention.is_empty()).then(|| retention.to_json()))
    .bind(key_concurrency.map(i64::from))
    .bind(key_rate.map(|rate| i64::from(rate.count)))
    .bind(key_rate.map(|rate| i64::try_from(rate.period_ms()).unwrap_or(i64::MAX)))
    .bind(
        key_fairness
            .as_ref()
            .map(|fairness| serde_json::to_string(&fairness.weights))
            .transpose()
            .map_err(|e| StoreError::Invalid(e.to_string()))?,
    )
    .bind(
        key_fairness
            .as_ref()
            .map(|fairness| i64::from(fairness.lookahead)),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub(super) async fn deploy(tx: &mut Connection, params: &LambdaDeploy) -> Result<Lambda> {
    check_lambda_name(&params.name)?;
    params.config.validate()?;
    sqlx::query(
        "INSERT INTO components (digest, bytes, created_at) VALUES ($1, $2, $3) \
         ON CONFLICT (digest) DO NOTHING",
    )
    .bind(&params.digest)
    .bind(&params.component)
    .bind(params.now)
    .execute(&mut *tx)
    .await?;
    if let Some(artifact) = &params.artifact {
        // A later compile (after the key changed, say) replaces the seal.
        sqlx::query(
            "INSERT INTO artifacts (digest, engine, bytes, seal, created_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (digest, engine) DO UPDATE SET bytes = excluded.bytes, \
             seal = excluded.seal, created_at = excluded.created_at",
        )
        .bind(&params.digest)
        .bind(&artifact.engine)
        .bind(&artifact.bytes)
        .bind(&artifact.seal)
        .bind(params.now)
        .execute(&mut *tx)
        .await?;
    }
    // Polls and claims read neither components nor artifacts: they are
    // locked out only from here.
    keys::lock_out_polls(&mut *tx).await?;
    let version = next_version(&mut *tx, &params.name, params.now).await?;
    insert_version(&mut *tx, params, version).await?;
    pace::repace(&mut *tx, &params.name, params.now).await?;
    keys::redeployed(&mut *tx, &params.name).await?;
    // Deployed again after a delete: its queues, not deleted yet, stay.
    retired_done(&mut *tx, &params.name).await?;
    let lambda = require_lambda(&mut *tx, &params.name).await?;
    Ok(lambda)
}

/// The number of the version a deploy of `name` makes: the next of its
/// lambda, or, for a new lambda, the first past every number a deleted
/// lambda of that name had, its secrets version past that one's as well (see
/// `deleted_lambdas`): executors keep code, grants, limits and opened secrets
/// by these numbers, so none may name two lambdas.
async fn next_version(tx: &mut Connection, name: &str, now: crate::Millis) -> Result<i64> {
    let version = sqlx::query_scalar(
        "INSERT INTO lambdas (name, current_version, secrets_version, created_at) VALUES ($1, \
         COALESCE((SELECT last_version FROM deleted_lambdas WHERE name = $1), 0) + 1, \
         COALESCE((SELECT CASE WHEN secrets_version > 0 THEN secrets_version + 1 ELSE 0 END \
            FROM deleted_lambdas WHERE name = $1), 0), $2) \
         ON CONFLICT (name) DO UPDATE SET current_version = lambdas.current_version + 1 \
         RETURNING current_version",
    )
    .bind(name)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    // The lambda carries the numbers from here.
    sqlx::query("DELETE FROM deleted_lambdas WHERE name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    Ok(version)
}

/// Keeps the last version and secrets version of `name`, deleted now, for
/// the next lambda of that name to start past.
async fn remember_numbers(tx: &mut Connection, name: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO deleted_lambdas (name, last_version, secrets_version) \
         SELECT name, current_version, secrets_version FROM lambdas WHERE name = $1 \
         ON CONFLICT (name) DO UPDATE SET last_version = excluded.last_version, \
         secrets_version = excluded.secrets_version",
    )
    .bind(name)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

pub(super) async fn get(store: &Store, name: &str) -> Result<Option<Lambda>> {
    let mut conn = store.pool.acquire().await?;
    lambda_current(&mut conn, name).await
}

pub(super) async fn get_version(store: &Store, name: &str, version: u32) -> Result<Option<Lambda>> {
    let row = sqlx::query(sql(format!(
        "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name WHERE l.name = $1 AND v.version = $2"
    )))
    .bind(text_in(name))
    .bind(i64::from(version))
    .fetch_optional(&store.pool)
    .await?;
    row.as_ref().map(rows::lambda).transpose()
}

pub(super) async fn list(store: &Store) -> Result<Vec<Lambda>> {
    let rows = sqlx::query(sql(format!(
        "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name AND v.version = l.current_version ORDER BY l.name"
    )))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(rows::lambda).collect()
}

pub(super) async fn versions(store: &Store, name: &str) -> Result<Vec<LambdaVersion>> {
    let rows = sqlx::query(sql(format!(
        "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name WHERE l.name = $1 ORDER BY v.version"
    )))
    .bind(text_in(name))
    .fetch_all(&store.pool)
    .await?;
    if rows.is_empty() {
        return Err(StoreError::UnknownLambda(name.to_owned()));
    }
    // The tasks that need each version, as `gc` counts them: live ones
    // (running ones are live too), read from the index of live tasks.
    let needed: Vec<(i64, i64, i64)> = sqlx::query_as(sql(format!(
        "SELECT v.version, \
         (SELECT COUNT(*) FROM tasks t WHERE t.lambda = v.lambda AND t.status = {SUSPENDED} \
            AND t.status IN {LIVE} \
            AND (t.version = v.version OR t.journal_version = v.version)), \
         (SELECT COUNT(*) FROM tasks t WHERE t.lambda = v.lambda AND t.status IN {LIVE} \
            AND (t.version = v.version OR t.journal_version = v.version \
            OR (t.status IN {RUNNING} AND t.claimed_version = v.version))) \
         FROM lambda_versions v WHERE v.lambda = $1"
    )))
    .bind(text_in(name))
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            let lambda = rows::lambda(row)?;
            let (suspended, live) = needed
                .iter()
                .find(|(version, ..)| *version == i64::from(lambda.version))
                .map_or((0, 0), |(_, suspended, live)| (*suspended, *live));
            Ok(LambdaVersion {
                suspended: u64::try_from(suspended).unwrap_or(0),
                live: u64::try_from(live).unwrap_or(0),
                lambda,
            })
        })
        .collect()
}

pub(super) async fn rollback(tx: &mut Connection, params: LambdaRollback) -> Result<Lambda> {
    check_lambda_name(&params.name)?;
    keys::lock_out_polls(&mut *tx).await?;
    let current = require_lambda(&mut *tx, &params.name).await?;
    let to = params.to.unwrap_or(current.version.saturating_sub(1));
    if to == current.version {
        return Err(StoreError::Invalid(format!(
            "version {to} of {:?} is already current",
            params.name
        )));
    }
    let row = sqlx::query(sql(format!(
        "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name WHERE l.name = $1 AND v.version = $2"
    )))
    .bind(&params.name)
    .bind(i64::from(to))
    .fetch_optional(&mut *tx)
    .await?;
    let target =
        row.as_ref()
            .map(rows::lambda)
            .transpose()?
            .ok_or_else(|| StoreError::UnknownVersion {
                lambda: params.name.clone(),
                version: to,
            })?;
    let version: i64 = sqlx::query_scalar(
        "UPDATE lambdas SET current_version = current_version + 1 WHERE name = $1 \
         RETURNING current_version",
    )
    .bind(&params.name)
    .fetch_one(&mut *tx)
    .await?;
    let copy = LambdaDeploy {
        name: params.name.clone(),
        digest: target.digest,
        component: Vec::new(),
        artifact: None,
        config: target.config,
        now: params.now,
    };
    insert_version(&mut *tx, &copy, version).await?;
    pace::repace(&mut *tx, &params.name, params.now).await?;
    keys::redeployed(&mut *tx, &params.name).await?;
    let lambda = require_lambda(&mut *tx, &params.name).await?;
    Ok(lambda)
}

pub(super) async fn gc(tx: &mut Connection, params: LambdaGc) -> Result<GcReport> {
    let keep = i64::from(params.keep.max(1));
    // Older than the newest `keep`, not current, and not needed by a task
    // that may still run (a dead one may be redriven): pinned by it, or by
    // its journal, which only the version that wrote it can replay, or
    // running in an execution whose result may still pin its journal to it.
    let versions = sqlx::query(sql(format!(
        "DELETE FROM lambda_versions WHERE lambda = $1 \
         AND version <= (SELECT current_version FROM lambdas WHERE name = $1) - $2 \
         AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.lambda = lambda_versions.lambda \
            AND t.status IN {LIVE} AND (t.version = lambda_versions.version \
                OR t.journal_version = lambda_versions.version \
                OR (t.status IN {RUNNING} AND t.claimed_version = lambda_versions.version)))"
    )))
    .bind(&params.lambda)
    .bind(keep)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let components = delete_unused_components(&mut *tx).await?;
    Ok(GcReport {
        versions,
        components,
    })
}

/// Deletes a lambda with everything it has; see [`LambdaDelete`].
pub(super) async fn delete(tx: &mut Connection, params: LambdaDelete) -> Result<LambdaDeleted> {
    // Locked first: a task inserted meanwhile waits for the delete, then
    // finds no lambda (on Postgres; SQLite writes one at a time).
    let found: Option<String> = sqlx::query_scalar(sql(format!(
        "SELECT name FROM lambdas WHERE name = $1 {}",
        DIALECT.row_lock
    )))
    .bind(&params.name)
    .fetch_optional(&mut *tx)
    .await?;
    if found.is_none() {
        return Err(StoreError::UnknownLambda(params.name));
    }
    let live: i64 = sqlx::query_scalar(sql(format!(
        "SELECT COUNT(*) FROM tasks WHERE lambda = $1 AND status IN {LIVE}"
    )))
    .bind(&params.name)
    .fetch_one(&mut *tx)
    .await?;
    let live = u64::try_from(live).unwrap_or(0);
    if live > 0 && !params.drop_tasks {
        return Err(StoreError::LambdaHasTasks {
            lambda: params.name,
            live,
        });
    }
    let tasks = prune::delete_lambda_tasks(&mut *tx, &params.name).await?;
    for table in [
        "crons",
        "gates",
        "lambda_pace",
        "key_pace",
        "secrets",
        "lambda_versions",
        "task_minutes",
        "task_latency",
    ] {
        sqlx::query(sql(format!("DELETE FROM {table} WHERE lambda = $1")))
            .bind(&params.name)
            .execute(&mut *tx)
            .await?;
    }
    remember_numbers(&mut *tx, &params.name).await?;
    sqlx::query("DELETE FROM lambdas WHERE name = $1")
        .bind(&params.name)
        .execute(&mut *tx)
        .await?;
    delete_unused_components(&mut *tx).await?;
    sqlx::query("INSERT INTO retired_queues (lambda) VALUES ($1) ON CONFLICT (lambda) DO NOTHING")
        .bind(&params.name)
        .execute(&mut *tx)
        .await?;
    Ok(LambdaDeleted { tasks, live })
}

/// Deleted lambdas whose queues are still to go, by name.
pub(super) async fn retired(store: &Store, limit: u32) -> Result<Vec<String>> {
    Ok(
        sqlx::query_scalar("SELECT lambda FROM retired_queues ORDER BY lambda LIMIT $1")
            .bind(i64::from(limit))
            .fetch_all(&store.pool)
            .await?,
    )
}

pub(super) async fn retired_done(conn: &mut Connection, lambda: &str) -> Result<()> {
    sqlx::query("DELETE FROM retired_queues WHERE lambda = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Deletes every component no version uses, with its artifacts (ON DELETE
/// CASCADE).
async fn delete_unused_components(conn: &mut Connection) -> Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM components WHERE NOT EXISTS \
         (SELECT 1 FROM lambda_versions v WHERE v.digest = components.digest)",
    )
    .execute(&mut *conn)
    .await?
    .rows_affected())
}

/// The artifact of component `digest` compiled by an engine of fingerprint
/// `engine`, if a Frontend of that engine deployed it.
pub(super) async fn artifact(
    store: &Store,
    digest: &str,
    engine: &str,
) -> Result<Option<Artifact>> {
    let row: Option<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("SELECT bytes, seal FROM artifacts WHERE digest = $1 AND engine = $2")
            .bind(text_in(digest))
            .bind(text_in(engine))
            .fetch_optional(&store.pool)
            .await?;
    Ok(row.map(|(bytes, seal)| Artifact {
        engine: engine.to_owned(),
        bytes,
        seal,
    }))
}

pub(super) async fn component(store: &Store, digest: &str) -> Result<Option<Vec<u8>>> {
    Ok(
        sqlx::query_scalar("SELECT bytes FROM components WHERE digest = $1")
            .bind(text_in(digest))
            .fetch_optional(&store.pool)
            .await?,
    )
}
