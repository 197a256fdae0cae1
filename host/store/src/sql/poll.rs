//! The Store Consumer's poll: due tasks enqueued, held or dropped by their
//! gates, lapsed executions counted as lost attempts; quota pacing is
//! `pace.rs`. And the recovery that makes every task in flight due at once
//! when the process that carried them all starts again.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use waft_core::{TaskStatus, machine};

use super::attempt::{self, Ended};
use super::fan_in;
use super::keys;
use super::pace::{self, Due, Now};
use super::{Connection, DIALECT, GATE_OF_TASK, take_lock};
use crate::names::status::{DEAD, DROPPED, ENQUEUED, IN_FLIGHT, NEXT_ATTEMPT};
use crate::rows::{self, row};
use crate::rules::GateEffect;
use crate::support::{batch_json, millis, sql, text_in};
use crate::{
    AttemptOutcome, EnqueueReport, EnqueuedTask, Millis, Result, StoreError, TaskEnqueueReady,
};

row! {
    /// A due task as the poll reads it, with the gate that covers it.
    struct DueRow {
        id: String,
        lambda: String,
        status: String,
        attempt: i64,
        max_attempts: i64,
        paced: bool,
        key_paced: bool,
        lease_token: i64,
        next_trigger_at: Millis,
        key: Option<String>,
        gate: Option<i64>,
    }
}

/// A task the poll enqueues or holds, as the update reads it (the field
/// names are its JSON keys): the error a lapsed execution left.
#[derive(Serialize)]
pub(super) struct Marked<'a> {
    pub(super) id: &'a str,
    pub(super) error: Option<&'static str>,
}

/// A task [`enqueue`] enqueues, as the update reads it (the field names
/// are its JSON keys): the error a lapsed execution left, and whether its
/// key counts in flight (1) or not (0).
#[derive(Serialize)]
struct Going<'a> {
    id: &'a str,
    error: Option<&'static str>,
    limited: u8,
}

row! {
    /// A task [`enqueue`] enqueued, as the update returns it.
    struct EnqueuedRow {
        id: String,
        lambda: String,
        priority: i64,
        enqueue_token: i64,
        key: Option<String>,
        traceparent: Option<String>,
        tracestate: Option<String>,
    }
}

pub(super) async fn enqueue_ready(
    tx: &mut Connection,
    params: TaskEnqueueReady,
) -> Result<EnqueueReport> {
    let now = params.now;
    take_lock(&mut *tx, DIALECT.gate_read_lock).await?;
    let limits = keys::Limits::read(&mut *tx).await?;
    limits.unpark_landed(&mut *tx).await?;
    let due = read_due(&mut *tx, now, params.limit).await?;
    let mut report = EnqueueReport::default();
    let mut open = Vec::with_capacity(due.len());
    let mut lost = Vec::new();
    let mut held = Vec::new();
    for row in &due {
        let decided = triage(&mut *tx, row, now, &mut lost, &mut held).await?;
        match decided {
            Triage::Open(task) => open.push(task),
            Triage::Held => report.held += 1,
            Triage::Dropped => report.dropped += 1,
            Triage::Dead => report.dead += 1,
        }
    }
    hold(&mut *tx, &held, "").await?;
    attempt::record(&mut *tx, lost, now).await?;
    let open = limits.admit(&mut *tx, open, &mut report).await?;
    let to_enqueue = pace::pace(&mut *tx, open, now, &mut report).await?;
    report.enqueued = enqueue(&mut *tx, to_enqueue, now, params.enqueue_timeout, &limits).await?;
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
        if let Some(recheck) = keys::recheck(&mut *tx, now).await? {
            report.next_due = Some(report.next_due.map_or(recheck, |due| due.min(recheck)));
        }
    }
    Ok(report)
}

/// Every task in flight due at `now` ([`machine::Operation::Recover`]):
/// the process that carried them is gone, so the next poll enqueues them
/// again (on the queue) or counts their executions as lost (running), as
/// their timeouts would have made it do later.
pub(super) async fn recover(tx: &mut Connection, now: Millis) -> Result<u64> {
    // The states the recovery starts from (a test of the table holds them
    // to `IN_FLIGHT`).
    let done = sqlx::query(sql(format!(
        "UPDATE tasks SET next_trigger_at = $1 \
         WHERE (status IN {IN_FLIGHT}) IS TRUE AND next_trigger_at > $1"
    )))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected())
}

/// Up to `limit` due tasks in trigger order, locked on Postgres.
async fn read_due(tx: &mut Connection, now: Millis, limit: u32) -> Result<Vec<DueRow>> {
    Ok(sqlx::query_as(sql(format!(
        "SELECT t.id, t.lambda, t.status, t.attempt, t.max_attempts, t.paced, \
         t.key_paced, t.lease_token, t.next_trigger_at, t.key, {GATE_OF_TASK} AS gate \
         FROM tasks t WHERE t.next_trigger_at IS NOT NULL AND t.next_trigger_at <= $1 \
         ORDER BY t.next_trigger_at LIMIT $2 {}",
        DIALECT.poll_lock
    )))
    .bind(now)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?)
}

/// Why a due task's execution lapsed, if it was running: such an
/// execution may have run (a poison task crashes its executor before its
/// first heartbeat), so it is an attempt, lost.
fn lapse(status: TaskStatus) -> Option<&'static str> {
    machine::RUNNING.contains(status).then(|| {
        if status == TaskStatus::Claimed {
            "the execution never reported: no heartbeat within the claim timeout"
        } else {
            "the executor stopped heartbeating"
        }
    })
}

/// What the poll made of a due task.
enum Triage {
    /// To be paced and enqueued.
    Open(Due),
    /// Under a paused gate: to be held with the others.
    Held,
    Dropped,
    /// Its last attempt lapsed.
    Dead,
}

/// Decides one due task: a lapsed execution is recorded as lost (and its
/// last attempt ends the task dead); a closed gate drops it, or holds it
/// (with the others the poll holds, in one update); else it is to be
/// paced and enqueued.
async fn triage<'a>(
    tx: &mut Connection,
    row: &'a DueRow,
    now: Millis,
    lost: &mut Vec<Ended>,
    held: &mut Vec<Marked<'a>>,
) -> Result<Triage> {
    let status: TaskStatus = row
        .status
        .parse()
        .map_err(|_| StoreError::Corrupt(format!("status {:?}", row.status)))?;
    let gate = GateEffect::from_code(row.gate);
    let lapsed = lapse(status);
    if let Some(why) = lapsed {
        let last = row.attempt >= row.max_attempts;
        let error = if last {
            format!("{why} on attempt {}, the last one", row.attempt)
        } else {
            why.to_owned()
        };
        let outcome = AttemptOutcome::Lost;
        // A lost execution said nothing of what it replayed.
        lost.push(Ended::new(
            &row.id,
            row.lease_token,
            outcome,
            Some(&error),
            None,
            0,
        ));
        if last && gate != GateEffect::Drop {
            let parent: Option<String> = sqlx::query_scalar(sql(format!(
                "UPDATE tasks SET status = {DEAD}, next_trigger_at = NULL, held = FALSE, \
                 finished_at = $2, last_error = $3 WHERE id = $1 RETURNING parent_id"
            )))
            .bind(&row.id)
            .bind(now)
            .bind(text_in(&error))
            .fetch_one(&mut *tx)
            .await?;
            fan_in::ended(&mut *tx, child_of(&row.id, parent), now).await?;
            return Ok(Triage::Dead);
        }
    }
    match gate {
        GateEffect::Drop => {
            drop_task(&mut *tx, &row.id, now, "").await?;
            Ok(Triage::Dropped)
        }
        GateEffect::Hold => {
            held.push(Marked {
                id: &row.id,
                error: lapsed,
            });
            Ok(Triage::Held)
        }
        GateEffect::Open => Ok(Triage::Open(Due {
            id: row.id.clone(),
            lambda: row.lambda.clone(),
            paced: row.paced,
            key_paced: row.key_paced,
            lapsed,
            key: row.key.clone(),
            due: row.next_trigger_at,
            in_flight: machine::IN_FLIGHT.contains(status),
            limited: false,
        })),
    }
}

/// Enqueues the tasks in one statement; answers them in due order, as the
/// poll found them, each of a fair lambda with its key's turn.
async fn enqueue(
    tx: &mut Connection,
    tasks: Vec<Now>,
    now: Millis,
    enqueue_timeout: Duration,
    limits: &keys::Limits,
) -> Result<Vec<EnqueuedTask>> {
    if tasks.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<_> = tasks
        .iter()
        .map(|t| Going {
            id: &t.id,
            error: t.lapsed,
            limited: u8::from(t.limited),
        })
        .collect();
    let enqueued: Vec<EnqueuedRow> = sqlx::query_as(sql(format!(
        "UPDATE tasks SET status = {ENQUEUED}, enqueue_token = enqueue_token + 1, \
         enqueued_at = $2, next_trigger_at = $3, paced = FALSE, key_paced = FALSE, debounced = FALSE, \
         limited = (CAST(d.limited AS INTEGER) = 1), \
         last_error = COALESCE(d.due_error, last_error) \
         FROM (SELECT j.value->>'id' AS due_id, j.value->>'error' AS due_error, \
            j.value->>'limited' AS limited FROM {}) AS d \
         WHERE tasks.id = d.due_id \
         RETURNING id, lambda, priority, enqueue_token, key, traceparent, tracestate",
        DIALECT.json_rows
    )))
    .bind(batch_json(&rows)?)
    .bind(now)
    .bind(now.saturating_add(millis(enqueue_timeout)))
    .fetch_all(&mut *tx)
    .await?;
    let mut by_id: HashMap<String, EnqueuedRow> = enqueued
        .into_iter()
        .map(|row| (row.id.clone(), row))
        .collect();
    tasks
        .into_iter()
        .map(|Now { id, .. }| {
            let row = by_id
                .remove(&id)
                .ok_or_else(|| StoreError::Corrupt(format!("task {id} vanished")))?;
            Ok(EnqueuedTask {
                id,
                turn: limits.turn(&row.lambda, row.key),
                lambda: row.lambda,
                priority: u8::try_from(row.priority)
                    .map_err(|_| StoreError::Corrupt("priority".into()))?,
                enqueue_token: row.enqueue_token,
                trace: rows::trace(row.traceparent, row.tracestate),
            })
        })
        .collect()
}

/// Holds tasks under a paused gate, in one update: each waits in the
/// store, not due, until the gate opens, then comes due at the earlier of
/// when it was due and when it was looked at. Whatever message of it a
/// queue still has goes stale, and a lapsed execution's error is kept.
/// `guard` narrows the update for a caller that holds no row lock: of two
/// such callers, the second finds the task held and leaves it.
pub(super) async fn hold(conn: &mut Connection, tasks: &[Marked<'_>], guard: &str) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    sqlx::query(sql(format!(
        "UPDATE tasks SET status = {NEXT_ATTEMPT}, held = TRUE, \
         due_at = CASE WHEN next_trigger_at < due_at THEN next_trigger_at ELSE due_at END, \
         next_trigger_at = NULL, paced = FALSE, key_paced = FALSE, debounced = FALSE, \
         enqueue_token = enqueue_token + 1, \
         last_error = COALESCE(h.hold_error, last_error) \
         FROM (SELECT j.value->>'id' AS hold_id, j.value->>'error' AS hold_error FROM {}) AS h \
         WHERE tasks.id = h.hold_id {guard}",
        DIALECT.json_rows
    )))
    .bind(batch_json(tasks)?)
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
    let dropped: Option<Option<String>> = sqlx::query_scalar(sql(format!(
        "UPDATE tasks SET status = {DROPPED}, next_trigger_at = NULL, held = FALSE, \
         finished_at = $2 WHERE id = $1 {guard} RETURNING parent_id"
    )))
    .bind(id)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(parent) = dropped {
        fan_in::ended(&mut *conn, child_of(id, parent), now).await?;
    }
    Ok(())
}

/// Task `id` as [`fan_in::ended`] takes it: with its parent, or nothing.
pub(super) fn child_of(id: &str, parent: Option<String>) -> Vec<(String, String)> {
    parent
        .map(|parent| (id.to_owned(), parent))
        .into_iter()
        .collect()
}
