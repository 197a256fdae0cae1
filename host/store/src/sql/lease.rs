//! Leases: claims, heartbeats and results, each a guarded update that a
//! stale lease cannot pass; the attempts table and continuations.

use std::collections::{HashMap, HashSet};

use waft_core::TaskStatus;

use super::poll;
use super::{Connection, DIALECT, GATE_OF_TASK, Row, lock_gates};
use crate::names::status::{CLAIMED, ENQUEUED, PROCESSING, RUNNING, SUCCESS};
use crate::rows::{self, RowExt};
use crate::rules::{GateEffect, Origin, RetryPlan};
use crate::support::{millis, sql, text_in};
use crate::{
    AttemptOutcome, ClaimedTask, Millis, NewTask, Refusal, Result, ResultOutcome, StoreError,
    TaskClaimMany, TaskHeartbeatMany, TaskResult, TaskSetResultMany,
};

pub(super) async fn claim_many(
    tx: &mut Connection,
    params: TaskClaimMany,
) -> Result<Vec<Result<ClaimedTask, Refusal>>> {
    lock_gates(&mut *tx, DIALECT.gate_read_lock).await?;
    let claims: Vec<_> = params
        .claims
        .iter()
        .map(|(id, token)| serde_json::json!({ "id": text_in(id), "token": token }))
        .collect();
    // `(status = ...) IS TRUE` keeps either database from driving the
    // update from the status index (a scan of every enqueued task, and on
    // Postgres of their dead versions too, per batch); both then join on
    // the primary key. (Postgres reads `(...) = TRUE` as the bare test and
    // took the index: a claim cost milliseconds once thousands of tasks
    // waited.)
    let rows = sqlx::query(sql(format!(
        "UPDATE tasks SET status = {CLAIMED}, lease_token = lease_token + 1, \
         attempt = attempt + 1, claimed_at = $2, next_trigger_at = $3, progress = NULL \
         FROM (SELECT j.value->>'id' AS claim_id, CAST(j.value->>'token' AS BIGINT) \
            AS claim_token FROM {}) AS c \
         WHERE tasks.id = c.claim_id AND tasks.enqueue_token = c.claim_token \
         AND (tasks.status = {ENQUEUED}) IS TRUE AND tasks.held = FALSE \
         AND NOT EXISTS (SELECT 1 FROM gates g WHERE g.lambda = tasks.lambda \
            AND (g.collection = '' OR g.collection = tasks.collection)) \
         RETURNING id, lambda, collection, priority, payload, attempt, scheduled_at, \
         lease_token, COALESCE(tasks.version, \
            (SELECT current_version FROM lambdas WHERE name = tasks.lambda)) AS lambda_version, \
         (SELECT secrets_version FROM lambdas WHERE name = tasks.lambda) AS secrets_version",
        DIALECT.json_rows
    )))
    .bind(serde_json::Value::Array(claims).to_string())
    .bind(params.now)
    .bind(params.now.saturating_add(millis(params.claim_timeout)))
    .fetch_all(&mut *tx)
    .await?;
    let mut won = HashMap::with_capacity(rows.len());
    for row in &rows {
        let task = claimed(row)?;
        won.insert(task.id.clone(), task);
    }
    let mut answers = Vec::with_capacity(params.claims.len());
    for (id, _) in &params.claims {
        answers.push(match won.remove(id) {
            Some(task) => Ok(task),
            None => Err(claim_refusal(&mut *tx, id, params.now).await?),
        });
    }
    Ok(answers)
}

pub(super) async fn heartbeat_many(
    tx: &mut Connection,
    params: TaskHeartbeatMany,
) -> Result<Vec<Result<(), Refusal>>> {
    let beats: Vec<_> = params
        .beats
        .iter()
        .map(|b| {
            serde_json::json!({
                "id": text_in(&b.id),
                "lease": b.lease_token,
                "progress": b.progress.as_deref().map(text_in),
            })
        })
        .collect();
    // See the claim for why the status test is written this way.
    let alive: Vec<String> = sqlx::query_scalar(sql(format!(
        "UPDATE tasks SET status = {PROCESSING}, heartbeat_at = $2, next_trigger_at = $3, \
         progress = COALESCE(b.beat_progress, progress) \
         FROM (SELECT j.value->>'id' AS beat_id, CAST(j.value->>'lease' AS BIGINT) \
            AS beat_lease, j.value->>'progress' AS beat_progress FROM {}) AS b \
         WHERE tasks.id = b.beat_id AND tasks.lease_token = b.beat_lease \
         AND (tasks.status IN {RUNNING}) IS TRUE RETURNING id",
        DIALECT.json_rows
    )))
    .bind(serde_json::Value::Array(beats).to_string())
    .bind(params.now)
    .bind(params.now.saturating_add(millis(params.heartbeat_timeout)))
    .fetch_all(&mut *tx)
    .await?;
    let alive: HashSet<String> = alive.into_iter().collect();
    let mut answers = Vec::with_capacity(params.beats.len());
    for beat in &params.beats {
        answers.push(if alive.contains(&beat.id) {
            Ok(())
        } else {
            Err(lease_refusal(&mut *tx, &beat.id, beat.lease_token).await?)
        });
    }
    Ok(answers)
}

/// Records a batch of results. Successes and fatal failures end their
/// tasks in one guarded update; a retriable failure first reads its task's
/// attempts and its version's backoff; a second result for a task already
/// in the batch is judged after the first has ended it. Each answer is in
/// its result's place.
pub(super) async fn set_result_many(
    tx: &mut Connection,
    params: TaskSetResultMany,
) -> Result<Vec<Result<TaskStatus, Refusal>>> {
    let now = params.now;
    let mut batch = Batch::new(params.results.len());
    let Sorted {
        finals,
        retries,
        repeats,
    } = sort(params.results);
    end_finals(&mut *tx, finals, now, &mut batch).await?;
    let planned = plan_retries(&mut *tx, retries, now, &mut batch).await?;
    apply_retries(&mut *tx, planned, &mut batch).await?;
    record_attempts(&mut *tx, std::mem::take(&mut batch.executions), now).await?;
    for repeat in repeats {
        let refusal = lease_refusal(&mut *tx, &repeat.id, repeat.lease).await?;
        batch.answer(repeat.index, Err(refusal));
    }
    batch.answers()
}

/// One result of a batch: where its answer goes, whose lease it ran
/// under, and what it logged.
struct Ending {
    index: usize,
    id: String,
    lease: i64,
    log: Option<String>,
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

/// A retriable failure whose next status is decided, before the update
/// that must still find the task under its lease.
struct Planned {
    ending: Ending,
    error: String,
    plan: RetryPlan,
}

/// A batch's results by what they need.
struct Sorted {
    finals: Vec<Final>,
    retries: Vec<Retry>,
    /// Second results for a task, judged after the first.
    repeats: Vec<Ending>,
}

fn sort(results: Vec<TaskResult>) -> Sorted {
    let mut sorted = Sorted {
        finals: Vec::new(),
        retries: Vec::new(),
        repeats: Vec::new(),
    };
    let mut seen = HashSet::new();
    for (index, result) in results.into_iter().enumerate() {
        let ending = Ending {
            index,
            lease: result.lease_token,
            log: result.log,
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
        }
    }
    sorted
}

/// A batch's answers, by the results' places, and the executions it
/// ended (for the attempts table), as the steps find them.
struct Batch {
    answers: Vec<Option<Result<TaskStatus, Refusal>>>,
    executions: Vec<serde_json::Value>,
}

impl Batch {
    fn new(results: usize) -> Self {
        Self {
            answers: vec![None; results],
            executions: Vec::new(),
        }
    }

    fn answer(&mut self, index: usize, answer: Result<TaskStatus, Refusal>) {
        self.answers[index] = Some(answer);
    }

    /// An execution ended as `outcome`: recorded with its error and log.
    fn ended(&mut self, ending: Ending, outcome: AttemptOutcome, error: Option<String>) {
        self.executions.push(serde_json::json!({
            "id": ending.id, "lease": ending.lease, "outcome": outcome.as_str(),
            "error": error, "log": ending.log,
        }));
    }

    fn answers(self) -> Result<Vec<Result<TaskStatus, Refusal>>> {
        self.answers
            .into_iter()
            .map(|answer| {
                answer.ok_or_else(|| StoreError::Corrupt("a result went unanswered".into()))
            })
            .collect()
    }
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
    let rows: Vec<_> = finals
        .iter()
        .map(|f| {
            serde_json::json!({
                "id": text_in(&f.ending.id),
                "lease": f.ending.lease,
                "status": f.status.as_str(),
                "output": f.output.as_ref().map(hex::encode),
                "error": f.error.as_deref().map(text_in),
                "log": f.ending.log.as_deref().map(text_in),
            })
        })
        .collect();
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
         RETURNING id, CASE WHEN status = {SUCCESS} THEN continuation END AS continuation, \
         CASE WHEN status = {SUCCESS} AND continuation IS NOT NULL THEN output END AS next_payload",
        output = DIALECT.unhex("r.result_output"),
        rows = DIALECT.json_rows,
    )))
    .bind(serde_json::Value::Array(rows).to_string())
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    let mut continued = Vec::new();
    let mut ended = HashSet::with_capacity(rows.len());
    for row in &rows {
        let id = row.text("id")?;
        if let Some(then) = row.opt_text("continuation")? {
            continued.push((id.clone(), then, row.opt_bytes("next_payload")?));
        }
        ended.insert(id);
    }
    continue_successes(&mut *tx, continued, now).await?;
    for f in finals {
        let index = f.ending.index;
        if !ended.contains(&f.ending.id) {
            let refusal = lease_refusal(&mut *tx, &f.ending.id, f.ending.lease).await?;
            batch.answer(index, Err(refusal));
            continue;
        }
        batch.ended(f.ending, f.outcome, f.error);
        batch.answer(index, Ok(f.status));
    }
    Ok(())
}

/// Decides each retriable failure's next status from its task's attempts
/// and the backoff of the version the task runs (pinned, or else
/// current). A task gone, under another lease or no longer running is
/// answered here; the rest are planned.
async fn plan_retries(
    tx: &mut Connection,
    retries: Vec<Retry>,
    now: Millis,
    batch: &mut Batch,
) -> Result<Vec<Planned>> {
    let mut planned = Vec::with_capacity(retries.len());
    for retry in retries {
        let index = retry.ending.index;
        let row = sqlx::query(
            "SELECT t.status, t.lease_token, t.attempt, t.max_attempts, \
             v.backoff_base_ms, v.backoff_factor, v.backoff_max_ms FROM tasks t \
             JOIN lambdas l ON l.name = t.lambda \
             JOIN lambda_versions v ON v.lambda = l.name \
                AND v.version = COALESCE(t.version, l.current_version) \
             WHERE t.id = $1",
        )
        .bind(text_in(&retry.ending.id))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            batch.answer(index, Err(Refusal::NotFound));
            continue;
        };
        let status = rows::status(&row)?;
        let current = row.int("lease_token")?;
        if current != retry.ending.lease {
            batch.answer(index, Err(Refusal::StaleLease { current }));
            continue;
        }
        if !matches!(status, TaskStatus::Claimed | TaskStatus::Processing) {
            batch.answer(index, Err(Refusal::WrongState(status)));
            continue;
        }
        let plan = RetryPlan::decide(
            row.int("attempt")?,
            row.int("max_attempts")?,
            &rows::backoff(&row)?,
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
    let updates: Vec<_> = planned
        .iter()
        .map(|p| {
            serde_json::json!({
                "id": p.ending.id,
                "lease": p.ending.lease,
                "status": p.plan.status.as_str(),
                "error": text_in(&p.error),
                "log": p.ending.log.as_deref().map(text_in),
                "next": p.plan.next_trigger_at,
                "finished": p.plan.finished_at,
            })
        })
        .collect();
    let updated: HashSet<String> = sqlx::query_scalar(sql(format!(
        "UPDATE tasks SET status = r.result_status, last_error = r.result_error, \
         log = r.result_log, next_trigger_at = r.result_next, due_at = COALESCE(r.result_next, due_at), \
         held = FALSE, finished_at = r.result_finished \
         FROM (SELECT j.value->>'id' AS result_id, \
            CAST(j.value->>'lease' AS BIGINT) AS result_lease, \
            j.value->>'status' AS result_status, j.value->>'error' AS result_error, \
            j.value->>'log' AS result_log, CAST(j.value->>'next' AS BIGINT) AS result_next, \
            CAST(j.value->>'finished' AS BIGINT) AS result_finished FROM {}) AS r \
         WHERE tasks.id = r.result_id AND tasks.lease_token = r.result_lease \
         AND (tasks.status IN {RUNNING}) IS TRUE RETURNING id",
        DIALECT.json_rows,
    )))
    .bind(serde_json::Value::Array(updates).to_string())
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    for p in planned {
        let index = p.ending.index;
        if !updated.contains(&p.ending.id) {
            let refusal = lease_refusal(&mut *tx, &p.ending.id, p.ending.lease).await?;
            batch.answer(index, Err(refusal));
            continue;
        }
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
/// as the succeeded task's `last_error`; the success stands. Each of
/// `continued` is a task id, its continuation (JSON) and its output.
pub(super) async fn continue_successes(
    conn: &mut Connection,
    continued: Vec<(String, String, Option<Vec<u8>>)>,
    now: Millis,
) -> Result<()> {
    for (id, json, output) in continued {
        let then: crate::Continuation = serde_json::from_str(&json)
            .map_err(|e| StoreError::Corrupt(format!("continuation {json:?}: {e}")))?;
        let next = NewTask {
            lambda: then.lambda,
            collection: then.collection,
            priority: then.priority,
            payload: output.unwrap_or_default(),
            idempotency_key: Some(format!("then:{id}")),
            parent_id: Some(id.clone()),
            ..NewTask::default()
        };
        match super::task::insert(conn, vec![next], None, Origin::Store, now).await {
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

/// Records ended executions (`{id, outcome, error, log}` each) at
/// their task's current attempt and lease. An execution already
/// recorded (a paced task polled again) is kept as it was.
pub(super) async fn record_attempts(
    conn: &mut Connection,
    ended: Vec<serde_json::Value>,
    now: Millis,
) -> Result<()> {
    if ended.is_empty() {
        return Ok(());
    }
    // Each under the lease it ran with, which is still the task's.
    let ended: Vec<serde_json::Value> = ended
        .into_iter()
        .map(|mut record| {
            for field in ["id", "error", "log"] {
                if let Some(serde_json::Value::String(text)) = record.get_mut(field) {
                    *text = text_in(text).into_owned();
                }
            }
            record
        })
        .collect();
    sqlx::query(sql(format!(
        "INSERT INTO attempts (task_id, lease_token, attempt, outcome, error, log, \
         started_at, ended_at) \
         SELECT t.id, t.lease_token, t.attempt, a.outcome, a.error, a.log, t.claimed_at, $2 \
         FROM (SELECT j.value->>'id' AS attempt_task, CAST(j.value->>'lease' AS BIGINT) AS lease, \
            j.value->>'outcome' AS outcome, \
            j.value->>'error' AS error, j.value->>'log' AS log FROM {}) AS a \
         JOIN tasks t ON t.id = a.attempt_task AND t.lease_token = a.lease WHERE TRUE \
         ON CONFLICT (task_id, lease_token) DO NOTHING",
        DIALECT.json_rows
    )))
    .bind(serde_json::Value::Array(ended).to_string())
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn claimed(row: &Row) -> Result<ClaimedTask> {
    let small = |column: &str| -> Result<i64> { row.int(column) };
    Ok(ClaimedTask {
        id: row.text("id")?,
        lambda: row.text("lambda")?,
        lambda_version: u32::try_from(small("lambda_version")?)
            .map_err(|_| StoreError::Corrupt("lambda_version".into()))?,
        collection: row.text("collection")?,
        priority: u8::try_from(small("priority")?)
            .map_err(|_| StoreError::Corrupt("priority".into()))?,
        payload: row.bytes("payload")?,
        attempt: u32::try_from(small("attempt")?)
            .map_err(|_| StoreError::Corrupt("attempt".into()))?,
        scheduled_at: small("scheduled_at")?,
        lease_token: small("lease_token")?,
        secrets_version: row.int("secrets_version")?,
    })
}

/// Why a claim was refused. A queued task under a closed gate is
/// acted on here, as the poll would: held, or dropped.
async fn claim_refusal(conn: &mut Connection, id: &str, now: Millis) -> Result<Refusal> {
    // Read unlocked (a lock would make a concurrent poll skip the
    // task); only a refusal that acts on the task — a hold or drop
    // under a closed gate — reads it again under a lock, so its
    // answer is about the task as it is, not as a cancel committing
    // meanwhile left it.
    // The guard of the refusal's own update: the task is still queued,
    // as the refusal read it.
    let queued = format!("AND status = {ENQUEUED} AND held = FALSE");
    let mut lock = "";
    loop {
        let row = sqlx::query(sql(format!(
            "SELECT t.status, t.enqueue_token, t.held, {GATE_OF_TASK} AS gate FROM tasks t \
             WHERE t.id = $1 {lock}"
        )))
        .bind(text_in(id))
        .fetch_optional(&mut *conn)
        .await?;
        let Some(row) = row else {
            return Ok(Refusal::NotFound);
        };
        let status = rows::status(&row)?;
        if row.flag("held")? {
            return Ok(Refusal::Held);
        }
        if status != TaskStatus::Enqueued {
            return Ok(Refusal::WrongState(status));
        }
        let gate = GateEffect::from_code(row.opt_int("gate")?);
        if gate != GateEffect::Open && lock != DIALECT.row_lock {
            lock = DIALECT.row_lock;
            continue;
        }
        return Ok(match gate {
            GateEffect::Hold => {
                poll::hold(conn, id, None, &queued).await?;
                Refusal::Held
            }
            GateEffect::Drop => {
                poll::drop_task(conn, id, now, &queued).await?;
                Refusal::WrongState(TaskStatus::Dropped)
            }
            GateEffect::Open => Refusal::StaleEnqueueToken {
                current: row.int("enqueue_token")?,
            },
        });
    }
}

/// Explains why a lease-guarded update touched no row.
pub(super) async fn lease_refusal(conn: &mut Connection, id: &str, lease: i64) -> Result<Refusal> {
    let row = sqlx::query("SELECT status, lease_token FROM tasks WHERE id = $1")
        .bind(text_in(id))
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match row {
        None => Refusal::NotFound,
        Some(row) => {
            let current = row.int("lease_token")?;
            if current != lease {
                Refusal::StaleLease { current }
            } else {
                Refusal::WrongState(rows::status(&row)?)
            }
        }
    })
}
