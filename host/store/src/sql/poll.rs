//! The Store Consumer's poll: due tasks enqueued, held or dropped by their
//! gates, lapsed executions counted as lost attempts, and quota pacing.

use std::collections::HashMap;

use waft_core::TaskStatus;

use super::attempt::{self, Ended};
use super::{Connection, DIALECT, GATE_OF_TASK, lock_gates};
use crate::names::status::{DEAD, DROPPED, ENQUEUED, NEXT_ATTEMPT};
use crate::rows::{self, RowExt};
use crate::rules::GateEffect;
use crate::support::{millis, sql, text_in};
use crate::{
    AttemptOutcome, EnqueueReport, EnqueuedTask, Millis, Result, StoreError, TaskEnqueueReady,
};

pub(super) async fn enqueue_ready(
    tx: &mut Connection,
    params: TaskEnqueueReady,
) -> Result<EnqueueReport> {
    let now = params.now;
    lock_gates(&mut *tx, DIALECT.gate_read_lock).await?;
    let due = sqlx::query(sql(format!(
        "SELECT t.id, t.lambda, t.status, t.attempt, t.max_attempts, t.paced, \
         t.lease_token, {GATE_OF_TASK} AS gate \
         FROM tasks t WHERE t.next_trigger_at IS NOT NULL AND t.next_trigger_at <= $1 \
         ORDER BY t.next_trigger_at LIMIT $2 {}",
        DIALECT.poll_lock
    )))
    .bind(now)
    .bind(i64::from(params.limit))
    .fetch_all(&mut *tx)
    .await?;
    let mut report = EnqueueReport::default();
    let mut to_enqueue = Vec::with_capacity(due.len());
    let mut lost = Vec::new();
    for row in &due {
        let id = row.text("id")?;
        let status = rows::status(row)?;
        let gate = GateEffect::from_code(row.opt_int("gate")?);
        let attempt = row.int("attempt")?;
        // An execution whose claim or heartbeat lapsed may have
        // run (a poison task crashes its executor before its
        // first heartbeat): it is an attempt, lost.
        let lapsed = match status {
            TaskStatus::Claimed => {
                Some("the execution never reported: no heartbeat within the claim timeout")
            }
            TaskStatus::Processing => Some("the executor stopped heartbeating"),
            TaskStatus::New
            | TaskStatus::Enqueued
            | TaskStatus::RetriableFailure
            | TaskStatus::Success
            | TaskStatus::FatalFailure
            | TaskStatus::Dead
            | TaskStatus::Dropped
            | TaskStatus::Cancelled => None,
        };
        if let Some(why) = lapsed {
            let last = attempt >= row.int("max_attempts")?;
            let error = if last {
                format!("{why} on attempt {attempt}, the last one")
            } else {
                why.to_owned()
            };
            lost.push(Ended::new(
                &id,
                row.int("lease_token")?,
                AttemptOutcome::Lost,
                Some(&error),
                None,
            ));
            if last && gate != GateEffect::Drop {
                sqlx::query(sql(format!(
                    "UPDATE tasks SET status = {DEAD}, next_trigger_at = NULL, held = FALSE, \
                     finished_at = $2, last_error = $3 WHERE id = $1"
                )))
                .bind(&id)
                .bind(now)
                .bind(text_in(&error))
                .execute(&mut *tx)
                .await?;
                report.dead += 1;
                continue;
            }
        }
        match gate {
            GateEffect::Drop => {
                drop_task(&mut *tx, &id, now, "").await?;
                report.dropped += 1;
            }
            GateEffect::Hold => {
                hold(&mut *tx, &id, lapsed, "").await?;
                report.held += 1;
            }
            GateEffect::Open => {
                to_enqueue.push((id, row.text("lambda")?, row.flag("paced")?, lapsed));
            }
        }
    }
    attempt::record(&mut *tx, lost, now).await?;
    let to_enqueue = pace(&mut *tx, to_enqueue, now, &mut report).await?;
    if !to_enqueue.is_empty() {
        // One statement for the common case.
        let ids: Vec<_> = to_enqueue
            .iter()
            .map(|(id, lapsed)| serde_json::json!({ "id": id, "error": lapsed }))
            .collect();
        let rows = sqlx::query(sql(format!(
            "UPDATE tasks SET status = {ENQUEUED}, enqueue_token = enqueue_token + 1, \
             enqueued_at = $2, next_trigger_at = $3, paced = FALSE, \
             last_error = COALESCE(d.due_error, last_error) \
             FROM (SELECT j.value->>'id' AS due_id, j.value->>'error' AS due_error FROM {}) AS d \
             WHERE tasks.id = d.due_id \
             RETURNING id, lambda, priority, enqueue_token",
            DIALECT.json_rows
        )))
        .bind(serde_json::Value::Array(ids).to_string())
        .bind(now)
        .bind(now.saturating_add(millis(params.enqueue_timeout)))
        .fetch_all(&mut *tx)
        .await?;
        let mut by_id = HashMap::with_capacity(rows.len());
        for row in &rows {
            by_id.insert(
                row.text("id")?,
                (
                    row.text("lambda")?,
                    u8::try_from(row.int("priority")?)
                        .map_err(|_| StoreError::Corrupt("priority".into()))?,
                    row.int("enqueue_token")?,
                ),
            );
        }
        // In due order, as the poll found them.
        for (id, _) in to_enqueue {
            let (lambda, priority, enqueue_token) = by_id
                .remove(&id)
                .ok_or_else(|| StoreError::Corrupt(format!("task {id} vanished")))?;
            report.enqueued.push(EnqueuedTask {
                id,
                lambda,
                priority,
                enqueue_token,
            });
        }
    }
    if due.len() < params.limit as usize {
        // The partial index on next_trigger_at answers this from its first
        // entry past `now`.
        report.next_due = sqlx::query_scalar(
            "SELECT MIN(next_trigger_at) FROM tasks \
             WHERE next_trigger_at IS NOT NULL AND next_trigger_at > $1",
        )
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
    }
    Ok(report)
}

/// Holds a task under a paused gate: it waits in the store, not
/// due, until the gate opens, then comes due at the earlier of
/// when it was due and when it was looked at. Whatever message of it a queue still
/// has goes stale, and a lapsed execution's error is kept.
/// `guard` narrows the update for a caller that holds no row lock:
/// of two such callers, the second finds the task held and leaves
/// it.
pub(super) async fn hold(
    conn: &mut Connection,
    id: &str,
    lapsed: Option<&str>,
    guard: &str,
) -> Result<()> {
    sqlx::query(sql(format!(
        "UPDATE tasks SET status = {NEXT_ATTEMPT}, held = TRUE, \
         due_at = CASE WHEN next_trigger_at < due_at THEN next_trigger_at ELSE due_at END, \
         next_trigger_at = NULL, paced = FALSE, enqueue_token = enqueue_token + 1, \
         last_error = COALESCE($2, last_error) WHERE id = $1 {guard}"
    )))
    .bind(id)
    .bind(lapsed)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Ends a task under a drop gate; `guard` as for [`hold`].
pub(super) async fn drop_task(
    conn: &mut Connection,
    id: &str,
    now: Millis,
    guard: &str,
) -> Result<()> {
    sqlx::query(sql(format!(
        "UPDATE tasks SET status = {DROPPED}, next_trigger_at = NULL, held = FALSE, \
         finished_at = $2 WHERE id = $1 {guard}"
    )))
    .bind(id)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// After a deploy or rollback, a lambda's tasks paced under its old
/// quota come due now and are paced afresh under the new one.
pub(super) async fn repace(conn: &mut Connection, lambda: &str, now: Millis) -> Result<()> {
    sqlx::query("DELETE FROM lambda_pace WHERE lambda = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE tasks SET paced = FALSE, \
         next_trigger_at = CASE WHEN next_trigger_at > $2 THEN $2 ELSE next_trigger_at END \
         WHERE lambda = $1 AND paced = TRUE",
    )
    .bind(lambda)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Paces lambdas with a scheduling quota. Of `due` (id, lambda,
/// already paced), answers the ids to enqueue now, in order; every
/// other task of a paced lambda waits for its own slot, given in
/// turn from the lambda's next free one at `1 / quota` apart. A
/// lambda idle for a second has a second's worth of slots at once.
async fn pace(
    conn: &mut Connection,
    due: Vec<(String, String, bool, Option<&'static str>)>,
    now: Millis,
    report: &mut EnqueueReport,
) -> Result<Vec<(String, Option<&'static str>)>> {
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let quotas: HashMap<String, f64> = sqlx::query(
        "SELECT l.name, v.quota_per_sec FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name AND v.version = l.current_version \
         WHERE v.quota_per_sec IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|row| Ok((row.text("name")?, row.real("quota_per_sec")?)))
    .collect::<Result<_>>()?;
    let mut paced: Vec<&str> = due
        .iter()
        .filter(|(_, lambda, already, _)| !already && quotas.contains_key(lambda))
        .map(|(_, lambda, _, _)| lambda.as_str())
        .collect();
    if paced.is_empty() {
        return Ok(due
            .into_iter()
            .map(|(id, _, _, lapsed)| (id, lapsed))
            .collect());
    }
    // One lock order for every consumer: by name.
    paced.sort_unstable();
    paced.dedup();
    let mut slots: HashMap<String, f64> = HashMap::with_capacity(paced.len());
    for lambda in paced {
        sqlx::query(
            "INSERT INTO lambda_pace (lambda, next_slot_at) VALUES ($1, $2) \
             ON CONFLICT (lambda) DO NOTHING",
        )
        .bind(lambda)
        .bind((now - 1000) as f64)
        .execute(&mut *conn)
        .await?;
        let next: f64 = sqlx::query_scalar(sql(format!(
            "SELECT next_slot_at FROM lambda_pace WHERE lambda = $1 {}",
            DIALECT.row_lock
        )))
        .bind(lambda)
        .fetch_one(&mut *conn)
        .await?;
        slots.insert(lambda.to_owned(), next.max((now - 1000) as f64));
    }
    let mut now_ids = Vec::with_capacity(due.len());
    let mut later = Vec::new();
    for (id, lambda, already, lapsed) in due {
        let slot = match slots.get_mut(&lambda) {
            Some(slot) if !already => slot,
            _ => {
                now_ids.push((id, lapsed));
                continue;
            }
        };
        let at = *slot;
        *slot += 1000.0 / quotas[&lambda];
        if at < now as f64 {
            now_ids.push((id, lapsed));
        } else {
            later.push(serde_json::json!({ "id": id, "at": at.ceil() as i64, "error": lapsed }));
        }
    }
    for (lambda, next) in &slots {
        sqlx::query("UPDATE lambda_pace SET next_slot_at = $2 WHERE lambda = $1")
            .bind(lambda)
            .bind(*next)
            .execute(&mut *conn)
            .await?;
    }
    if !later.is_empty() {
        report.paced = later.len() as u64;
        // A paced task waits like a retrying one: not claimable from
        // a message it may still have on a queue.
        sqlx::query(sql(format!(
            "UPDATE tasks SET next_trigger_at = d.at, paced = TRUE, status = {NEXT_ATTEMPT}, \
             enqueue_token = enqueue_token + 1, last_error = COALESCE(d.paced_error, last_error) \
             FROM (SELECT j.value->>'id' AS paced_id, CAST(j.value->>'at' AS BIGINT) AS at, \
             j.value->>'error' AS paced_error FROM {}) AS d WHERE tasks.id = d.paced_id",
            DIALECT.json_rows
        )))
        .bind(serde_json::Value::Array(later).to_string())
        .execute(&mut *conn)
        .await?;
    }
    Ok(now_ids)
}
