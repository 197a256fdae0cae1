//! Leases: claims and heartbeats, each a guarded update that a stale lease
//! cannot pass, and why one was refused. Results, which end leases, are in
//! `result.rs`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sqlx::FromRow;

use waft_core::TaskStatus;

use super::poll;
use super::{Connection, DIALECT, GATE_OF_TASK, take_lock};
use crate::names::status::{CLAIMED, ENQUEUED, PROCESSING, RUNNING};
use crate::rows::{self, row};
use crate::rules::GateEffect;
use crate::support::{batch_json, millis, sql, text_in};
use crate::{
    ClaimedTask, LEASE_STEP, Millis, Refusal, Result, StoreError, TaskClaimMany, TaskHeartbeatMany,
};

/// A claim as the claims' update reads it (the field names are its JSON
/// keys): a task, the enqueue token its queue message carried, and the
/// random low half of the lease it is given.
#[derive(Serialize)]
struct ClaimRow<'a> {
    id: Cow<'a, str>,
    token: i64,
    nonce: i64,
}

/// A heartbeat as the heartbeats' update reads it (the field names are
/// its JSON keys).
#[derive(Serialize)]
struct BeatRow<'a> {
    id: Cow<'a, str>,
    lease: i64,
    progress: Option<Cow<'a, str>>,
}

row! {
    /// A task a claim won, as the claims' update returns it.
    struct Won {
        id: String,
        lambda: String,
        lambda_version: i64,
        collection: String,
        priority: i64,
        payload: Vec<u8>,
        attempt: i64,
        scheduled_at: Millis,
        lease_token: i64,
        secrets_version: i64,
        journal_len: i64,
        journal_generation: i64,
        traceparent: Option<String>,
        tracestate: Option<String>,
    }
}

impl TryFrom<Won> for ClaimedTask {
    type Error = StoreError;

    fn try_from(won: Won) -> Result<Self> {
        let corrupt = |column: &str| StoreError::Corrupt(column.into());
        Ok(ClaimedTask {
            id: won.id,
            lambda: won.lambda,
            lambda_version: u32::try_from(won.lambda_version)
                .map_err(|_| corrupt("lambda_version"))?,
            collection: won.collection,
            priority: u8::try_from(won.priority).map_err(|_| corrupt("priority"))?,
            payload: won.payload,
            attempt: u32::try_from(won.attempt).map_err(|_| corrupt("attempt"))?,
            scheduled_at: won.scheduled_at,
            lease_token: won.lease_token,
            secrets_version: won.secrets_version,
            journal_len: u32::try_from(won.journal_len).map_err(|_| corrupt("journal_len"))?,
            journal_generation: u32::try_from(won.journal_generation)
                .map_err(|_| corrupt("journal_generation"))?,
            trace: rows::trace(won.traceparent, won.tracestate),
        })
    }
}

pub(super) async fn claim_many(
    tx: &mut Connection,
    params: TaskClaimMany,
) -> Result<Vec<Result<ClaimedTask, Refusal>>> {
    take_lock(&mut *tx, DIALECT.gate_read_lock).await?;
    let claims: Vec<_> = params
        .claims
        .iter()
        .map(|(id, token)| ClaimRow {
            id: text_in(id),
            token: *token,
            nonce: i64::from(rand::random::<u32>()),
        })
        .collect();
    // `(status = ...) IS TRUE` keeps either database from driving the
    // update from the status index (a scan of every enqueued task, and on
    // Postgres of their dead versions too, per batch); both then join on
    // the primary key. (Postgres reads `(...) = TRUE` as the bare test and
    // took the index: a claim cost milliseconds once thousands of tasks
    // waited.)
    // The version run is the journal's, which its entries must be replayed
    // on; else the pinned one; else the current one. It is kept
    // (`claimed_version`) for the journal write a result carries.
    let rows = sqlx::query(sql(format!(
        "UPDATE tasks SET status = {CLAIMED}, lease_token = \
            (tasks.lease_token / {LEASE_STEP} + 1) * {LEASE_STEP} + c.claim_nonce, \
         attempt = attempt + 1, claimed_at = $2, next_trigger_at = $3, progress = NULL, \
         claimed_version = COALESCE(tasks.journal_version, tasks.version, \
            (SELECT current_version FROM lambdas WHERE name = tasks.lambda)) \
         FROM (SELECT j.value->>'id' AS claim_id, CAST(j.value->>'token' AS BIGINT) \
            AS claim_token, CAST(j.value->>'nonce' AS BIGINT) AS claim_nonce FROM {}) AS c \
         WHERE tasks.id = c.claim_id AND tasks.enqueue_token = c.claim_token \
         AND (tasks.status = {ENQUEUED}) IS TRUE AND tasks.held = FALSE \
         AND NOT EXISTS (SELECT 1 FROM gates g WHERE g.lambda = tasks.lambda \
            AND (g.collection = '' OR g.collection = tasks.collection)) \
         RETURNING id, lambda, collection, priority, payload, attempt, scheduled_at, \
         lease_token, claimed_version AS lambda_version, journal_len, journal_generation, \
         traceparent, tracestate, \
         (SELECT secrets_version FROM lambdas WHERE name = tasks.lambda) AS secrets_version",
        DIALECT.json_rows
    )))
    .bind(batch_json(&claims)?)
    .bind(params.now)
    .bind(params.now.saturating_add(millis(params.claim_timeout)))
    .fetch_all(&mut *tx)
    .await?;
    let mut won = HashMap::with_capacity(rows.len());
    for row in &rows {
        let task = ClaimedTask::try_from(Won::from_row(row)?)?;
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
        .map(|b| BeatRow {
            id: text_in(&b.id),
            lease: b.lease_token,
            progress: b.progress.as_deref().map(text_in),
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
    .bind(batch_json(&beats)?)
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

row! {
    /// A queued task as a refused claim reads it, with the gate over it.
    struct Queued {
        status: String,
        enqueue_token: i64,
        held: bool,
        gate: Option<i64>,
    }
}

row! {
    /// A task as a refused lease reads it.
    struct Leased {
        status: String,
        lease_token: i64,
    }
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
        let row: Option<Queued> = sqlx::query_as(sql(format!(
            "SELECT t.status, t.enqueue_token, t.held, {GATE_OF_TASK} AS gate FROM tasks t \
             WHERE t.id = $1 {lock}"
        )))
        .bind(text_in(id))
        .fetch_optional(&mut *conn)
        .await?;
        let Some(row) = row else {
            return Ok(Refusal::NotFound);
        };
        let status = rows::task_status(row.status)?;
        if row.held {
            return Ok(Refusal::Held);
        }
        if status != TaskStatus::Enqueued {
            return Ok(Refusal::WrongState(status));
        }
        let gate = GateEffect::from_code(row.gate);
        if gate != GateEffect::Open && lock != DIALECT.row_lock {
            lock = DIALECT.row_lock;
            continue;
        }
        return Ok(match gate {
            GateEffect::Hold => {
                let task = poll::Marked { id, error: None };
                poll::hold(conn, &[task], &queued).await?;
                Refusal::Held
            }
            GateEffect::Drop => {
                poll::drop_task(conn, id, now, &queued).await?;
                Refusal::WrongState(TaskStatus::Dropped)
            }
            GateEffect::Open => Refusal::StaleEnqueueToken {
                current: row.enqueue_token,
            },
        });
    }
}

/// Explains why a lease-guarded update touched no row.
pub(super) async fn lease_refusal(conn: &mut Connection, id: &str, lease: i64) -> Result<Refusal> {
    let row: Option<Leased> = sqlx::query_as("SELECT status, lease_token FROM tasks WHERE id = $1")
        .bind(text_in(id))
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match row {
        None => Refusal::NotFound,
        Some(row) => {
            if row.lease_token != lease {
                Refusal::StaleLease {
                    current: row.lease_token,
                }
            } else {
                Refusal::WrongState(rows::task_status(row.status)?)
            }
        }
    })
}
