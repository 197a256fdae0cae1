//! The attempts of a task: every execution that ended, at its task's
//! attempt and lease.
//!
//! An execution that ends its task for good (a success, a fatal failure)
//! is held by the task's own row: its attempt and lease, its claim and end
//! as start and end, its log, its error and the journal entries it
//! replayed (`replayed`). Those states are final, so nothing writes those
//! columns again; and a task that succeeds, the common case, costs no
//! second row, nor its entries in the table's indexes. Every other end (a
//! retry, a suspension, an execution lost, an attempt exhausted) is a row
//! of `attempts`: the task runs again, or may (a dead letter is
//! redriven), and its row moves on. Readers take both ([`final_attempts`]);
//! a release before kept every end as a row, and a row of the same lease
//! wins.

use serde::Serialize;

use super::{Connection, DIALECT};
use crate::names::outcome;
use crate::names::status::{FATAL_FAILURE, SUCCESS};
use crate::support::{batch_json, sql, text_in};
use crate::{AttemptOutcome, Millis, Result};

/// An execution that ended, as the statement of [`record`] reads it: its
/// task, the lease it ran under, how it ended, with what error and log,
/// and how many journal entries it replayed. The field names are the JSON
/// keys the statement reads.
#[derive(Debug, Serialize)]
pub(super) struct Ended {
    id: String,
    lease: i64,
    outcome: &'static str,
    error: Option<String>,
    log: Option<String>,
    replayed: u32,
    /// The attempt its end gave back (a suspension's): the task's count is
    /// one short of the attempt the execution ran as.
    given_back: u32,
}

impl Ended {
    /// An execution of task `id` under `lease`, its text kept escaped as
    /// the database keeps it.
    pub(super) fn new(
        id: &str,
        lease: i64,
        outcome: AttemptOutcome,
        error: Option<&str>,
        log: Option<&str>,
        replayed: u32,
    ) -> Self {
        Self {
            id: text_in(id).into_owned(),
            lease,
            outcome: outcome.as_str(),
            error: error.map(|e| text_in(e).into_owned()),
            log: log.map(|l| text_in(l).into_owned()),
            replayed,
            given_back: u32::from(outcome == AttemptOutcome::Suspended),
        }
    }
}

/// Records ended executions at their task's current attempt and lease.
/// An execution already recorded (a paced task polled again) is kept as
/// it was.
pub(super) async fn record(conn: &mut Connection, ended: Vec<Ended>, now: Millis) -> Result<()> {
    if ended.is_empty() {
        return Ok(());
    }
    // Each under the lease it ran with, which is still the task's.
    sqlx::query(sql(format!(
        "INSERT INTO attempts (task_id, lease_token, attempt, outcome, error, log, \
         started_at, ended_at, replayed) \
         SELECT t.id, t.lease_token, t.attempt + a.given_back, a.outcome, a.error, a.log, \
            t.claimed_at, $2, a.replayed \
         FROM (SELECT j.value->>'id' AS attempt_task, CAST(j.value->>'lease' AS BIGINT) AS lease, \
            j.value->>'outcome' AS outcome, \
            j.value->>'error' AS error, j.value->>'log' AS log, \
            CAST(j.value->>'replayed' AS BIGINT) AS replayed, \
            CAST(j.value->>'given_back' AS BIGINT) AS given_back FROM {}) AS a \
         JOIN tasks t ON t.id = a.attempt_task AND t.lease_token = a.lease WHERE TRUE \
         ON CONFLICT (task_id, lease_token) DO NOTHING",
        DIALECT.json_rows
    )))
    .bind(batch_json(&ended)?)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The executions the rows of `tasks` (as `t`) hold, read as rows of
/// `attempts` are (`task_id`, `lambda`, `attempt`, `lease_token`,
/// `outcome`, `error`, `log`, `started_at`, `ended_at`, `replayed`), for
/// the tasks that `{}` (a condition on `t`) chooses.
pub(super) fn final_attempts(condition: &str) -> String {
    format!(
        "SELECT t.id AS task_id, t.lambda, t.attempt, t.lease_token, \
         CASE WHEN t.status = {SUCCESS} THEN {success} ELSE {fatal} END AS outcome, \
         CASE WHEN t.status = {SUCCESS} THEN NULL ELSE t.last_error END AS error, \
         t.log, t.claimed_at AS started_at, t.finished_at AS ended_at, t.replayed \
         FROM tasks t WHERE t.status IN ({SUCCESS}, {FATAL_FAILURE}) AND ({condition}) \
         AND NOT EXISTS (SELECT 1 FROM attempts a \
            WHERE a.task_id = t.id AND a.lease_token = t.lease_token)",
        success = outcome::SUCCESS,
        fatal = outcome::FATAL,
    )
}
