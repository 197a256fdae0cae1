//! Tasks as stored and as asked for: a task, a new one, the filters of a
//! list or a count, and the executions it had.

use super::Millis;
use crate::{TaskStatus, TraceContext};

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub lambda: String,
    pub collection: String,
    pub priority: u8,
    pub payload: Vec<u8>,
    pub status: TaskStatus,
    /// Executions started so far (the running one included).
    pub attempt: u32,
    pub max_attempts: u32,
    /// When the client wanted the task to run.
    pub scheduled_at: Millis,
    /// When the Store Consumer looks at the task next; `None` once terminal
    /// or while held by a paused gate.
    pub next_trigger_at: Option<Millis>,
    /// Held back by a paused gate; released when the gate opens.
    pub held: bool,
    /// Waits for a task of its key to land: as many are in flight as its
    /// lambda's concurrency per key allows (or, when `awaits_turn`, as
    /// many wait in the queue as its key's turns allow).
    pub parked: bool,
    /// Parked for its key's turn: its lambda is fair between keys, and as
    /// many of its key's tasks wait in the queue as the key's weight
    /// allows.
    pub awaits_turn: bool,
    /// Waits for its slot of its lambda's scheduling quota (until
    /// `next_trigger_at`).
    pub paced: bool,
    /// Was given its slot of its key's rate: while not `paced`, it waits
    /// for that slot (until `next_trigger_at`).
    pub key_paced: bool,
    /// Scheduled with a debounce: until it is enqueued, later debounced
    /// tasks of its key collapse into it.
    pub debounced: bool,
    pub enqueue_token: i64,
    pub lease_token: i64,
    pub created_at: Millis,
    pub enqueued_at: Option<Millis>,
    pub claimed_at: Option<Millis>,
    pub heartbeat_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// The latest progress note of a heartbeat.
    pub progress: Option<String>,
    pub last_error: Option<String>,
    /// What the last execution logged, one record a line.
    pub log: Option<String>,
    pub output: Option<Vec<u8>>,
    pub parent_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// The task's key within its lambda (a customer, an account, a
    /// document): what the lambda's limits per key count by.
    pub key: Option<String>,
    /// The periodic schedule that created the task, if any.
    pub cron_id: Option<String>,
    /// The lambda version the task is pinned to; `None` runs the version
    /// current when it is claimed.
    pub version: Option<u32>,
    /// The task created with this one's output when it succeeds.
    pub continuation: Option<Continuation>,
    /// The signal a suspended task waits for (its wait's end is
    /// `next_trigger_at`); `None` for any other task, and for one suspended
    /// in a sleep.
    pub waiting_for_signal: Option<String>,
    /// Whether a suspended task waits for its children to end (a fan-in).
    pub waiting_for_children: bool,
}

/// On a task's success, a task of `lambda` with the output as its payload,
/// created in the same transaction as the success, as the task's child.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Continuation {
    pub lambda: String,
    pub collection: Option<String>,
    pub priority: Option<u8>,
    /// The next task's key; none when absent (a key is not inherited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A task to insert.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewTask {
    pub lambda: String,
    /// `default` when absent.
    pub collection: Option<String>,
    /// The lambda's default priority when absent.
    pub priority: Option<u8>,
    pub payload: Vec<u8>,
    /// When to run it; now when absent.
    pub run_at: Option<Millis>,
    /// A second insert with the same key (per lambda) returns the first
    /// task instead of creating another.
    pub idempotency_key: Option<String>,
    /// The task's key within its lambda (see [`Task::key`]).
    pub key: Option<String>,
    /// Collapse with the other debounced tasks of its key: the first
    /// waits this long past the last one's arrival (at most
    /// [`DEBOUNCE_WINDOWS_AT_MOST`] windows past its own) and runs with
    /// the last one's request; the others answer its id. Needs a key.
    ///
    /// [`DEBOUNCE_WINDOWS_AT_MOST`]: crate::task::DEBOUNCE_WINDOWS_AT_MOST
    pub debounce: Option<std::time::Duration>,
    pub parent_id: Option<String>,
    /// Run this version of the lambda, not the one current at the claim.
    pub version: Option<u32>,
    /// The parent's lease, when a running execution schedules the task:
    /// refused unless the parent still holds it (fencing).
    pub parent_lease: Option<i64>,
    pub continuation: Option<Continuation>,
    /// The trace the task's spans join (the Frontend's `schedule` span).
    pub trace: Option<TraceContext>,
    /// The id its parent's execution chose for it (only with
    /// `parent_lease`): the lambda learns a child's id before the child is
    /// written, so that its executor can write children in batches. A new
    /// id when absent.
    pub id: Option<String>,
}

/// Inserts tasks, all or none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskInsertMany {
    pub tasks: Vec<NewTask>,
    pub now: Millis,
}

/// One inserted task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInserted {
    pub id: String,
    /// False when an earlier task was returned: one with the same
    /// idempotency key, or the debounced task of the key this one
    /// collapsed into.
    pub created: bool,
}

/// Filters of a task list (`TaskStore::task_list`, `ClientApi::task_list`);
/// every filter is optional.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskList {
    pub lambda: Option<String>,
    /// Only tasks of these lambdas (an empty list matches none): the
    /// lambdas a caller's token may read, which the Frontend's gRPC adapter
    /// sets so that a page is full of theirs, not what is left of a page of
    /// every lambda's. Not sent over the wire: a server sets it from the
    /// caller's token.
    pub lambdas: Option<Vec<String>>,
    pub collection: Option<String>,
    pub key: Option<String>,
    pub status: Option<TaskStatus>,
    pub parent_id: Option<String>,
    /// Tasks created at or after this time.
    pub created_from: Option<Millis>,
    /// Tasks created before this time.
    pub created_before: Option<Millis>,
    /// Newest first; oldest first when false.
    pub newest_first: bool,
    /// Tasks past this one in the list's order (the last id of the previous
    /// page).
    pub after: Option<String>,
    /// At most this many (capped at 1000; 100 when zero).
    pub limit: u32,
}

/// Which tasks to count (`TaskStore::task_count`, `ClientApi::task_count`):
/// a lambda's, optionally only one collection's, one key's or one parent's
/// children.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskCount {
    pub lambda: String,
    pub collection: Option<String>,
    pub key: Option<String>,
    pub parent_id: Option<String>,
}

/// How many counted tasks are in each status; a status with none is
/// absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCount {
    pub status: TaskStatus,
    pub count: u64,
}

/// One execution of a task that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number within the task's attempt budget (from 1 again after a
    /// redrive).
    pub attempt: u32,
    /// The claim's lease: unique per execution of a task, increasing.
    pub lease_token: i64,
    pub outcome: AttemptOutcome,
    pub error: Option<String>,
    /// What the execution logged, one record a line.
    pub log: Option<String>,
    /// When it was claimed.
    pub started_at: Option<Millis>,
    /// When its end was recorded.
    pub ended_at: Millis,
    /// Journal entries it was answered from before it ran live.
    pub replayed: u32,
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    Retriable,
    Fatal,
    /// Its executor stopped heartbeating; the store noticed the timeout.
    Lost,
    /// It ended in a long wait: the task is suspended until the wait is
    /// over (no attempt spent).
    Suspended,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Retriable => "retriable",
            AttemptOutcome::Fatal => "fatal",
            AttemptOutcome::Lost => "lost",
            AttemptOutcome::Suspended => "suspended",
        }
    }
}

impl std::str::FromStr for AttemptOutcome {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        match text {
            "success" => Ok(AttemptOutcome::Success),
            "retriable" => Ok(AttemptOutcome::Retriable),
            "fatal" => Ok(AttemptOutcome::Fatal),
            "lost" => Ok(AttemptOutcome::Lost),
            "suspended" => Ok(AttemptOutcome::Suspended),
            _ => Err(()),
        }
    }
}
