//! Deleting tasks for good: the pruner's batches of tasks past their
//! retention, an operator's purge of dead letters, and the lease that lets
//! one pruner at a time run among the processes sharing the store.
//!
//! A task goes with everything kept of it — attempts (and their logs),
//! journal, signals, the children it waited for and the ends kept of its
//! deleted children — in one transaction, leaving its own end for a live
//! parent that stays (`child_ends.rs`). The
//! pruner takes the oldest ended tasks of each end first, through the
//! partial index `tasks_finished`, and keeps a task while
//! one of its children is live (it may still wait for their ends) or while
//! its parent is (the parent reads the task's end when it resumes).
//! Postgres skips rows another transaction holds, as the poll does.

use serde::Serialize;
use waft_core::retention::{End, Keep, Retention};

use super::child_ends::{self, Doomed};
use super::{Connection, DIALECT, lambda, rate, task};
use crate::names::status::{DEAD, LIVE, One};
use crate::support::{batch_json, millis, sql, text_in};
use crate::{DeadPurge, DeadSelector, DutyTake, Pruned, Result, StoreError, TaskPrune};

/// A lambda or a task, as the JSON array parameters below name them.
#[derive(Serialize)]
struct Named<'a> {
    name: &'a str,
}

pub(super) async fn prune(tx: &mut Connection, params: TaskPrune) -> Result<Pruned> {
    let limit = params.limit as usize;
    let own = own_retention(&mut *tx).await?;
    let mut doomed: Vec<String> = Vec::new();
    for end in End::ALL {
        // Lambdas that set how long this end is kept are pruned each by
        // itself; the rest together, by the installation's retention.
        let mut apart = Vec::new();
        for (lambda, retention) in &own {
            let Some(keep) = retention.get(end) else {
                continue;
            };
            apart.push(Named { name: lambda });
            if let Some(before) = cutoff(keep, params.now) {
                let left = limit - doomed.len();
                doomed.extend(past(&mut *tx, end, Some(lambda), &[], before, left).await?);
            }
        }
        if let Some(before) = params
            .retention
            .get(end)
            .and_then(|k| cutoff(k, params.now))
        {
            let left = limit - doomed.len();
            doomed.extend(past(&mut *tx, end, None, &apart, before, left).await?);
        }
        if doomed.len() >= limit {
            break;
        }
    }
    delete(&mut *tx, &doomed).await?;
    rate::forget_idle(&mut *tx, params.now).await?;
    Ok(Pruned {
        tasks: doomed.len() as u64,
        more: doomed.len() >= limit,
    })
}

/// The retention each lambda sets at its current version, where it sets one.
async fn own_retention(conn: &mut Connection) -> Result<Vec<(String, Retention)>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT l.name, v.retention FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name AND v.version = l.current_version WHERE v.retention IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|(name, json)| {
            Ok((
                name,
                Retention::from_json(&json).map_err(StoreError::Corrupt)?,
            ))
        })
        .collect()
}

/// Tasks that ended before this are past their retention; none for ever.
fn cutoff(keep: Keep, now: crate::Millis) -> Option<crate::Millis> {
    match keep {
        Keep::For(duration) => Some(now.saturating_sub(millis(duration))),
        Keep::Forever => None,
    }
}

/// Up to `limit` tasks that ended `end` before `before`, of `lambda` or of
/// every lambda but those `apart`, and that no live task still needs.
async fn past(
    conn: &mut Connection,
    end: End,
    lambda: Option<&str>,
    apart: &[Named<'_>],
    before: crate::Millis,
    limit: usize,
) -> Result<Vec<String>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let status = One::of(end.status());
    sqlx::query_scalar(sql(format!(
        "SELECT t.id FROM tasks t \
         WHERE t.status = {status} AND t.finished_at IS NOT NULL AND t.finished_at < $2 \
         AND ($3 IS NULL OR t.lambda = $3) \
         AND t.lambda NOT IN (SELECT j.value->>'name' FROM {}) \
         AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_id = t.id AND c.status IN {LIVE}) \
         AND (t.parent_id IS NULL OR NOT EXISTS \
             (SELECT 1 FROM tasks p WHERE p.id = t.parent_id AND p.status IN {LIVE})) \
         ORDER BY t.finished_at LIMIT $4 {}",
        DIALECT.json_rows, DIALECT.poll_lock
    )))
    .bind(batch_json(apart)?)
    .bind(before)
    .bind(lambda)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(&mut *conn)
    .await
    .map_err(Into::into)
}

/// Deletes the tasks `ids` and everything kept of them.
async fn delete(conn: &mut Connection, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let named: Vec<_> = ids.iter().map(|id| Named { name: id }).collect();
    let named = batch_json(&named)?;
    child_ends::keep(&mut *conn, Doomed::Ids(&named), "deleted before it ended").await?;
    for (table, column) in [
        ("attempts", "task_id"),
        ("journal", "task_id"),
        ("signals", "task_id"),
        ("awaits", "task_id"),
        ("child_ends", "parent_id"),
        ("tasks", "id"),
    ] {
        sqlx::query(sql(format!(
            "DELETE FROM {table} WHERE {column} IN (SELECT j.value->>'name' FROM {})",
            DIALECT.json_rows
        )))
        .bind(&named)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Deletes every task of `lambda` and everything kept of them; how many.
/// The tasks' rows are locked first (on Postgres; SQLite has one writer),
/// so no call that writes a task's rows (a journal write, a result, a
/// signal: each locks the task's row first) can add one after its table
/// was cleared: nothing is left behind without its task.
pub(super) async fn delete_lambda_tasks(conn: &mut Connection, lambda: &str) -> Result<u64> {
    if !DIALECT.row_lock.is_empty() {
        sqlx::query(sql(format!(
            "SELECT id FROM tasks WHERE lambda = $1 {}",
            DIALECT.row_lock
        )))
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    }
    let why = format!("deleted with its lambda {lambda:?} before it ended");
    child_ends::keep(&mut *conn, Doomed::Lambda(lambda), &why).await?;
    for (table, column) in [
        ("attempts", "task_id"),
        ("journal", "task_id"),
        ("signals", "task_id"),
        ("awaits", "task_id"),
        ("child_ends", "parent_id"),
    ] {
        sqlx::query(sql(format!(
            "DELETE FROM {table} WHERE {column} IN (SELECT id FROM tasks WHERE lambda = $1)"
        )))
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    }
    Ok(sqlx::query("DELETE FROM tasks WHERE lambda = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?
        .rows_affected())
}

/// Deletes dead letters: the tasks named, each of which must be dead (or
/// none is deleted), or up to `limit` of a lambda's (and collection's).
pub(super) async fn purge(tx: &mut Connection, params: DeadPurge) -> Result<Pruned> {
    let doomed: Vec<String> = match params.selector {
        DeadSelector::Ids(ids) => {
            for id in &ids {
                task::require_dead(&mut *tx, id).await?;
            }
            ids.iter().map(|id| text_in(id).into_owned()).collect()
        }
        DeadSelector::Filter { lambda, collection } => {
            lambda::require_lambda(&mut *tx, &lambda).await?;
            sqlx::query_scalar(sql(format!(
                // In the order of the index of live tasks, not by id: a
                // sort would read every dead letter of the lambda for each
                // batch.
                "SELECT t.id FROM tasks t WHERE t.status = {DEAD} AND t.status IN {LIVE} \
                 AND t.lambda = $1 AND ($2 IS NULL OR t.collection = $2) LIMIT $3 {}",
                DIALECT.poll_lock
            )))
            .bind(&lambda)
            .bind(collection.as_deref().map(text_in))
            .bind(i64::from(params.limit))
            .fetch_all(&mut *tx)
            .await?
        }
    };
    delete(&mut *tx, &doomed).await?;
    Ok(Pruned {
        tasks: doomed.len() as u64,
        more: doomed.len() >= params.limit as usize,
    })
}

/// Takes or renews a duty's lease; whether `holder` now holds it.
pub(super) async fn take_duty(tx: &mut Connection, params: DutyTake) -> Result<bool> {
    let until = params
        .now
        .saturating_add(i64::try_from(params.lease_ms).unwrap_or(i64::MAX));
    let held: Option<String> = sqlx::query_scalar(
        "INSERT INTO duties (name, holder, until) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until \
         WHERE duties.holder = excluded.holder OR duties.until < $4 \
         RETURNING holder",
    )
    .bind(&params.name)
    .bind(&params.holder)
    .bind(until)
    .bind(params.now)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(held.is_some())
}
