//! What operators and schedules do to tasks: gates, dead-letter redrives
//! and purges, and periodic schedules.

use super::Millis;

/// Whether a gate lets tasks through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    Open,
    /// Tasks wait in the store; running ones finish.
    Paused,
    /// Tasks end as `dropped` when they come due.
    Dropped,
}

impl GateState {
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::Open => "open",
            GateState::Paused => "paused",
            GateState::Dropped => "dropped",
        }
    }
}

/// A gate on a lambda, or on one collection of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub lambda: String,
    /// `None`: the whole lambda.
    pub collection: Option<String>,
    pub state: GateState,
    pub updated_at: Millis,
}

/// Sets a gate; opening releases the tasks it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSet {
    pub lambda: String,
    pub collection: Option<String>,
    pub state: GateState,
    pub now: Millis,
}

/// Which dead letters to redrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadSelector {
    /// These tasks; every one must be dead, or nothing is redriven.
    Ids(Vec<String>),
    /// Every dead task of a lambda (and collection).
    Filter {
        lambda: String,
        collection: Option<String>,
    },
}

/// Deletes dead letters for good, with their attempts, logs and journals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadPurge {
    pub selector: DeadSelector,
    /// The most a filter deletes in one call (the ids are deleted all).
    pub limit: u32,
}

/// Gives dead tasks a fresh attempt budget and makes them due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadRedrive {
    pub selector: DeadSelector,
    /// Pin the tasks to this version of their lambda (its attempt budget
    /// too); the current version when absent. A version discards the
    /// tasks' journals, as `fresh` does.
    pub version: Option<u32>,
    /// Discard the tasks' journals: they start afresh instead of replaying
    /// their earlier executions.
    pub fresh: bool,
    pub now: Millis,
}

/// A periodic schedule: one task per occurrence.
#[derive(Debug, Clone, PartialEq)]
pub struct Cron {
    pub id: String,
    pub lambda: String,
    /// The cron expression, as given; the store does not parse it.
    pub cron: String,
    pub timezone: String,
    pub payload: Vec<u8>,
    pub collection: Option<String>,
    /// The key of the tasks it makes.
    pub key: Option<String>,
    pub priority: Option<u8>,
    /// After downtime: run every missed occurrence (true), or only the most
    /// recent one (false).
    pub catch_up: bool,
    /// The next occurrence not yet materialised.
    pub next_at: Millis,
    pub created_at: Millis,
}

/// Materialises one occurrence of a schedule, exactly once: succeeds only if
/// the schedule's next occurrence is still `expected` (as the caller read
/// it), and moves it to `next_at` in the same transaction as the insert of
/// the task for `occurrence`. The two differ when missed occurrences are
/// skipped: `expected` is the oldest missed, `occurrence` the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronMaterialize {
    pub cron_id: String,
    pub expected: Millis,
    pub occurrence: Millis,
    pub next_at: Millis,
    pub now: Millis,
}

/// What materialising an occurrence did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Materialized {
    /// The occurrence's task, created now.
    Created(String),
    /// Another consumer materialised it first.
    AlreadyDone,
    /// The task was refused (its lambda's settings changed since the
    /// schedule was made: a smaller payload limit, fewer priorities); the
    /// occurrence is skipped and the schedule moved on. Why it was refused.
    Skipped(String),
}

impl Materialized {
    /// The task created now, if one was.
    pub fn created(self) -> Option<String> {
        match self {
            Materialized::Created(id) => Some(id),
            Materialized::AlreadyDone | Materialized::Skipped(_) => None,
        }
    }
}
