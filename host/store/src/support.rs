//! Small helpers shared by the backends.

use std::borrow::Cow;
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

/// What the gates covering a task do to it when it comes due or is
/// claimed. The SQL reads the strongest gate as a code (see
/// `GATE_OF_TASK`: 2 drop, 1 pause, 0 or none open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateEffect {
    /// No gate closed: the task goes on.
    Open,
    /// Paused: the task waits in the store until the gate opens.
    Hold,
    /// Dropped: the task ends as `dropped`.
    Drop,
}

impl GateEffect {
    pub(crate) fn from_code(code: Option<i64>) -> Self {
        match code {
            Some(2..) => GateEffect::Drop,
            Some(1) => GateEffect::Hold,
            _ => GateEffect::Open,
        }
    }
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
        let delay = delay.min(waft_core::MAX_RETRY_DELAY);
        Ok(Self {
            status: TaskStatus::RetriableFailure,
            next_trigger_at: Some(now.saturating_add(millis(delay))),
            finished_at: None,
        })
    }
}

/// Free text as the store keeps it. Postgres's `text` and `jsonb` cannot
/// hold NUL, which a Rust string (a lambda's log, an error, a progress note,
/// an idempotency key) may: NUL is kept as `\0` and a backslash as `\\`,
/// on both backends alike, and [`text_out`] undoes it. Lookups go through
/// it too, so a string that could never be stored finds nothing instead of
/// failing.
pub(crate) fn text_in(text: &str) -> Cow<'_, str> {
    if !text.contains(['\0', '\\']) {
        return Cow::Borrowed(text);
    }
    let mut kept = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\0' => kept.push_str("\\0"),
            '\\' => kept.push_str("\\\\"),
            c => kept.push(c),
        }
    }
    Cow::Owned(kept)
}

/// The text [`text_in`] kept, as it was given.
pub(crate) fn text_out(kept: String) -> String {
    if !kept.contains('\\') {
        return kept;
    }
    let mut text = String::with_capacity(kept.len());
    let mut chars = kept.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('0')) => {
                chars.next();
                text.push('\0');
            }
            ('\\', Some('\\')) => {
                chars.next();
                text.push('\\');
            }
            (c, _) => text.push(c),
        }
    }
    text
}

/// The idempotency-key prefixes the store writes itself: a continuation's
/// (`then:TASK`), a periodic occurrence's (`schedule:ID:AT`) and a child's
/// (`child:PARENT:N`). A client using one could pre-empt a continuation or
/// suppress an occurrence, so a client's key may not start with one, but a
/// running parent's child may use its own parent's prefix.
pub(crate) fn check_client_key(
    key: &str,
    parent: Option<&str>,
    parent_lease: Option<i64>,
) -> Result<()> {
    let own_child = match (parent, parent_lease) {
        (Some(parent), Some(_)) => key
            .strip_prefix("child:")
            .and_then(|rest| rest.strip_prefix(parent))
            .is_some_and(|rest| rest.starts_with(':')),
        _ => false,
    };
    let reserved = ["then:", "schedule:", "child:"]
        .into_iter()
        .find(|prefix| key.starts_with(prefix));
    match reserved {
        Some(prefix) if !own_child => Err(StoreError::Invalid(format!(
            "idempotency keys starting with {prefix:?} are reserved for the keys Waft makes \
             itself; choose another key"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_text_round_trips_and_holds_no_nul() {
        for text in [
            "",
            "plain",
            "\0",
            "\\",
            "\\0",
            "a\\\0b\\\\0\0",
            "\\x",
            "é🦀\0",
        ] {
            let kept = text_in(text);
            assert!(!kept.contains('\0'), "{kept:?}");
            assert_eq!(text_out(kept.into_owned()), text);
        }
        assert!(matches!(text_in("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn reserved_keys_are_refused_except_a_parent_for_its_children() {
        assert!(check_client_key("order-1", None, None).is_ok());
        assert!(check_client_key("then:x", None, None).is_err());
        assert!(check_client_key("schedule:s:1", None, None).is_err());
        assert!(check_client_key("child:p:0", None, None).is_err());
        assert!(check_client_key("child:p:0", Some("p"), None).is_err());
        assert!(check_client_key("child:p:0", Some("p"), Some(3)).is_ok());
        assert!(check_client_key("child:pq:0", Some("p"), Some(3)).is_err());
        assert!(check_client_key("then:p", Some("p"), Some(3)).is_err());
    }

    #[test]
    fn a_retry_delay_is_cut_to_the_bound() {
        struct Row;
        impl RowExt for Row {
            fn int(&self, column: &str) -> Result<i64> {
                Ok(match column {
                    "attempt" => 1,
                    "max_attempts" => 5,
                    _ => 1000,
                })
            }
            fn opt_int(&self, _: &str) -> Result<Option<i64>> {
                Ok(None)
            }
            fn real(&self, _: &str) -> Result<f64> {
                Ok(2.0)
            }
            fn opt_real(&self, _: &str) -> Result<Option<f64>> {
                Ok(None)
            }
            fn text(&self, _: &str) -> Result<String> {
                Ok(String::new())
            }
            fn opt_text(&self, _: &str) -> Result<Option<String>> {
                Ok(None)
            }
            fn bytes(&self, _: &str) -> Result<Vec<u8>> {
                Ok(Vec::new())
            }
            fn opt_bytes(&self, _: &str) -> Result<Option<Vec<u8>>> {
                Ok(None)
            }
            fn flag(&self, _: &str) -> Result<bool> {
                Ok(false)
            }
        }
        let plan = RetryPlan::new(&Row, Some(Duration::MAX), 0).unwrap();
        assert_eq!(
            plan.next_trigger_at,
            Some(millis(waft_core::MAX_RETRY_DELAY))
        );
    }
}
