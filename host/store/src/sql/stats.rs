//! The overview of every lambda's tasks: what the dashboard's first page
//! reads every few seconds, so it must cost little at millions of tasks.
//! Grouped statements over indexes of the schema: the unfinished and dead
//! tasks (`tasks_live`, in its order: lambda, status, priority; ended tasks
//! are not in it), and the executions that ended in the window: rows of
//! `attempts` (`attempts_ended`) and the tasks that ended for good in it,
//! whose rows hold their last execution (`tasks_finished`).

use std::collections::BTreeMap;

use waft_core::TaskStatus;
use waft_core::machine::{self, StatusSet};

use super::{DIALECT, Store};
use crate::names::outcome;
use crate::names::status::{LIVE, SUSPENDED};
use crate::rows::{self, RowExt};
use crate::support::sql;
use crate::{Depth, LambdaStats, Millis, Result, StoreError};

/// The statement reads only the live states, and each has its place above:
/// running, waiting, or dead. A live state that is none of these fails
/// to compile here until the overview gives it one.
const _: () = assert!(
    machine::LIVE
        .minus(machine::RUNNING)
        .minus(machine::WAITING)
        .minus(StatusSet::of(&[TaskStatus::Dead]))
        .is_empty()
);

/// A waiting task that goes when due: not held by a gate, not parked, not
/// waiting for a slot of its lambda's quota or its key's rate (as the
/// backlog, `task.rs`, counts it too).
pub(super) const READY: &str = "NOT held AND NOT parked AND NOT paced AND NOT key_paced";

pub(super) async fn lambda_stats(
    store: &Store,
    now: Millis,
    since: Millis,
) -> Result<Vec<LambdaStats>> {
    let mut stats: BTreeMap<String, LambdaStats> = BTreeMap::new();
    let rows = sqlx::query(sql(live_statement()))
        .bind(now)
        .fetch_all(&store.pool)
        .await?;
    for row in &rows {
        let entry = of_lambda(&mut stats, row.text("lambda")?);
        let n = count(row.int("n")?)?;
        let status = rows::status(row)?;
        if machine::RUNNING.contains(status) {
            entry.running += n;
        } else if machine::WAITING.contains(status) {
            let held = count(row.int("held")?)?;
            let parked = count(row.int("parked")?)?;
            let paced = count(row.int("paced")?)?;
            let due = count(row.int("due")?)?;
            entry.held += held;
            entry.parked += parked;
            entry.paced += paced;
            let rest = n - held - parked - paced - due;
            if status == TaskStatus::Suspended {
                entry.suspended += rest;
            } else {
                entry.waiting += rest;
            }
            if let Some(oldest) = row.opt_int("oldest")? {
                let priority = u8::try_from(row.int("priority")?)
                    .map_err(|_| StoreError::Corrupt("priority".into()))?;
                add_depth(&mut entry.ready, priority, due, oldest);
            }
        } else if status == TaskStatus::Dead {
            entry.dead += n;
        }
    }
    // Of the suspended tasks (not yet due, as above), those waiting for a
    // signal and those waiting for their children, each from an index of
    // just those (`tasks_waiting_for_signal`, `tasks_waiting_for_children`).
    for kind in ["signal", "children"] {
        let rows = sqlx::query(sql(format!(
            "SELECT lambda, COUNT(*) AS n FROM tasks \
             WHERE status = {SUSPENDED} AND wait_kind = '{kind}' AND due_at > $1 \
             GROUP BY lambda"
        )))
        .bind(now)
        .fetch_all(&store.pool)
        .await?;
        for row in &rows {
            let entry = of_lambda(&mut stats, row.text("lambda")?);
            let n = count(row.int("n")?)?;
            match kind {
                "signal" => entry.waiting_for_signal += n,
                _ => entry.waiting_for_children += n,
            }
        }
    }
    // The executions that ended since: rows of `attempts`, and those the
    // tasks' own rows hold (their final ones, see `attempt.rs`), read
    // through the index of ended tasks.
    let mut rows = sqlx::query(sql(format!(
        "SELECT t.lambda, a.outcome = {success} AS ok, COUNT(*) AS n \
         FROM attempts a JOIN tasks t ON t.id = a.task_id \
         WHERE a.ended_at >= $1 GROUP BY t.lambda, a.outcome = {success}",
        success = outcome::SUCCESS,
    )))
    .bind(since)
    .fetch_all(&store.pool)
    .await?;
    rows.extend(
        sqlx::query(sql(format!(
            "SELECT f.lambda, f.outcome = {success} AS ok, COUNT(*) AS n FROM ({}) f \
             GROUP BY f.lambda, f.outcome = {success}",
            super::attempt::final_attempts("t.finished_at >= $1"),
            success = outcome::SUCCESS,
        )))
        .bind(since)
        .fetch_all(&store.pool)
        .await?,
    );
    for row in &rows {
        let entry = of_lambda(&mut stats, row.text("lambda")?);
        let n = count(row.int("n")?)?;
        if row.flag("ok")? {
            entry.succeeded += n;
        } else {
            entry.failed += n;
        }
    }
    Ok(stats.into_values().collect())
}

/// The live tasks grouped as `tasks_live` holds them in order (lambda,
/// status, priority), so the index is read once, whole, and nothing sorted.
pub(super) fn live_statement() -> String {
    format!(
        "SELECT lambda, priority, status, COUNT(*) AS n, \
         SUM(CASE WHEN held THEN 1 ELSE 0 END) AS held, \
         SUM(CASE WHEN parked THEN 1 ELSE 0 END) AS parked, \
         SUM(CASE WHEN NOT held AND NOT parked AND (paced OR key_paced) THEN 1 ELSE 0 END) \
            AS paced, \
         SUM(CASE WHEN {READY} AND due_at <= $1 THEN 1 ELSE 0 END) AS due, \
         MIN(CASE WHEN {READY} AND due_at <= $1 THEN due_at END) AS oldest \
         FROM tasks {} WHERE status IN {LIVE} GROUP BY lambda, status, priority",
        DIALECT.live_tasks_index
    )
}

fn of_lambda(stats: &mut BTreeMap<String, LambdaStats>, lambda: String) -> &mut LambdaStats {
    stats.entry(lambda.clone()).or_insert_with(|| LambdaStats {
        lambda,
        ..LambdaStats::default()
    })
}

fn add_depth(ready: &mut Vec<Depth>, priority: u8, count: u64, oldest_due: Millis) {
    match ready.iter_mut().find(|d| d.priority == priority) {
        Some(depth) => {
            depth.count += count;
            depth.oldest_due = depth.oldest_due.min(oldest_due);
        }
        None => {
            ready.push(Depth {
                priority,
                count,
                oldest_due,
            });
            ready.sort_by_key(|d| d.priority);
        }
    }
}

fn count(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt("a negative count".into()))
}
