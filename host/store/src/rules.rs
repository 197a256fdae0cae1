//! The store's decisions that need no database, in plain Rust: whether a
//! new task is admitted (and how it is stored), what a retriable failure
//! does to its task, what a gate does to a task, which idempotency keys are
//! Waft's own, whether a journal write is well formed. The backends' SQL gathers the facts and applies the verdict;
//! the rules themselves are unit-tested here.

use std::time::Duration;

use waft_core::limits::{MAX_JOURNAL_ANSWER, MAX_JOURNAL_ENTRIES};
use waft_core::task::{DEFAULT_COLLECTION, check_collection_name, check_lambda_name};
use waft_core::{Backoff, TaskStatus};

use crate::support::millis;
use crate::{JournalPart, JournalWrite, Lambda, Millis, NewTask, Result, StoreError};

/// Who asks for an insert: a client, whose idempotency keys may not use the
/// prefixes the store writes itself, or the store (a continuation, a
/// periodic occurrence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Client,
    Store,
}

/// How an admitted task is stored: its defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub(crate) collection: String,
    pub(crate) priority: u8,
    pub(crate) run_at: Millis,
}

/// Checks a new task against its lambda (at its current version): names,
/// priority, payload size, time, idempotency key. What needs the database
/// (a pinned version, a parent's lease, a continuation's lambda) is checked
/// by the insert itself.
pub(crate) fn admit(
    task: &NewTask,
    lambda: &Lambda,
    origin: Origin,
    now: Millis,
) -> Result<Admitted> {
    check_lambda_name(&task.lambda)?;
    let config = &lambda.config;
    let collection = task
        .collection
        .clone()
        .unwrap_or_else(|| DEFAULT_COLLECTION.to_owned());
    check_collection_name(&collection)?;
    let priority = task.priority.unwrap_or(config.default_priority);
    if priority >= config.priorities {
        return Err(StoreError::InvalidPriority {
            lambda: lambda.name.clone(),
            priority,
            max: config.priorities - 1,
        });
    }
    if task.payload.len() as u64 > config.max_payload.bytes() {
        return Err(StoreError::PayloadTooLarge {
            lambda: lambda.name.clone(),
            size: task.payload.len(),
            max: config.max_payload.bytes(),
        });
    }
    let run_at = task.run_at.unwrap_or(now);
    check_run_at(run_at, now)?;
    if let Some(key) = &task.idempotency_key {
        if key.is_empty() || key.len() > 255 {
            return Err(StoreError::Invalid(
                "an idempotency key must be 1 to 255 bytes".into(),
            ));
        }
        if origin == Origin::Client {
            check_client_key(key, task.parent_id.as_deref(), task.parent_lease)?;
        }
    }
    if let Some(key) = &task.key {
        waft_core::task::check_key(key).map_err(StoreError::Invalid)?;
    }
    if let Some(window) = task.debounce {
        check_debounce(task, window)?;
    }
    if let Some(id) = &task.id {
        check_chosen_id(id, task.parent_id.as_deref(), task.parent_lease)?;
    }
    Ok(Admitted {
        collection,
        priority,
        run_at,
    })
}

/// A debounce needs a key to collapse by, and leaves the task's time to
/// its window: no run time, no idempotency key, no chosen id.
fn check_debounce(task: &NewTask, window: std::time::Duration) -> Result<()> {
    waft_core::task::check_debounce(window).map_err(StoreError::Invalid)?;
    let refused = |why: &str| Err(StoreError::Invalid(format!("a debounced task {why}")));
    if task.key.is_none() {
        return refused("needs a key: its key's debounced tasks collapse into one");
    }
    if task.run_at.is_some() {
        return refused("runs when its window has passed: give it no run time");
    }
    if task.idempotency_key.is_some() {
        return refused("cannot have an idempotency key: its key collapses it already");
    }
    if task.id.is_some() || task.parent_lease.is_some() || task.parent_id.is_some() {
        return refused("cannot be a child: collapsed, it would answer another parent's");
    }
    Ok(())
}

/// Earliest and latest times a task may be scheduled at, around `now`:
/// a year back (clock skew, replays) and ten years ahead.
fn check_run_at(run_at: Millis, now: Millis) -> Result<()> {
    const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
    if run_at < now - YEAR_MS || run_at > now + 10 * YEAR_MS {
        return Err(StoreError::TimeOutOfRange { at: run_at, now });
    }
    Ok(())
}

/// The idempotency-key prefixes Waft writes itself: a continuation's
/// (`then:TASK`), a periodic occurrence's (`cron:CRON:AT`), a child's
/// (`child:PARENT:N`), and `schedule:`, which occurrences' keys began with
/// before periodic schedules were named crons (a database upgraded keeps
/// some). A client using one could pre-empt a continuation or
/// suppress an occurrence, so a client's key may not start with one, but a
/// running parent's child may use its own parent's prefix. That needs the
/// parent's live lease, which the insert checks; the lease counts claims and
/// is no secret, so who may send one at all is decided before the store
/// (the Frontend's authorization: only the installation's own processes).
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
    let reserved = ["then:", "cron:", "schedule:", "child:"]
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

/// An id chosen by the task's parent execution: only a running parent (its
/// lease, which the insert checks) may choose its child's id, and only a
/// ULID spelt as Waft spells ids, so ids keep one form and their order.
pub(crate) fn check_chosen_id(
    id: &str,
    parent: Option<&str>,
    parent_lease: Option<i64>,
) -> Result<()> {
    if parent.is_none() || parent_lease.is_none() {
        return Err(StoreError::Invalid(
            "only a running parent's child may come with its id".into(),
        ));
    }
    match ulid::Ulid::from_string(id) {
        Ok(ulid) if ulid.to_string() == id => Ok(()),
        _ => Err(StoreError::Invalid(format!(
            "a task id is a ULID (26 characters of Crockford's base 32, upper case), not {id:?}"
        ))),
    }
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryPlan {
    pub(crate) status: TaskStatus,
    pub(crate) next_trigger_at: Option<Millis>,
    pub(crate) finished_at: Option<Millis>,
}

impl RetryPlan {
    /// Decides from the attempts made (the failed one included) and
    /// allowed, the lambda's backoff, and the lambda's own delay if it
    /// asked for one; `jitter` in `0..1` spreads the backoff. Every delay
    /// is cut to [`waft_core::MAX_RETRY_DELAY`].
    pub(crate) fn decide(
        attempt: i64,
        max_attempts: i64,
        backoff: &Backoff,
        retry_after: Option<Duration>,
        now: Millis,
        jitter: f64,
    ) -> Self {
        if attempt >= max_attempts {
            return Self {
                status: TaskStatus::Dead,
                next_trigger_at: None,
                finished_at: Some(now),
            };
        }
        let delay = retry_after
            .unwrap_or_else(|| {
                backoff.delay(u32::try_from(attempt.max(1)).unwrap_or(u32::MAX), jitter)
            })
            .min(waft_core::MAX_RETRY_DELAY);
        Self {
            status: TaskStatus::RetriableFailure,
            next_trigger_at: Some(now.saturating_add(millis(delay))),
            finished_at: None,
        }
    }
}

/// Checks the shape of a write to task `id`'s journal: its entries are
/// numbered on from `from` without a gap, the journal stays within
/// [`MAX_JOURNAL_ENTRIES`] and each answer within [`MAX_JOURNAL_ANSWER`].
/// The runtime makes these writes, so one that fails is a bug of the host,
/// never the lambda's: it is refused whole, as invalid. (That the write
/// starts within the journal, leaving no hole, needs the task's row: the
/// write's statement checks it.)
pub(crate) fn check_journal_write(id: &str, write: &JournalWrite) -> Result<()> {
    let invalid = |why: String| {
        Err(StoreError::Invalid(format!(
            "a journal write of task {id} {why}; nothing was written"
        )))
    };
    let end = u64::from(write.from) + write.entries.len() as u64;
    if end > u64::from(MAX_JOURNAL_ENTRIES) {
        return invalid(format!(
            "would make the journal {end} entries long, over the limit of {MAX_JOURNAL_ENTRIES}"
        ));
    }
    for (seq, entry) in (write.from..).zip(&write.entries) {
        if entry.seq != seq {
            return invalid(format!("numbers entry {seq} as {}", entry.seq));
        }
        if entry.answer.len() > MAX_JOURNAL_ANSWER {
            return invalid(format!(
                "holds an answer of {} bytes at entry {seq}, over the limit of {MAX_JOURNAL_ANSWER}",
                entry.answer.len()
            ));
        }
    }
    Ok(())
}

/// Checks where a part of a journal write says it stands: within its
/// write (its `from` at or past the write's `start`), and, unless it is the
/// last, holding entries (a cut is one message).
pub(crate) fn check_journal_part(id: &str, write: &JournalWrite, part: &JournalPart) -> Result<()> {
    let invalid = |why: String| {
        Err(StoreError::Invalid(format!(
            "a journal write of task {id} {why}; nothing was written"
        )))
    };
    if part.start > write.from {
        return invalid(format!(
            "has a part from entry {} of a write said to start later, at {}",
            write.from, part.start
        ));
    }
    if part.more && write.entries.is_empty() {
        return invalid("has a part other than its last without entries".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use waft_core::{ByteSize, LambdaConfig};

    use super::*;

    const NOW: Millis = 1_800_000_000_000;

    fn lambda() -> Lambda {
        Lambda {
            name: "mail".into(),
            version: 1,
            digest: "d".into(),
            config: LambdaConfig {
                priorities: 3,
                default_priority: 1,
                max_payload: ByteSize::b(8),
                ..LambdaConfig::default()
            },
            created_at: NOW,
        }
    }

    fn task() -> NewTask {
        NewTask {
            lambda: "mail".into(),
            ..NewTask::default()
        }
    }

    #[test]
    fn an_admitted_task_takes_its_lambdas_defaults() {
        assert_eq!(
            admit(&task(), &lambda(), Origin::Client, NOW).unwrap(),
            Admitted {
                collection: "default".into(),
                priority: 1,
                run_at: NOW,
            }
        );
    }

    #[test]
    fn each_bad_field_is_refused_precisely() {
        let refused = |task: NewTask| admit(&task, &lambda(), Origin::Client, NOW).unwrap_err();
        assert!(matches!(
            refused(NewTask {
                collection: Some("Bad Name".into()),
                ..task()
            }),
            StoreError::InvalidName(_)
        ));
        assert!(matches!(
            refused(NewTask {
                priority: Some(3),
                ..task()
            }),
            StoreError::InvalidPriority { max: 2, .. }
        ));
        assert!(matches!(
            refused(NewTask {
                payload: vec![0; 9],
                ..task()
            }),
            StoreError::PayloadTooLarge {
                size: 9,
                max: 8,
                ..
            }
        ));
        assert!(matches!(
            refused(NewTask {
                run_at: Some(NOW + 11 * 365 * 24 * 3600 * 1000),
                ..task()
            }),
            StoreError::TimeOutOfRange { .. }
        ));
        for key in [String::new(), "k".repeat(256), "then:x".into()] {
            assert!(matches!(
                refused(NewTask {
                    idempotency_key: Some(key),
                    ..task()
                }),
                StoreError::Invalid(_)
            ));
        }
    }

    #[test]
    fn the_store_may_use_its_own_keys() {
        let continuation = NewTask {
            idempotency_key: Some("then:01ABC".into()),
            ..task()
        };
        admit(&continuation, &lambda(), Origin::Store, NOW).unwrap();
    }

    #[test]
    fn reserved_keys_are_refused_except_a_parent_for_its_children() {
        assert!(check_client_key("order-1", None, None).is_ok());
        assert!(check_client_key("then:x", None, None).is_err());
        assert!(check_client_key("cron:s:1", None, None).is_err());
        assert!(check_client_key("schedule:s:1", None, None).is_err());
        assert!(check_client_key("child:p:0", None, None).is_err());
        assert!(check_client_key("child:p:0", Some("p"), None).is_err());
        assert!(check_client_key("child:p:0", Some("p"), Some(3)).is_ok());
        assert!(check_client_key("child:pq:0", Some("p"), Some(3)).is_err());
        assert!(check_client_key("then:p", Some("p"), Some(3)).is_err());
    }

    #[test]
    fn the_strongest_gate_decides() {
        assert_eq!(GateEffect::from_code(None), GateEffect::Open);
        assert_eq!(GateEffect::from_code(Some(0)), GateEffect::Open);
        assert_eq!(GateEffect::from_code(Some(1)), GateEffect::Hold);
        assert_eq!(GateEffect::from_code(Some(2)), GateEffect::Drop);
    }

    #[test]
    fn a_retry_backs_off_until_the_last_attempt_is_dead() {
        let backoff = Backoff {
            base: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(60),
        };
        let plan = RetryPlan::decide(2, 3, &backoff, None, NOW, 1.0);
        assert_eq!(plan.status, TaskStatus::RetriableFailure);
        let delay = plan.next_trigger_at.unwrap() - NOW;
        assert!((1..=60_000).contains(&delay), "{delay}");
        let asked = RetryPlan::decide(2, 3, &backoff, Some(Duration::from_millis(250)), NOW, 0.5);
        assert_eq!(asked.next_trigger_at, Some(NOW + 250));
        let last = RetryPlan::decide(3, 3, &backoff, None, NOW, 0.5);
        assert_eq!(
            last,
            RetryPlan {
                status: TaskStatus::Dead,
                next_trigger_at: None,
                finished_at: Some(NOW),
            }
        );
    }

    #[test]
    fn a_retry_delay_is_cut_to_the_bound() {
        let plan = RetryPlan::decide(1, 5, &Backoff::default(), Some(Duration::MAX), 0, 0.5);
        assert_eq!(
            plan.next_trigger_at,
            Some(millis(waft_core::MAX_RETRY_DELAY))
        );
    }

    fn entries(seqs: impl IntoIterator<Item = u32>) -> Vec<crate::JournalEntry> {
        seqs.into_iter()
            .map(|seq| crate::JournalEntry {
                seq,
                call: "wasi:random/random.get-random-u64".into(),
                digest: vec![1],
                answer: vec![2],
                summary: String::new(),
                outside: false,
                attempt: 1,
                at: NOW,
                took_us: 3,
            })
            .collect()
    }

    #[test]
    fn a_journal_write_runs_on_from_its_start() {
        let write = |from, seqs| JournalWrite {
            from,
            entries: entries(seqs),
        };
        assert!(check_journal_write("t", &write(0, vec![0, 1, 2])).is_ok());
        assert!(check_journal_write("t", &write(4, vec![4, 5])).is_ok());
        // A cut: no entries, from anywhere.
        assert!(check_journal_write("t", &write(7, vec![])).is_ok());
        for bad in [
            write(0, vec![1]),
            write(2, vec![2, 4]),
            write(3, vec![3, 3]),
        ] {
            let refused = check_journal_write("t", &bad);
            assert!(matches!(refused, Err(StoreError::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_journal_write_keeps_to_the_limits() {
        let at_limit = JournalWrite {
            from: MAX_JOURNAL_ENTRIES - 1,
            entries: entries([MAX_JOURNAL_ENTRIES - 1]),
        };
        assert!(check_journal_write("t", &at_limit).is_ok());
        let over = JournalWrite {
            from: MAX_JOURNAL_ENTRIES,
            entries: entries([MAX_JOURNAL_ENTRIES]),
        };
        assert!(check_journal_write("t", &over).is_err());
        let far = JournalWrite {
            from: u32::MAX,
            entries: entries([u32::MAX]),
        };
        assert!(check_journal_write("t", &far).is_err());
        let mut big = entries([0]);
        big[0].answer = vec![0; MAX_JOURNAL_ANSWER + 1];
        let big = JournalWrite {
            from: 0,
            entries: big,
        };
        assert!(check_journal_write("t", &big).is_err());
    }
}
