//! The operations a model sequence is made of, and the proptest strategies
//! that generate them: the lambdas, collections and schedule they name, the
//! weights that make claims and results common, the journal writes that
//! executions and their results carry, and which operations a race may
//! hold. Apart from the run so that what a sequence can contain is read
//! in one place, without the machinery that drives it.

use proptest::prelude::*;
use waft_store::{GateState, Millis};

use crate::reference::Ending;

pub const T0: Millis = 1_800_000_000_000;
pub const LAMBDAS: [&str; 2] = ["a", "b"];
pub const COLLECTIONS: [&str; 2] = ["default", "c"];
pub const SIGNALS: [&str; 2] = ["go", "stop"];
/// Tasks' keys (their lambdas' limits per key are `reference::key_limit`).
/// Most keyed tasks share the first, so that places run out often.
pub const KEYS: [&str; 2] = ["k", "j"];
pub const CRON_PERIOD: Millis = 4_000;
/// The debounce window of debounced inserts: a debounced task waits at
/// most ten of them past its own insert.
pub const DEBOUNCE: Millis = 1_500;
/// Tasks a sequence makes at most.
pub const MAX_TASKS: usize = 8;

/// Which token or lease an operation carries.
#[derive(Debug, Clone, Copy)]
pub enum Token {
    Current,
    Stale,
}

/// A change to a task's journal, relative to its length when the operation
/// runs (so that a shrunk sequence still writes where it means to): the
/// entries from `back` before its end are replaced by `entries` new ones
/// (none: a cut). A `hole` starts one past the end instead, which the store
/// refuses whole.
#[derive(Debug, Clone, Copy)]
pub struct JournalChange {
    pub back: u32,
    pub entries: u32,
    pub hole: bool,
}

/// Which turn a journal write names among the messages of its lease's
/// writes, relative to how many the store took when it runs.
#[derive(Debug, Clone, Copy)]
pub enum Turn {
    /// Its own: as many as the store took.
    Next,
    /// The one taken last: a copy whose first landed, its answer lost.
    Again,
    /// One taken before that: a late copy of an earlier write.
    Late,
    /// Past its turn.
    Ahead,
    /// None: a write of an executor of an earlier release.
    Unnamed,
}

fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        6 => Just(Turn::Next),
        1 => Just(Turn::Again),
        2 => Just(Turn::Late),
        1 => Just(Turn::Ahead),
        1 => Just(Turn::Unnamed),
    ]
}

fn journal_change() -> impl Strategy<Value = JournalChange> {
    prop_oneof![
        6 => (1..4u32).prop_map(|entries| JournalChange { back: 0, entries, hole: false }),
        3 => (1..4u32, 0..3u32)
            .prop_map(|(back, entries)| JournalChange { back, entries, hole: false }),
        1 => Just(JournalChange { back: 0, entries: 1, hole: true }),
    ]
}

/// One operation. Tasks are named by their index in creation order (modulo
/// how many exist), so a generated sequence stays meaningful as it shrinks.
#[derive(Debug, Clone)]
pub enum Op {
    Insert {
        lambda: usize,
        collection: usize,
        delay: Millis,
        /// The task it is a child of.
        parent: Option<usize>,
        key: Option<usize>,
        /// Debounced (for a keyed task): it collapses into its key's
        /// debounced task not yet enqueued, if there is one, and waits for
        /// [`DEBOUNCE`] instead of `delay`.
        debounce: bool,
    },
    Advance(Millis),
    Poll,
    Claim(usize, Token),
    Heartbeat(usize, Token),
    /// An execution writes its task's journal under its lease (or a stale
    /// one), naming a turn among its lease's writes.
    Journal(usize, Token, JournalChange, Turn),
    /// A result, carrying the execution's last journal write or none.
    Result(usize, Token, Ending, Option<JournalChange>),
    Cancel(usize),
    /// A client sends a task signal `SIGNALS[name]`; with no name, a task
    /// suspended waiting for a signal, if one is, that signal.
    Signal {
        task: usize,
        name: Option<usize>,
    },
    Gate {
        lambda: usize,
        collection: Option<usize>,
        state: GateState,
    },
    /// A redrive that keeps the task's journal, or a fresh one that
    /// discards it.
    Redrive {
        task: usize,
        fresh: bool,
    },
    /// A new version of a lambda: tasks with a journal keep theirs.
    Deploy(usize),
    /// The process that held the store alone started again: every task in
    /// flight is due now.
    Recover,
    Materialize {
        lambda: usize,
        stale: bool,
    },
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![4 => Just(Token::Current), 1 => Just(Token::Stale)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            prop_oneof![3 => Just(0), 1 => Just(1)],
            0..2usize,
            prop_oneof![Just(0), 0..3_000i64],
            prop::option::weighted(0.5, 0..MAX_TASKS),
            prop::option::weighted(0.8, prop_oneof![4 => Just(0), 1 => Just(1)]),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(lambda, collection, delay, parent, key, debounce)| Op::Insert {
                lambda,
                collection,
                delay,
                parent,
                key,
                debounce: debounce && key.is_some(),
            }),
        3 => prop_oneof![1..500i64, 1_000..6_000i64].prop_map(Op::Advance),
        1 => (0..2usize, any::<bool>()).prop_map(|(lambda, stale)| Op::Materialize { lambda, stale }),
        1 => (0..2usize).prop_map(Op::Deploy),
        1 => Just(Op::Recover),
        20 => racing_op(),
    ]
}

/// The operations a race may hold: no clock moves and nothing that makes a
/// task (tasks made at once could not be told apart by their ids).
/// Generated directly rather than filtered from [`op`]: a long run's
/// filtered draws exceed proptest's limit on rejections.
fn racing_op() -> impl Strategy<Value = Op> {
    let task = 0..MAX_TASKS;
    prop_oneof![
        4 => Just(Op::Poll),
        4 => (task.clone(), token()).prop_map(|(t, k)| Op::Claim(t, k)),
        2 => (task.clone(), token()).prop_map(|(t, k)| Op::Heartbeat(t, k)),
        3 => (task.clone(), token(), journal_change(), turn())
            .prop_map(|(t, k, change, turn)| Op::Journal(t, k, change, turn)),
        3 => (
            task.clone(),
            token(),
            prop_oneof![
                2 => Just(Ending::Success),
                2 => Just(Ending::Fatal),
                2 => (0..4_000u64).prop_map(Ending::Retriable),
                2 => (0..4_000u64).prop_map(Ending::Suspend),
                2 => (0..4_000u64, 0..2usize, 0..2u32)
                    .prop_map(|(after, name, taken)| Ending::AwaitSignal { after, name, taken }),
                3 => Just(Ending::AwaitChildren),
            ],
            prop::option::of(journal_change()),
        )
            .prop_map(|(t, k, e, change)| Op::Result(t, k, e, change)),
        1 => task.clone().prop_map(Op::Cancel),
        2 => (task.clone(), prop::option::of(0..2usize))
            .prop_map(|(task, name)| Op::Signal { task, name }),
        2 => (
            0..2usize,
            prop::option::of(0..2usize),
            prop_oneof![
                Just(GateState::Open),
                Just(GateState::Paused),
                Just(GateState::Dropped)
            ]
        )
            .prop_map(|(lambda, collection, state)| Op::Gate { lambda, collection, state }),
        1 => (task, any::<bool>()).prop_map(|(task, fresh)| Op::Redrive { task, fresh }),
    ]
}

/// A step: one operation, or (for backends with real concurrency) a race.
#[derive(Debug, Clone)]
pub enum Step {
    One(Op),
    Race(Vec<Op>),
}

pub fn steps(races: bool, len: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = if races {
        prop_oneof![
            4 => op().prop_map(Step::One),
            1 => prop::collection::vec(racing_op(), 2..=3).prop_map(Step::Race),
        ]
        .boxed()
    } else {
        op().prop_map(Step::One).boxed()
    };
    prop::collection::vec(step, 1..=len)
}
