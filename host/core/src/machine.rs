//! The task state machine, as data.
//!
//! [`TRANSITIONS`] is the whole of what may happen to a task: for each
//! operation of the store, the states it may start from, the state it ends
//! in, when the Store Consumer looks at the task next, and what it does to
//! the lease and to the attempt count. The sets the rest of Waft speaks of
//! (ended, unfinished, running, waiting, final, live) are derived from it
//! here, once, at compile time; the store's SQL, the reference model of the
//! store's model test, the CLI and the dashboard are checked against them
//! by tests, so a new state is placed in this table and every place that
//! must learn of it fails a test until it has.
//!
//! A state's meaning is in its row of the table, not in its name: `dead` is
//! ended (no trigger) but not final (a redrive leaves it), so it is live.

use crate::TaskStatus;
use TaskStatus::*;

/// What the store does to tasks: every operation that may change a task's
/// state. One store call may apply several (a poll enqueues, expires, holds
/// and drops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A client, a parent, a continuation or a periodic schedule creates the
    /// task.
    Insert,
    /// As [`Operation::Insert`], for a task of a fair lambda's key due at
    /// once: it is created parked, awaiting its key's turn, so that a
    /// key's backlog is never among the due tasks a poll reads.
    InsertParked,
    /// The Store Consumer puts a due task on its queue, or again on it when
    /// the queue seems to have lost it.
    Enqueue,
    /// A controller takes the enqueued task for an executor.
    Claim,
    /// The running execution reports it is alive.
    Heartbeat,
    /// The running execution writes the host calls it made to its task's
    /// journal: fenced by its lease, it changes neither the state nor when
    /// the Store Consumer looks at the task (a heartbeat does that).
    Journal,
    /// The execution returned its output.
    Succeed,
    /// The execution failed and may be tried again.
    Retry,
    /// The execution failed retriably on its last attempt: a dead letter.
    Exhaust,
    /// The execution failed for good.
    Fail,
    /// The execution ended in a long wait (a durable lambda's sleep, or its
    /// wait for a signal): the task waits in the store, holding no instance
    /// and no lease, its attempt given back, until the wait is over; then
    /// it is enqueued again and resumes by replaying its journal.
    Suspend,
    /// A signal the suspended task waits for was sent: it is due at once
    /// (and resumes to take it).
    Signal,
    /// The last of the children the suspended task waits for ended (a
    /// fan-in): it is due at once (and resumes to gather their ends).
    Gather,
    /// The lease timed out (the executor died or lost the store) with
    /// attempts left: the lost attempt is recorded and the task queued again.
    Expire,
    /// The lease timed out on the last attempt: a dead letter.
    Bury,
    /// A paused gate covers the due task: it waits in the store, its due
    /// time kept, with no trigger until the gate opens.
    Hold,
    /// The gate holding the task opened: it is due again at its due time.
    Release,
    /// A drop gate closed over the held task: it is due at once, for the
    /// next poll to drop.
    ReleaseToDrop,
    /// A drop gate covers the due task.
    Drop,
    /// As many tasks of its key are in flight as its lambda allows (its
    /// concurrency per key), or wait in the queue as its key's turn allows
    /// (its fairness between keys): the due task waits in the store, its
    /// due time kept, with no trigger until a task of its key lands or
    /// leaves the queue.
    Park,
    /// A task of its key landed (left flight) or left the queue: the parked
    /// task is due again at its due time.
    Unpark,
    /// Its lambda's quota or its key's rate has no slot for the due task
    /// now (or its execution lapsed and its next start must wait for one):
    /// it waits in the store, its due time kept, until its slot.
    Pace,
    /// A client cancelled the task.
    Cancel,
    /// An operator gave the dead letter a fresh attempt budget.
    Redrive,
    /// The one process that holds the store (`waft dev`, on its data
    /// directory's lock) started again: whatever it had in flight when it
    /// stopped is in flight nowhere, so the Store Consumer looks at those
    /// tasks at once rather than when their timeouts would have told it —
    /// and then enqueues, expires or buries each as its trigger would have.
    Recover,
}

/// The state an operation leaves the task in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    To(TaskStatus),
    /// The state of a task waiting for its next attempt: `new` before the
    /// first, `retriable_failure` after one ([`next_attempt`]).
    NextAttempt,
    /// The state it was in.
    Same,
}

/// When the Store Consumer looks at the task next (its `next_trigger_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// When the task is due: the time its client asked for (a redrive's:
    /// the redrive), kept through a hold.
    Due,
    /// At once, its due time kept.
    Now,
    /// After the enqueue timeout: the queue may have lost the message.
    EnqueueTimeout,
    /// After the claim timeout: the claimer may have died before its first
    /// heartbeat.
    ClaimTimeout,
    /// After the heartbeat timeout: the executor may have died.
    HeartbeatTimeout,
    /// After the backoff of its lambda (or the lambda's own `retry_after`).
    Backoff,
    /// When the wait it is suspended in is over (its timeout, for a
    /// signal; a century, for children).
    Wake,
    /// Not until a gate opens (the task is held).
    Gate,
    /// Not until a task of its key lands (the task is parked).
    Landing,
    /// At the slot its lambda's quota or its key's rate gave it.
    Slot,
    /// Never: the task has ended.
    Never,
    /// When it was: the operation does not move the trigger.
    Unchanged,
}

/// What an operation does to the task's lease (its fencing token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Untouched, and not asked for.
    Keep,
    /// A new lease is taken: the token grows by one.
    Take,
    /// Only the holder of the current lease may do it; the token stays.
    Fenced,
}

/// What an operation does to the attempt count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts {
    Keep,
    /// One more execution starts.
    Next,
    /// The execution's attempt is given back: it spent none.
    Back,
    /// Back to none: a fresh budget.
    Reset,
}

/// One row of the state table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub operation: Operation,
    /// The states it may start from; empty for [`Operation::Insert`], which
    /// starts from nothing.
    pub from: StatusSet,
    pub to: Target,
    pub trigger: Trigger,
    pub lease: Lease,
    pub attempts: Attempts,
}

const fn row(
    operation: Operation,
    from: StatusSet,
    to: Target,
    trigger: Trigger,
    lease: Lease,
    attempts: Attempts,
) -> Transition {
    Transition {
        operation,
        from,
        to,
        trigger,
        lease,
        attempts,
    }
}

// The table's own shorthands for the states its rows start from; the sets
// derived below from the rows (and spelled out by the tests) are the ones
// the rest of Waft names.
const LEASED: StatusSet = StatusSet::of(&[Claimed, Processing]);
const DUE: StatusSet = StatusSet::of(&[New, Enqueued, Suspended, RetriableFailure]);
const OPEN: StatusSet = DUE.union(LEASED);
const HELD: StatusSet = StatusSet::of(&[New, RetriableFailure]);
/// The due states not in flight: an enqueued task is in flight already
/// (its queue message may have been lost), and is never parked.
const GROUNDED: StatusSet = StatusSet::of(&[New, Suspended, RetriableFailure]);

/// The states of a task in flight, derived from the table: enqueued (its
/// claim takes over) and running. A lambda's concurrency per key counts a
/// key's tasks in them; a task that leaves them lands, and a parked task of
/// its key may go.
pub const IN_FLIGHT: StatusSet = {
    let mut set = RUNNING;
    let mut i = 0;
    while i < TRANSITIONS.len() {
        if let (Operation::Enqueue, Target::To(status)) =
            (TRANSITIONS[i].operation, TRANSITIONS[i].to)
        {
            set = set.with(status);
        }
        i += 1;
    }
    set
};

/// The state table. Guards that are not states (the enqueue token of a
/// claim, the gates, the attempts left) are the store's; the table says
/// which states each operation may meet.
#[rustfmt::skip]
pub const TRANSITIONS: [Transition; 25] = {
    use Attempts as A;
    use Lease as L;
    use Operation as O;
    use Target::*;
    use Trigger as T;
    const NOTHING: StatusSet = StatusSet::EMPTY;
    const ENQUEUED: StatusSet = StatusSet::of(&[Enqueued]);
    const DEAD: StatusSet = StatusSet::of(&[Dead]);
    const SUSPENDED: StatusSet = StatusSet::of(&[Suspended]);
    // What a process carries: a task on its queue, or running (the
    // derived `IN_FLIGHT`, which a test holds it to).
    const CARRIED: StatusSet = StatusSet::of(&[Enqueued, Claimed, Processing]);
    [
        //  operation         from      to                    trigger              lease      attempts
        row(O::Insert,        NOTHING,  To(New),              T::Due,              L::Keep,   A::Reset),
        row(O::InsertParked,  NOTHING,  To(New),              T::Landing,          L::Keep,   A::Reset),
        row(O::Enqueue,       DUE,      To(Enqueued),         T::EnqueueTimeout,   L::Keep,   A::Keep),
        row(O::Claim,         ENQUEUED, To(Claimed),          T::ClaimTimeout,     L::Take,   A::Next),
        row(O::Heartbeat,     LEASED,   To(Processing),       T::HeartbeatTimeout, L::Fenced, A::Keep),
        row(O::Journal,       LEASED,   Same,                 T::Unchanged,        L::Fenced, A::Keep),
        row(O::Succeed,       LEASED,   To(Success),          T::Never,            L::Fenced, A::Keep),
        row(O::Retry,         LEASED,   To(RetriableFailure), T::Backoff,          L::Fenced, A::Keep),
        row(O::Exhaust,       LEASED,   To(Dead),             T::Never,            L::Fenced, A::Keep),
        row(O::Fail,          LEASED,   To(FatalFailure),     T::Never,            L::Fenced, A::Keep),
        row(O::Suspend,       LEASED,   To(Suspended),        T::Wake,             L::Fenced, A::Back),
        row(O::Signal,        SUSPENDED, Same,                T::Now,              L::Keep,   A::Keep),
        row(O::Gather,        SUSPENDED, Same,                T::Now,              L::Keep,   A::Keep),
        row(O::Expire,        LEASED,   To(Enqueued),         T::EnqueueTimeout,   L::Keep,   A::Keep),
        row(O::Bury,          LEASED,   To(Dead),             T::Never,            L::Keep,   A::Keep),
        row(O::Hold,          OPEN,     NextAttempt,          T::Gate,             L::Keep,   A::Keep),
        row(O::Release,       HELD,     Same,                 T::Due,              L::Keep,   A::Keep),
        row(O::ReleaseToDrop, HELD,     Same,                 T::Now,              L::Keep,   A::Keep),
        row(O::Drop,          OPEN,     To(Dropped),          T::Never,            L::Keep,   A::Keep),
        row(O::Park,          GROUNDED, NextAttempt,          T::Landing,          L::Keep,   A::Keep),
        row(O::Unpark,        HELD,     Same,                 T::Due,              L::Keep,   A::Keep),
        row(O::Pace,          OPEN,     NextAttempt,          T::Slot,             L::Keep,   A::Keep),
        row(O::Cancel,        OPEN,     To(Cancelled),        T::Never,            L::Keep,   A::Keep),
        row(O::Redrive,       DEAD,     To(New),              T::Due,              L::Keep,   A::Reset),
        row(O::Recover,       CARRIED,  Same,                 T::Now,              L::Keep,   A::Keep),
    ]
};

/// The row of an operation.
pub fn transition(operation: Operation) -> &'static Transition {
    TRANSITIONS
        .iter()
        .find(|row| row.operation == operation)
        .expect("every operation has a row (a test holds the table to it)")
}

/// The states a task can end in, derived from the table: those an operation
/// leaves with no trigger. Their tasks are never looked at again by the
/// Store Consumer (ATF's `completed`).
pub const ENDED: StatusSet = {
    let mut set = StatusSet::EMPTY;
    let mut i = 0;
    while i < TRANSITIONS.len() {
        let row = &TRANSITIONS[i];
        if let (Target::To(status), Trigger::Never) = (row.to, row.trigger) {
            set = set.with(status);
        }
        i += 1;
    }
    set
};

/// The states not ended.
pub const UNFINISHED: StatusSet = StatusSet::ALL.minus(ENDED);

/// The states whose task holds a lease: those an operation fenced by the
/// lease may start from (an execution is claimed or running).
pub const RUNNING: StatusSet = {
    let mut set = StatusSet::EMPTY;
    let mut i = 0;
    while i < TRANSITIONS.len() {
        if let Lease::Fenced = TRANSITIONS[i].lease {
            set = set.union(TRANSITIONS[i].from);
        }
        i += 1;
    }
    set
};

/// The unfinished states holding no lease: due to start, or waiting in a
/// queue, for a retry or behind a gate.
pub const WAITING: StatusSet = UNFINISHED.minus(RUNNING);

/// The ended states no operation leaves: nothing can bring their task back.
pub const FINAL: StatusSet = {
    let mut left = StatusSet::EMPTY;
    let mut i = 0;
    while i < TRANSITIONS.len() {
        left = left.union(TRANSITIONS[i].from);
        i += 1;
    }
    ENDED.minus(left)
};

/// The states whose task may still change: all but the final ones (the
/// store's partial index of live tasks holds exactly these).
pub const LIVE: StatusSet = StatusSet::ALL.minus(FINAL);

/// A set of task states.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StatusSet(u32);

impl StatusSet {
    pub const EMPTY: StatusSet = StatusSet(0);
    pub const ALL: StatusSet = StatusSet::of(&TaskStatus::ALL);

    pub const fn of(statuses: &[TaskStatus]) -> StatusSet {
        let mut set = StatusSet::EMPTY;
        let mut i = 0;
        while i < statuses.len() {
            set = set.with(statuses[i]);
            i += 1;
        }
        set
    }

    const fn bit(status: TaskStatus) -> u32 {
        1 << status.index()
    }

    pub const fn with(self, status: TaskStatus) -> StatusSet {
        StatusSet(self.0 | Self::bit(status))
    }

    pub const fn union(self, other: StatusSet) -> StatusSet {
        StatusSet(self.0 | other.0)
    }

    pub const fn minus(self, other: StatusSet) -> StatusSet {
        StatusSet(self.0 & !other.0)
    }

    pub const fn contains(self, status: TaskStatus) -> bool {
        self.0 & Self::bit(status) != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The states, in life order.
    pub fn iter(self) -> impl Iterator<Item = TaskStatus> {
        TaskStatus::ALL
            .into_iter()
            .filter(move |s| self.contains(*s))
    }

    /// The states as an SQL list, `('new', 'enqueued')`, in life order.
    pub fn sql(self) -> String {
        let names: Vec<String> = self.iter().map(|s| format!("'{s}'")).collect();
        format!("({})", names.join(", "))
    }
}

impl std::fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<TaskStatus> for StatusSet {
    fn from_iter<I: IntoIterator<Item = TaskStatus>>(iter: I) -> Self {
        iter.into_iter().fold(StatusSet::EMPTY, StatusSet::with)
    }
}

/// The state of a task waiting for its next attempt, given the attempts it
/// had.
pub const fn next_attempt(attempt: u32) -> TaskStatus {
    if attempt == 0 { New } else { RetriableFailure }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATIONS: [Operation; 25] = [
        Operation::Insert,
        Operation::InsertParked,
        Operation::Enqueue,
        Operation::Claim,
        Operation::Heartbeat,
        Operation::Journal,
        Operation::Succeed,
        Operation::Retry,
        Operation::Exhaust,
        Operation::Fail,
        Operation::Suspend,
        Operation::Signal,
        Operation::Gather,
        Operation::Expire,
        Operation::Bury,
        Operation::Hold,
        Operation::Release,
        Operation::ReleaseToDrop,
        Operation::Drop,
        Operation::Park,
        Operation::Unpark,
        Operation::Pace,
        Operation::Cancel,
        Operation::Redrive,
        Operation::Recover,
    ];

    /// Every operation has exactly one row; a new operation names itself
    /// here (the match fails to compile until it does).
    #[test]
    fn every_operation_has_one_row() {
        for operation in OPERATIONS {
            match operation {
                Operation::Insert
                | Operation::InsertParked
                | Operation::Enqueue
                | Operation::Claim
                | Operation::Heartbeat
                | Operation::Journal
                | Operation::Succeed
                | Operation::Retry
                | Operation::Exhaust
                | Operation::Fail
                | Operation::Suspend
                | Operation::Signal
                | Operation::Gather
                | Operation::Expire
                | Operation::Bury
                | Operation::Hold
                | Operation::Release
                | Operation::ReleaseToDrop
                | Operation::Drop
                | Operation::Park
                | Operation::Unpark
                | Operation::Pace
                | Operation::Cancel
                | Operation::Redrive
                | Operation::Recover => {}
            }
            let rows = TRANSITIONS.iter().filter(|r| r.operation == operation);
            assert_eq!(rows.count(), 1, "{operation:?}");
        }
        assert_eq!(TRANSITIONS.len(), OPERATIONS.len());
    }

    /// The derived sets, spelled out: a change to the table that moves a
    /// state between them is a change of meaning, to be made here on
    /// purpose.
    #[test]
    fn the_named_sets_follow_from_the_table() {
        assert_eq!(
            ENDED,
            StatusSet::of(&[Success, FatalFailure, Dead, Dropped, Cancelled])
        );
        assert_eq!(
            UNFINISHED,
            StatusSet::of(&[
                New,
                Enqueued,
                Claimed,
                Processing,
                Suspended,
                RetriableFailure
            ])
        );
        assert_eq!(RUNNING, StatusSet::of(&[Claimed, Processing]));
        assert_eq!(
            WAITING,
            StatusSet::of(&[New, Enqueued, Suspended, RetriableFailure])
        );
        assert_eq!(
            FINAL,
            StatusSet::of(&[Success, FatalFailure, Dropped, Cancelled])
        );
        assert_eq!(LIVE, UNFINISHED.with(Dead));
        assert_eq!(IN_FLIGHT, StatusSet::of(&[Enqueued, Claimed, Processing]));
        // A recovery looks again at every task a process may have carried.
        assert_eq!(transition(Operation::Recover).from, IN_FLIGHT);
        // A task in flight is never parked; a parked one waits in a state
        // the poll enqueues from once it is unparked.
        let park = transition(Operation::Park);
        assert!(park.from.iter().all(|s| !IN_FLIGHT.contains(s)));
        assert!(park.from.iter().all(|s| DUE.contains(s)));
    }

    /// Every state is reached from an insert, and every unfinished state
    /// has a way out that needs nobody (a trigger) and one a client may
    /// take (a cancel): no task can be stranded.
    #[test]
    fn no_state_is_unreachable_or_a_trap() {
        let mut reached = StatusSet::EMPTY;
        loop {
            let before = reached;
            for row in &TRANSITIONS {
                let starts = row.from.is_empty() || row.from.iter().any(|s| reached.contains(s));
                if !starts {
                    continue;
                }
                reached = match row.to {
                    Target::To(status) => reached.with(status),
                    Target::NextAttempt => reached.with(New).with(RetriableFailure),
                    Target::Same => reached,
                };
            }
            if reached == before {
                break;
            }
        }
        assert_eq!(reached, StatusSet::ALL);
        for status in UNFINISHED.iter() {
            let consumer = [Operation::Enqueue, Operation::Expire, Operation::Bury];
            let timed_out = consumer
                .into_iter()
                .any(|operation| transition(operation).from.contains(status));
            assert!(timed_out, "{status} has no way out on its trigger");
            assert!(transition(Operation::Cancel).from.contains(status));
        }
    }

    /// Entering an ended state clears the trigger, and only that does.
    #[test]
    fn only_ended_states_have_no_trigger() {
        for row in &TRANSITIONS {
            if let Target::To(status) = row.to {
                assert_eq!(
                    row.trigger == Trigger::Never,
                    ENDED.contains(status),
                    "{:?}",
                    row.operation
                );
            }
        }
    }

    /// An operation that leaves the trigger where it was leaves the state
    /// as it was too, and takes no lease: a task's trigger is always the
    /// one its state was entered with, so it is never forgotten.
    #[test]
    fn an_unchanged_trigger_keeps_the_state() {
        let unchanged: Vec<_> = TRANSITIONS
            .iter()
            .filter(|row| row.trigger == Trigger::Unchanged)
            .collect();
        assert!(!unchanged.is_empty());
        for row in unchanged {
            assert_eq!(row.to, Target::Same, "{:?}", row.operation);
            assert_ne!(row.lease, Lease::Take, "{:?}", row.operation);
            assert_eq!(row.attempts, Attempts::Keep, "{:?}", row.operation);
        }
    }

    #[test]
    fn sets_print_as_sql() {
        assert_eq!(RUNNING.sql(), "('claimed', 'processing')");
        assert_eq!(format!("{RUNNING:?}"), "{Claimed, Processing}");
    }
}
