//! The attempts table: every execution that ended, recorded once at its
//! task's attempt and lease.

use serde::Serialize;

use super::{Connection, DIALECT};
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
