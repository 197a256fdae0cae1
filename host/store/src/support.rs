//! Small helpers shared by the backends.

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

/// A new task id: a ULID, sortable by creation time.
pub(crate) fn new_id() -> String {
    ulid::Ulid::new().to_string()
}

pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
