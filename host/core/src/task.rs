//! Tasks: ids, states, names.
//!
//! The state machine is ATF's (see the design notes), and its table is
//! [`crate::machine`]: every state but the ended ones carries a trigger time
//! at which the Store Consumer looks at the task again, so no task can be
//! forgotten.

use std::fmt;
use std::str::FromStr;

/// Where a task is in its life.
///
/// | status | next trigger | meaning |
/// |---|---|---|
/// | `new` | due time | waits to be enqueued |
/// | `enqueued` | enqueued + enqueue timeout | on a queue; re-enqueued if lost |
/// | `claimed` | claimed + claim timeout | taken by a controller; re-enqueued if it dies |
/// | `processing` | heartbeat + heartbeat timeout | running; re-enqueued if the executor dies |
/// | `suspended` | wake time | a durable lambda waits with no instance held; resumed by replay |
/// | `retriable_failure` | backoff | waits for its next attempt |
/// | `success`, `fatal_failure`, `dead`, `dropped`, `cancelled` | none | terminal |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskStatus {
    New,
    Enqueued,
    Claimed,
    Processing,
    /// A durable lambda's execution ended in a wait (a long sleep): no
    /// instance, no lease, no attempt spent; due again when the wait is
    /// over, and resumed by replaying its journal.
    Suspended,
    RetriableFailure,
    Success,
    FatalFailure,
    /// Attempts exhausted: a dead letter, terminal until redriven.
    Dead,
    /// Ended by a `drop` gate on its lambda or collection.
    Dropped,
    Cancelled,
}

impl TaskStatus {
    /// Every status, in life order.
    pub const ALL: [TaskStatus; 11] = [
        TaskStatus::New,
        TaskStatus::Enqueued,
        TaskStatus::Claimed,
        TaskStatus::Processing,
        TaskStatus::Suspended,
        TaskStatus::RetriableFailure,
        TaskStatus::Success,
        TaskStatus::FatalFailure,
        TaskStatus::Dead,
        TaskStatus::Dropped,
        TaskStatus::Cancelled,
    ];

    /// Every status's name, for messages (a test holds it to [`Self::ALL`]).
    pub const NAMES: &str = "one of new, enqueued, claimed, processing, suspended, \
                             retriable_failure, success, fatal_failure, dead, dropped, cancelled";

    /// The status's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::New => "new",
            TaskStatus::Enqueued => "enqueued",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Processing => "processing",
            TaskStatus::Suspended => "suspended",
            TaskStatus::RetriableFailure => "retriable_failure",
            TaskStatus::Success => "success",
            TaskStatus::FatalFailure => "fatal_failure",
            TaskStatus::Dead => "dead",
            TaskStatus::Dropped => "dropped",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// The status's place in [`TaskStatus::ALL`].
    pub const fn index(self) -> usize {
        match self {
            TaskStatus::New => 0,
            TaskStatus::Enqueued => 1,
            TaskStatus::Claimed => 2,
            TaskStatus::Processing => 3,
            TaskStatus::Suspended => 4,
            TaskStatus::RetriableFailure => 5,
            TaskStatus::Success => 6,
            TaskStatus::FatalFailure => 7,
            TaskStatus::Dead => 8,
            TaskStatus::Dropped => 9,
            TaskStatus::Cancelled => 10,
        }
    }

    /// Whether the task's life is over (ATF's `completed` assoc status):
    /// [`machine::ENDED`](crate::machine::ENDED), which the state table
    /// defines.
    pub const fn is_terminal(self) -> bool {
        crate::machine::ENDED.contains(self)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| NameError {
                what: "task status",
                name: s.to_owned(),
                rule: TaskStatus::NAMES,
            })
    }
}

/// A name that breaks the naming rule of lambdas and collections.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {name:?}: {rule}")]
pub struct NameError {
    what: &'static str,
    name: String,
    rule: &'static str,
}

const NAME_RULE: &str = "use 1 to 63 characters from a-z, 0-9, '-', '_' and '.', starting with a \
                         letter or digit";

fn check_name(what: &'static str, name: &str) -> Result<(), NameError> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|&b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        });
    if ok {
        Ok(())
    } else {
        Err(NameError {
            what,
            name: name.to_owned(),
            rule: NAME_RULE,
        })
    }
}

/// Checks a lambda name.
///
/// ```
/// assert!(waft_core::task::check_lambda_name("send-email").is_ok());
/// assert!(waft_core::task::check_lambda_name("Send Email").is_err());
/// ```
pub fn check_lambda_name(name: &str) -> Result<(), NameError> {
    check_name("lambda name", name)
}

/// Checks a collection name.
///
/// ```
/// assert!(waft_core::task::check_collection_name("password-reset").is_ok());
/// assert!(waft_core::task::check_collection_name("").is_err());
/// ```
pub fn check_collection_name(name: &str) -> Result<(), NameError> {
    check_name("collection name", name)
}

/// Checks that a payload its client declared JSON is JSON; the error names
/// where it is not (`expected value at line 1 column 2`).
pub fn check_json_payload(payload: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<serde::de::IgnoredAny>(payload)
        .map(|_| ())
        .map_err(|error| format!("the payload is not JSON: {error}"))
}

/// The collection of tasks scheduled without one.
pub const DEFAULT_COLLECTION: &str = "default";

/// The most bytes a task's key may have.
pub const MAX_KEY_BYTES: usize = 255;

/// Checks a task's key: any text of 1 to [`MAX_KEY_BYTES`] bytes (a
/// customer's id, an e-mail address, a URL).
///
/// ```
/// assert!(waft_core::task::check_key("customer-42").is_ok());
/// assert!(waft_core::task::check_key("").is_err());
/// ```
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "a task's key must be 1 to {MAX_KEY_BYTES} bytes (this one has {})",
            key.len()
        ));
    }
    Ok(())
}

/// The longest debounce window: a day.
pub const MAX_DEBOUNCE: std::time::Duration = std::time::Duration::from_secs(86_400);

/// How many windows a debounced task waits at most after the first task
/// it collapsed: a steady stream of tasks of its key postpones it no
/// further.
pub const DEBOUNCE_WINDOWS_AT_MOST: u32 = 10;

/// Checks a debounce window: from 1 ms to [`MAX_DEBOUNCE`].
///
/// ```
/// use std::time::Duration;
/// assert!(waft_core::task::check_debounce(Duration::from_secs(5)).is_ok());
/// assert!(waft_core::task::check_debounce(Duration::ZERO).is_err());
/// ```
pub fn check_debounce(window: std::time::Duration) -> Result<(), String> {
    if window < std::time::Duration::from_millis(1) || window > MAX_DEBOUNCE {
        return Err(format!(
            "a debounce window must be from 1ms to 1day (this one is {})",
            humantime::format_duration(window)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_names() {
        for status in TaskStatus::ALL {
            assert_eq!(status.as_str().parse::<TaskStatus>().unwrap(), status);
        }
        assert!("done".parse::<TaskStatus>().is_err());
        for (index, status) in TaskStatus::ALL.into_iter().enumerate() {
            assert_eq!(status.index(), index);
        }
        let names: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(TaskStatus::NAMES, format!("one of {}", names.join(", ")));
    }

    #[test]
    fn names_follow_the_rule() {
        for good in ["a", "send-email", "v1.2_x", &"a".repeat(63)] {
            check_lambda_name(good).unwrap();
        }
        for bad in ["", "-a", "A", "a b", "é", &"a".repeat(64), "a/b"] {
            let error = check_collection_name(bad).unwrap_err();
            assert!(
                error.to_string().contains("invalid collection name"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_payload_declared_json_must_be_json() {
        for good in [
            &b"{}"[..],
            b"[1, 2]",
            b"\"text\"",
            b" null ",
            "{\"é\": \"\\u0000\"}".as_bytes(),
        ] {
            check_json_payload(good).unwrap();
        }
        for (bad, says) in [
            (&b""[..], "EOF while parsing a value at line 1 column 0"),
            (
                b"{\"name\": ",
                "EOF while parsing a value at line 1 column 9",
            ),
            (b"{} {}", "trailing characters at line 1 column 4"),
            (b"\xff", "expected value at line 1 column 1"),
        ] {
            let error = check_json_payload(bad).unwrap_err();
            assert_eq!(error, format!("the payload is not JSON: {says}"));
        }
    }
}
