//! Small helpers shared by the backends.

use std::time::Duration;

use waft_core::TaskStatus;

use crate::rows::RowExt;
use crate::{Millis, Result, ResultOutcome, StoreError};

/// Earliest and latest times a task may be scheduled at, around `now`:
/// a year back (clock skew, replays) and ten years ahead.
pub(crate) fn check_run_at(run_at: Millis, now: Millis) -> Result<()> {
    const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
    if run_at < now - YEAR_MS || run_at > now + 10 * YEAR_MS {
        return Err(StoreError::TimeOutOfRange { at: run_at, now });
    }
    Ok(())
}

/// A new task id: a ULID, sortable by creation time.
pub(crate) fn new_id() -> String {
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

/// What a result does to its task.
pub(crate) struct ResultPlan {
    pub(crate) status: TaskStatus,
    pub(crate) output: Option<Vec<u8>>,
    pub(crate) error: Option<String>,
    pub(crate) next_trigger_at: Option<Millis>,
    pub(crate) finished_at: Option<Millis>,
}

impl ResultPlan {
    /// Decides from the task's attempts and its lambda's backoff (the
    /// columns of the result query) what `outcome` makes of it.
    pub(crate) fn new(row: &impl RowExt, outcome: ResultOutcome, now: Millis) -> Result<Self> {
        let done = |status, output, error| ResultPlan {
            status,
            output,
            error,
            next_trigger_at: None,
            finished_at: Some(now),
        };
        Ok(match outcome {
            ResultOutcome::Success { output } => done(TaskStatus::Success, output, None),
            ResultOutcome::Fatal { error } => done(TaskStatus::FatalFailure, None, Some(error)),
            ResultOutcome::Retriable { error, retry_after } => {
                let attempt = row.int("attempt")?;
                if attempt >= row.int("max_attempts")? {
                    done(TaskStatus::Dead, None, Some(error))
                } else {
                    let delay = match retry_after {
                        Some(delay) => delay,
                        None => waft_core::Backoff {
                            base: Duration::from_millis(row.int("backoff_base_ms")?.max(0) as u64),
                            factor: row.real("backoff_factor")?,
                            max: Duration::from_millis(row.int("backoff_max_ms")?.max(0) as u64),
                        }
                        .delay(attempt.max(1) as u32, fastrand::f64()),
                    };
                    ResultPlan {
                        status: TaskStatus::RetriableFailure,
                        output: None,
                        error: Some(error),
                        next_trigger_at: Some(now.saturating_add(millis(delay))),
                        finished_at: None,
                    }
                }
            }
        })
    }
}
