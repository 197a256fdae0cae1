//! Small helpers shared by the backends.

use std::time::Duration;

use waft_core::TaskStatus;

use crate::rows::RowExt;
use crate::{Millis, Result, StoreError};

/// Earliest and latest times a task may be scheduled at, around `now`:
/// a year back (clock skew, replays) and ten years ahead.
pub(crate) fn check_run_at(run_at: Millis, now: Millis) -> Result<()> {
    const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
    if run_at < now - YEAR_MS || run_at > now + 10 * YEAR_MS {
        return Err(StoreError::TimeOutOfRange { at: run_at, now });
    }
    Ok(())
}

/// A new id for a task or schedule: a ULID, sortable by creation time.
pub fn new_id() -> String {
    ulid::Ulid::new().to_string()
}

pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// SQL assembled from this module's constant fragments (column lists, the
/// gate expression) and never from input: input always goes through binds.
pub(crate) fn sql(text: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(text)
}

/// What a retriable failure does to its task: another attempt after a
/// delay, or `dead` when the attempts are used up.
pub(crate) struct RetryPlan {
    pub(crate) status: TaskStatus,
    pub(crate) next_trigger_at: Option<Millis>,
    pub(crate) finished_at: Option<Millis>,
}

impl RetryPlan {
    /// Decides from the task's attempts and its lambda's backoff (the
    /// columns of the result query).
    pub(crate) fn new(
        row: &impl RowExt,
        retry_after: Option<Duration>,
        now: Millis,
    ) -> Result<Self> {
        let attempt = row.int("attempt")?;
        if attempt >= row.int("max_attempts")? {
            return Ok(Self {
                status: TaskStatus::Dead,
                next_trigger_at: None,
                finished_at: Some(now),
            });
        }
        let delay = match retry_after {
            Some(delay) => delay,
            None => waft_core::Backoff {
                base: Duration::from_millis(row.int("backoff_base_ms")?.max(0) as u64),
                factor: row.real("backoff_factor")?,
                max: Duration::from_millis(row.int("backoff_max_ms")?.max(0) as u64),
            }
            .delay(
                u32::try_from(attempt.max(1)).unwrap_or(u32::MAX),
                fastrand::f64(),
            ),
        };
        Ok(Self {
            status: TaskStatus::RetriableFailure,
            next_trigger_at: Some(now.saturating_add(millis(delay))),
            finished_at: None,
        })
    }
}
