//! Retriable failures: each is planned from its task's attempts and the
//! backoff of the version it runs (read first, one task at a time), then
//! the plans are applied in one update that a cancel or lapse committed
//! meanwhile still wins.

use std::collections::HashMap;

use serde::Serialize;
use waft_core::{TaskStatus, machine};

use super::super::lease::lease_refusal;
use super::super::{Connection, DIALECT};
use super::{Batch, Ending, Retry};
use crate::names::status::RUNNING;
use crate::rows::{self, row};
use crate::rules::RetryPlan;
use crate::support::{batch_json, sql, text_in};
use crate::{AttemptOutcome, Millis, Refusal, Result};

/// A retriable failure whose next status is decided, before the update
/// that must still find the task under its lease.
pub(super) struct Planned {
    ending: Ending,
    error: String,
    plan: RetryPlan,
}

/// A planned retry as the update of [`apply_retries`] reads it (the field
/// names are its JSON keys).
#[derive(Serialize)]
struct RetryRow<'a> {
    id: &'a str,
    lease: i64,
    status: &'static str,
    error: std::borrow::Cow<'a, str>,
    log: Option<std::borrow::Cow<'a, str>>,
    next: Option<Millis>,
    finished: Option<Millis>,
}

impl<'a> RetryRow<'a> {
    fn new(p: &'a Planned) -> Self {
        Self {
            id: &p.ending.id,
            lease: p.ending.lease,
            status: p.plan.status.as_str(),
            error: text_in(&p.error),
            log: p.ending.log.as_deref().map(text_in),
            next: p.plan.next_trigger_at,
            finished: p.plan.finished_at,
        }
    }
}

row! {
    /// What a retriable failure's plan needs of its task and of the version
    /// it runs.
    struct RetryFacts {
        status: String,
        lease_token: i64,
        attempt: i64,
        max_attempts: i64,
        backoff_base_ms: i64,
        backoff_factor: f64,
        backoff_max_ms: i64,
    }
}

/// Decides each retriable failure's next status from its task's attempts
/// and the backoff of the version the task runs (its journal's, else the
/// pinned one, else the current one). A task gone, under another lease or
/// no longer running is answered here; the rest are planned.
pub(super) async fn plan_retries(
    tx: &mut Connection,
    retries: Vec<Retry>,
    now: Millis,
    batch: &mut Batch,
) -> Result<Vec<Planned>> {
    let mut planned = Vec::with_capacity(retries.len());
    for retry in retries {
        let index = retry.ending.index;
        let row: Option<RetryFacts> = sqlx::query_as(
            "SELECT t.status, t.lease_token, t.attempt, t.max_attempts, \
             v.backoff_base_ms, v.backoff_factor, v.backoff_max_ms FROM tasks t \
             JOIN lambdas l ON l.name = t.lambda \
             JOIN lambda_versions v ON v.lambda = l.name \
                AND v.version = COALESCE(t.journal_version, t.version, l.current_version) \
             WHERE t.id = $1",
        )
        .bind(text_in(&retry.ending.id))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            batch.answer(index, Err(Refusal::NotFound));
            continue;
        };
        let status = rows::task_status(row.status)?;
        let current = row.lease_token;
        if current != retry.ending.lease {
            batch.answer(index, Err(Refusal::StaleLease { current }));
            continue;
        }
        if !machine::RUNNING.contains(status) {
            batch.answer(index, Err(Refusal::WrongState(status)));
            continue;
        }
        let plan = RetryPlan::decide(
            row.attempt,
            row.max_attempts,
            &rows::backoff_of(row.backoff_base_ms, row.backoff_factor, row.backoff_max_ms)?,
            retry.retry_after,
            now,
            fastrand::f64(),
        );
        planned.push(Planned {
            ending: retry.ending,
            error: retry.error,
            plan,
        });
    }
    Ok(planned)
}

/// Applies the planned retries in one update, guarded like the others: a
/// cancel or a lapse committed since [`plan_retries`] read the task wins,
/// and the result is refused.
pub(super) async fn apply_retries(
    tx: &mut Connection,
    planned: Vec<Planned>,
    batch: &mut Batch,
) -> Result<()> {
    if planned.is_empty() {
        return Ok(());
    }
    let updates: Vec<_> = planned.iter().map(RetryRow::new).collect();
    let updated: Vec<(String, String, Option<String>, String)> = sqlx::query_as(sql(format!(
        "UPDATE tasks SET status = r.result_status, last_error = r.result_error, \
         log = r.result_log, next_trigger_at = r.result_next, due_at = COALESCE(r.result_next, due_at), \
         held = FALSE, finished_at = r.result_finished \
         FROM (SELECT j.value->>'id' AS result_id, \
            CAST(j.value->>'lease' AS BIGINT) AS result_lease, \
            j.value->>'status' AS result_status, j.value->>'error' AS result_error, \
            j.value->>'log' AS result_log, CAST(j.value->>'next' AS BIGINT) AS result_next, \
            CAST(j.value->>'finished' AS BIGINT) AS result_finished FROM {}) AS r \
         WHERE tasks.id = r.result_id AND tasks.lease_token = r.result_lease \
         AND (tasks.status IN {RUNNING}) IS TRUE RETURNING id, status, parent_id, lambda",
        DIALECT.json_rows,
    )))
    .bind(batch_json(&updates)?)
    .fetch_all(&mut *tx)
    .await?;
    // Those that ended (dead letters) and have a parent.
    let dead: Vec<_> = updated
        .iter()
        .filter(|(_, status, parent, _)| parent.is_some() && status == TaskStatus::Dead.as_str())
        .map(|(id, _, parent, _)| (id.clone(), parent.clone().unwrap_or_default()))
        .collect();
    batch.children.extend(dead);
    let mut updated: HashMap<String, String> = updated
        .into_iter()
        .map(|(id, _, _, lambda)| (id, lambda))
        .collect();
    for p in planned {
        let index = p.ending.index;
        let Some(lambda) = updated.remove(&p.ending.id) else {
            let refusal = lease_refusal(&mut *tx, &p.ending.id, p.ending.lease).await?;
            batch.answer(index, Err(refusal));
            continue;
        };
        batch.of_lambda(index, lambda);
        batch.ended(p.ending, AttemptOutcome::Retriable, Some(p.error));
        batch.answer(index, Ok(p.plan.status));
    }
    Ok(())
}
