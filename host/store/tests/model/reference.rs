//! A reference model of the store's state table, in plain Rust: what every
//! `TaskStore` operation the model test drives must answer, and what it must
//! leave behind. It is built on the state table itself
//! ([`waft_core::machine`]): every change of a task's state goes through
//! [`apply`], which takes the target, the trigger and the effects on the
//! lease and the attempt count from the operation's row and fails when the
//! row does not allow the state it starts from. What the table leaves to the
//! store (gates, tokens, attempts left, which operation a call makes) is
//! written here from DESIGN.md and the store's docs, not from the SQL, so the
//! two can disagree. So are journals: entries replaced from a point on under
//! the lease, each write in its turn among the lease's, the version they
//! pin, and what a redrive does to them.

use std::collections::{BTreeMap, BTreeSet};

use waft_core::machine::{self, Attempts, Lease, Operation, Target, Trigger};
use waft_core::{KeyFairness, KeyRate, TaskStatus};
use waft_store::{AttemptOutcome, GateState, JournalEntry, JournalWrite, Millis, Refusal};

use crate::ops::SIGNALS;

// The model's operations by who makes them; the types, a task's own
// operations (insert, claim, heartbeat, result, cancel) and `apply` here.
#[path = "reference/durable.rs"]
mod durable;
#[path = "reference/operator.rs"]
mod operator;
#[path = "reference/poll.rs"]
mod poll;

pub const ENQUEUE_TIMEOUT: Millis = 5_000;
pub const CLAIM_TIMEOUT: Millis = 3_000;
pub const HEARTBEAT_TIMEOUT: Millis = 2_000;
pub const MAX_ATTEMPTS: u32 = 2;

/// One task as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTask {
    pub lambda: String,
    pub collection: String,
    pub key: Option<String>,
    pub status: TaskStatus,
    pub held: bool,
    /// Waits for a place of its key (the lambda's concurrency per key) or
    /// its key's turn (the lambda's fairness).
    pub parked: bool,
    /// Parked for its key's turn rather than for a place.
    pub awaits_turn: bool,
    /// Scheduled with a debounce, and not yet enqueued, held or parked
    /// since: its key's debounced inserts collapse into it while it is new.
    pub debounced: bool,
    /// When it was inserted.
    pub created: Millis,
    /// Waits for (or has come to) the slot of its key's rate it was given:
    /// it takes no other when it comes due.
    pub key_paced: bool,
    pub next_trigger_at: Option<Millis>,
    pub due_at: Millis,
    pub attempt: u32,
    pub enqueue_token: i64,
    pub lease_token: i64,
    /// Ended executions: lease, attempt, outcome, entries replayed.
    pub attempts: Vec<(i64, u32, AttemptOutcome, u32)>,
    /// The journal, in order.
    pub journal: Vec<JournalEntry>,
    /// The version the journal pins, while it holds entries.
    pub journal_version: Option<u32>,
    /// The journal's generation: one more at each redrive that discards it.
    pub journal_generation: u32,
    /// The messages of journal writes taken under the current lease.
    pub journal_taken: u32,
    /// The version the latest claim handed out.
    pub claimed_version: Option<u32>,
    /// The names of the signals sent to it, in order.
    pub signals: Vec<String>,
    /// The signal its last suspension waits for (meaningful while it is
    /// suspended).
    pub waiting_for: Option<String>,
    /// The task it is a child of.
    pub parent: Option<String>,
    /// Whether its last suspension waits for its children (a fan-in), and
    /// those of them not ended yet: the end of the last wakes it.
    pub waiting_for_children: bool,
    pub awaiting: Vec<String>,
}

/// The whole model: tasks by id, gates by `(lambda, collection or "")`,
/// periodic schedules' next occurrences, lambdas' current versions.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub tasks: BTreeMap<String, ModelTask>,
    pub gates: BTreeMap<(String, String), GateState>,
    pub crons: BTreeMap<String, Millis>,
    pub versions: BTreeMap<String, u32>,
    /// The next free slot of each rated key's bucket.
    pub buckets: BTreeMap<(String, String), f64>,
}

/// What the consumer's poll did, as sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollAnswer {
    pub enqueued: Vec<(String, i64)>,
    pub held: u64,
    pub dropped: u64,
    pub dead: u64,
    pub parked: u64,
    pub key_paced: u64,
}

/// The concurrency per key of the model's lambdas: one task of a key in
/// flight at once for the first, two for the second. (Tasks without a key
/// are never limited.)
pub fn key_limit(lambda: &str) -> Option<u32> {
    Some(if lambda == crate::ops::LAMBDAS[0] {
        1
    } else {
        2
    })
}

/// The rate per key of the model's lambdas: a start of a key every four
/// seconds for the second (which has a concurrency per key of two as well),
/// none for the first.
pub fn key_rate(lambda: &str) -> Option<KeyRate> {
    (lambda == crate::ops::LAMBDAS[1]).then(|| KeyRate {
        count: 1,
        period: std::time::Duration::from_secs(4),
    })
}

/// The fairness of the model's lambdas: the second (with a concurrency of
/// two and a rate per key too) keeps two tasks of a key in the queue, or
/// waiting for their rate's slots, at once, four of key `j`; the first is
/// not fair.
pub fn key_fairness(lambda: &str) -> Option<KeyFairness> {
    (lambda == crate::ops::LAMBDAS[1]).then(|| KeyFairness {
        weights: [(crate::ops::KEYS[1].to_owned(), 2)].into(),
        lookahead: 2,
    })
}

/// How a claim was answered: the attempt, lease, version to run, the
/// journal's length and its generation, or why not.
pub type ClaimAnswer = Result<(u32, i64, u32, u32, u32), Refusal>;

/// A journal write under a lease that holds the task, starting past the
/// journal's end: the store refuses the whole call (a write alone, or the
/// result that carries it) and nothing of it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hole;

/// Why the store refuses a journal write alone whole (nothing written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwritten {
    /// It starts past the journal's end.
    Hole,
    /// It names a turn among its lease's writes that is not the next (nor
    /// the last taken, which is answered as written): a late copy.
    OutOfTurn,
}

/// How a cancel was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelAnswer {
    Cancelled,
    NotFound,
    AlreadyEnded(TaskStatus),
}

/// How a redrive of one task was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveAnswer {
    Redriven,
    NotFound,
    NotDead(TaskStatus),
}

/// How a result was meant to end its execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Success,
    Fatal,
    /// Retriable, to be tried again after this many milliseconds.
    Retriable(u64),
    /// Suspended in a wait that is over this many milliseconds from now.
    Suspend(u64),
    /// Suspended waiting for the signal `SIGNALS[name]` after the `taken`
    /// of that name, for at most `after` milliseconds.
    AwaitSignal {
        after: u64,
        name: usize,
        taken: u32,
    },
    /// Suspended until every child it has ends ([`CENTURY`] at most).
    AwaitChildren,
}

/// How long a wait for children lasts at most: it never comes due by time.
pub const CENTURY: Millis = 100 * 366 * 86_400_000;

/// How a signal was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalAnswer {
    Sent { seq: u32, woke: bool },
    NotFound,
    AlreadyEnded(TaskStatus),
}

impl Model {
    fn gate_of(&self, task: &ModelTask) -> GateState {
        let mut effect = GateState::Open;
        for key in [
            (task.lambda.clone(), String::new()),
            (task.lambda.clone(), task.collection.clone()),
        ] {
            match self.gates.get(&key) {
                Some(GateState::Dropped) => return GateState::Dropped,
                Some(GateState::Paused) => effect = GateState::Paused,
                _ => {}
            }
        }
        effect
    }

    /// The debounced task a debounced insert of `lambda`'s `key` collapses
    /// into: the key's one that is new, not held and not parked.
    pub fn debounced(&self, lambda: &str, key: &str) -> Option<String> {
        self.tasks
            .iter()
            .find(|(_, t)| {
                t.debounced
                    && t.lambda == lambda
                    && t.key.as_deref() == Some(key)
                    && t.status == TaskStatus::New
                    && !t.held
                    && !t.parked
            })
            .map(|(id, _)| id.clone())
    }

    /// A debounced insert at `now` collapsing into task `id`: it takes the
    /// insert's request (its collection, here) and is due a window past
    /// now, or ten windows past its own insert if sooner — or at the slot
    /// of its key's rate it was given already, if that is later.
    pub fn collapse(&mut self, id: &str, collection: &str, now: Millis, window: Millis) {
        let task = self.tasks.get_mut(id).unwrap();
        task.collection = collection.into();
        let end = (now + window).min(task.created + 10 * window);
        task.due_at = end;
        task.next_trigger_at = match task.next_trigger_at {
            Some(slot) if task.key_paced && slot > end => Some(slot),
            _ => Some(end),
        };
    }

    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &mut self,
        id: String,
        lambda: &str,
        collection: &str,
        run_at: Millis,
        parent: Option<String>,
        key: Option<String>,
        debounced: bool,
        now: Millis,
    ) {
        let mut task = ModelTask {
            lambda: lambda.into(),
            collection: collection.into(),
            key,
            status: TaskStatus::New,
            held: false,
            parked: false,
            awaits_turn: false,
            debounced,
            created: now,
            key_paced: false,
            next_trigger_at: None,
            due_at: run_at,
            attempt: 0,
            enqueue_token: 0,
            lease_token: 0,
            attempts: Vec::new(),
            journal: Vec::new(),
            journal_version: None,
            journal_generation: 0,
            journal_taken: 0,
            claimed_version: None,
            signals: Vec::new(),
            waiting_for: None,
            parent,
            waiting_for_children: false,
            awaiting: Vec::new(),
        };
        // A fair key's task due at once waits parked for its key's turn,
        // which the next poll gives it if the key has a place.
        let fair = key_fairness(lambda).is_some() && task.key.is_some();
        if fair && !debounced && run_at <= now {
            apply(&mut task, Operation::InsertParked, run_at, 0);
            task.awaits_turn = true;
            crate::TURNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            apply(&mut task, Operation::Insert, run_at, 0);
        }
        self.tasks.insert(id, task);
    }

    pub fn claim(&mut self, id: &str, token: i64, now: Millis) -> ClaimAnswer {
        let Some(task) = self.tasks.get(id) else {
            return Err(Refusal::NotFound);
        };
        let gate = self.gate_of(task);
        let task = self.tasks.get_mut(id).unwrap();
        let claimable = machine::transition(Operation::Claim)
            .from
            .contains(task.status);
        if claimable && task.enqueue_token == token && !task.held && gate == GateState::Open {
            apply(task, Operation::Claim, now, 0);
            task.journal_taken = 0;
            // A journal is replayed on the version that wrote it.
            let version = task.journal_version.unwrap_or(self.versions[&task.lambda]);
            task.claimed_version = Some(version);
            let len = task.journal.len() as u32;
            let generation = task.journal_generation;
            return Ok((task.attempt, task.lease_token, version, len, generation));
        }
        if task.held {
            return Err(Refusal::Held);
        }
        if !claimable {
            return Err(Refusal::WrongState(task.status));
        }
        match gate {
            GateState::Paused => {
                apply(task, Operation::Hold, now, 0);
                Err(Refusal::Held)
            }
            GateState::Dropped => {
                apply(task, Operation::Drop, now, 0);
                let status = task.status;
                self.gather(now);
                Err(Refusal::WrongState(status))
            }
            GateState::Open => Err(Refusal::StaleEnqueueToken {
                current: task.enqueue_token,
            }),
        }
    }

    fn lease_check(&self, id: &str, lease: i64) -> Result<(), Refusal> {
        let Some(task) = self.tasks.get(id) else {
            return Err(Refusal::NotFound);
        };
        if task.lease_token != lease {
            return Err(Refusal::StaleLease {
                current: task.lease_token,
            });
        }
        if !machine::RUNNING.contains(task.status) {
            return Err(Refusal::WrongState(task.status));
        }
        Ok(())
    }

    pub fn heartbeat(&mut self, id: &str, lease: i64, now: Millis) -> Result<(), Refusal> {
        self.lease_check(id, lease)?;
        apply(
            self.tasks.get_mut(id).unwrap(),
            Operation::Heartbeat,
            now,
            0,
        );
        Ok(())
    }

    /// A result, and the journal write it carries, which pins the journal
    /// to the version its lease was claimed with.
    pub fn result(
        &mut self,
        id: &str,
        lease: i64,
        ending: Ending,
        journal: Option<&JournalWrite>,
        replayed: u32,
        now: Millis,
    ) -> Result<Result<TaskStatus, Refusal>, Hole> {
        if let Err(refusal) = self.lease_check(id, lease) {
            return Ok(Err(refusal));
        }
        if let Some(write) = journal {
            let version = self.tasks[id]
                .claimed_version
                .expect("a leased task was claimed");
            self.journal_write(id, lease, version, write, now)?
                .expect("the lease was checked");
        }
        Ok(Ok(self.end(id, ending, replayed, now)))
    }

    fn end(&mut self, id: &str, ending: Ending, replayed: u32, now: Millis) -> TaskStatus {
        let task = self.tasks.get_mut(id).unwrap();
        let (operation, outcome, backoff) = match ending {
            Ending::Success => (Operation::Succeed, AttemptOutcome::Success, 0),
            Ending::Fatal => (Operation::Fail, AttemptOutcome::Fatal, 0),
            Ending::Retriable(_) if task.attempt >= MAX_ATTEMPTS => {
                (Operation::Exhaust, AttemptOutcome::Retriable, 0)
            }
            Ending::Retriable(after) => {
                (Operation::Retry, AttemptOutcome::Retriable, after as Millis)
            }
            Ending::Suspend(after) | Ending::AwaitSignal { after, .. } => (
                Operation::Suspend,
                AttemptOutcome::Suspended,
                after as Millis,
            ),
            Ending::AwaitChildren => (Operation::Suspend, AttemptOutcome::Suspended, CENTURY),
        };
        task.attempts
            .push((task.lease_token, task.attempt, outcome, replayed));
        apply(task, operation, now, backoff);
        if operation == Operation::Suspend {
            task.waiting_for = None;
            task.waiting_for_children = false;
        }
        if let Ending::AwaitSignal { name, taken, .. } = ending {
            let name = SIGNALS[name];
            task.waiting_for = Some(name.to_owned());
            // One sent while the execution ran, after it last looked.
            let kept = task.signals.iter().filter(|n| *n == name).count();
            if kept > taken as usize {
                apply(task, Operation::Signal, now, 0);
            }
        }
        if ending == Ending::AwaitChildren {
            // Those that ended while the execution ran are not awaited;
            // with none left, it is due at once.
            let awaiting: Vec<String> = self
                .children(id)
                .into_iter()
                .filter(|child| !self.tasks[child].status.is_terminal())
                .collect();
            let task = self.tasks.get_mut(id).unwrap();
            task.waiting_for_children = true;
            if awaiting.is_empty() {
                apply(task, Operation::Gather, now, 0);
            }
            task.awaiting = awaiting;
        }
        self.gather(now);
        self.tasks[id].status
    }

    pub fn cancel(&mut self, id: &str, now: Millis) -> CancelAnswer {
        let Some(task) = self.tasks.get_mut(id) else {
            return CancelAnswer::NotFound;
        };
        if !machine::transition(Operation::Cancel)
            .from
            .contains(task.status)
        {
            return CancelAnswer::AlreadyEnded(task.status);
        }
        apply(task, Operation::Cancel, now, 0);
        self.gather(now);
        CancelAnswer::Cancelled
    }
}

/// Applies one row of the state table to a task at `now`: the state it
/// ends in, its next trigger (`backoff` after `now` for a retry, for a
/// suspension the wait, for a pace the slot), and what the row does to the
/// lease and the attempt count. Panics when the row does not start from the
/// task's state: the model asked for a transition the table does not have.
/// The due time is the caller's (an insert's run time, a redrive's now);
/// the enqueue token is renewed whenever the task's message on a queue goes
/// stale: the task is enqueued anew, held, or paced.
fn apply(task: &mut ModelTask, operation: Operation, now: Millis, backoff: Millis) {
    let row = machine::transition(operation);
    if matches!(operation, Operation::Insert | Operation::InsertParked) {
        assert!(row.from.is_empty());
    } else {
        assert!(
            row.from.contains(task.status),
            "the state table has no {operation:?} from {}",
            task.status
        );
    }
    task.status = match row.to {
        Target::To(status) => status,
        Target::NextAttempt => machine::next_attempt(task.attempt),
        Target::Same => task.status,
    };
    task.next_trigger_at = match row.trigger {
        Trigger::Due => Some(task.due_at),
        Trigger::Now => Some(now),
        Trigger::EnqueueTimeout => Some(now + ENQUEUE_TIMEOUT),
        Trigger::ClaimTimeout => Some(now + CLAIM_TIMEOUT),
        Trigger::HeartbeatTimeout => Some(now + HEARTBEAT_TIMEOUT),
        Trigger::Backoff | Trigger::Wake => {
            task.due_at = now + backoff;
            Some(task.due_at)
        }
        Trigger::Slot => Some(now + backoff),
        Trigger::Gate | Trigger::Landing => {
            if let Some(next) = task.next_trigger_at {
                task.due_at = task.due_at.min(next);
            }
            None
        }
        Trigger::Never => None,
        Trigger::Unchanged => task.next_trigger_at,
    };
    task.held = match row.trigger {
        Trigger::Gate => true,
        Trigger::Unchanged => task.held,
        _ => false,
    };
    task.parked = match row.trigger {
        Trigger::Landing => true,
        Trigger::Unchanged => task.parked,
        _ => false,
    };
    // Why it is parked: set by the caller that parks it.
    task.awaits_turn &= task.parked;
    // Enqueued, held or parked, a debounced task has left its window for
    // good.
    if matches!(
        operation,
        Operation::Enqueue | Operation::Hold | Operation::Park
    ) {
        task.debounced = false;
    }
    if row.to == Target::To(TaskStatus::Enqueued) || task.held || row.trigger == Trigger::Slot {
        task.enqueue_token += 1;
    }
    // A task keeps the slot of its key's rate it was given until it goes
    // (or a gate stops it first; parked, it keeps it).
    match operation {
        Operation::Pace => task.key_paced = true,
        Operation::Enqueue | Operation::Hold => task.key_paced = false,
        _ => {}
    }
    match row.lease {
        Lease::Take => task.lease_token += 1,
        Lease::Keep | Lease::Fenced => {}
    }
    match row.attempts {
        Attempts::Next => task.attempt += 1,
        Attempts::Reset => task.attempt = 0,
        Attempts::Back => task.attempt = task.attempt.saturating_sub(1),
        Attempts::Keep => {}
    }
}
