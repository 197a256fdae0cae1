//! The pipeline's operations: the Store Consumer's poll, the Controller's
//! claims, the executors' heartbeats and results, and how each may be
//! refused.

use std::time::Duration;

use super::{JournalWrite, Millis, Wait};
use crate::{TaskStatus, TraceContext};

/// A claim gives its task a new lease: the count of the task's claims times
/// `LEASE_STEP`, plus 32 random bits. A task's leases stay ordered (its
/// attempts are listed by lease) and the next cannot be guessed from the
/// last.
pub const LEASE_STEP: i64 = 1 << 32;

/// Which claim of its task a lease came from: 1 for the first.
pub fn lease_counter(lease: i64) -> i64 {
    lease.div_euclid(LEASE_STEP)
}

/// The Store Consumer's poll.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEnqueueReady {
    pub now: Millis,
    /// Tasks taken at most.
    pub limit: u32,
    /// How long an enqueued task may wait to be claimed before it is
    /// enqueued again (the queue may have lost it).
    pub enqueue_timeout: Duration,
}

/// A task the consumer must push onto its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedTask {
    pub id: String,
    pub lambda: String,
    pub priority: u8,
    /// Must accompany the claim: a claim with an older token (a duplicate
    /// of an earlier message) is refused.
    pub enqueue_token: i64,
    /// The trace the task joins, as stored with it.
    pub trace: Option<TraceContext>,
    /// Its key and the key's weight, when its lambda is fair between keys:
    /// the queue hands it out in the key's turns.
    pub turn: Option<(String, u32)>,
}

/// What one poll did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnqueueReport {
    pub enqueued: Vec<EnqueuedTask>,
    /// Held back by a paused gate.
    pub held: u64,
    /// Ended by a drop gate.
    pub dropped: u64,
    /// Dead: their executor stopped heartbeating on their last attempt.
    pub dead: u64,
    /// Held back by their lambda's scheduling quota, each until its slot.
    pub paced: u64,
    /// Held back by their key's rate, each until its slot.
    pub key_paced: u64,
    /// Parked: as many tasks of their key were in flight as their lambda
    /// allows.
    pub parked: u64,
    /// The tasks held back by each limit (parked, or waiting for a slot),
    /// per lambda: what the `tasks_limited` metric counts.
    pub limited: std::collections::BTreeMap<(String, Limit), u64>,
    /// When the earliest task not yet due comes due (a delayed task, a
    /// retry, a timeout, a paced slot), so the consumer can wake for it
    /// instead of waiting for its next poll. Read only when the poll did
    /// not fill its batch (a full one is followed by another at once).
    pub next_due: Option<Millis>,
}

impl EnqueueReport {
    /// Counts a task of `lambda` that `limit` held back.
    pub fn held_back(&mut self, lambda: &str, limit: Limit) {
        *self.limited.entry((lambda.to_owned(), limit)).or_default() += 1;
    }
}

/// A limit the poll holds due tasks back by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// The lambda's scheduling quota (`--quota`).
    Quota,
    /// Its concurrency per key (`--key-concurrency`).
    KeyConcurrency,
    /// Its rate per key (`--key-rate`).
    KeyRate,
    /// Its fairness between keys (`--key-fairness`): the key's turn.
    KeyFairness,
}

impl Limit {
    /// Its name in metrics: `quota`, `key_concurrency`, `key_rate`,
    /// `key_fairness`.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Quota => "quota",
            Limit::KeyConcurrency => "key_concurrency",
            Limit::KeyRate => "key_rate",
            Limit::KeyFairness => "key_fairness",
        }
    }
}

/// Claims of enqueued tasks, each with the enqueue token it was queued with.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskClaimMany {
    pub claims: Vec<(String, i64)>,
    pub now: Millis,
    /// How long a claimed task may wait for its first heartbeat.
    pub claim_timeout: Duration,
}

/// A claimed task: what an executor needs to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedTask {
    pub id: String,
    pub lambda: String,
    /// The lambda version current at the claim: the one to run.
    pub lambda_version: u32,
    pub collection: String,
    pub priority: u8,
    pub payload: Vec<u8>,
    pub attempt: u32,
    pub scheduled_at: Millis,
    /// The fencing token: heartbeats and results must carry it.
    pub lease_token: i64,
    /// The lambda's secrets as of the claim: it changes with every set or
    /// removal, so an executor knows when to read them again.
    pub secrets_version: i64,
    /// Entries in the task's journal: its earlier executions' host calls,
    /// which this one replays first.
    pub journal_len: u32,
    /// The generation of the task's journal: 0 until a journal is
    /// discarded, one more at each discard. Its children are named by it
    /// and their rank, so a journal started afresh schedules new children
    /// and one replayed gets the same back.
    pub journal_generation: u32,
    /// The span the execution is a child of: the claim's, else the one
    /// stored with the task.
    pub trace: Option<TraceContext>,
}

/// Why a claim, heartbeat or result was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such task.
    NotFound,
    /// The task is not in a state that allows it (e.g. a claim of a task
    /// that is not enqueued, a result after completion).
    WrongState(TaskStatus),
    /// The claim carries an older enqueue token: a duplicate message.
    StaleEnqueueToken { current: i64 },
    /// The lease token is not the task's current one: another execution
    /// owns the task now.
    StaleLease { current: i64 },
    /// A gate on the task's lambda or collection is closed: the task is
    /// held in the store until the gate opens.
    Held,
}

/// Heartbeats of running tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskHeartbeatMany {
    pub beats: Vec<Heartbeat>,
    pub now: Millis,
    /// How long a running task may go without a heartbeat.
    pub heartbeat_timeout: Duration,
}

/// One heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub id: String,
    pub lease_token: i64,
    pub progress: Option<String>,
}

/// Results of executions.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSetResultMany {
    pub results: Vec<TaskResult>,
    pub now: Millis,
}

/// A result the store accepted: its task's new status, and the task's
/// lambda (what the HSC counts the execution under).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultRecorded {
    pub status: crate::TaskStatus,
    pub lambda: String,
}

/// The result of one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    pub id: String,
    pub lease_token: i64,
    pub outcome: ResultOutcome,
    /// What the execution logged, one record a line.
    pub log: Option<String>,
    /// The journal's change this execution made last, written with the
    /// result (entries that reached nothing outside wait for it).
    pub journal: Option<JournalWrite>,
    /// Journal entries this execution was answered from before it ran live.
    pub replayed: u32,
}

/// How an execution ended, as far as the store cares.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultOutcome {
    Success {
        output: Option<Vec<u8>>,
    },
    /// Retried after `retry_after`, or the lambda's backoff when absent;
    /// dead when the attempts are used up.
    Retriable {
        error: String,
        retry_after: Option<Duration>,
    },
    Fatal {
        error: String,
    },
    /// The execution ended in a wait that lasts until `until` (or until
    /// the signal it waits for is sent): the task is suspended, its attempt
    /// given back, and due again then.
    Suspend {
        until: Millis,
        wait: Wait,
    },
}
