//! Small helpers of the backends' SQL: ids, times, kept text.

use std::borrow::Cow;

/// A new id for a token or schedule: a ULID, sortable by creation time.
pub fn new_id() -> String {
    ulid::Ulid::new().to_string()
}

/// A new task's id: a ULID whose time is the task's `created_at` (the
/// store's clock, not the host's), so a range of creation times is a range
/// of ids and lists by time read one index range.
pub(crate) fn task_id(created_at: crate::Millis) -> String {
    ulid_at(created_at, fastrand::u128(..))
}

/// The least id a task created at `at` can have.
pub(crate) fn least_task_id(at: crate::Millis) -> String {
    ulid_at(at, 0)
}

/// A ULID of time `at`, clamped to the 48 bits a ULID's time has.
fn ulid_at(at: crate::Millis, random: u128) -> String {
    let at = u64::try_from(at).unwrap_or(0).min((1 << 48) - 1);
    ulid::Ulid::from_parts(at, random).to_string()
}

/// A writing call's work: its statements on a connection inside a
/// transaction that the backend begins, and commits once the work is done.
pub(crate) type Work<'c, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = crate::Result<T>> + Send + 'c>>;

pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// SQL assembled from this module's constant fragments (column lists, the
/// gate expression) and never from input: input always goes through binds.
pub(crate) fn sql(text: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(text)
}

/// A batch as the one JSON array parameter its statement joins to `tasks`
/// (see `sql/mod.rs`): each row a struct whose field names are the keys the
/// statement reads.
pub(crate) fn batch_json<T: serde::Serialize>(rows: &[T]) -> crate::Result<String> {
    serde_json::to_string(rows).map_err(|e| crate::StoreError::Corrupt(format!("a batch: {e}")))
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
}
