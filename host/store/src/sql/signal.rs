//! Signals: sent to a task by a client, kept with it, and taken by its
//! executions in order (see `waft_core::model::TaskSignal`). What a task
//! keeps is bounded by count ([`MAX_SIGNALS`]) and by bytes
//! ([`MAX_SIGNAL_BYTES`]), each checked with the task's row locked.
//!
//! Sending locks the task's row before it looks: a suspension committing
//! meanwhile either comes first (and the signal then finds the task waiting
//! for it, and wakes it) or waits, and then finds the signal itself
//! ([`woken_by_a_kept_signal`], which `result/suspensions.rs` runs after
//! the update that suspends). No signal is missed between an execution's
//! last look and its suspension.

use super::{Connection, DIALECT, Store};
use crate::names::status::SUSPENDED;
use crate::rows;
use crate::support::{sql, text_in};
use crate::{Millis, Refusal, Result, SignalSent, StoreError, TaskSignal, TaskSignalRead};
use waft_core::limits::{
    ITEM_OVERHEAD, MAX_SIGNAL_BYTES, MAX_SIGNAL_PAYLOAD, MAX_SIGNALS, check_signal_name,
};

/// Keeps a signal for task `params.id`, and wakes the task when it is
/// suspended waiting for a signal of that name.
pub(super) async fn send(tx: &mut Connection, params: TaskSignal) -> Result<SignalSent> {
    let TaskSignal {
        id,
        name,
        payload,
        now,
    } = params;
    check_signal_name(&name).map_err(StoreError::Invalid)?;
    let task: Option<(String, String, Option<String>, Option<String>)> =
        sqlx::query_as(sql(format!(
            "SELECT status, lambda, wait_kind, wait_signal FROM tasks WHERE id = $1 {}",
            DIALECT.row_lock
        )))
        .bind(text_in(&id))
        .fetch_optional(&mut *tx)
        .await?;
    let Some((status, lambda, wait_kind, wait_signal)) = task else {
        return Err(StoreError::TaskNotFound(id));
    };
    let status = rows::task_status(status)?;
    if status.is_terminal() {
        return Err(StoreError::AlreadyEnded { id, status });
    }
    // The version the task runs: its journal's, else the pinned one, else
    // the current one.
    let max: Option<i64> = sqlx::query_scalar(
        "SELECT v.max_payload FROM tasks t JOIN lambdas l ON l.name = t.lambda \
         JOIN lambda_versions v ON v.lambda = l.name \
            AND v.version = COALESCE(t.journal_version, t.version, l.current_version) \
         WHERE t.id = $1",
    )
    .bind(text_in(&id))
    .fetch_optional(&mut *tx)
    .await?;
    let max = u64::try_from(max.unwrap_or(0))
        .unwrap_or(0)
        .min(MAX_SIGNAL_PAYLOAD as u64);
    if payload.len() as u64 > max {
        return Err(StoreError::PayloadTooLarge {
            lambda,
            size: payload.len(),
            max,
        });
    }
    let (kept, bytes): (i64, Option<i64>) = sqlx::query_as(
        "SELECT COUNT(*), CAST(SUM(OCTET_LENGTH(payload) + OCTET_LENGTH(name)) AS BIGINT) \
         FROM signals WHERE task_id = $1",
    )
    .bind(text_in(&id))
    .fetch_one(&mut *tx)
    .await?;
    let seq = u32::try_from(kept).map_err(|_| StoreError::Corrupt("signal count".into()))?;
    if seq >= MAX_SIGNALS {
        return Err(StoreError::TooManySignals {
            id,
            max: MAX_SIGNALS,
        });
    }
    let cost = |bytes: u64, count: u64| bytes.saturating_add(count * ITEM_OVERHEAD as u64);
    let kept = cost(
        u64::try_from(bytes.unwrap_or(0)).unwrap_or(0),
        u64::from(seq),
    );
    let size = cost((payload.len() + name.len()) as u64, 1);
    if kept.saturating_add(size) > MAX_SIGNAL_BYTES as u64 {
        return Err(StoreError::SignalBudget {
            id,
            kept,
            size,
            max: MAX_SIGNAL_BYTES as u64,
            overhead: ITEM_OVERHEAD as u64,
        });
    }
    sqlx::query(
        "INSERT INTO signals (task_id, seq, name, payload, sent_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(text_in(&id))
    .bind(i64::from(seq))
    .bind(text_in(&name))
    .bind(&payload)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let waiting = status == waft_core::TaskStatus::Suspended
        && wait_kind.as_deref() == Some("signal")
        && wait_signal.as_deref() == Some(&*text_in(&name));
    if waiting {
        wake(tx, &id, now).await?;
    }
    Ok(SignalSent { seq, woke: waiting })
}

/// The signal of `params.name` after the `taken` the execution's task took,
/// for the execution holding its lease; `None` when none has come yet.
pub(super) async fn read(
    store: &Store,
    params: TaskSignalRead,
) -> Result<Result<Option<Vec<u8>>, Refusal>> {
    if let Err(refusal) = fence(store, &params.id, params.lease_token).await? {
        return Ok(Err(refusal));
    }
    let payload: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT payload FROM signals WHERE task_id = $1 AND name = $2 \
         ORDER BY seq LIMIT 1 OFFSET $3",
    )
    .bind(text_in(&params.id))
    .bind(text_in(&params.name))
    .bind(i64::from(params.taken))
    .fetch_optional(&store.pool)
    .await?;
    Ok(Ok(payload))
}

/// Refuses a read by an execution that no longer holds task `id`'s lease
/// `lease_token`, or whose task is not running.
pub(super) async fn fence(
    store: &Store,
    id: &str,
    lease_token: i64,
) -> Result<Result<(), Refusal>> {
    let found: Option<(String, i64)> =
        sqlx::query_as("SELECT status, lease_token FROM tasks WHERE id = $1")
            .bind(text_in(id))
            .fetch_optional(&store.pool)
            .await?;
    let Some((status, current)) = found else {
        return Ok(Err(Refusal::NotFound));
    };
    if current != lease_token {
        return Ok(Err(Refusal::StaleLease { current }));
    }
    let status = rows::task_status(status)?;
    if !waft_core::machine::RUNNING.contains(status) {
        return Ok(Err(Refusal::WrongState(status)));
    }
    Ok(Ok(()))
}

/// After task `id` was suspended waiting for the signal of `name` after
/// the `taken` it took: when that signal is kept already (it came while the
/// execution ran), the task is woken at once.
pub(super) async fn woken_by_a_kept_signal(
    tx: &mut Connection,
    id: &str,
    name: &str,
    taken: u32,
    now: Millis,
) -> Result<bool> {
    let kept: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM signals WHERE task_id = $1 AND name = $2")
            .bind(text_in(id))
            .bind(text_in(name))
            .fetch_one(&mut *tx)
            .await?;
    if kept <= i64::from(taken) {
        return Ok(false);
    }
    wake(tx, id, now).await?;
    Ok(true)
}

/// The state table's `Signal` (and `Gather`): the suspended task is looked
/// at at once, its due time (the wait's timeout) kept.
pub(super) async fn wake(tx: &mut Connection, id: &str, now: Millis) -> Result<()> {
    sqlx::query(sql(format!(
        "UPDATE tasks SET next_trigger_at = $2 WHERE id = $1 AND status = {SUSPENDED}"
    )))
    .bind(text_in(id))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
