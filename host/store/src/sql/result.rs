//! Results: a batch of executions' ends, each a guarded update that a
//! stale lease cannot pass; the journal writes they carry, the attempts
//! they ended, and the continuations of the successes.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sqlx::FromRow;
use waft_core::TaskStatus;
use waft_core::machine;

use super::attempt::{self, Ended};
use super::journal;
use super::lease::lease_refusal;
use super::{Connection, DIALECT};
use super::{fan_in, signal};
use crate::names::status::{RUNNING, SUCCESS, SUSPENDED};
use crate::rows;
use crate::rules::{Origin, RetryPlan, check_journal_write};
use crate::support::{batch_json, sql, text_in};
use crate::{
    AttemptOutcome, JournalWrite, Millis, NewTask, Refusal, Result, ResultOutcome, ResultRecorded,
    StoreError, TaskResult, TaskSetResultMany, Wait,
};

/// Records a batch of results. Successes and fatal failures end their
/// tasks in one guarded update; a retriable failure first reads its task's
/// attempts and its version's backoff; a suspension is one guarded update
/// of its own; a second result for a task already
/// in the batch is judged after the first has ended it. Each answer is in
/// its result's place.
///
/// A result's journal write is applied first, fenced by the same lease as
/// the result (see [`write_journals`]). A malformed one is the runtime's
/// bug and fails the whole batch: nothing of it is written.
pub(super) async fn set_result_many(
    tx: &mut Connection,
    params: TaskSetResultMany,
) -> Result<Vec<Result<ResultRecorded, Refusal>>> {
    let now = params.now;
    for result in &params.results {
        if let Some(write) = &result.journal {
            check_journal_write(&result.id, write)?;
        }
    }
    let mut batch = Batch::new(params.results.len());
    let Sorted {
        mut finals,
        mut retries,
        mut suspensions,
        repeats,
    } = sort(params.results);
    let endings = finals
        .iter_mut()
        .map(|f| &mut f.ending)
        .chain(retries.iter_mut().map(|r| &mut r.ending))
        .chain(suspensions.iter_mut().map(|s| &mut s.ending));
    write_journals(&mut *tx, endings).await?;
    end_finals(&mut *tx, finals, now, &mut batch).await?;
    suspend(&mut *tx, suspensions, now, &mut batch).await?;
    let planned = plan_retries(&mut *tx, retries, now, &mut batch).await?;
    apply_retries(&mut *tx, planned, &mut batch).await?;
    attempt::record(&mut *tx, std::mem::take(&mut batch.executions), now).await?;
    // Last, and once: the parents waiting for children this batch ended
    // are locked after every row of the batch, in one order (see
    // `fan_in`).
    fan_in::ended(&mut *tx, std::mem::take(&mut batch.children), now).await?;
    for repeat in repeats {
        let refusal = lease_refusal(&mut *tx, &repeat.id, repeat.lease).await?;
        batch.answer(repeat.index, Err(refusal));
    }
    batch.answers()
}

/// One result of a batch: where its answer goes, whose lease it ran
/// under, what it logged, and what it did with its task's journal.
struct Ending {
    index: usize,
    id: String,
    lease: i64,
    log: Option<String>,
    journal: Option<JournalWrite>,
    replayed: u32,
}

/// A success or a fatal failure: it ends its task whatever the task's
/// attempts.
struct Final {
    ending: Ending,
    status: TaskStatus,
    outcome: AttemptOutcome,
    output: Option<Vec<u8>>,
    error: Option<String>,
}

/// A retriable failure, before its task is read.
struct Retry {
    ending: Ending,
    error: String,
    retry_after: Option<std::time::Duration>,
}

/// An execution that ended in a wait lasting until `until`, or until the
/// signal it waits for.
struct Suspension {
    ending: Ending,
    until: Millis,
    wait: Wait,
}

/// A retriable failure whose next status is decided, before the update
/// that must still find the task under its lease.
struct Planned {
    ending: Ending,
    error: String,
    plan: RetryPlan,
}

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
        }
    }
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

/// A task [`end_finals`] ended; a success's continuation and output
/// when it has one.
#[derive(sqlx::FromRow)]
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

/// What a retriable failure's plan needs of its task and of the version
/// it runs.
#[derive(FromRow)]
struct RetryFacts {
    status: String,
    lease_token: i64,
    attempt: i64,
    max_attempts: i64,
    backoff_base_ms: i64,
    backoff_factor: f64,
    backoff_max_ms: i64,
}

/// A task that succeeded with a continuation (JSON) to create.
struct Succeeded {
    id: String,
    continuation: String,
    output: Option<Vec<u8>>,
    trace: Option<waft_core::TraceContext>,
}

/// A batch's results by what they need.
struct Sorted {
    finals: Vec<Final>,
    retries: Vec<Retry>,
    suspensions: Vec<Suspension>,
    /// Second results for a task, judged after the first.
    repeats: Vec<Ending>,
}

fn sort(results: Vec<TaskResult>) -> Sorted {
    let mut sorted = Sorted {
        finals: Vec::new(),
        retries: Vec::new(),
        suspensions: Vec::new(),
        repeats: Vec::new(),
    };
    let mut seen = HashSet::new();
    for (index, result) in results.into_iter().enumerate() {
        let ending = Ending {
            index,
            lease: result.lease_token,
            log: result.log,
            journal: result.journal,
            replayed: result.replayed,
            id: result.id,
        };
        if !seen.insert(ending.id.clone()) {
            sorted.repeats.push(ending);
            continue;
        }
        match result.outcome {
            ResultOutcome::Success { output } => sorted.finals.push(Final {
                ending,
                status: TaskStatus::Success,
                outcome: AttemptOutcome::Success,
                output,
                error: None,
            }),
            ResultOutcome::Fatal { error } => sorted.finals.push(Final {
                ending,
                status: TaskStatus::FatalFailure,
                outcome: AttemptOutcome::Fatal,
                output: None,
                error: Some(error),
            }),
            ResultOutcome::Retriable { error, retry_after } => sorted.retries.push(Retry {
                ending,
                error,
                retry_after,
            }),
            ResultOutcome::Suspend { until, wait } => {
                sorted.suspensions.push(Suspension {
                    ending,
                    until,
                    wait,
                });
            }
        }
    }
    sorted
}

/// A batch's answers, by the results' places, and the executions it
/// ended (for the attempts table), as the steps find them.
struct Batch {
    answers: Vec<Option<Result<TaskStatus, Refusal>>>,
    /// The lambda of each accepted result's task, by the results' places.
    lambdas: Vec<String>,
    executions: Vec<Ended>,
    /// `(task, parent)` of the tasks the batch ended that have a parent.
    children: Vec<(String, String)>,
}

impl Batch {
    fn new(results: usize) -> Self {
        Self {
            answers: vec![None; results],
            lambdas: vec![String::new(); results],
            executions: Vec::new(),
            children: Vec::new(),
        }
    }

    fn answer(&mut self, index: usize, answer: Result<TaskStatus, Refusal>) {
        self.answers[index] = Some(answer);
    }

    /// An execution ended as `outcome`: recorded with its error and log.
    fn ended(&mut self, ending: Ending, outcome: AttemptOutcome, error: Option<String>) {
        self.executions.push(Ended::new(
            &ending.id,
            ending.lease,
            outcome,
            error.as_deref(),
            ending.log.as_deref(),
            ending.replayed,
        ));
    }

    /// An accepted result's task is of `lambda`.
    fn of_lambda(&mut self, index: usize, lambda: String) {
        self.lambdas[index] = lambda;
    }

    fn answers(self) -> Result<Vec<Result<ResultRecorded, Refusal>>> {
        self.answers
            .into_iter()
            .zip(self.lambdas)
            .map(|(answer, lambda)| {
                let answer =
                    answer.ok_or_else(|| StoreError::Corrupt("a result went unanswered".into()))?;
                Ok(answer.map(|status| ResultRecorded { status, lambda }))
            })
            .collect()
    }
}

/// Applies the journal writes of a batch's results (their first result
/// for each task), each fenced by its result's lease, before the results
/// themselves: a write the lease refuses writes nothing, and its result,
/// guarded by the same lease in the same transaction, is then refused
/// too; a write it lets through has locked the task's row (on Postgres),
/// so its result is accepted. The journal is pinned to the version the
/// lease was claimed with, which a result does not name. The rows are
/// taken in id order, so two batches never wait on each other's.
async fn write_journals(
    tx: &mut Connection,
    endings: impl Iterator<Item = &mut Ending>,
) -> Result<()> {
    let mut writes: Vec<_> = endings
        .filter_map(|e| Some((e.id.clone(), e.lease, e.journal.take()?)))
        .collect();
    writes.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, lease, write) in writes {
        // A refusal is the result's to answer.
        let _refused = journal::apply(&mut *tx, &id, lease, None, &write).await?;
    }
    Ok(())
}

/// Ends the successes and fatal failures in one guarded update (they
/// need nothing from their tasks), and creates the successes'
/// continuations.
async fn end_finals(
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
         held = FALSE, finished_at = $2 \
         FROM (SELECT j.value->>'id' AS result_id, \
            CAST(j.value->>'lease' AS BIGINT) AS result_lease, \
            j.value->>'status' AS result_status, j.value->>'output' AS result_output, \
            j.value->>'error' AS result_error, j.value->>'log' AS result_log \
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
        batch.of_lambda(index, lambda);
        batch.ended(f.ending, f.outcome, f.error);
        batch.answer(index, Ok(f.status));
    }
    Ok(())
}

/// Suspends the tasks whose executions ended in a wait, each in an update
/// guarded like the others: the task waits, holding no lease, until its
/// wait is over (its due time and trigger), and the attempt its execution
/// took is given back ([`machine`]'s `Suspend`).
async fn suspend(
    tx: &mut Connection,
    suspensions: Vec<Suspension>,
    now: Millis,
    batch: &mut Batch,
) -> Result<()> {
    for Suspension {
        ending,
        until,
        wait,
    } in suspensions
    {
        let signal = match &wait {
            Wait::Timer | Wait::Children { .. } => None,
            Wait::Signal { name, .. } => Some(text_in(name)),
        };
        let suspended: Option<String> = sqlx::query_scalar(sql(format!(
            "UPDATE tasks SET status = {SUSPENDED}, \
             attempt = CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END, \
             due_at = $3, next_trigger_at = $3, held = FALSE, log = $4, \
             wait_kind = $5, wait_signal = $6 \
             WHERE id = $1 AND lease_token = $2 AND (status IN {RUNNING}) IS TRUE \
             RETURNING lambda"
        )))
        .bind(text_in(&ending.id))
        .bind(ending.lease)
        .bind(until)
        .bind(ending.log.as_deref().map(text_in))
        .bind(wait.kind())
        .bind(signal)
        .fetch_optional(&mut *tx)
        .await?;
        let index = ending.index;
        let Some(lambda) = suspended else {
            let refusal = lease_refusal(&mut *tx, &ending.id, ending.lease).await?;
            batch.answer(index, Err(refusal));
            continue;
        };
        batch.of_lambda(index, lambda);
        // A signal sent while the execution ran, after its last look: the
        // row lock the update took orders this against every send.
        match &wait {
            Wait::Timer => {}
            Wait::Signal { name, taken } => {
                signal::woken_by_a_kept_signal(&mut *tx, &ending.id, name, *taken, now).await?;
            }
            // Children that ended while the execution ran, after its last
            // look, are not awaited (and wake it when none is left).
            Wait::Children { ids } => {
                fan_in::await_children(&mut *tx, &ending.id, ids, now).await?;
            }
        }
        batch.ended(ending, AttemptOutcome::Suspended, None);
        batch.answer(index, Ok(TaskStatus::Suspended));
    }
    Ok(())
}

/// Decides each retriable failure's next status from its task's attempts
/// and the backoff of the version the task runs (its journal's, else the
/// pinned one, else the current one). A task gone, under another lease or
/// no longer running is answered here; the rest are planned.
async fn plan_retries(
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
async fn apply_retries(
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
        match super::insert::insert(conn, vec![next], None, Origin::Store, now).await {
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
