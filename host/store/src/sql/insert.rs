//! Inserting tasks: each checked against its lambda (at its current
//! version, or the one it pins), its idempotency key, its parent's lease
//! and its continuation's lambda, then all of them in one statement.
//!
//! A task of a fair lambda's key, due at once, is stored parked awaiting
//! its key's turn, and its key marked: the next poll lets as many go as
//! the key's turn allows (`keys.rs`). So a backlog of one key is never
//! among the due tasks a poll reads, and another key's task scheduled
//! after it goes at that poll.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use waft_core::machine;
use waft_core::task::{DEBOUNCE_WINDOWS_AT_MOST, check_collection_name, check_lambda_name};

use super::lambda;
use super::{Connection, DIALECT};
use crate::names::status::NEW;
use crate::rows::{self, row};
use crate::rules::{Admitted, Origin, admit};
use crate::support::{batch_json, millis, sql, task_id, text_in};
use crate::{Lambda, Millis, NewTask, Result, StoreError, TaskInserted};

/// A new task as the insert reads it (the field names are its JSON keys).
#[derive(Serialize)]
struct NewRow {
    id: String,
    lambda: String,
    collection: String,
    priority: u8,
    /// Hex: the statement decodes it.
    payload: String,
    max_attempts: i64,
    run_at: Millis,
    parent_id: Option<String>,
    idempotency_key: Option<String>,
    key: Option<String>,
    version: Option<u32>,
    continuation: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    /// 1 when it is stored parked, awaiting its key's turn.
    parked: u8,
}

row! {
    /// A new task's parent, as its insert reads it.
    #[derive(Clone)]
    struct Parent {
        lambda: String,
        status: String,
        lease_token: i64,
    }
}

/// What a batch has learnt so far: lambdas and parents read, keys held
/// already and given out, answers.
#[derive(Default)]
struct Batch {
    lambdas: HashMap<String, Lambda>,
    parents: HashMap<String, Parent>,
    /// `(lambda, idempotency key)` to the task holding it before the batch.
    held: HashMap<(String, String), String>,
    /// `(lambda, idempotency key)` to the id this batch gave it.
    keys: HashMap<(String, String), String>,
    answers: Vec<TaskInserted>,
}

/// Checks tasks against their lambdas and inserts them in one
/// statement; `cron_id` links tasks made by a periodic schedule.
pub(super) async fn insert(
    conn: &mut Connection,
    tasks: Vec<NewTask>,
    cron_id: Option<&str>,
    origin: Origin,
    now: Millis,
) -> Result<Vec<TaskInserted>> {
    let mut batch = Batch {
        held: held_keys(conn, &tasks).await?,
        ..Batch::default()
    };
    let mut rows = Vec::with_capacity(tasks.len());
    // Debounced tasks, each with its answer's place and its window.
    let mut debounced = Vec::new();
    for task in tasks {
        let (admitted, max_attempts) = admit_task(conn, &mut batch, &task, origin, now).await?;
        if let Some(id) = existing_key(&batch, &task) {
            batch.answers.push(TaskInserted { id, created: false });
            continue;
        }
        check_parent(conn, &mut batch, &task).await?;
        let continuation = check_continuation(conn, &task).await?;
        let id = task.id.clone().unwrap_or_else(|| task_id(now));
        if let Some(key) = &task.idempotency_key {
            batch
                .keys
                .insert((task.lambda.clone(), key.clone()), id.clone());
        }
        let window = task.debounce.map(millis);
        let fair = batch
            .lambdas
            .get(&task.lambda)
            .is_some_and(|lambda| lambda.config.key_fairness.is_some());
        let parked = fair && task.key.is_some() && window.is_none() && admitted.run_at <= now;
        let row = NewRow {
            parked: u8::from(parked),
            id: id.clone(),
            collection: admitted.collection,
            priority: admitted.priority,
            payload: hex::encode(&task.payload),
            max_attempts,
            run_at: admitted.run_at.saturating_add(window.unwrap_or(0)),
            idempotency_key: task
                .idempotency_key
                .as_deref()
                .map(|key| text_in(key).into_owned()),
            key: task.key.as_deref().map(|key| text_in(key).into_owned()),
            version: task.version,
            continuation,
            lambda: task.lambda,
            parent_id: task.parent_id,
            tracestate: task.trace.as_ref().and_then(|t| t.tracestate.clone()),
            traceparent: task.trace.map(|t| t.traceparent),
        };
        match window {
            Some(window) => debounced.push((batch.answers.len(), row, window)),
            None => rows.push(row),
        }
        batch.answers.push(TaskInserted { id, created: true });
    }
    if !rows.is_empty() {
        // The marks first: no error between the two leaves a parked task
        // unmarked (a caller that carries on past one commits what it has).
        mark_parked_keys(conn, &rows).await?;
        let created = insert_rows(conn, &rows, cron_id, now).await?;
        answer_lost_races(conn, &mut batch, created).await?;
    }
    // One statement each: a batch may hold several of one key, each of
    // which collapses into the one before. In key order, so that batches
    // of the same keys lock them the same way round.
    debounced.sort_by(|a, b| (&a.1.lambda, &a.1.key).cmp(&(&b.1.lambda, &b.1.key)));
    for (answer, row, window) in debounced {
        let id = insert_debounced(conn, row, window, now).await?;
        batch.answers[answer].created = batch.answers[answer].id == id;
        batch.answers[answer].id = id;
    }
    Ok(batch.answers)
}

/// Admits a task by its lambda (see [`admit`]); answers how it is stored
/// and its attempt budget. A pinned task's budget is its version's, as a
/// redrive's is; its backoff is read from that version too.
async fn admit_task(
    conn: &mut Connection,
    batch: &mut Batch,
    task: &NewTask,
    origin: Origin,
    now: Millis,
) -> Result<(Admitted, i64)> {
    check_lambda_name(&task.lambda)?;
    let lambda = lambda::cached_lambda(conn, &mut batch.lambdas, &task.lambda).await?;
    let admitted = admit(task, &lambda, origin, now)?;
    let max_attempts = match task.version {
        Some(version) => pinned_attempts(conn, &task.lambda, version).await?,
        None => i64::from(lambda.config.max_attempts),
    };
    Ok((admitted, max_attempts))
}

/// The tasks already holding the batch's idempotency keys, read at once
/// (one round trip, not one a task: a parent's children all have keys).
async fn held_keys(
    conn: &mut Connection,
    tasks: &[NewTask],
) -> Result<HashMap<(String, String), String>> {
    #[derive(Serialize)]
    struct Wanted<'a> {
        lambda: &'a str,
        key: std::borrow::Cow<'a, str>,
    }
    // As the database keeps them, each back to the key it came from.
    let mut kept = HashMap::new();
    let wanted: Vec<Wanted> = tasks
        .iter()
        .filter_map(|task| {
            let key = task.idempotency_key.as_deref()?;
            let stored = text_in(key);
            kept.insert((task.lambda.as_str(), stored.clone()), key);
            Some(Wanted {
                lambda: &task.lambda,
                key: stored,
            })
        })
        .collect();
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    let held: Vec<(String, String, String)> = sqlx::query_as(sql(format!(
        "SELECT t.lambda, t.idempotency_key, t.id FROM tasks t \
         JOIN (SELECT j.value->>'lambda' AS wanted_lambda, j.value->>'key' AS wanted_key \
            FROM {}) AS w ON t.lambda = w.wanted_lambda AND t.idempotency_key = w.wanted_key \
         WHERE t.idempotency_key IS NOT NULL",
        DIALECT.json_rows
    )))
    .bind(batch_json(&wanted)?)
    .fetch_all(&mut *conn)
    .await?;
    Ok(held
        .into_iter()
        .filter_map(|(lambda, stored, id)| {
            let key = *kept.get(&(lambda.as_str(), std::borrow::Cow::Borrowed(stored.as_str())))?;
            Some(((lambda, key.to_owned()), id))
        })
        .collect())
}

/// The task already holding the new task's idempotency key, in this
/// batch or before it.
fn existing_key(batch: &Batch, task: &NewTask) -> Option<String> {
    let key = (task.lambda.clone(), task.idempotency_key.clone()?);
    batch
        .keys
        .get(&key)
        .or_else(|| batch.held.get(&key))
        .cloned()
}

/// A parent must exist; a parent's lease, when given, must be the running
/// parent's, and its lambda must allow the child's.
async fn check_parent(conn: &mut Connection, batch: &mut Batch, task: &NewTask) -> Result<()> {
    let Some(parent) = &task.parent_id else {
        if task.parent_lease.is_some() {
            return Err(StoreError::Invalid(
                "a parent lease needs a parent task".into(),
            ));
        }
        return Ok(());
    };
    // Read once a batch: a parent's children come together.
    let row = match batch.parents.get(parent) {
        Some(row) => row.clone(),
        None => {
            let row: Parent =
                sqlx::query_as("SELECT lambda, status, lease_token FROM tasks WHERE id = $1")
                    .bind(text_in(parent))
                    .fetch_optional(&mut *conn)
                    .await?
                    .ok_or_else(|| StoreError::Invalid(format!("unknown parent task {parent}")))?;
            batch.parents.insert(parent.clone(), row.clone());
            row
        }
    };
    let Some(lease) = task.parent_lease else {
        return Ok(());
    };
    let running = machine::RUNNING.contains(rows::task_status(row.status)?);
    if !running || row.lease_token != lease {
        return Err(StoreError::ParentLeaseLost {
            parent: parent.clone(),
            lease,
        });
    }
    // An execution schedules children of its own lambda, and of those its
    // lambda's current version names.
    let parent_lambda = row.lambda;
    if parent_lambda != task.lambda
        && !lambda::cached_lambda(conn, &mut batch.lambdas, &parent_lambda)
            .await?
            .config
            .allows_child(&parent_lambda, &task.lambda)
    {
        return Err(StoreError::ChildNotAllowed {
            parent_lambda,
            child_lambda: task.lambda.clone(),
        });
    }
    Ok(())
}

/// A declared continuation, checked against its lambda, as the JSON the
/// task keeps.
async fn check_continuation(conn: &mut Connection, task: &NewTask) -> Result<Option<String>> {
    let Some(then) = &task.continuation else {
        return Ok(None);
    };
    check_lambda_name(&then.lambda)?;
    if let Some(collection) = &then.collection {
        check_collection_name(collection)?;
    }
    if let Some(key) = &then.key {
        waft_core::task::check_key(key).map_err(StoreError::Invalid)?;
    }
    let next = lambda::require_lambda(conn, &then.lambda).await?;
    if let Some(priority) = then.priority
        && priority >= next.config.priorities
    {
        return Err(StoreError::InvalidPriority {
            lambda: next.name,
            priority,
            max: next.config.priorities - 1,
        });
    }
    let json = serde_json::to_string(then).map_err(|e| StoreError::Invalid(e.to_string()))?;
    Ok(Some(json))
}

/// Inserts the admitted tasks in one statement; answers the ids created.
/// A task with the same idempotency key committed by another transaction
/// since [`existing_key`] looked is skipped (no error).
async fn insert_rows(
    conn: &mut Connection,
    rows: &[NewRow],
    cron_id: Option<&str>,
    now: Millis,
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(sql(insert_statement(
        "FALSE",
        "ON CONFLICT (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING",
    )))
    .bind(batch_json(rows)?)
    .bind(now)
    .bind(cron_id)
    .fetch_all(&mut *conn)
    .await?)
}

/// Marks the keys of the tasks stored parked, once each, for the next
/// poll to let as many go as their turns allow.
async fn mark_parked_keys(conn: &mut Connection, rows: &[NewRow]) -> Result<()> {
    let keys: std::collections::BTreeSet<super::keys::Key> = rows
        .iter()
        .filter(|row| row.parked == 1)
        .filter_map(|row| {
            Some(super::keys::Key {
                lambda: row.lambda.clone(),
                key: row.key.clone()?,
            })
        })
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    let keys: Vec<_> = keys.into_iter().collect();
    sqlx::query(sql(format!(
        "INSERT INTO key_landings (lambda, key) \
         SELECT j.value->>'lambda', j.value->>'key' FROM {}",
        DIALECT.json_rows
    )))
    .bind(batch_json(&keys)?)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Inserts a debounced task, or collapses it into its key's debounced task
/// not yet enqueued: that one takes this one's request and waits for the
/// window past now, or to `DEBOUNCE_WINDOWS_AT_MOST` windows past its own
/// arrival, whichever is sooner — or, when it was given a slot of its
/// quota or rate already, for that slot if it is later: it keeps its
/// slot, so a stream of collapses spends no further slot. Answers the id
/// of the task that holds the request, this one's or the other's.
async fn insert_debounced(
    conn: &mut Connection,
    row: NewRow,
    window: Millis,
    now: Millis,
) -> Result<String> {
    let longest = window.saturating_mul(i64::from(DEBOUNCE_WINDOWS_AT_MOST));
    let window_end = "CASE WHEN excluded.next_trigger_at < tasks.created_at + $4 \
                      THEN excluded.next_trigger_at ELSE tasks.created_at + $4 END";
    let at = format!(
        "CASE WHEN (tasks.paced OR tasks.key_paced) AND tasks.next_trigger_at > {window_end} \
         THEN tasks.next_trigger_at ELSE {window_end} END"
    );
    let conflict = format!(
        "ON CONFLICT (lambda, key) WHERE debounced AND status = {NEW} AND NOT held AND NOT parked \
         DO UPDATE SET payload = excluded.payload, collection = excluded.collection, \
         priority = excluded.priority, max_attempts = excluded.max_attempts, \
         version = excluded.version, continuation = excluded.continuation, \
         traceparent = excluded.traceparent, tracestate = excluded.tracestate, \
         scheduled_at = {window_end}, due_at = {window_end}, next_trigger_at = {at}"
    );
    Ok(sqlx::query_scalar(sql(insert_statement("TRUE", &conflict)))
        .bind(batch_json(&[row])?)
        .bind(now)
        .bind(Option::<&str>::None)
        .bind(longest)
        .fetch_one(&mut *conn)
        .await?)
}

/// The insert of a batch of [`NewRow`]s (`$1`, with `$2` the time and `$3`
/// the periodic schedule), each `debounced` or not, with its `conflict`
/// clause.
fn insert_statement(debounced: &str, conflict: &str) -> String {
    format!(
        "INSERT INTO tasks (id, lambda, collection, priority, payload, status, \
         max_attempts, scheduled_at, due_at, next_trigger_at, created_at, parent_id, \
         idempotency_key, key, cron_id, version, continuation, traceparent, tracestate, \
         debounced, parked, awaits_turn, limited) \
         SELECT j.value->>'id', j.value->>'lambda', j.value->>'collection', \
         CAST(j.value->>'priority' AS BIGINT), {payload}, {NEW}, \
         CAST(j.value->>'max_attempts' AS BIGINT), CAST(j.value->>'run_at' AS BIGINT), \
         CAST(j.value->>'run_at' AS BIGINT), \
         CASE WHEN CAST(j.value->>'parked' AS INTEGER) = 1 THEN NULL \
            ELSE CAST(j.value->>'run_at' AS BIGINT) END, $2, \
         j.value->>'parent_id', j.value->>'idempotency_key', j.value->>'key', $3, \
         CAST(j.value->>'version' AS BIGINT), \
         j.value->>'continuation', j.value->>'traceparent', j.value->>'tracestate', {debounced}, \
         CAST(j.value->>'parked' AS INTEGER) = 1, CAST(j.value->>'parked' AS INTEGER) = 1, \
         CAST(j.value->>'parked' AS INTEGER) = 1 \
         FROM {rows} WHERE TRUE {conflict} RETURNING id",
        payload = DIALECT.unhex("j.value->>'payload'"),
        rows = DIALECT.json_rows,
    )
}

/// Answers each task [`insert_rows`] skipped with the task that holds its
/// key: another transaction's, committed meanwhile.
async fn answer_lost_races(
    conn: &mut Connection,
    batch: &mut Batch,
    created: Vec<String>,
) -> Result<()> {
    if created.len() == batch.answers.iter().filter(|a| a.created).count() {
        return Ok(());
    }
    let created: HashSet<String> = created.into_iter().collect();
    for ((lambda, key), id) in &batch.keys {
        if created.contains(id) {
            continue;
        }
        let winner: String =
            sqlx::query_scalar("SELECT id FROM tasks WHERE lambda = $1 AND idempotency_key = $2")
                .bind(lambda)
                .bind(text_in(key))
                .fetch_one(&mut *conn)
                .await?;
        for answer in batch.answers.iter_mut().filter(|a| &a.id == id) {
            *answer = TaskInserted {
                id: winner.clone(),
                created: false,
            };
        }
    }
    Ok(())
}

/// The attempt budget of `version` of `lambda`; `UnknownVersion` when the
/// lambda has no such version.
async fn pinned_attempts(conn: &mut Connection, lambda: &str, version: u32) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT max_attempts FROM lambda_versions WHERE lambda = $1 AND version = $2",
    )
    .bind(lambda)
    .bind(i64::from(version))
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| StoreError::UnknownVersion {
        lambda: lambda.to_owned(),
        version,
    })
}
