//! Successes and fatal failures: they need nothing from their tasks, so
//! a batch ends them all in one guarded update; then the successes that
//! declared a continuation create it, at most once, as their child.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::FromRow;

use super::super::lease::lease_refusal;
use super::super::{Connection, DIALECT};
use super::{Batch, Final};
use crate::names::status::{RUNNING, SUCCESS};
use crate::rows::{self, row};
use crate::rules::Origin;
use crate::support::{batch_json, sql, text_in};
use crate::{Millis, NewTask, Result, StoreError};

/// A success or fatal failure as the update of [`end_finals`] reads it
/// (the field names are its JSON keys), text kept escaped.
#[derive(Serialize)]
struct FinalRow<'a> {
    id: std::borrow::Cow<'a, str>,
    lease: i64,
    status: &'static str,
    /// Hex: the statement decodes it.
    output: Option<String>,
    error: Option<std::borrow::Cow<'a, str>>,
    log: Option<std::borrow::Cow<'a, str>>,
    replayed: u32,
}

impl<'a> FinalRow<'a> {
    fn new(f: &'a Final) -> Self {
        Self {
            id: text_in(&f.ending.id),
            lease: f.ending.lease,
            status: f.status.as_str(),
            output: f.output.as_ref().map(hex::encode),
            error: f.error.as_deref().map(text_in),
            log: f.ending.log.as_deref().map(text_in),
            replayed: f.ending.replayed,
        }
    }
}

row! {
    /// A task [`end_finals`] ended; a success's continuation and output
    /// when it has one.
    struct EndedTask {
        id: String,
        lambda: String,
        parent_id: Option<String>,
        continuation: Option<String>,
        next_payload: Option<Vec<u8>>,
        /// The trace a continuation joins: its parent's.
        next_traceparent: Option<String>,
        next_tracestate: Option<String>,
    }
}

/// A task that succeeded with a continuation (JSON) to create.
struct Succeeded {
    id: String,
    continuation: String,
    output: Option<Vec<u8>>,
    trace: Option<waft_core::TraceContext>,
}

/// Ends the successes and fatal failures in one guarded update (they
/// need nothing from their tasks), and creates the successes'
/// continuations.
pub(super) async fn end_finals(
    tx: &mut Connection,
    finals: Vec<Final>,
    now: Millis,
    batch: &mut Batch,
) -> Result<()> {
    if finals.is_empty() {
        return Ok(());
    }
    let rows: Vec<_> = finals.iter().map(FinalRow::new).collect();
    // A success with a continuation also answers what the next task
    // needs, so tasks without one cost no second query.
    let rows = sqlx::query(sql(format!(
        "UPDATE tasks SET status = r.result_status, output = {output}, \
         last_error = r.result_error, log = r.result_log, next_trigger_at = NULL, \
         held = FALSE, finished_at = $2, replayed = r.result_replayed \
         FROM (SELECT j.value->>'id' AS result_id, \
            CAST(j.value->>'lease' AS BIGINT) AS result_lease, \
            j.value->>'status' AS result_status, j.value->>'output' AS result_output, \
            j.value->>'error' AS result_error, j.value->>'log' AS result_log, \
            CAST(j.value->>'replayed' AS BIGINT) AS result_replayed \
            FROM {rows}) AS r \
         WHERE tasks.id = r.result_id AND tasks.lease_token = r.result_lease \
         AND (tasks.status IN {RUNNING}) IS TRUE \
         RETURNING id, lambda, parent_id, \
         CASE WHEN status = {SUCCESS} THEN continuation END AS continuation, \
         CASE WHEN status = {SUCCESS} AND continuation IS NOT NULL THEN output END AS next_payload, \
         CASE WHEN status = {SUCCESS} AND continuation IS NOT NULL THEN traceparent END \
            AS next_traceparent, \
         CASE WHEN status = {SUCCESS} AND continuation IS NOT NULL THEN tracestate END \
            AS next_tracestate",
        output = DIALECT.unhex("r.result_output"),
        rows = DIALECT.json_rows,
    )))
    .bind(batch_json(&rows)?)
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    let mut continued = Vec::new();
    let mut ended = HashMap::with_capacity(rows.len());
    for row in &rows {
        let row = EndedTask::from_row(row)?;
        if let Some(parent) = row.parent_id {
            batch.children.push((row.id.clone(), parent));
        }
        if let Some(continuation) = row.continuation {
            continued.push(Succeeded {
                id: row.id.clone(),
                continuation,
                output: row.next_payload,
                trace: rows::trace(row.next_traceparent, row.next_tracestate),
            });
        }
        ended.insert(row.id, row.lambda);
    }
    continue_successes(&mut *tx, continued, now).await?;
    for f in finals {
        let index = f.ending.index;
        let Some(lambda) = ended.remove(&f.ending.id) else {
            let refusal = lease_refusal(&mut *tx, &f.ending.id, f.ending.lease).await?;
            batch.answer(index, Err(refusal));
            continue;
        };
        // The task's row holds the execution that ended it: a success or a
        // fatal failure is final, so nothing changes that row's attempt,
        // lease, times, log or error again (`attempt::final_attempts`).
        batch.of_lambda(index, lambda);
        batch.answer(index, Ok(f.status));
    }
    Ok(())
}

/// Creates the continuations of the tasks that just succeeded: a
/// task of the declared lambda with the output as payload, as the
/// succeeded task's child, at most once (its idempotency key). A
/// continuation the store cannot create (the output over the next
/// lambda's payload limit, a priority it no longer has) is recorded
/// as the succeeded task's `last_error`; the success stands.
async fn continue_successes(
    conn: &mut Connection,
    continued: Vec<Succeeded>,
    now: Millis,
) -> Result<()> {
    for Succeeded {
        id,
        continuation: json,
        output,
        trace,
    } in continued
    {
        let then: crate::Continuation = serde_json::from_str(&json)
            .map_err(|e| StoreError::Corrupt(format!("continuation {json:?}: {e}")))?;
        let next = NewTask {
            lambda: then.lambda,
            collection: then.collection,
            priority: then.priority,
            key: then.key,
            payload: output.unwrap_or_default(),
            idempotency_key: Some(format!("then:{id}")),
            parent_id: Some(id.clone()),
            trace,
            ..NewTask::default()
        };
        match super::super::insert::insert(conn, vec![next], None, Origin::Store, now).await {
            Ok(_) => {}
            Err(StoreError::Database(error)) => return Err(StoreError::Database(error)),
            Err(error) => {
                sqlx::query("UPDATE tasks SET last_error = $2 WHERE id = $1")
                    .bind(&id)
                    .bind(
                        text_in(&format!("the continuation was not created: {error}")).into_owned(),
                    )
                    .execute(&mut *conn)
                    .await?;
            }
        }
    }
    Ok(())
}
